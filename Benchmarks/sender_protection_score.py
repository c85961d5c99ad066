"""Scores what `parley-bench sender-protection` decoded: PESQ-WB (P.862.2) and STOI for
every option and seed against the original speech, averaged over the seeds, per loss
scenario; prints a Markdown table and writes it to OUT.

Usage: sender_protection_score.py OUT RUNS/SCENARIO...
"""
import json
import os
import statistics
import sys
import wave

import numpy
from pesq import pesq
from pystoi import stoi
from scipy.signal import resample_poly


def read(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 48000, path
        return numpy.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(numpy.float64) / 32768


def score(folder):
    original = resample_poly(read(f"{folder}/original.wav"), 1, 3)
    results = json.load(open(f"{folder}/summary.json"))
    by_label = {}
    for result in results:
        decoded = resample_poly(read(f"{folder}/{result['label']}-{result['seed']}.wav"), 1, 3)
        n = min(len(original), len(decoded))
        result["pesq"] = pesq(16000, original[:n], decoded[:n], "wb")
        result["stoi"] = stoi(original[:n], decoded[:n], 16000, extended=False)
        by_label.setdefault(result["label"], []).append(result)
    rows = []
    for label, runs in by_label.items():
        frames = sum(r["framesFromOwnPacket"] + r["framesFromRedundancy"] + r["framesFromFEC"] + r["framesConcealed"] for r in runs)
        rows.append({
            "label": label,
            "pesq": statistics.mean(r["pesq"] for r in runs),
            "pesq_sd": statistics.stdev(r["pesq"] for r in runs) if len(runs) > 1 else 0.0,
            "stoi": statistics.mean(r["stoi"] for r in runs),
            "kbps": statistics.mean(r["payloadKilobitsPerSecond"] for r in runs),
            "loss": statistics.mean(r["lossPercent"] for r in runs),
            "red": 100 * sum(r["framesFromRedundancy"] for r in runs) / frames,
            "fec": 100 * sum(r["framesFromFEC"] for r in runs) / frames,
            "plc": 100 * sum(r["framesConcealed"] for r in runs) / frames,
            "seeds": len(runs),
        })
    return rows


def main():
    out, folders = sys.argv[1], sys.argv[2:]
    lines = []
    for folder in folders:
        rows = score(folder)
        reference = next((r for r in rows if r["label"] == "ideal"), None)
        lines.append(f"\n### {os.path.basename(folder.rstrip('/'))} (loss {rows[0]['loss']:.1f} %, {rows[0]['seeds']} seeds)\n")
        lines.append("| option | PESQ-WB | − ideal | STOI | kb/s (payload, talking) | frames from RED | from FEC | concealed |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            gap = f"{r['pesq'] - reference['pesq']:+.2f}" if reference else "–"
            lines.append(f"| {r['label']} | {r['pesq']:.2f} ± {r['pesq_sd']:.2f} | {gap} | {r['stoi']:.3f} | {r['kbps']:.1f} | "
                         f"{r['red']:.1f} % | {r['fec']:.1f} % | {r['plc']:.1f} % |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
