"""Scores the calls Benchmarks/quality-report ran: PESQ-WB and STOI for every listener's
recording of every talker (aligned by `parley-bench call-quality`), per scenario, against
the loss the listeners saw; writes quality.md (a Markdown table) and quality.png.

Usage: quality_score.py RUNS OUT SCENARIO...
"""
import json
import statistics
import sys
import wave

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plot  # noqa: E402
import numpy  # noqa: E402
from pesq import pesq  # noqa: E402
from pystoi import stoi  # noqa: E402
from scipy.signal import resample_poly  # noqa: E402

NAMES = ["ada", "bob", "cy"]


def read(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 48000, path
        samples = numpy.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(numpy.float64) / 32768
    return samples


def score(runs, scenario):
    pairs = []
    for listener in NAMES:
        stats = json.load(open(f"{runs}/{scenario}/{listener}/stats.json"))
        speakers = {s["identity"]: s for s in stats["speakers"]}
        for talker in NAMES:
            if talker == listener:
                continue
            folder = f"{runs}/{scenario}/{listener}"
            reference = read(f"{folder}/reference-{talker}.wav")
            degraded = read(f"{folder}/aligned-{talker}.wav")
            n = min(len(reference), len(degraded))
            # From 0.1 s before the talker's first word to 0.1 s after their last: PESQ and
            # STOI judge speech, and a long silence before it would only pad the files.
            active = numpy.abs(reference[:n]) > 1e-4
            first = max(0, int(numpy.argmax(active)) - 4800)
            last = min(n, n - int(numpy.argmax(active[::-1])) + 4800)
            reference16 = resample_poly(reference[first:last], 1, 3)
            degraded16 = resample_poly(degraded[first:last], 1, 3)
            quality = json.load(open(f"{folder}/quality-{talker}.json"))
            speaker = speakers.get(talker, {})
            pairs.append({
                "listener": listener,
                "talker": talker,
                "pesq": pesq(16000, reference16, degraded16, "wb"),
                "stoi": stoi(reference16, degraded16, 16000, extended=False),
                "loss": speaker.get("lossPercent", 0.0),
                "fec": speaker.get("fecRecoveredPercent", 0.0),
                "concealed": speaker.get("concealedPercent", 0.0),
                "delay": quality.get("delayMedianMilliseconds"),
                "envelope": quality["envelopeCorrelation"],
                "dropped": quality["droppedSpeechPercent"],
            })
    return pairs


def main():
    runs, out, scenarios = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows = []
    for scenario in scenarios:
        pairs = score(runs, scenario)
        row = {"scenario": scenario}
        for key in ["pesq", "stoi", "loss", "fec", "concealed", "envelope", "dropped"]:
            row[key] = statistics.mean(p[key] for p in pairs)
        row["pesq_min"] = min(p["pesq"] for p in pairs)
        row["stoi_min"] = min(p["stoi"] for p in pairs)
        delays = [p["delay"] for p in pairs if p["delay"] is not None]
        row["delay"] = statistics.median(delays) if delays else float("nan")
        rows.append(row)
        print(f"{scenario:12} PESQ-WB {row['pesq']:.2f} (worst {row['pesq_min']:.2f})  STOI {row['stoi']:.3f}  "
              f"loss {row['loss']:.1f}%  delay {row['delay']:.0f} ms")

    lines = [
        "| scenario | loss seen by listeners | FEC rebuilt | concealed | mouth-to-ear (median) | PESQ-WB mean (worst) | STOI mean (worst) | envelope match |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['scenario']} | {row['loss']:.1f}% | {row['fec']:.1f}% | {row['concealed']:.1f}% | {row['delay']:.0f} ms | "
            f"{row['pesq']:.2f} ({row['pesq_min']:.2f}) | {row['stoi']:.3f} ({row['stoi_min']:.3f}) | {row['envelope']:.2f} |")
    with open(f"{out}/quality.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    figure, axes = plot.subplots(1, 2, figsize=(11, 4.2))
    for axis, key, label, limits in [(axes[0], "pesq", "PESQ-WB (MOS-LQO)", (1, 4.7)), (axes[1], "stoi", "STOI", (0.5, 1.0))]:
        for row in rows:
            axis.scatter(row["loss"], row[key], color="tab:blue")
            axis.vlines(row["loss"], row[key + "_min"], row[key], color="tab:blue", alpha=0.35)
            axis.annotate(row["scenario"], (row["loss"], row[key]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        axis.set_xlabel("packets lost on the way to the listener (%, before repair)")
        axis.set_ylabel(label)
        axis.set_ylim(*limits)
        axis.grid(alpha=0.3)
    axes[0].set_title("Speech quality (mean of 6 listener–talker pairs; line to the worst)")
    axes[1].set_title("Intelligibility")
    figure.tight_layout()
    figure.savefig(f"{out}/quality.png", dpi=110)


if __name__ == "__main__":
    main()
