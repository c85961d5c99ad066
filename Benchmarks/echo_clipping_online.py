"""Whether the clipping loudspeaker's model can be found *online*, frame by frame, while
SpeexDSP's filter runs on the reference through the model found so far (issue 29; the
prototype of Sources/ParleyAudio/LoudspeakerIdentifier.swift, which does the same search
far more cheaply in the outgoing path).

Per 20 ms frame, as Parley runs SpeexDSP (20 ms frames, 200 ms filter, the preprocessor
attached), the reference aligned by the true bulk delay less 5 ms:
  1. the filter runs on the current model of the reference, m(far): the reference itself
     at first, clip(HP(far)) once a model is chosen (the filter is never reset);
  2. while the far end plays (over -45 dBFS) and the linear filter already removes 6 dB of
     the echo, every candidate model c (high-pass none/100/200/300 Hz, second order; limit
     -36 to -3 dBFS in 0.5 dB steps) predicts the residual the current model leaves:
     D_c = m(far) - c(far). Over the last two frames (Hann window, 2,048-point transform),
     with exponential forgetting (0.99 a frame), its spectra are compared with the linear
     filter's residual R over 300-4,000 Hz by *partial* coherence given the current
     reference M (the part of R that M already explains linearly is removed first);
  3. the same partial coherence is computed for a linear control with the same support,
     the reference itself where D_c is non-zero: in a linear room the filter's
     misadjustment is largest where the reference is loudest, so any fragment of the
     loudest samples looks "coherent" with the residual; only a candidate that explains it
     clearly better than the control (1.5 times) is the loudspeaker's;
  4. every 0.2 s, once 12 frames were compared, the best candidate (coherence less the
     estimate's bias, 2 / frames it was non-zero in, over 0.15, at least 10 such frames)
     becomes the model; the statistics
     start again, nothing is evaluated for the next 2 s of far-end speech (the filter
     re-adapts to the new reference), and the model just left is not gone back to.
Scores are echo_score.py's (converged single-talk ERLE, double-talk PESQ-WB).

Usage: echo_clipping_online.py SCENARIOS NAME...   (SCENARIOS from echo_scenarios.py)
"""
import ctypes
import json
import os
import sys

import numpy as np
from scipy.signal import butter, sosfilt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import echo_score  # noqa: E402
from echo_clipping_model import FRAME, RATE, SAMPLES, speexdsp  # noqa: E402

HIGH_PASSES = [None, 100, 200, 300]
SECTIONS = [None] + [butter(2, f, btype="highpass", fs=RATE, output="sos") for f in HIGH_PASSES[1:]]
LIMITS_DBFS = np.arange(-36.0, -2.99, 0.5)
SEGMENT, TRANSFORM = 2 * FRAME, 2048
BAND = (np.fft.rfftfreq(TRANSFORM, 1 / RATE) > 300) & (np.fft.rfftfreq(TRANSFORM, 1 / RATE) < 4000)
WINDOW = np.hanning(SEGMENT)
FORGET = 0.99
FAR_ACTIVE_DBFS = -45.0
LINEAR_GATE_DB = 6.0
FIRST_AFTER, EVERY = 12, 10            # active frames before deciding; frames between decisions
BIAS, MIN_FRAMES = 2.0, 10.0
COHERENCE_NEEDED, OVER_CONTROL = 0.15, 1.5
HOLD_AFTER_CHANGE = 100                # active frames


def to16(signal):
    return np.clip(np.round(signal * 32768), -32768, 32767).astype(np.int16)


def run(mic, reference, identify=True):
    """(output of the preprocessor, [(seconds, high-pass, limit dBFS, coherence, over control)] of each change)."""
    echo = speexdsp.speex_echo_state_init(FRAME, RATE // 5)
    rate = ctypes.c_int32(RATE)
    speexdsp.speex_echo_ctl(ctypes.c_void_p(echo), 24, ctypes.byref(rate))
    preprocess = speexdsp.speex_preprocess_state_init(FRAME, RATE)
    speexdsp.speex_preprocess_ctl(ctypes.c_void_p(preprocess), 24, ctypes.c_void_p(echo))
    dereverb = ctypes.c_int32(0)
    speexdsp.speex_preprocess_ctl(ctypes.c_void_p(preprocess), 8, ctypes.byref(dereverb))
    mic16 = to16(mic)
    frames = len(mic) // FRAME
    output = np.zeros(frames * FRAME)
    states = [None] + [np.zeros((1, 2)) for _ in SECTIONS[1:]]
    shaped_history = [np.zeros(SEGMENT) for _ in HIGH_PASSES]
    residual_history = np.zeros(SEGMENT)
    count, bins = len(HIGH_PASSES) * len(LIMITS_DBFS), int(BAND.sum())
    s_dr, s_dm, s_fr, s_fm = (np.zeros((count, bins), complex) for _ in range(4))
    s_dd, s_ff, used = np.zeros((count, bins)), np.zeros((count, bins)), np.zeros(count)
    s_rr, s_mm, s_rm = np.zeros(bins), np.zeros(bins), np.zeros(bins, complex)
    model, previous, changes = None, None, []
    mic_energy = residual_energy = 1e-12
    hold = active = 0
    for index in range(frames):
        span = slice(index * FRAME, (index + 1) * FRAME)
        far = reference[span]
        shaped = []
        for which, section in enumerate(SECTIONS):
            if section is None:
                shaped.append(far.copy())
            else:
                filtered, states[which] = sosfilt(section, far, zi=states[which])
                shaped.append(filtered)
        current = far if model is None else np.clip(shaped[model[0]], -model[1], model[1])
        captured, played = np.ascontiguousarray(mic16[span]), np.ascontiguousarray(to16(current))
        cleaned = np.zeros(FRAME, np.int16)
        speexdsp.speex_echo_cancellation(ctypes.c_void_p(echo), captured.ctypes.data_as(SAMPLES), played.ctypes.data_as(SAMPLES),
                                         cleaned.ctypes.data_as(SAMPLES))
        residual = cleaned / 32768
        speexdsp.speex_preprocess_run(ctypes.c_void_p(preprocess), cleaned.ctypes.data_as(SAMPLES))
        output[span] = cleaned / 32768
        if not identify:
            continue
        for which in range(len(HIGH_PASSES)):
            shaped_history[which] = np.concatenate([shaped_history[which][FRAME:], shaped[which]])
        residual_history = np.concatenate([residual_history[FRAME:], residual])
        mic_energy = 0.98 * mic_energy + np.sum(mic[span] ** 2)
        residual_energy = 0.98 * residual_energy + np.sum(residual ** 2)
        if 10 * np.log10(np.mean(far ** 2) + 1e-30) < FAR_ACTIVE_DBFS:
            continue
        if hold > 0:
            hold -= 1
            continue
        if 10 * np.log10(mic_energy / residual_energy) < LINEAR_GATE_DB:
            continue
        active += 1
        r = np.fft.rfft(residual_history * WINDOW, TRANSFORM)[BAND]
        now = shaped_history[0] if model is None else np.clip(shaped_history[model[0]], -model[1], model[1])
        m = np.fft.rfft(now * WINDOW, TRANSFORM)[BAND]
        s_rr[:] = FORGET * s_rr + np.abs(r) ** 2
        s_mm[:] = FORGET * s_mm + np.abs(m) ** 2
        s_rm[:] = FORGET * s_rm + r * np.conj(m)
        for arrays in (s_dr, s_dm, s_fr, s_fm, s_dd, s_ff):
            arrays *= FORGET
        used *= FORGET
        for which in range(len(HIGH_PASSES)):
            for step, limit_dbfs in enumerate(LIMITS_DBFS):
                limit = 10 ** (limit_dbfs / 20)
                c = which * len(LIMITS_DBFS) + step
                delta = now - np.clip(shaped_history[which], -limit, limit)
                support = np.abs(delta) > 1e-7
                if not np.any(support):
                    continue
                d = np.fft.rfft(delta * WINDOW, TRANSFORM)[BAND]
                f = np.fft.rfft(np.where(support, shaped_history[which], 0.0) * WINDOW, TRANSFORM)[BAND]
                s_dd[c] += np.abs(d) ** 2
                s_dr[c] += d * np.conj(r)
                s_dm[c] += d * np.conj(m)
                s_ff[c] += np.abs(f) ** 2
                s_fr[c] += f * np.conj(r)
                s_fm[c] += f * np.conj(m)
                used[c] += 1
        if active < FIRST_AFTER or index % EVERY:
            continue
        mm = s_mm + 1e-30
        rr = np.maximum(s_rr - np.abs(s_rm) ** 2 / mm, 1e-30)

        def partial(cross, own, with_reference):
            given = cross - with_reference * np.conj(s_rm) / mm
            alone = np.maximum(own - np.abs(with_reference) ** 2 / mm, 1e-30)
            return np.mean(np.abs(given) ** 2 / (alone * rr), axis=1)

        coherence = partial(s_dr, s_dd, s_dm) - BIAS / np.maximum(used, 1e-9)
        coherence[used < MIN_FRAMES] = 0
        control = partial(s_fr, s_ff, s_fm)
        best = int(np.argmax(coherence))
        which, step = divmod(best, len(LIMITS_DBFS))
        over = coherence[best] / max(control[best], 1e-9)
        if coherence[best] >= COHERENCE_NEEDED and over >= OVER_CONTROL and (which, step) != previous:
            previous = None if model is None else model[2]
            model = (which, 10 ** (LIMITS_DBFS[step] / 20), (which, step))
            changes.append((index * FRAME / RATE, HIGH_PASSES[which], float(LIMITS_DBFS[step]), float(coherence[best]), float(over)))
            for arrays in (s_dr, s_dm, s_fr, s_fm, s_dd, s_ff, used, s_rr, s_mm, s_rm):
                arrays[:] = 0
            hold, active = HOLD_AFTER_CHANGE, 0
    for state, destroy in ((preprocess, speexdsp.speex_preprocess_state_destroy), (echo, speexdsp.speex_echo_state_destroy)):
        destroy(ctypes.c_void_p(state))
    return output, changes


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    folder = sys.argv[1]
    print("| scenario | models chosen (s: high-pass, limit, coherence, × control) | ERLE as played | ERLE online | PESQ-WB as played | PESQ-WB online |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in sys.argv[2:]:
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

        played = score(run(mic, reference, identify=False)[0])
        output, changes = run(mic, reference)
        online = score(output)
        chosen = "; ".join(f"{t:.1f} s: {'none' if hp is None else f'{hp} Hz'}, {limit:.1f} dBFS ({c:.2f}, ×{over:.1f})"
                           for t, hp, limit, c, over in changes) or "none (identity)"
        print(f"| {name} | {chosen} | {played[0]:.1f} | {online[0]:.1f} | {played[1]:.2f} | {online[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
