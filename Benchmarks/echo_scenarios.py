"""Builds the echo benchmark's scenarios: a far-end talker played through a loudspeaker in
a simulated room and picked up, with a bulk delay, by the microphone beside it; after 16 s a
near-end talker joins (double talk). Rooms are image-source simulations (pyroomacoustics,
shoebox rooms with RT60 0.15-0.4 s), the loudspeaker band-limited like a laptop's and, in the
"clipping" scenarios, driven into hard clipping; the "noise" scenarios add a fan's pink noise.
Speech is recorded human voice from alsa-utils and synthetic voice from espeak-ng.

For each scenario, in OUT/NAME/:
  far.wav   what the loudspeaker was given (the canceller's reference), 16-bit 48 kHz mono
  mic.wav   what the microphone captured: echo + near-end talker + noise
  echo.wav  the echo alone, near.wav the near-end talker alone as it reaches the microphone
  scenario.json   room, delay, condition, and where single and double talk are
Deterministic: the same seed and inputs give the same files.

Usage: echo_scenarios.py OUT [--only NAME,...]
"""
import json
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import pyroomacoustics as pra
from scipy.io import wavfile
from scipy.signal import butter, fftconvolve, resample_poly, sosfilt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speech_passage import read as read_alsa, trimmed  # noqa: E402

RATE = 48000
LENGTH = 30.0          # seconds per scenario
NEAR_START = 16.0      # the near end starts talking (double talk) here
SINGLE_TALK = (0.0, 15.5)
FAR_LEVEL = -26.0      # dBFS, active speech level of what the far end sends
ECHO_LEVEL = -3.0      # echo at the microphone relative to the far end, dB
SELF_NOISE = -70.0     # dBFS, the microphone's own white noise

# Rooms: dimensions (m), RT60 (s), loudspeaker, microphone and near talker positions.
ROOMS = {
    "office": dict(rt60=0.15, size=[4.0, 3.2, 2.7], speaker=[1.5, 1.2, 0.78], mic=[1.5, 1.45, 0.80], talker=[1.6, 1.95, 1.15]),
    "living": dict(rt60=0.25, size=[5.0, 4.0, 2.6], speaker=[2.2, 1.8, 0.70], mic=[2.45, 1.85, 0.72], talker=[2.9, 2.2, 1.10]),
    "meeting": dict(rt60=0.30, size=[6.0, 4.5, 2.8], speaker=[3.0, 2.2, 0.76], mic=[3.08, 2.26, 0.77], talker=[3.9, 2.9, 1.20]),
    "lively": dict(rt60=0.40, size=[5.5, 4.5, 3.0], speaker=[2.0, 2.0, 0.78], mic=[2.0, 2.25, 0.80], talker=[2.2, 2.8, 1.15]),
}
DELAYS = [10, 20, 40, 80, 150]


def scenarios():
    """Every room at every bulk delay in a quiet room, then noise and a clipping loudspeaker
    in every room (at a short and a long delay), and the near talker louder and softer than
    the echo. The two talker pairs alternate."""
    listed = []
    for room in ROOMS:
        for delay in DELAYS:
            listed.append(dict(room=room, delay=delay, condition="quiet", ser=0.0))
    for index, room in enumerate(ROOMS):
        for condition in ("noise", "clipping"):
            for delay in ((10, 150) if index % 2 == 0 else (20, 80)):
                listed.append(dict(room=room, delay=delay, condition=condition, ser=0.0))
    for room, delay, ser in (("living", 40, -6.0), ("lively", 20, -6.0), ("office", 80, 6.0), ("meeting", 150, 6.0)):
        listed.append(dict(room=room, delay=delay, condition="quiet", ser=ser))
    for index, scenario in enumerate(listed):
        scenario["talkers"] = "espeak-far" if index % 2 == 0 else "alsa-far"
        ser = scenario["ser"]
        tag = "" if ser == 0 else f"-ser{int(ser):+d}"
        scenario["name"] = f"{scenario['room']}-{scenario['delay']}ms-{scenario['condition']}{tag}"
    return listed


def espeak(voice, text, seed_pitch):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "speech.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "-p", str(seed_pitch), "-w", path, text], check=True)
        rate, samples = wavfile.read(path)
    samples = samples.astype(np.float64) / 32768.0
    return resample_poly(samples, RATE // 150, rate // 150) if rate == 22050 else resample_poly(samples, RATE, rate)


def alsa_passage(order, pauses):
    passage = []
    for index, name in enumerate(order):
        passage.append(np.array(trimmed(read_alsa(f"/usr/share/sounds/alsa/{name}.wav")), dtype=np.float64) / 32768.0)
        passage.append(np.zeros(int(pauses[index % len(pauses)] * RATE)))
    return np.concatenate(passage)


FAR_TEXT = (
    "The quick brown fox jumps over the lazy dog, and then it runs back home across the field. "
    "Every morning the baker opens the shop at six, bakes fresh bread and sells it to the neighbours. "
    "Please remember to bring your umbrella tomorrow, because the forecast says it will rain all afternoon. "
    "We moved the meeting to Thursday at three, so that everyone from the other office can join us. "
    "The train was late again, and the platform was so crowded that nobody could find a seat. "
    "After dinner we walked down to the river and watched the boats until the sun went down."
)
NEAR_TEXT = ("Sorry to interrupt, but I think we should check the numbers again before Friday. "
             "The totals in the second table do not match the report we sent last week.")
ALSA_ORDER = ["Front_Center", "Rear_Left", "Side_Right", "Front_Left", "Rear_Right", "Side_Left", "Front_Right", "Rear_Center", "Noise"]


def fitted(signal, length):
    """`signal` repeated or cut to `length` samples."""
    if len(signal) >= length:
        return signal[:length]
    return np.tile(signal, int(np.ceil(length / len(signal))))[:length]


def active_rms(signal):
    frames = signal[: len(signal) // 480 * 480].reshape(-1, 480)
    energy = (frames ** 2).mean(axis=1)
    active = energy[energy >= energy.max() * 1e-4]
    return float(np.sqrt(active.mean())) if len(active) else 0.0


def scaled(signal, decibels, reference=1.0):
    return signal * (reference * 10 ** (decibels / 20) / active_rms(signal))


_rirs = {}


def room_responses(name):
    """(loudspeaker to microphone, talker to microphone) impulse responses, and the RT60 the
    simulation actually gives (measured on the first)."""
    if name in _rirs:
        return _rirs[name]
    spec = ROOMS[name]
    absorption, max_order = pra.inverse_sabine(spec["rt60"], spec["size"])
    room = pra.ShoeBox(spec["size"], fs=RATE, materials=pra.Material(absorption), max_order=max_order)
    room.add_source(spec["speaker"])
    room.add_source(spec["talker"])
    room.add_microphone(spec["mic"])
    np.random.seed(7)
    room.compute_rir()
    speaker, talker = (np.asarray(room.rir[0][k], dtype=np.float64) for k in (0, 1))
    measured = float(pra.experimental.measure_rt60(speaker, fs=RATE, decay_db=30))
    _rirs[name] = (speaker, talker, measured)
    return _rirs[name]


def pink(length, generator):
    """Pink (1/f) noise: white noise shaped in frequency."""
    spectrum = np.fft.rfft(generator.standard_normal(length))
    frequencies = np.fft.rfftfreq(length, 1 / RATE)
    spectrum[1:] /= np.sqrt(frequencies[1:] / frequencies[1])
    spectrum[0] = 0
    return np.fft.irfft(spectrum, length)


def build(scenario, speech, out):
    length = int(LENGTH * RATE)
    speaker_rir, talker_rir, measured_rt60 = room_responses(scenario["room"])
    generator = np.random.default_rng(zlib.crc32(scenario["name"].encode()))
    if scenario["talkers"] == "espeak-far":
        far_speech, near_speech = speech["espeak-male"], speech["alsa"]
    else:
        far_speech, near_speech = speech["alsa"], speech["espeak-female"]
    far = scaled(fitted(np.concatenate([np.zeros(RATE // 2), far_speech]), length), FAR_LEVEL)
    # The loudspeaker: a small driver (nothing below 200 Hz, rolled off above 12 kHz) and,
    # in the clipping scenarios, an amplifier driven 6 dB past its limit at speech peaks.
    driven = sosfilt(butter(2, [200, 12000], btype="bandpass", fs=RATE, output="sos"), far)
    clipped_fraction = 0.0
    if scenario["condition"] == "clipping":
        limit = np.percentile(np.abs(driven), 99.9) / 2
        clipped_fraction = float(np.mean(np.abs(driven) > limit))
        driven = np.clip(driven, -limit, limit)
    echo = fftconvolve(driven, speaker_rir)[:length]
    delay = scenario["delay"] * RATE // 1000
    echo = np.concatenate([np.zeros(delay), echo])[:length]
    echo = scaled(echo, ECHO_LEVEL, 10 ** (FAR_LEVEL / 20))
    # The near end talks from NEAR_START, at `ser` dB relative to the echo.
    near_dry = np.zeros(length)
    start = int(NEAR_START * RATE)
    words = near_speech[: length - start - RATE]
    near_dry[start:start + len(words)] = words
    near = fftconvolve(near_dry, talker_rir)[:length]
    near = scaled(near, scenario["ser"], active_rms(echo))
    noise = generator.standard_normal(length) * 10 ** (SELF_NOISE / 20)
    if scenario["condition"] == "noise":
        fan = pink(length, generator)
        noise += fan * (10 ** (-50 / 20) / np.sqrt(np.mean(fan ** 2)))
    mic = echo + near + noise
    peak = np.max(np.abs(mic))
    if peak >= 1:
        raise SystemExit(f"echo_scenarios: {scenario['name']} clips the microphone (peak {peak:.2f})")
    folder = os.path.join(out, scenario["name"])
    os.makedirs(folder, exist_ok=True)
    for name, signal in (("far", far), ("mic", mic), ("echo", echo), ("near", near)):
        wavfile.write(os.path.join(folder, f"{name}.wav"), RATE, np.round(np.clip(signal, -1, 32767 / 32768) * 32768).astype(np.int16))
    near_end = (start + len(words)) / RATE
    described = dict(scenario, rt60=ROOMS[scenario["room"]]["rt60"], measured_rt60=round(measured_rt60, 3),
                     single_talk=list(SINGLE_TALK), double_talk=[NEAR_START, round(near_end, 3)], length=LENGTH,
                     clipped_fraction=round(clipped_fraction, 4),
                     noise_dbfs=-50.0 if scenario["condition"] == "noise" else SELF_NOISE)
    with open(os.path.join(folder, "scenario.json"), "w") as file:
        json.dump(described, file, indent=1)
    return described


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    only = None
    if len(sys.argv) > 3 and sys.argv[2] == "--only":
        only = set(sys.argv[3].split(","))
        unknown = only - {s["name"] for s in scenarios()}
        if unknown:
            sys.exit(f"echo_scenarios: no scenario named {', '.join(sorted(unknown))}")
    speech = {
        "espeak-male": espeak("en-us", FAR_TEXT, 45),
        "espeak-female": espeak("en+f3", NEAR_TEXT, 55),
        "alsa": alsa_passage(ALSA_ORDER, [0.35, 0.6, 0.25, 0.8, 0.4, 0.5]),
    }
    os.makedirs(out, exist_ok=True)
    listed = [s for s in scenarios() if only is None or s["name"] in only]
    for scenario in listed:
        described = build(scenario, speech, out)
        print(f"{described['name']}: RT60 {described['rt60']} s (simulated {described['measured_rt60']} s), "
              f"bulk delay {described['delay']} ms, {described['condition']}, near end {described['ser']:+.0f} dB re echo")
    with open(os.path.join(out, "scenarios.json"), "w") as file:
        json.dump([s["name"] for s in listed], file, indent=1)


if __name__ == "__main__":
    main()
