"""Scores the calls Benchmarks/one-talker-report ran: for every scenario and seed, PESQ-WB
(P.862.2) and STOI of each receiver's audio against what its talker handed its encoder
(Parley's --record-sent; the GStreamer peer's input file), over the talker's speech (0.1 s
before the first word to 0.1 s after the last), each recording lined up as each measure
needs (speech_alignment.py); with each receiver's mouth-to-ear delay, how lost frames were
repaired, and what each sender sent. Writes one-talker.md (tables: mean over seeds, min–max
in brackets), one-talker.json (every run) and one-talker.png.

Usage: one_talker_score.py RUNS OUT --seeds "1 2 3" --scenarios "none loss-5 …"
"""
import argparse
import json
import os
import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plot  # noqa: E402
import numpy  # noqa: E402

from speech_alignment import Timeline, align, align_windows, read, scores, speech_span  # noqa: E402

# The first scenario of a run that has it: the clean path other scenarios' delay is set against.
CLEAN = "none"


def load(path):
    with open(path) as f:
        return json.load(f)


def peer_loss(run, label):
    """Packets the GStreamer peer's own simulator dropped, percent, from its final report."""
    path = f"{run}/{label}-netsim-report.txt"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        match = re.search(r"up +\(client → relay\): (\d+) packets?, lost (\d+)", f.read())
    return 100 * int(match.group(2)) / int(match.group(1)) if match and int(match.group(1)) else None


def score_run(run, only=None):
    """One call's figures. With `only` (a receiver's name), the others come from the
    scores.json the last full scoring of this run left, and only that one is scored again."""
    cached = None
    if only and os.path.exists(f"{run}/scores.json"):
        cached = load(f"{run}/scores.json")
    references = {"parley": read(f"{run}/sent.wav")}
    captured = load(f"{run}/talker.json")["captureStartedAtNanoseconds"]
    # Offline decodes are in step with the reference by construction.
    receivers = {name: (f"{run}/{file}.wav", Timeline(0), "parley")
                 for name, file in [("ceiling", "ceiling"), ("ideal", "ideal"), ("sent", "sent-all"), ("oracle", "oracle")]}
    delays = {}
    recordings = []
    if os.path.exists(f"{run}/listener.json"):
        recordings.append(("parley", "received/talker", "parley-quality", load(f"{run}/listener.json")["playbackStartedAtNanoseconds"]))
    recordings.append(("replay", "replay", "replay-quality", load(f"{run}/replay.json")["playbackStartedAtNanoseconds"]))
    for path in sorted(os.listdir(run)):
        match = re.fullmatch(r"gst-([\w-]+)-quality\.json", path)
        if match:
            label = match.group(1)
            recordings.append((f"gst:{label}", f"gst-{label}", f"gst-{label}-quality", load(f"{run}/gst-{label}.json")["startedAtNanoseconds"]))
    for name, file, quality, started in recordings:
        receivers[name] = (f"{run}/{file}.wav", Timeline.of_recording(f"{run}/{quality}.json", captured, started), "parley")
        delays[name] = load(f"{run}/{quality}.json").get("delayMedianMilliseconds")

    span = speech_span(references["parley"])
    row = {"speechSeconds": (span[1] - span[0]) / 48000}
    # GStreamer talkers. On a path of their own (peer): scored against their own input from
    # the moment it was spoken. On the listener's path: a replay after the call, its recording
    # set back on the call's clock.
    for path in sorted(os.listdir(run)):
        match = re.fullmatch(r"gst(peer|path)-(\d+)-send\.json", path)
        if not match:
            continue
        kind, latency = match.groups()
        label, name = f"gst{kind}-{latency}", f"{kind}:{latency}"
        sender = load(f"{run}/{path}")
        started = load(f"{run}/{label}.json")["startedAtNanoseconds"]
        if kind == "peer":
            references["peer"] = read(f"{run}/peer-sent.wav")
            timeline = Timeline.of_recording(f"{run}/{label}-quality.json", sender["startedAtNanoseconds"], started)
            row[f"{name}_loss"] = peer_loss(run, label)
        else:
            timeline = Timeline.of_recording(f"{run}/{label}-quality.json", captured, started - sender["shiftNanoseconds"])
            row[f"{name}_loss"] = 100 * sender["lost"] / sender["packets"]
        receivers[name] = (f"{run}/{label}.wav", timeline, "peer" if kind == "peer" else "parley")
        delays[name] = load(f"{run}/{label}-quality.json").get("delayMedianMilliseconds")
        row[f"{name}_kbps"] = sender["payloadBytes"] * 8 / sender["seconds"] / 1000

    for name, (path, timeline, talker) in receivers.items():
        if cached and name != only and f"{name}_pesq" in cached:
            row[f"{name}_pesq"] = cached[f"{name}_pesq"]
            row[f"{name}_stoi"] = cached[f"{name}_stoi"]
            continue
        reference = references[talker]
        recording = read(path)
        aligned, _ = align(reference, recording, timeline)
        result = scores(reference, aligned, align_windows(reference, recording, timeline), speech_span(reference))
        row[f"{name}_pesq"] = result["pesq"]
        row[f"{name}_stoi"] = result["stoi"]
    for name, delay in delays.items():
        row[f"{name}_delay"] = delay
    fates = load(f"{run}/fates.json")
    row["loss"] = fates["lossPercent"]
    row["longest_loss_run"] = fates["longestLossRun"]
    row["ideal_fec"] = fates["fecPercent"]
    row["ideal_concealed"] = fates["concealedPercent"]
    row["oracle_red"] = fates["oracleRedundancyPercent"]
    row["oracle_fec"] = fates["oracleFECPercent"]
    row["oracle_concealed"] = fates["oracleConcealedPercent"]
    row["parley_kbps"] = fates["sentPayloadKilobitsPerSecond"]
    row["parley_kbps_average"] = fates["sentAverageKilobitsPerSecond"]
    row["parley_redundant_packets"] = fates["redundantPacketPercent"]
    replayed = load(f"{run}/replay.json")
    row["replay_red"] = 100 * replayed["redundancyRecoveredFrames"] / max(1, replayed["decodedFrames"] + replayed["redundancyRecoveredFrames"]
                                                                          + replayed["fecRecoveredFrames"] + replayed["concealedFrames"])
    row["replay_fec"] = replayed["fecRecoveredPercent"]
    row["replay_concealed"] = replayed["concealedPercent"]
    if os.path.exists(f"{run}/listener.json"):
        speakers = [s for s in load(f"{run}/listener.json")["speakers"] if s["identity"] == "talker"]
        if speakers:
            row["parley_red"] = speakers[0]["redundancyRecoveredPercent"]
            row["parley_fec"] = speakers[0]["fecRecoveredPercent"]
            row["parley_concealed"] = speakers[0]["concealedPercent"]
            row["parley_underruns"] = speakers[0]["underruns"]
    if os.path.exists(f"{run}/disturbed.txt"):
        with open(f"{run}/disturbed.txt") as f:
            row["disturbed"] = f.read().strip()
    if not only:
        with open(f"{run}/scores.json", "w") as f:
            json.dump(row, f)
    return row


def summary(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    return {"mean": statistics.mean(values), "min": min(values), "max": max(values)}


def cell(stat, digits=2, unit=""):
    if stat is None:
        return "–"
    mean = f"{stat['mean']:.{digits}f}{unit}"
    if len({round(stat["min"], digits), round(stat["max"], digits)}) == 1:
        return mean
    return f"{mean} ({stat['min']:.{digits}f}–{stat['max']:.{digits}f})"


def table(title, header, rows):
    return ["", title, "", "| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)] \
        + ["| " + " | ".join(cells) + " |" for cells in rows]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("runs")
    parser.add_argument("out")
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--scenarios", required=True)
    parser.add_argument("--only", help="score only this receiver again (replay); the others as last scored")
    arguments = parser.parse_args()
    seeds = arguments.seeds.split()
    scenarios = arguments.scenarios.split()

    results = {}
    for scenario in scenarios:
        rows = []
        for seed in seeds:
            row = score_run(f"{arguments.runs}/{scenario}/seed-{seed}", arguments.only)
            row["seed"] = seed
            gst = [row[k] for k in row if k.startswith("gst:") and k.endswith("_pesq")]
            for name in ["parley", "replay"]:
                if f"{name}_pesq" in row:
                    row[f"{name}_minus_ideal"] = row[f"{name}_pesq"] - row["ideal_pesq"]
                    row[f"{name}_minus_oracle"] = row[f"{name}_pesq"] - row["oracle_pesq"]
                    row[f"{name}_stoi_minus_oracle"] = row[f"{name}_stoi"] - row["oracle_stoi"]
                    if gst:
                        row[f"{name}_minus_gst"] = row[f"{name}_pesq"] - max(gst)
                    for other in [k[:-5] for k in row if k[:5] in ("peer:", "path:") and k.endswith("_pesq")]:
                        row[f"{name}_minus_{other}"] = row[f"{name}_pesq"] - row[f"{other}_pesq"]
                        row[f"{name}_stoi_minus_{other}"] = row[f"{name}_stoi"] - row[f"{other}_stoi"]
            rows.append(row)
            print(f"{scenario:10} seed {seed}: " + "  ".join(
                f"{k[:-5]} {row[k]:.2f}" for k in row if k.endswith("_pesq")) + f"  loss {row['loss']:.1f}%")
        keys = sorted({k for r in rows for k in r if isinstance(r[k], (int, float)) and k != "seed"})
        results[scenario] = {"runs": rows, "summary": {k: summary(rows, k) for k in keys}}
    with open(f"{arguments.out}/one-talker.json", "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)

    gst_names = sorted({k[:-5] for r in results.values() for k in r["summary"] if k.startswith("gst:") and k.endswith("_pesq")},
                       key=lambda n: (-int(re.match(r"gst:(\d+)", n).group(1)), n))
    # GStreamer talkers: on the listener's path first, then on a path of their own.
    peer_names = sorted({k[:-5] for r in results.values() for k in r["summary"] if k[:5] in ("peer:", "path:") and k.endswith("_pesq")},
                        reverse=True)
    live = all(r["summary"].get("parley_pesq") for r in results.values())
    # The receiver the tables judge: the live call, or (rescoring the replay) today's jitter
    # buffer offline.
    subject, subject_label = ("parley", "Parley") if live and arguments.only != "replay" else ("replay", "replay")

    def gst_label(name):
        if name.startswith("peer:"):
            return f"GStreamer, own path ({name[5:]} ms)"
        if name.startswith("path:"):
            return f"GStreamer, listener's path ({name[5:]} ms)"
        latency, _, variant = name[4:].partition("-")
        return f"GStreamer {latency} ms" + (", no FEC" if variant == "plc" else "")

    def gap(summary, key, digits=2):
        value = summary.get(key)
        return "–" if value is None else f"{value['mean']:+.{digits}f}"

    def ratio(summary, numerator, denominator):
        top, bottom = summary.get(numerator), summary.get(denominator)
        return "–" if not top or not bottom else f"{top['mean'] / bottom['mean']:.0%}"

    clean_delay = results.get(CLEAN, {}).get("summary", {}).get(f"{subject}_delay")

    def added_delay(summary):
        delay = summary.get(f"{subject}_delay")
        return "–" if delay is None or clean_delay is None else f"{delay['mean'] - clean_delay['mean']:+.0f}"

    lines = [f"PESQ-WB (P.862.2, 1–4.64) and STOI against what each talker handed its encoder, over {len(seeds)} seed(s): "
             "mean (min–max)."]
    lines += table(
        f"{subject_label} against the oracle receiver (the same packets, no deadline) and stock GStreamer (opusenc 32 kb/s with "
        "in-band FEC for 10 %; rtpjitterbuffer, opusdec with FEC and PLC) on the listener's very path and on a path of its own; "
        "kb/s: RTP payload per packet sent, while talking; added delay: mouth-to-ear above the clean path's (none).",
        ["scenario", "frames lost", f"{subject_label} PESQ-WB", "oracle", f"{subject_label} − oracle", "ideal decoder"]
        + [x for n in peer_names for x in (gst_label(n), f"{subject_label} − it")]
        + [f"{subject_label} STOI", "oracle STOI"] + [f"{gst_label(n)} STOI" for n in peer_names]
        + [f"{subject_label} kb/s"] + ["GStreamer kb/s"] * bool(peer_names)
        + [f"{subject_label} mouth-to-ear (ms)", "added delay (ms)"] + [f"{gst_label(n)} mouth-to-ear" for n in peer_names],
        [[scenario, cell(r["summary"]["loss"], 1, " %"), cell(r["summary"][f"{subject}_pesq"]), cell(r["summary"]["oracle_pesq"]),
          f"{gap(r['summary'], f'{subject}_minus_oracle')} ({ratio(r['summary'], f'{subject}_pesq', 'oracle_pesq')})",
          cell(r["summary"]["ideal_pesq"])]
         + [x for n in peer_names for x in (cell(r["summary"].get(f"{n}_pesq")), gap(r["summary"], f"{subject}_minus_{n}"))]
         + [cell(r["summary"][f"{subject}_stoi"], 3), cell(r["summary"]["oracle_stoi"], 3)]
         + [cell(r["summary"].get(f"{n}_stoi"), 3) for n in peer_names]
         + [cell(r["summary"]["parley_kbps"], 0)] + [cell(r["summary"].get(f"{peer_names[0]}_kbps"), 0)] * bool(peer_names)
         + [cell(r["summary"].get(f"{subject}_delay"), 0), added_delay(r["summary"])]
         + [cell(r["summary"].get(f"{n}_delay"), 0) for n in peer_names]
         for scenario, r in results.items()])
    lines += table(
        "PESQ-WB: what the path allows (the reference encoder: 32 kb/s, in-band FEC, 10 % expected loss) and what each receiver made of it.",
        ["scenario", "frames lost", "codec ceiling", "ideal decoder", subject_label, f"{subject_label} − ideal (ratio)"]
        + [gst_label(n) for n in peer_names + gst_names] + ([f"{subject_label} − best GStreamer fed its packets"] if gst_names else []),
        [[scenario, cell(r["summary"]["loss"], 1, " %"), cell(r["summary"]["ceiling_pesq"]), cell(r["summary"]["ideal_pesq"]),
          cell(r["summary"][f"{subject}_pesq"]),
          f"{gap(r['summary'], f'{subject}_minus_ideal')} ({ratio(r['summary'], f'{subject}_pesq', 'ideal_pesq')})"]
         + [cell(r["summary"].get(f"{n}_pesq")) for n in peer_names + gst_names]
         + ([gap(r["summary"], f"{subject}_minus_gst")] if gst_names else [])
         for scenario, r in results.items()])
    lines += table(
        "PESQ-WB: the sender's part and the receiver's. The talker's own packets decoded with nothing lost, and by the oracle "
        "receiver with the listener's fates; replay: the listener's packets through today's JitterBuffer offline.",
        ["scenario", "talker's packets, nothing lost", "oracle receiver", "Parley", "Parley − oracle", "replay", "replay − oracle"],
        [[scenario, cell(r["summary"]["sent_pesq"]), cell(r["summary"]["oracle_pesq"]), cell(r["summary"].get("parley_pesq")),
          gap(r["summary"], "parley_minus_oracle"), cell(r["summary"]["replay_pesq"]), gap(r["summary"], "replay_minus_oracle")]
         for scenario, r in results.items()])
    stoi_names = ["ceiling", "ideal", "sent", "oracle", "parley"] + peer_names + gst_names + ["replay"]
    stoi_labels = {"ceiling": "codec ceiling", "ideal": "ideal decoder", "sent": "talker's packets", "oracle": "oracle receiver",
                   "parley": "Parley", "replay": "replay"}
    lines += table(
        "STOI (0–1).", ["scenario"] + [stoi_labels.get(n) or gst_label(n) for n in stoi_names],
        [[scenario] + [cell(r["summary"].get(f"{n}_stoi"), 3) for n in stoi_names] for scenario, r in results.items()])

    def repair(summary, prefix):
        fec, concealed = summary.get(f"{prefix}_fec"), summary.get(f"{prefix}_concealed")
        if fec is None:
            return "–"
        red = summary.get(f"{prefix}_red")
        return (f"{red['mean']:.1f} % / " if red else "") + f"{fec['mean']:.1f} % / {concealed['mean']:.1f} %"
    lines += table(
        "Mouth-to-ear delay (median over the talker's speech, ms); the share of the talker's frames played from copies / rebuilt "
        "from FEC / concealed; and what the talker sent (payload kb/s while talking, over the whole passage, packets with copies).",
        ["scenario", "Parley"] + [gst_label(n) for n in peer_names + gst_names]
        + ["replay", "Parley copies / FEC / concealed", "oracle copies / FEC / concealed", "replay copies / FEC / concealed",
           "longest loss run", "Parley kb/s talking / average", "packets with copies"],
        [[scenario, cell(r["summary"].get("parley_delay"), 0)] + [cell(r["summary"].get(f"{n}_delay"), 0) for n in peer_names + gst_names]
         + [cell(r["summary"].get("replay_delay"), 0), repair(r["summary"], "parley"), repair(r["summary"], "oracle"),
            repair(r["summary"], "replay"), f"{r['summary']['longest_loss_run']['max']:.0f} frames",
            f"{r['summary']['parley_kbps']['mean']:.0f} / {r['summary']['parley_kbps_average']['mean']:.0f}",
            f"{r['summary']['parley_redundant_packets']['mean']:.0f} %"]
         for scenario, r in results.items()])
    if peer_names:
        lines += table(
            "Packets the GStreamer talkers lost: on the listener's path (the Parley talker's losses, frame for frame) and on its "
            "own (its own simulator, same impairment and seed).",
            ["scenario"] + [gst_label(n) for n in peer_names],
            [[scenario] + [cell(r["summary"].get(f"{n}_loss"), 1, " %") for n in peer_names] for scenario, r in results.items()])
    disturbed = [f"{scenario} seed {r['seed']} ({r['disturbed']})" for scenario, result in results.items() for r in result["runs"]
                 if r.get("disturbed")]
    if disturbed:
        lines += ["", "Calls the machine disturbed in every attempt (call_disturbed.py), counted all the same: " + "; ".join(disturbed) + "."]
    with open(f"{arguments.out}/one-talker.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot_results(results, scenarios, seeds, peer_names + gst_names, gst_label, f"{arguments.out}/one-talker.png")


def plot_results(results, scenarios, seeds, gst_names, gst_label, path):
    labels = {"ceiling": "codec ceiling", "ideal": "ideal decoder", "oracle": "oracle receiver (talker's packets, no deadline)",
              "parley": "Parley", "replay": "replay (today's buffer)"}
    colours = {"ceiling": "0.6", "ideal": "black", "oracle": "0.35", "parley": "tab:blue", "replay": "tab:cyan"}
    markers = {"ceiling": "_", "ideal": "s", "oracle": "D", "parley": "o", "replay": "."}
    for index, name in enumerate(gst_names):
        labels[name] = gst_label(name)
        colours[name] = ["tab:orange", "tab:red", "tab:brown", "tab:purple"][index % 4]
        markers[name] = {"peer": "v", "path": "<"}.get(name[:4], "^")
    figure = plot.figure(figsize=(14, 9))
    grid = figure.add_gridspec(2, 2, height_ratios=[1.2, 1])
    axes = [figure.add_subplot(grid[0, :]), figure.add_subplot(grid[1, 0]), figure.add_subplot(grid[1, 1])]
    x = numpy.arange(len(scenarios))

    def draw(axis, names, metric, width):
        for offset, name in enumerate(names):
            shift = (offset - (len(names) - 1) / 2) * width
            stats = [results[scenario]["summary"].get(f"{name}_{metric}") for scenario in scenarios]
            if not any(stats):
                continue
            means = [st["mean"] if st else numpy.nan for st in stats]
            low = [st["mean"] - st["min"] if st else 0 for st in stats]
            high = [st["max"] - st["mean"] if st else 0 for st in stats]
            axis.errorbar(x + shift, means, yerr=[low, high], fmt=markers[name], color=colours[name], label=labels[name],
                          capsize=2, markersize=14 if name == "ceiling" else 6)
        axis.set_xticks(x, scenarios, rotation=20)
        axis.grid(alpha=0.3)

    quality = ["ceiling", "ideal", "oracle", "parley"] + gst_names + ["replay"]
    draw(axes[0], quality, "pesq", 0.08)
    axes[0].set_ylim(1, 4.7)
    axes[0].set_title("PESQ-WB (MOS-LQO)")
    axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    draw(axes[1], quality, "stoi", 0.08)
    axes[1].set_ylim(0.5, 1.0)
    axes[1].set_title("STOI")
    draw(axes[2], ["parley"] + gst_names + ["replay"], "delay", 0.12)
    axes[2].set_ylim(bottom=0)
    axes[2].set_ylabel("ms")
    axes[2].set_title("Mouth-to-ear delay (median)")

    figure.suptitle("One talker, one listener: loss on the talker's uplink, the encrypted relay, 32 kb/s "
                    f"({len(seeds)} seed{'s' if len(seeds) > 1 else ''}; bars: min–max)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
