"""Lines a receiver's recording up with what the talker said, for PESQ and STOI, the way a
listener hears it: each utterance (speech between pauses of 150 ms or more) at its own
delay, the cut between two delays falling in the pause between them.

A receiver's delay changes between utterances (a jitter buffer grows or shrinks, a
GStreamer timeline steps by a frame after a silence) and, with time stretching, a little
within one. Cutting the recording at every 400 ms window's delay (as `parley-bench
call-quality --aligned-out` does, for its envelope measures) leaves a discontinuity at
most cuts, which PESQ hears as a click: on a clean path it marks a perfect copy of the
talker's packets down from 4.1 to 2.7. PESQ and STOI align within an utterance
themselves; what they need is each utterance in place.

For each utterance the expected delay is the median of `call-quality`'s window delays over
it (or a known one); the best lag within ±60 ms of it, by cross-correlation of the
waveforms, places the utterance.
"""
import json
import wave

import numpy
from pesq import pesq
from pystoi import stoi
from scipy.signal import correlate, resample_poly

RATE = 48000
SEARCH_SECONDS = 0.06
PAUSE_SECONDS = 0.15


def read(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == RATE, path
        return numpy.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(numpy.float64) / 32768


def utterances(reference):
    """(start, end) sample ranges of speech, split at pauses of PAUSE_SECONDS or more."""
    block = RATE // 100
    loud = [numpy.max(numpy.abs(reference[i:i + block])) > 1e-3 for i in range(0, len(reference), block)]
    spans = []
    start = end = None
    for index, active in enumerate(loud):
        if active:
            start = index if start is None else start
            end = index + 1
        elif start is not None and (index - end) * block >= PAUSE_SECONDS * RATE:
            spans.append((start * block, end * block))
            start = None
    if start is not None:
        spans.append((start * block, end * block))
    return spans


def speech_span(reference):
    """From 0.1 s before the first word to 0.1 s after the last: what PESQ and STOI judge."""
    active = numpy.abs(reference) > 1e-3
    first = max(0, int(numpy.argmax(active)) - RATE // 10)
    last = min(len(reference), len(reference) - int(numpy.argmax(active[::-1])) + RATE // 10)
    return first, last


class Timeline:
    """Where the talker's sample i is expected in a recording: offset + i + delay(i)."""

    def __init__(self, offset, windows=None, delay_milliseconds=0.0):
        self.offset = offset
        self.windows = [(w["startSeconds"] * RATE, w["delayMilliseconds"] * RATE / 1000)
                        for w in (windows or []) if w.get("delayMilliseconds") is not None]
        delays = [d for _, d in self.windows]
        self.default = numpy.median(delays) if delays else delay_milliseconds * RATE / 1000

    @staticmethod
    def of_recording(quality_json, talker_captured_ns, recording_started_ns):
        """A recording that began at `recording_started_ns` (CLOCK_MONOTONIC), with the
        windows `parley-bench call-quality --json` measured for it."""
        with open(quality_json) as f:
            windows = json.load(f).get("windows", [])
        offset = round((talker_captured_ns - recording_started_ns) * RATE / 1e9)
        return Timeline(offset, windows)

    def expected(self, start, end):
        delays = [d for s, d in self.windows if start - 0.4 * RATE <= s < end]
        return self.offset + start + (numpy.median(delays) if delays else self.default)


def align(reference, recording, timeline):
    """The recording cut utterance by utterance into the reference's timing; the lags
    (samples) found for each utterance."""
    spans = utterances(reference)
    search = int(SEARCH_SECONDS * RATE)
    lags = []
    for start, end in spans:
        expected = int(round(timeline.expected(start, end))) - start  # lag of this utterance
        low = start + expected - search
        window = numpy.zeros(end - start + 2 * search)
        source_from, source_to = max(0, low), min(len(recording), low + len(window))
        if source_to > source_from:
            window[source_from - low:source_to - low] = recording[source_from:source_to]
        score = correlate(window, reference[start:end], mode="valid", method="fft")
        lags.append(expected - search + int(numpy.argmax(score)))
    aligned = numpy.zeros(len(reference))
    bounds = [0] + [(spans[i][1] + spans[i + 1][0]) // 2 for i in range(len(spans) - 1)] + [len(reference)]
    for index, lag in enumerate(lags):
        source = numpy.arange(bounds[index], bounds[index + 1]) + lag
        inside = (source >= 0) & (source < len(recording))
        aligned[bounds[index]:bounds[index + 1]][inside] = recording[source[inside]]
    return aligned, lags


def scores(reference, degraded, span):
    """PESQ-WB (P.862.2) and STOI of `degraded` (aligned) against `reference`, over `span`, at 16 kHz."""
    first, last = span
    reference16 = resample_poly(reference[first:last], 1, 3)
    degraded16 = resample_poly(degraded[first:last], 1, 3)
    return {
        "pesq": float(pesq(16000, reference16, degraded16, "wb")),
        "stoi": float(stoi(reference16, degraded16, 16000, extended=False)),
    }
