"""Lines a receiver's recording up with what the talker said, as PESQ and STOI each need it.

A receiver's delay changes between utterances (a jitter buffer grows or shrinks, a
GStreamer timeline steps by a frame after a silence) and, with time stretching, within
one. The two measures take that differently:

- PESQ (P.862) finds each utterance's delay itself and follows a change of delay inside
  one, but hears a discontinuity as a click. It is given each utterance (speech between
  pauses of 150 ms or more) at its own delay, the cut falling in the pause: the best lag,
  by cross-correlation of the waveforms, within ±60 ms of the median of `call-quality`'s
  window delays over the utterance (or a known delay); or of one window's delay, or the
  utterance before's lag, if the waveform matches better there: alsa-utils' voices say the
  same words more than once, and a window damaged by loss can match the same word a second
  later, which would misplace the whole utterance. Cutting at every 400 ms window's
  delay instead (`parley-bench call-quality --aligned-out`) leaves a click at most cuts:
  on a clean path PESQ marks a bit-exact copy of the talker's packets 2.65 that way and
  4.09 this way.
- STOI aligns nothing and compares 384 ms segments, so it needs the recording in step
  everywhere: one lag per utterance is not enough (a 4 s sentence that a jitter buffer
  stretched by 1 % drifts 40 ms from start to end; the three-way call's clean path scored
  STOI 0.86 that way, 0.97 window by window). It is given the recording window by window,
  each 400 ms window at the sample lag near its measured delay where the waveforms match
  best, cross-faded where the lag changes (`align_windows`). `call-quality --aligned-out`
  cuts at every window's fractional delay instead, which costs even a bit-exact copy
  0.02 STOI (0.969 against 0.992).

Offline decodes (the ceilings) are in step by construction and serve both as they are.
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
WINDOW = int(0.4 * RATE)
FINE = int(0.003 * RATE)
FADE = RATE // 200


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

    def lag(self, start, end, margin=WINDOW):
        """The expected lag (samples) of the talker's samples start..<end in the recording:
        the median delay of the windows from `margin` before `start` to `end`."""
        delays = [d for s, d in self.windows if start - margin <= s < end]
        return int(round(self.offset + (numpy.median(delays) if delays else self.default)))

    def candidates(self, start, end, margin=WINDOW):
        """The lag `lag` expects, and each window's own over the same span."""
        return {self.lag(start, end, margin)} | {int(round(self.offset + d)) for s, d in self.windows if start - margin <= s < end}


def best_lag(reference, recording, start, end, expected, search):
    """The lag within `search` samples of `expected` at which the recording matches the
    reference's start..<end best (cross-correlation of the waveforms)."""
    return best_match(reference, recording, start, end, expected, search)[0]


def best_match(reference, recording, start, end, expected, search):
    """`best_lag`, and how well the waveforms match there (normalized correlation, −1…1)."""
    low = start + expected - search
    window = numpy.zeros(end - start + 2 * search)
    source_from, source_to = max(0, low), min(len(recording), low + len(window))
    if source_to > source_from:
        window[source_from - low:source_to - low] = recording[source_from:source_to]
    part = reference[start:end]
    score = correlate(window, part, mode="valid", method="fft")
    best = int(numpy.argmax(score))
    energy = numpy.sqrt(numpy.sum(part ** 2) * numpy.sum(window[best:best + len(part)] ** 2))
    return expected - search + best, float(score[best] / energy) if energy > 0 else 0.0


def compose(length, recording, bounds, lags, fade=0):
    """The recording taken at lags[i] over bounds[i]..<bounds[i + 1], cross-faded over
    `fade` samples where the lag changes."""
    aligned = numpy.zeros(length)
    weight = numpy.zeros(length)
    for index, lag in enumerate(lags):
        before = fade // 2 if index > 0 and lags[index - 1] != lag else 0
        after = fade // 2 if index < len(lags) - 1 and lags[index + 1] != lag else 0
        positions = numpy.arange(max(0, bounds[index] - before), min(length, bounds[index + 1] + after))
        ramp = numpy.ones(len(positions))
        if before:
            ramp *= numpy.clip((positions - (bounds[index] - before) + 0.5) / (2 * before), 0, 1)
        if after:
            ramp *= numpy.clip((bounds[index + 1] + after - positions - 0.5) / (2 * after), 0, 1)
        source = positions + lag
        inside = (source >= 0) & (source < len(recording))
        aligned[positions[inside]] += ramp[inside] * recording[source[inside]]
        weight[positions] += ramp
    return aligned / numpy.maximum(weight, 1e-9)


def align(reference, recording, timeline):
    """For PESQ: the recording cut utterance by utterance into the reference's timing; the
    lags (samples) found for each utterance."""
    spans = utterances(reference)
    search = int(SEARCH_SECONDS * RATE)
    lags = []
    for start, end in spans:
        # The windows' median first (it wins a tie), then each window's and the last utterance's.
        expected = [timeline.lag(start, end)] + sorted(timeline.candidates(start, end) - {timeline.lag(start, end)}) \
            + ([lags[-1]] if lags else [])
        matches = [best_match(reference, recording, start, end, lag, search) for lag in expected]
        lags.append(max(matches, key=lambda match: match[1])[0])
    bounds = [0] + [(spans[i][1] + spans[i + 1][0]) // 2 for i in range(len(spans) - 1)] + [len(reference)]
    return compose(len(reference), recording, bounds, lags), lags


def align_windows(reference, recording, timeline):
    """For STOI: the recording in step window by window (`call-quality`'s 400 ms windows),
    each at the sample lag within ±3 ms of that window's measured delay where the waveforms
    match best, smoothed over three windows; cross-faded over 5 ms where the lag changes,
    so a receiver whose delay does not change (a bit-exact decode) is not cut at all."""
    first, last = speech_span(reference)
    starts = list(range(first - first % WINDOW, last, WINDOW))
    # Without measured windows (an offline decode), one lag for the whole: a decode from a
    # stream resampled on the way in is a few milliseconds off the reference.
    overall = None if timeline.windows else best_lag(reference, recording, first, last, timeline.lag(first, last),
                                                     int(SEARCH_SECONDS * RATE))
    lags = []
    for start in starts:
        end = min(start + WINDOW, len(reference))
        expected = overall if overall is not None else timeline.lag(start, end, margin=0)
        speech = numpy.max(numpy.abs(reference[start:end])) > 1e-3
        lags.append(best_lag(reference, recording, start, end, expected, FINE) if speech else None)
    known = [index for index, lag in enumerate(lags) if lag is not None]
    if not known:
        return numpy.zeros(len(reference))
    lags = [lag if lag is not None else lags[min(known, key=lambda k: abs(k - index))] for index, lag in enumerate(lags)]
    smoothed = [int(numpy.median(lags[max(0, i - 1):i + 2])) for i in range(len(lags))]
    bounds = [0] + starts[1:] + [len(reference)]
    return compose(len(reference), recording, bounds, smoothed, fade=FADE)


def scores(reference, for_pesq, for_stoi, span):
    """PESQ-WB (P.862.2) of `for_pesq` (from `align`) and STOI of `for_stoi` (from
    `align_windows`) against `reference`, over `span`, at 16 kHz."""
    first, last = span

    def at16k(signal):
        signal = numpy.concatenate([signal, numpy.zeros(max(0, last - len(signal)))])
        return resample_poly(signal[first:last], 1, 3)
    reference16 = at16k(reference)
    return {
        "pesq": float(pesq(16000, reference16, at16k(for_pesq), "wb")),
        "stoi": float(stoi(reference16, at16k(for_stoi), 16000, extended=False)),
    }
