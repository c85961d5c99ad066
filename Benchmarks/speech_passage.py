"""Builds the one-talker benchmark's speech: recorded human voices from alsa-utils
(/usr/share/sounds/alsa: two voices saying loudspeaker positions, 48 kHz mono), each
phrase trimmed to its speech and strung together with pauses of varied length, as a person
reads a list. Deterministic: the same files give the same passage, sample for sample.

With --voices, the speech `parley-bench sender-protection` sends instead: each of the
eight recordings whole, in name order, 0.3 s apart (13.8 s), between the same lead and
tail of silence.

Usage: speech_passage.py [--voices] OUT.wav [SOUNDS_DIR]
"""
import os
import struct
import sys
import wave

PHRASES = [
    "Front_Center", "Rear_Left", "Side_Right", "Front_Left", "Rear_Right", "Side_Left", "Front_Right", "Rear_Center",
    "Side_Left", "Front_Center", "Rear_Right", "Front_Left",
]
# Seconds of silence after each phrase: a reader's pauses, short and long.
PAUSES = [0.45, 0.8, 0.35, 1.1, 0.5, 0.65, 0.3, 0.9, 0.4, 0.7, 0.55]
RATE = 48000
LEAD = 1.0
TAIL = 1.0


def read(path):
    with wave.open(path) as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getframerate() != RATE:
            sys.exit(f"speech_passage: {path} is not 16-bit mono at {RATE} Hz")
        return list(struct.unpack(f"<{w.getnframes()}h", w.readframes(w.getnframes())))


def trimmed(samples):
    """The phrase from 50 ms before its first 10 ms block above -40 dBFS to 50 ms after its last."""
    block = RATE // 100
    loud = [i for i in range(0, len(samples), block) if max(abs(s) for s in samples[i:i + block]) > 328]
    if not loud:
        return samples
    return samples[max(0, loud[0] - 5 * block):min(len(samples), loud[-1] + block + 5 * block)]


def main():
    arguments = sys.argv[1:]
    voices = "--voices" in arguments
    if voices:
        arguments.remove("--voices")
    out = arguments[0]
    folder = arguments[1] if len(arguments) > 1 else "/usr/share/sounds/alsa"
    passage = [0] * int(LEAD * RATE)
    if voices:
        names = sorted(name[:-4] for name in os.listdir(folder) if name.endswith(".wav") and name != "Noise.wav")
        for name in names:
            passage += read(f"{folder}/{name}.wav") + [0] * int(0.3 * RATE)
    else:
        names = PHRASES
        for index, name in enumerate(PHRASES):
            passage += trimmed(read(f"{folder}/{name}.wav"))
            if index < len(PAUSES):
                passage += [0] * int(PAUSES[index] * RATE)
    passage += [0] * int(TAIL * RATE)
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(struct.pack(f"<{len(passage)}h", *passage))
    print(f"speech_passage: {len(names)} phrases, {len(passage) / RATE:.1f} s, in {out}")


if __name__ == "__main__":
    main()
