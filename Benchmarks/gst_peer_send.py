"""The sending half of a stock GStreamer peer: speech through `opusenc` and `rtpopuspay`.

GStreamer encodes the whole file first (`filesrc ! wavparse ! opusenc ! rtpopuspay !
rtpstreampay ! fdsink`, with the encoder settings given); then the packets are sent in one
of two ways:

- **live** (`--live SPEECH.wav`): one every 20 ms, packet k when its frame's last sample
  would have been spoken (k + 1 frames after the first sample), from CLOCK_MONOTONIC
  `startedAtNanoseconds`, the moment the speech's first sample was "spoken". Through a
  `parley netsim` of their own they meet the scenario's impairment as a Parley talker's do,
  but not the same losses: a call of its own on the same kind of path.
- **on a Parley listener's path** (`--path TALKER.csv LISTENER.csv SENT.wav`): the talker's
  own --record-sent is encoded, and packet k (the 20 ms frame k of the recording) arrives
  when the listener's packet for the same frame arrived, shifted to now, or not at all when
  the listener lost it: the same losses and the same arrival times, frame for frame. The
  frames the talker sent nothing for (its silences, DTX) arrive as its packets around them
  did. `shiftNanoseconds` (added to every time of the call) sets the GStreamer receiver's
  recording back on the call's timeline, so its delay is measured from the talker's capture.

Writes JSON with the packets sent and lost, their payload bytes (RTP headers not counted)
and the timing above.

Usage: gst_peer_send.py --live SPEECH.wav HOST:PORT OUT.json [opusenc properties...]
       gst_peer_send.py --path TALKER.csv LISTENER.csv SENT.wav HOST:PORT OUT.json [opusenc properties...]
       e.g. gst_peer_send.py --live passage.wav 127.0.0.1:5004 peer.json bitrate=32000 inband-fec=true packet-loss-percentage=10
"""
import csv
import json
import socket
import statistics
import subprocess
import sys
import time

FRAME_SAMPLES = 960
FRAME_NANOSECONDS = 20_000_000


def encode(speech, properties):
    """The RTP packets opusenc and rtpopuspay make of the file, in order."""
    # RFC 4571 framing (a 16-bit length before each packet) on standard output.
    pipeline = ["gst-launch-1.0", "-q", "filesrc", f"location={speech}", "!", "wavparse", "!", "audioconvert", "!",
                "audioresample", "!", "audio/x-raw,rate=48000,channels=1", "!", "opusenc", "frame-size=20", *properties,
                "!", "rtpopuspay", "pt=111", "!", "rtpstreampay", "!", "fdsink", "fd=1"]
    done = subprocess.run(pipeline, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"gst_peer_send: GStreamer could not encode {speech}: {done.stderr.decode(errors='replace').strip()}")
    data = done.stdout
    packets = []
    offset = 0
    while offset + 2 <= len(data):
        length = int.from_bytes(data[offset:offset + 2], "big")
        if length < 12 or offset + 2 + length > len(data):
            sys.exit(f"gst_peer_send: GStreamer's packet stream of {speech} is cut short at byte {offset}")
        packets.append(data[offset + 2:offset + 2 + length])
        offset += 2 + length
    if not packets:
        sys.exit(f"gst_peer_send: GStreamer made no packets of {speech}")
    return packets


def path_times(talker_trace, listener_trace, count):
    """When each of `count` frames arrived at the listener (CLOCK_MONOTONIC ns, the call's
    clock), or None where the listener lost the talker's packet for it."""
    sent = {}
    with open(talker_trace) as f:
        for row in csv.DictReader(f):
            if row["direction"] == "sent" and row["frame_start"]:
                sent[int(row["frame_start"]) // FRAME_SAMPLES] = (int(row["ssrc"]), int(row["timestamp"]), int(row["monotonic_ns"]))
    if not sent:
        sys.exit(f"gst_peer_send: {talker_trace} has no sent packets")
    arrived = {}
    with open(listener_trace) as f:
        for row in csv.DictReader(f):
            if row["direction"] == "received":
                key = (int(row["ssrc"]), int(row["timestamp"]))
                arrived[key] = min(arrived.get(key, 1 << 62), int(row["monotonic_ns"]))
    # The talker's sending clock and the path's transit, for the frames it sent nothing for.
    send_offset = statistics.median(ns - frame * FRAME_NANOSECONDS for frame, (_, _, ns) in sent.items())
    transits = [arrived[(ssrc, ts)] - ns for ssrc, ts, ns in sent.values() if (ssrc, ts) in arrived]
    if not transits:
        sys.exit(f"gst_peer_send: {listener_trace} has none of the talker's packets")
    transit = statistics.median(transits)
    times = []
    for frame in range(count):
        if frame in sent:
            ssrc, ts, _ = sent[frame]
            times.append(arrived.get((ssrc, ts)))
        else:
            times.append(int(send_offset + frame * FRAME_NANOSECONDS + transit))
    return times


def send(packets, times, destination):
    """Sends packet i at times[i] (CLOCK_MONOTONIC ns), in time order; None: not at all."""
    host, _, port = destination.rpartition(":")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for due, packet in sorted((t, p) for t, p in zip(times, packets) if t is not None):
        while True:
            wait = due - time.monotonic_ns()
            if wait <= 0:
                break
            time.sleep(wait / 1e9)
        sender.sendto(packet, (host, int(port)))


def main():
    arguments = sys.argv[1:]
    if len(arguments) >= 4 and arguments[0] == "--live":
        speech, destination, out, properties = arguments[1], arguments[2], arguments[3], arguments[4:]
        packets = encode(speech, properties)
        started = time.monotonic_ns() + 100_000_000
        times = [started + (index + 1) * FRAME_NANOSECONDS for index in range(len(packets))]
        report = {"startedAtNanoseconds": started}
    elif len(arguments) >= 6 and arguments[0] == "--path":
        talker, listener, speech, destination, out, properties = (*arguments[1:6], arguments[6:])
        packets = encode(speech, properties)
        times = path_times(talker, listener, len(packets))
        first = min(t for t in times if t is not None)
        shift = time.monotonic_ns() + 300_000_000 - first
        times = [t + shift if t is not None else None for t in times]
        report = {"shiftNanoseconds": shift}
    else:
        sys.exit(__doc__)
    send(packets, times, destination)
    report.update({"packets": len(packets), "lost": sum(t is None for t in times),
                   "payloadBytes": sum(len(packet) - 12 for packet in packets),
                   "seconds": len(packets) * FRAME_NANOSECONDS / 1e9})
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
