"""What a model of the clipping loudspeaker in the reference would give SpeexDSP's filter,
and whether the model can be found from the filter's own residual (issue 29; offline, with
the model's parameters known or searched on a full grid: the outgoing path finds them
online, Sources/ParleyAudio/LoudspeakerIdentifier.swift).

A loudspeaker driven into clipping plays clip(HP(far)): the playback chain's high-pass,
then the amplifier's limit. No linear filter models that from `far`, which is why every
canceller built on one stops near 18 dB in the echo benchmark's clipping rooms. Given the
reference passed through the same high-pass and limit (a Hammerstein model: a static
non-linearity before the room's linear response), SpeexDSP's own filter has a linear echo
path to model again.

For each scenario this runs SpeexDSP as Parley configures it (20 ms frames, 200 ms filter,
the preprocessor attached with its default limits), the reference aligned by the true bulk
delay less 5 ms (Parley's margin):
  - with the reference as played;
  - with the reference through the loudspeaker's model found from the residual of that
    first run: for every candidate high-pass (none, 100, 200, 300 Hz, second order) and
    limit (-30 to -6 dBFS in 0.5 dB steps), the distortion the candidate predicts,
    HP(far) - clip(HP(far)), is compared with the linear filter's residual (before the
    preprocessor) from 6 to 15 s by their magnitude-squared coherence over 300-4,000 Hz
    (a room's response does not change coherence); the candidate with the highest wins,
    if it reaches COHERENCE_NEEDED, else the reference is left as played.
Scores are echo_score.py's (converged single-talk ERLE, double-talk PESQ-WB).

Usage: echo_clipping_model.py SCENARIOS [NAME_SUBSTRING]   (SCENARIOS from echo_scenarios.py)
"""
import ctypes
import json
import os
import sys

import numpy as np
from scipy.signal import butter, csd, sosfilt, welch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import echo_score  # noqa: E402

RATE = 48000
FRAME = 960
COHERENCE_NEEDED = 0.1
HIGH_PASSES = {"none": None, "100 Hz": 100, "200 Hz": 200, "300 Hz": 300}
LIMITS_DBFS = np.arange(-30.0, -5.99, 0.5)

speexdsp = ctypes.CDLL("libspeexdsp.so.1")
speexdsp.speex_echo_state_init.restype = ctypes.c_void_p
speexdsp.speex_preprocess_state_init.restype = ctypes.c_void_p
SAMPLES = ctypes.POINTER(ctypes.c_int16)


def speex(mic, reference):
    """(residual of the linear filter, output of the preprocessor), 16-bit like Parley's."""
    echo = speexdsp.speex_echo_state_init(FRAME, RATE // 5)
    rate = ctypes.c_int32(RATE)
    speexdsp.speex_echo_ctl(ctypes.c_void_p(echo), 24, ctypes.byref(rate))  # SPEEX_ECHO_SET_SAMPLING_RATE
    preprocess = speexdsp.speex_preprocess_state_init(FRAME, RATE)
    speexdsp.speex_preprocess_ctl(ctypes.c_void_p(preprocess), 24, ctypes.c_void_p(echo))  # SET_ECHO_STATE
    dereverb = ctypes.c_int32(0)
    speexdsp.speex_preprocess_ctl(ctypes.c_void_p(preprocess), 8, ctypes.byref(dereverb))  # SET_DEREVERB
    to16 = lambda s: np.clip(np.round(s * 32768), -32768, 32767).astype(np.int16)
    mic16, reference16 = to16(mic), to16(reference)
    frames = len(mic) // FRAME
    residual, output = np.zeros(frames * FRAME), np.zeros(frames * FRAME)
    for index in range(frames):
        span = slice(index * FRAME, (index + 1) * FRAME)
        captured, played = np.ascontiguousarray(mic16[span]), np.ascontiguousarray(reference16[span])
        cleaned = np.zeros(FRAME, np.int16)
        speexdsp.speex_echo_cancellation(ctypes.c_void_p(echo), captured.ctypes.data_as(SAMPLES), played.ctypes.data_as(SAMPLES),
                                         cleaned.ctypes.data_as(SAMPLES))
        residual[span] = cleaned / 32768
        speexdsp.speex_preprocess_run(ctypes.c_void_p(preprocess), cleaned.ctypes.data_as(SAMPLES))
        output[span] = cleaned / 32768
    speexdsp.speex_preprocess_state_destroy(ctypes.c_void_p(preprocess))
    speexdsp.speex_echo_state_destroy(ctypes.c_void_p(echo))
    return residual, output


def loudspeaker(reference, high_pass, limit_dbfs):
    shaped = reference if high_pass is None else sosfilt(butter(2, high_pass, btype="highpass", fs=RATE, output="sos"), reference)
    limit = 10 ** (limit_dbfs / 20)
    return shaped, np.clip(shaped, -limit, limit)


def identify(reference, residual):
    """(coherence, high-pass name, limit dBFS) of the candidate that best predicts the residual."""
    span = slice(6 * RATE, 15 * RATE)
    _, residual_power = welch(residual[span], fs=RATE, nperseg=1024)
    best = (0.0, "none", None)
    for name, high_pass in HIGH_PASSES.items():
        shaped = reference if high_pass is None else sosfilt(butter(2, high_pass, btype="highpass", fs=RATE, output="sos"), reference)
        for limit_dbfs in LIMITS_DBFS:
            limit = 10 ** (limit_dbfs / 20)
            distortion = (shaped - np.clip(shaped, -limit, limit))[span]
            if not np.any(distortion):
                continue
            frequencies, cross = csd(distortion, residual[span], fs=RATE, nperseg=1024)
            _, distortion_power = welch(distortion, fs=RATE, nperseg=1024)
            band = (frequencies > 300) & (frequencies < 4000)
            coherence = float(np.mean(np.abs(cross[band]) ** 2 / (distortion_power[band] * residual_power[band] + 1e-30)))
            if coherence > best[0]:
                best = (coherence, name, float(limit_dbfs))
    return best


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    folder = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else "clipping"
    print("| scenario | model found (coherence) | the scenario's loudspeaker | ERLE, reference as played | ERLE, through the model | PESQ-WB as played | PESQ-WB through the model |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name in json.load(open(os.path.join(folder, "scenarios.json"))):
        if only not in name:
            continue
        meta = json.load(open(os.path.join(folder, name, "scenario.json")))
        mic, far, echo, near = (echo_score.read(os.path.join(folder, name, f"{n}.wav")) for n in ("mic", "far", "echo", "near"))
        shift = max(0, meta["delay"] - 5) * RATE // 1000
        reference = np.concatenate([np.zeros(shift), far])[:len(far)]

        def score(output):
            output = np.concatenate([output, np.zeros(len(mic) - len(output))])
            lag = echo_score.latency(output, near, meta["double_talk"])
            aligned = echo_score.aligned(output, lag, len(mic))
            _, converged = echo_score.erle(mic, aligned, echo, meta["single_talk"], echo_score.CONVERGED_FROM)
            return converged, echo_score.pesq_wb(near, aligned, meta["double_talk"])

        residual, output = speex(mic, reference)
        plain = score(output)
        coherence, high_pass, limit = identify(reference, residual)
        if limit is not None and coherence >= COHERENCE_NEEDED:
            _, modelled_reference = loudspeaker(reference, HIGH_PASSES[high_pass], limit)
            modelled = score(speex(mic, modelled_reference)[1])
            found = f"high-pass {high_pass}, limit {limit:.1f} dBFS ({coherence:.2f})"
        else:
            modelled = plain
            found = f"none ({coherence:.2f})"
        truth = "linear"
        if meta["condition"] == "clipping":
            # As echo_scenarios.py drives it: 200 Hz-12 kHz, limited at half the 99.9th percentile.
            driven = sosfilt(butter(2, [200, 12000], btype="bandpass", fs=RATE, output="sos"), far)
            truth = f"200 Hz, limit {20 * np.log10(np.percentile(np.abs(driven), 99.9) / 2):.1f} dBFS"
        print(f"| {name} | {found} | {truth} | {plain[0]:.1f} | {modelled[0]:.1f} | {plain[1]:.2f} | {modelled[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
