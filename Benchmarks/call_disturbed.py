"""Says whether a one-talker call was disturbed by the machine rather than the network, from
its packet traces: on a shared machine a busy moment can hold a process for tens of
milliseconds to seconds, and what the listener then hears is that, not the scenario.

- The talker's own sending: within a talkspurt (consecutive sequence numbers) each packet
  leaves its frame's 20 ms after the one before; one that left `STALL_MS` later than its
  timestamp says, the talker's threads were held up.
- The path, where the scenario adds no delay (its simulator's final report shows a delay
  of 0 ms at the 99th percentile): a packet that took more than `STALL_MS` from the talker
  to the listener was held up by the relay's or the simulator's process.

Prints the reason and exits 1 when disturbed, else exits 0 silently.

Usage: call_disturbed.py RUN
"""
import csv
import re
import sys

STALL_MS = 50


def main():
    run = sys.argv[1]
    with open(f"{run}/talker.csv") as f:
        sent = [row for row in csv.DictReader(f) if row["direction"] == "sent"]
    stalls = []
    for before, after in zip(sent, sent[1:]):
        if int(after["sequence"]) - int(before["sequence"]) != 1:
            continue
        late = (int(after["monotonic_ns"]) - int(before["monotonic_ns"])) / 1e6 \
            - ((int(after["timestamp"]) - int(before["timestamp"])) % (1 << 32)) / 48
        if late > STALL_MS:
            stalls.append(late)
    if stalls:
        print(f"the talker's sending stalled {len(stalls)} times, up to {max(stalls):.0f} ms")
        sys.exit(1)
    with open(f"{run}/netsim-report.txt") as f:
        report = f.read()
    match = re.search(r"up +\(client → relay\):.*p99 ([\d.]+) ms", report)
    if match and float(match.group(1)) == 0:
        sent_at = {(row["ssrc"], row["sequence"]): int(row["monotonic_ns"]) for row in sent}
        with open(f"{run}/listener.csv") as f:
            transits = [(int(row["monotonic_ns"]) - sent_at[(row["ssrc"], row["sequence"])]) / 1e6
                        for row in csv.DictReader(f) if row["direction"] == "received" and (row["ssrc"], row["sequence"]) in sent_at]
        held = [transit for transit in transits if transit > STALL_MS]
        if held:
            print(f"{len(held)} packets took up to {max(held):.0f} ms on a path that adds no delay")
            sys.exit(1)


if __name__ == "__main__":
    main()
