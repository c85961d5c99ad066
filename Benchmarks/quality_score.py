"""Scores the calls Benchmarks/quality-report ran: PESQ-WB and STOI for every listener's
recording of every talker, of the oracle receiver (the same packets, no deadline) and of the
ideal decoder with the same packet fates, each lined up with what the talker said as each
measure needs (speech_alignment.py), per scenario, against the loss the listeners saw, with
the mouth-to-ear delay each scenario adds to the clean path's and the talkers' bitrate;
writes quality.md (a Markdown table) and quality.png.

Usage: quality_score.py RUNS OUT SCENARIO...
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plot  # noqa: E402

from speech_alignment import Timeline, align, align_windows, read, scores, speech_span  # noqa: E402

NAMES = ["ada", "bob", "cy"]


def load(path):
    with open(path) as f:
        return json.load(f)


def score(runs, scenario):
    pairs = []
    for listener in NAMES:
        stats = load(f"{runs}/{scenario}/{listener}/stats.json")
        speakers = {s["identity"]: s for s in stats["speakers"]}
        for talker in NAMES:
            if talker == listener:
                continue
            folder = f"{runs}/{scenario}/{listener}"
            reference = read(f"{folder}/reference-{talker}.wav")
            span = speech_span(reference)
            captured = load(f"{runs}/{scenario}/{talker}/stats.json")["captureStartedAtNanoseconds"]
            timeline = Timeline.of_recording(f"{folder}/quality-{talker}.json", captured, stats["playbackStartedAtNanoseconds"])
            recording = read(f"{folder}/received/{talker}.wav")
            heard, _ = align(reference, recording, timeline)
            parley = scores(reference, heard, align_windows(reference, recording, timeline), span)
            offline = {}
            for name in ["ideal", "oracle"]:
                decoded = read(f"{folder}/{name}-{talker}.wav")
                aligned, _ = align(reference, decoded, Timeline(0))
                offline[name] = scores(reference, aligned, align_windows(reference, decoded, Timeline(0)), span)
            quality = load(f"{folder}/quality-{talker}.json")
            fates = load(f"{folder}/fates-{talker}.json")
            speaker = speakers.get(talker, {})
            pairs.append({
                "listener": listener,
                "talker": talker,
                "pesq": parley["pesq"],
                "stoi": parley["stoi"],
                "ideal_pesq": offline["ideal"]["pesq"],
                "ideal_stoi": offline["ideal"]["stoi"],
                "oracle_pesq": offline["oracle"]["pesq"],
                "oracle_stoi": offline["oracle"]["stoi"],
                "kbps": fates["sentPayloadKilobitsPerSecond"],
                "loss": speaker.get("lossPercent", 0.0),
                "fec": speaker.get("fecRecoveredPercent", 0.0) + speaker.get("redundancyRecoveredPercent", 0.0),
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
        for key in ["pesq", "stoi", "ideal_pesq", "ideal_stoi", "oracle_pesq", "oracle_stoi", "kbps", "loss", "fec", "concealed",
                    "envelope", "dropped"]:
            row[key] = statistics.mean(p[key] for p in pairs)
        row["pesq_min"] = min(p["pesq"] for p in pairs)
        row["stoi_min"] = min(p["stoi"] for p in pairs)
        delays = [p["delay"] for p in pairs if p["delay"] is not None]
        row["delay"] = statistics.median(delays) if delays else float("nan")
        rows.append(row)
        print(f"{scenario:12} PESQ-WB {row['pesq']:.2f} (worst {row['pesq_min']:.2f}, oracle {row['oracle_pesq']:.2f}, "
              f"ideal {row['ideal_pesq']:.2f})  STOI {row['stoi']:.3f} (oracle {row['oracle_stoi']:.3f})  loss {row['loss']:.1f}%  "
              f"delay {row['delay']:.0f} ms  {row['kbps']:.0f} kb/s")

    clean = next((row["delay"] for row in rows if row["scenario"] == "clean"), None)
    lines = [
        "| scenario | loss seen by listeners | repaired (FEC or copies) | concealed | mouth-to-ear (median) | added delay "
        "| PESQ-WB mean (worst) | oracle PESQ-WB | Parley − oracle (ratio) | ideal decoder PESQ-WB | Parley / ideal "
        "| STOI mean (worst) | oracle STOI | ideal STOI | kb/s sent (talking) | envelope match |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        added = f"{row['delay'] - clean:+.0f} ms" if clean is not None else "–"
        lines.append(
            f"| {row['scenario']} | {row['loss']:.1f}% | {row['fec']:.1f}% | {row['concealed']:.1f}% | {row['delay']:.0f} ms | {added} | "
            f"{row['pesq']:.2f} ({row['pesq_min']:.2f}) | {row['oracle_pesq']:.2f} | {row['pesq'] - row['oracle_pesq']:+.2f} "
            f"({row['pesq'] / row['oracle_pesq']:.0%}) | {row['ideal_pesq']:.2f} | {row['pesq'] / row['ideal_pesq']:.0%} | "
            f"{row['stoi']:.3f} ({row['stoi_min']:.3f}) | {row['oracle_stoi']:.3f} | {row['ideal_stoi']:.3f} | {row['kbps']:.0f} | "
            f"{row['envelope']:.2f} |")
    with open(f"{out}/quality.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    figure, axes = plot.subplots(1, 2, figsize=(11, 4.2))
    for axis, key, label, limits in [(axes[0], "pesq", "PESQ-WB (MOS-LQO)", (1, 4.7)), (axes[1], "stoi", "STOI", (0.5, 1.0))]:
        for index, row in enumerate(rows):
            axis.scatter(row["loss"], row[key], color="tab:blue", label="Parley" if index == 0 else None)
            axis.vlines(row["loss"], row[key + "_min"], row[key], color="tab:blue", alpha=0.35)
            axis.scatter(row["loss"], row["ideal_" + key], color="black", marker="s", s=14,
                         label="ideal decoder, same packet fates" if index == 0 else None)
            axis.scatter(row["loss"], row["oracle_" + key], color="0.45", marker="D", s=16,
                         label="oracle receiver, same packets, no deadline" if index == 0 else None)
            axis.annotate(row["scenario"], (row["loss"], row[key]), textcoords="offset points", xytext=(5, 4), fontsize=8)
        axis.set_xlabel("packets lost on the way to the listener (%, before repair)")
        axis.set_ylabel(label)
        axis.set_ylim(*limits)
        axis.grid(alpha=0.3)
    axes[0].set_title("Speech quality (mean of 6 listener–talker pairs; line to the worst)")
    axes[0].legend(fontsize=8, loc="lower left")
    axes[1].set_title("Intelligibility")
    figure.tight_layout()
    figure.savefig(f"{out}/quality.png", dpi=110)


if __name__ == "__main__":
    main()
