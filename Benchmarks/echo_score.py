"""Scores echo cancellers on the scenarios echo_scenarios.py built, and draws the plot.

For every scenario and every system (Parley's outgoing path and the references):
  - ERLE over time in far-end single talk: microphone energy over output energy in 0.5 s
    windows of the frames where the echo plays (within 30 dB of its loudest 10 ms);
  - converged ERLE: the same ratio over all such frames from 5 s to the end of single talk,
    and again after the double talk (how well the filter survived it);
  - double-talk PESQ-WB (ITU-T P.862.2, PyPI's `pesq`): the output over the near talker's
    turn, against the near talker alone as it reached the microphone, both at 16 kHz.
Each output is first aligned with the microphone (its processing latency found by
cross-correlation with the near talker), so ERLE compares the same instants.

Usage:
  echo_score.py --self-test
  echo_score.py --replot OUT      (echo.png again from OUT/echo.json)
  echo_score.py SCENARIOS RESULTS OUT SYSTEM... (each RESULTS/SCENARIO/SYSTEM.wav)
Writes OUT/echo.md (tables), OUT/echo.json and OUT/echo.png.
"""
import json
import os
import sys

import numpy as np
from pesq import pesq
from scipy.io import wavfile
from scipy.signal import correlate, resample_poly

RATE = 48000
FRAME = 480
CONVERGED_FROM = 5.0
WINDOW_FRAMES = 50        # 0.5 s ERLE windows
ECHO_ACTIVE_DB = 30.0
MAX_LATENCY = 0.05
LABELS = {
    "parley": "Parley",
    "speex-plain": "SpeexDSP plain",
    "speex-delay": "SpeexDSP, true delay",
    "webrtc": "WebRTC legacy AEC",
    "mic": "microphone (no canceller)",
}
SHORT = {"parley": "Parley", "speex-plain": "Speex", "speex-delay": "Speex+delay", "webrtc": "WebRTC", "mic": "mic"}
COLORS = {"parley": "#d62728", "speex-plain": "#1f77b4", "speex-delay": "#17becf", "webrtc": "#2ca02c", "mic": "#7f7f7f"}


def read(path):
    rate, samples = wavfile.read(path)
    if rate != RATE:
        raise SystemExit(f"echo_score: {path} is {rate} Hz, not {RATE}")
    if samples.dtype == np.int16:
        return samples.astype(np.float64) / 32768.0
    return samples.astype(np.float64)


def frame_energies(signal, count):
    padded = np.zeros(count * FRAME)
    length = min(len(signal), count * FRAME)
    padded[:length] = signal[:length]
    return (padded.reshape(count, FRAME) ** 2).sum(axis=1)


def latency(output, near, span):
    """Samples by which `output` trails the microphone, from its correlation with the near
    talker over `span` (0 when the near talker cannot be found in it)."""
    start, end = (int(t * RATE) for t in span)
    reference = near[start:end]
    if not np.any(reference):
        return 0
    piece = np.zeros(end - start + int(MAX_LATENCY * RATE))
    available = output[start:end + int(MAX_LATENCY * RATE)]
    piece[:len(available)] = available
    # correlation[lag] = sum(piece[n + lag] * reference[n]) for lags 0...MAX_LATENCY
    correlation = correlate(piece, reference, mode="valid", method="fft")
    best_lag = int(np.argmax(correlation))
    if correlation[best_lag] <= 0:
        return 0
    return best_lag


def aligned(output, lag, length):
    shifted = np.zeros(length)
    piece = output[lag:lag + length]
    shifted[:len(piece)] = piece
    return shifted


def erle(mic, output, echo, span, converged_from=None):
    """(ERLE curve as (times, dB), converged ERLE over `span` from `converged_from`)."""
    count = len(mic) // FRAME
    mic_e, out_e, echo_e = (frame_energies(s, count) for s in (mic, output, echo))
    start, end = (int(t * RATE / FRAME) for t in span)
    active = echo_e >= echo_e[start:end].max() * 10 ** (-ECHO_ACTIVE_DB / 10)
    floor = FRAME * (1 / 32768) ** 2 / 12  # 16-bit quantisation: the quietest output there is
    times, curve = [], []
    for first in range(start, end - WINDOW_FRAMES + 1, WINDOW_FRAMES // 5):
        window = slice(first, first + WINDOW_FRAMES)
        used = active[window]
        if used.sum() < WINDOW_FRAMES // 5:
            continue
        times.append((first + WINDOW_FRAMES / 2) * FRAME / RATE)
        curve.append(10 * np.log10(mic_e[window][used].sum() / max(out_e[window][used].sum(), floor * used.sum())))
    begin = int((converged_from if converged_from is not None else span[0]) * RATE / FRAME)
    used = active[begin:end]
    converged = 10 * np.log10(mic_e[begin:end][used].sum() / max(out_e[begin:end][used].sum(), floor * used.sum()))
    return (times, curve), float(converged)


def pesq_wb(reference, degraded, span):
    start, end = int((span[0] - 0.25) * RATE), int((span[1] + 0.25) * RATE)
    ref = resample_poly(reference[start:end], 1, 3)
    deg = resample_poly(degraded[start:end], 1, 3)
    return float(pesq(16000, ref, deg, "wb"))


def score_scenario(folder, outputs):
    meta = json.load(open(os.path.join(folder, "scenario.json")))
    mic, echo, near = (read(os.path.join(folder, f"{n}.wav")) for n in ("mic", "echo", "near"))
    single = meta["single_talk"]
    double = meta["double_talk"]
    after = [double[1] + 0.5, meta["length"]]
    results = {}
    for system, path in outputs.items():
        raw = mic if path is None else read(path)
        lag = 0 if path is None else latency(raw, near, double)
        output = aligned(raw, lag, len(mic))
        curve, converged = erle(mic, output, echo, single, CONVERGED_FROM)
        after_curve, after_erle = erle(mic, output, echo, after) if after[1] - after[0] >= 1 else (([], []), None)
        results[system] = dict(
            latency_ms=lag * 1000 / RATE, erle_converged=converged, erle_after_double_talk=after_erle,
            erle_curve=[list(map(float, curve[0])), list(map(float, curve[1]))],
            erle_after_curve=[list(map(float, after_curve[0])), list(map(float, after_curve[1]))],
            pesq_double_talk=pesq_wb(near, output, double))
    return meta, results


# MARK: self-test


def self_test():
    """Cases of known answer: the scorer must give back what they were built with."""
    generator = np.random.default_rng(1)
    length = 20 * RATE
    # Speech-like far end: noise bursts with pauses.
    envelope = np.repeat((generator.random(length // 4800) > 0.3).astype(float), 4800)
    far = generator.standard_normal(length) * envelope * 0.05
    delay = 40 * RATE // 1000
    echo = np.concatenate([np.zeros(delay), far[:-delay]]) * 10 ** (-3 / 20)
    near = np.zeros(length)
    failures = []

    def check(name, value, low, high):
        verdict = "ok" if low <= value <= high else "FAILED"
        print(f"  {verdict:6} {name}: {value:.2f} (expected {low}..{high})")
        if verdict != "ok":
            failures.append(name)

    # A canceller that leaves the echo 30 dB down, with no latency, scores 30 dB.
    (_, curve), converged = erle(echo, echo * 10 ** (-30 / 20), echo, (0, 20), CONVERGED_FROM)
    check("ERLE of an echo attenuated by 30 dB", converged, 29.9, 30.1)
    check("lowest point of its ERLE curve", min(curve), 29.9, 30.1)
    # 45 dB down, with 10 ms of latency the scorer must find and remove (found from a near talker).
    speech = np.zeros(length)
    speech[12 * RATE:16 * RATE] = generator.standard_normal(4 * RATE) * 0.05
    mic = echo + speech
    late = np.concatenate([np.zeros(480), (echo * 10 ** (-45 / 20) + speech)[:-480]])
    lag = latency(late, speech, (12, 16))
    check("latency found (ms)", lag * 1000 / RATE, 10, 10)
    _, converged = erle(mic, aligned(late, lag, length), echo, (0, 11.5), CONVERGED_FROM)
    check("ERLE of an echo attenuated by 45 dB, output 10 ms late", converged, 44.8, 45.2)
    # No canceller at all: 0 dB.
    _, converged = erle(mic, mic, echo, (0, 11.5), CONVERGED_FROM)
    check("ERLE of the microphone itself", converged, -0.01, 0.01)
    # PESQ-WB: the near talker untouched is the scale's top; buried under echo at the same
    # level it is poor; turned down 6 dB it is untouched (PESQ aligns levels).
    voice = read("/usr/share/sounds/alsa/Front_Center.wav")
    voice = np.concatenate([np.zeros(RATE // 2), voice, np.zeros(RATE // 2)])
    span = (0.25, len(voice) / RATE - 0.25)
    check("PESQ-WB of the near talker itself", pesq_wb(voice, voice, span), 4.5, 4.65)
    check("PESQ-WB of the near talker turned down 6 dB", pesq_wb(voice, voice * 0.5, span), 4.4, 4.65)
    babble = np.roll(voice, RATE // 3) * 1.0
    check("PESQ-WB of the near talker under echo at the same level", pesq_wb(voice, voice + babble, span), 1.0, 2.0)
    check("PESQ-WB of the near talker gated 40 dB down", pesq_wb(voice, voice * 0.01 + generator.standard_normal(len(voice)) * 1e-4, span), 1.0, 2.5)
    del near
    if failures:
        raise SystemExit(f"echo_score: self-test FAILED: {', '.join(failures)}")
    print("echo_score: self-test passed")


# MARK: report


def plot(scored, systems, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = (len(scored) + columns - 1) // columns
    figure = plt.figure(figsize=(4.2 * columns, 2.6 * rows + 4.5))
    grid = figure.add_gridspec(rows + 1, columns, height_ratios=[1] * rows + [1.6], hspace=0.95, wspace=0.25, top=0.96, bottom=0.06)
    for index, (meta, results) in enumerate(scored):
        axis = figure.add_subplot(grid[index // columns, index % columns])
        # Parley last, so it is drawn over a reference it matches.
        for system in sorted(systems, key=lambda s: s == "parley"):
            times, curve = results[system]["erle_curve"]
            after_times, after_curve = results[system]["erle_after_curve"]
            axis.plot(times, curve, color=COLORS[system], linewidth=1.3 if system == "parley" else 0.9, label=LABELS[system])
            axis.plot(after_times, after_curve, color=COLORS[system], linewidth=1.3 if system == "parley" else 0.9)
        axis.axvspan(*meta["double_talk"], color="#eeeeee")
        axis.axhline(35, color="black", linewidth=0.6, linestyle=":")
        axis.set_ylim(0, 70)
        axis.set_xlim(0, meta["length"])
        pesqs = [f"{SHORT[s]} {results[s]['pesq_double_talk']:.2f}" for s in systems]
        half = (len(pesqs) + 1) // 2
        axis.set_title(f"{meta['name']}, double-talk PESQ-WB:\n{', '.join(pesqs[:half])}\n{', '.join(pesqs[half:])}", fontsize=7)
        axis.tick_params(labelsize=7)
        if index % columns == 0:
            axis.set_ylabel("ERLE, dB", fontsize=7.5)
        if index == 0:
            axis.legend(fontsize=6, loc="lower right")
    axis = figure.add_subplot(grid[rows, :])
    width = 0.8 / len(systems)
    positions = np.arange(len(scored))
    for offset, system in enumerate(systems):
        values = [results[system]["pesq_double_talk"] for _, results in scored]
        axis.bar(positions + (offset - (len(systems) - 1) / 2) * width, values, width, color=COLORS[system], label=LABELS[system])
    axis.axhline(2.9, color="black", linewidth=0.6, linestyle=":")
    axis.set_xticks(positions)
    axis.set_xticklabels([meta["name"] for meta, _ in scored], rotation=60, ha="right", fontsize=7)
    axis.set_ylabel("double-talk PESQ-WB", fontsize=8)
    axis.set_ylim(1, 4.6)
    axis.legend(fontsize=7, ncol=len(systems), loc="upper right")
    figure.suptitle("Echo cancellation per scenario: ERLE over time in single talk (grey: double talk; dotted: 35 dB), "
                    "and double-talk PESQ-WB (in each title, and as bars below)", fontsize=10, y=0.985)
    figure.savefig(path, dpi=72, bbox_inches="tight")


def report(scored, systems, out):
    lines = ["| scenario | RT60 s | delay ms | " + " | ".join(f"ERLE {LABELS[s]}" for s in systems) + " | "
             + " | ".join(f"PESQ-WB {LABELS[s]}" for s in systems) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in systems * 2) + " |"]
    for meta, results in scored:
        cells = [f"{results[s]['erle_converged']:.1f}" for s in systems] + [f"{results[s]['pesq_double_talk']:.2f}" for s in systems]
        lines.append(f"| {meta['name']} | {meta['rt60']} | {meta['delay']} | " + " | ".join(cells) + " |")
    means = [f"{np.mean([r[s]['erle_converged'] for _, r in scored]):.1f}" for s in systems]
    means += [f"{np.mean([r[s]['pesq_double_talk'] for _, r in scored]):.2f}" for s in systems]
    lines.append("| **mean** | | | " + " | ".join(f"**{m}**" for m in means) + " |")
    lows = [f"{min(r[s]['erle_converged'] for _, r in scored):.1f}" for s in systems]
    lows += [f"{min(r[s]['pesq_double_talk'] for _, r in scored):.2f}" for s in systems]
    lines.append("| lowest | | | " + " | ".join(lows) + " |")
    lines.append("")
    lines.append("| scenario | " + " | ".join(f"ERLE after double talk, {LABELS[s]}" for s in systems) + " | "
                 + " | ".join(f"latency ms, {LABELS[s]}" for s in systems) + " |")
    lines.append("| --- | " + " | ".join("---:" for _ in systems * 2) + " |")
    for meta, results in scored:
        cells = [f"{results[s]['erle_after_double_talk']:.1f}" if results[s]['erle_after_double_talk'] is not None else "" for s in systems]
        cells += [f"{results[s]['latency_ms']:.1f}" for s in systems]
        lines.append(f"| {meta['name']} | " + " | ".join(cells) + " |")
    summary = []
    if "parley" in systems:
        ours = [r["parley"] for _, r in scored]
        lowest = min(ours, key=lambda r: r["erle_converged"])
        worst = [m["name"] for m, r in scored if r["parley"]["erle_converged"] < 35]
        mean_pesq = np.mean([r["pesq_double_talk"] for r in ours])
        summary.append(f"converged ERLE >= 35 dB everywhere: {'met' if not worst else 'NOT MET (' + ', '.join(worst) + ')'}; "
                       f"lowest {lowest['erle_converged']:.1f} dB")
        summary.append(f"double-talk PESQ-WB mean >= 2.9: {'met' if mean_pesq >= 2.9 else 'NOT MET'} ({mean_pesq:.2f})")
        if "speex-plain" in systems:
            below = [(m["name"], r["parley"]["pesq_double_talk"] - r["speex-plain"]["pesq_double_talk"]) for m, r in scored
                     if r["parley"]["pesq_double_talk"] < r["speex-plain"]["pesq_double_talk"]]
            margin = min(r["parley"]["pesq_double_talk"] - r["speex-plain"]["pesq_double_talk"] for _, r in scored)
            summary.append("double-talk PESQ-WB never below plain SpeexDSP: "
                           + ("met" if not below else "NOT MET (" + ", ".join(f"{n} {d:+.2f}" for n, d in below) + ")")
                           + f"; smallest margin {margin:+.2f}")
    text = "\n".join(lines + [""] + summary) + "\n"
    with open(os.path.join(out, "echo.md"), "w") as file:
        file.write(text)
    print(text)


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--replot":
        # Draws OUT/echo.png again from OUT/echo.json, without scoring anything.
        saved = json.load(open(os.path.join(sys.argv[2], "echo.json")))
        scored = [(entry["scenario"], entry["results"]) for entry in saved]
        systems = [s for s in scored[0][1] if s != "mic"]
        plot(scored, systems, os.path.join(sys.argv[2], "echo.png"))
        return
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    scenarios_dir, results_dir, out = sys.argv[1:4]
    systems = sys.argv[4:]
    os.makedirs(out, exist_ok=True)
    names = json.load(open(os.path.join(scenarios_dir, "scenarios.json")))
    scored = []
    for name in names:
        outputs = {s: (None if s == "mic" else os.path.join(results_dir, name, f"{s}.wav")) for s in systems}
        meta, results = score_scenario(os.path.join(scenarios_dir, name), outputs)
        scored.append((meta, results))
        print(f"{name}: " + ", ".join(f"{s} {results[s]['erle_converged']:.1f} dB / {results[s]['pesq_double_talk']:.2f}" for s in systems),
              flush=True)
    with open(os.path.join(out, "echo.json"), "w") as file:
        json.dump([dict(scenario=m, results=r) for m, r in scored], file)
    report(scored, systems, out)
    plot(scored, [s for s in systems if s != "mic"], os.path.join(out, "echo.png"))


if __name__ == "__main__":
    main()
