"""Records what a GStreamer pipeline played and when, as a sound card would have played it.

The pipeline ends in `identity silent=false ! fdsink fd=3 sync=true`, run by `gst-launch-1.0
-v`: the sink writes each buffer to this script's standard input when the pipeline clock
says it plays, and identity logs each buffer's size and timestamp (PTS) on gst-launch's
standard output, which the script reads from a file at the end. Every read is stamped with
CLOCK_MONOTONIC.

A sink plays the buffer stamped PTS at C + PTS, C being the pipeline's base time plus its
latency; a buffer written alone in a read shows C as (read time − PTS), and the median over
them is C (a read comes late by the reader's scheduling, rarely and by little). The audio is
then laid out by PTS, C being the WAV's first sample: what GStreamer meant to play when.
What reached the sink too late is not played, as a sound card's ring buffer skips a period
already gone: a buffer written more than 20 ms after its samples were due loses those
samples (the silence audiorate fills in after a pause is written late by design, and is
silence either way). Writes JSON with `startedAtNanoseconds` (C), the samples of audio
dropped as late, and each read.

Usage: gst-launch-1.0 -v … ! identity silent=false ! fdsink fd=3 sync=true 3>PIPE >LOG
       timed_capture.py LOG OUT.wav OUT.json <PIPE
"""
import json
import os
import re
import sys
import time
import wave

RATE = 48000
LATE_NANOSECONDS = 20_000_000
CHAIN = re.compile(r"\((\d+) bytes, dts: [^,]*, pts: (\d+):(\d+):(\d+)\.(\d+),")


def buffers(log):
    """(bytes, PTS in ns) of every buffer identity passed, in order."""
    found = []
    with open(log, errors="replace") as f:
        for line in f:
            if "last-message = chain" not in line:
                continue
            match = CHAIN.search(line)
            if match:
                size, hours, minutes, seconds, fraction = match.groups()
                pts = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])
                found.append((int(size), pts))
    return found


def main():
    log, out_wav, out_json = sys.argv[1], sys.argv[2], sys.argv[3]
    reads = []  # (time, bytes)
    while True:
        data = os.read(0, 1 << 16)
        now = time.monotonic_ns()
        if not data:
            break
        reads.append((now, data))
    stream = b"".join(data for _, data in reads)
    listed = buffers(log)
    report = {"startedAtNanoseconds": None, "reads": [[t, len(data)] for t, data in reads]}
    if sum(size for size, _ in listed) != len(stream):
        report["error"] = f"identity logged {sum(size for size, _ in listed)} bytes, the sink wrote {len(stream)}"
        listed = []

    # When each buffer was written: the time of the read that took its last byte.
    written = []
    read_index, read_end, offset = 0, 0, 0
    alone = []
    for size, pts in listed:
        start, offset = offset, offset + size
        while read_index < len(reads) and read_end < offset:
            read_end += len(reads[read_index][1])
            read_index += 1
        read_time = reads[read_index - 1][0]
        read_start = read_end - len(reads[read_index - 1][1])
        written.append(read_time)
        if read_start == start and read_end == offset:
            alone.append(read_time - pts)
    alone.sort()
    audio = bytearray()
    late = 0
    if alone:
        origin = alone[len(alone) // 2]
        report["startedAtNanoseconds"] = origin
        offset = 0
        for (size, pts), write_time in zip(listed, written):
            chunk = stream[offset:offset + size]
            offset += size
            position = round(pts * RATE / 1e9)
            # Samples already gone when the buffer reached the sink are not played.
            skipped = max(0, round((write_time - LATE_NANOSECONDS - origin - pts) * RATE / 1e9))
            skipped = min(skipped, size // 2)
            if any(chunk[:2 * skipped]):
                late += skipped
            end = 2 * (position + size // 2)
            if len(audio) < end:
                audio += bytes(end - len(audio))
            audio[2 * (position + skipped):end] = chunk[2 * skipped:]
    report["samples"] = len(audio) // 2
    # Audio (not audiorate's silence) that came too late to play.
    report["lateSamples"] = late
    with wave.open(out_wav, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(bytes(audio))
    with open(out_json, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
