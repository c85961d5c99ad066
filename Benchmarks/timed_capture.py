"""Records a GStreamer pipeline's rendered audio with the time it played: reads raw 16-bit
mono 48 kHz samples from standard input (`fdsink fd=1 sync=true`, which writes each buffer
when the pipeline's clock says it plays), stamps every read with CLOCK_MONOTONIC, and at
the end writes the audio as a WAV file and, as JSON, when its first sample would have
played on the timeline the rest of it followed (with every read's time and the samples
before it, to check that timeline).

With `audiorate` before the sink the stream has no holes, so sample n plays at start +
n / 48 kHz, and each read gives an estimate of start: its time less the duration of the
samples before it. Reads only come late (scheduling), never early, so a low percentile of
the estimates is the timeline. The opening burst is left out: the silence audiorate fills
in before the first packet, and that packet, reach the sink before the pipeline has
configured its latency (GStreamer does so once the first data flows), so they are written
at once, off the timeline everything after them keeps. The silences audiorate fills after
a pause are written late too, so they stay above the percentile.

Usage: gst-launch-1.0 … ! fdsink fd=1 sync=true | timed_capture.py OUT.wav OUT.json
"""
import json
import os
import sys
import time
import wave

RATE = 48000
BURST_NANOSECONDS = 5_000_000


def main():
    out_wav, out_json = sys.argv[1], sys.argv[2]
    chunks = []
    samples = 0
    reads = []
    pending = b""
    while True:
        data = os.read(0, 1 << 16)
        now = time.monotonic_ns()
        if not data:
            break
        reads.append([now, samples])
        data = pending + data
        whole = len(data) - len(data) % 2
        chunks.append(data[:whole])
        pending = data[whole:]
        samples += whole // 2
    with wave.open(out_wav, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(b"".join(chunks))

    # The first read that comes well after the one before it ends the opening burst.
    steady = next((i for i in range(1, len(reads)) if reads[i][0] - reads[i - 1][0] >= BURST_NANOSECONDS), len(reads))
    estimates = sorted(t - n * 1_000_000_000 // RATE for t, n in reads[steady:])
    report = {"startedAtNanoseconds": None, "samples": samples, "reads": reads}
    if estimates:
        low = estimates[len(estimates) // 10]
        report["startedAtNanoseconds"] = low
        # How far the timeline moved, if it did (audiorate dropping or adding samples).
        report["timelineSpreadMilliseconds"] = (estimates[len(estimates) * 9 // 10] - low) / 1e6
    with open(out_json, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
