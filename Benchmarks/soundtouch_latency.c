/* What SoundTouch (the WSOLA time-stretch library Debian ships) costs a real-time player in
 * delay: fed 10 ms blocks of a 48 kHz voice-like signal, how much audio it holds back (input
 * given minus output returned, at its worst after the first second), at its default settings,
 * at its speech settings and at shorter windows, at tempo 1 and 1.25. A jitter buffer that
 * stretches through it pays that delay on every sample, stretched or not.
 *
 * Built and run by Benchmarks/soundtouch-latency; uses SoundTouch's C interface
 * (SoundTouchDLL.h, libSoundTouchDll). */
#include <SoundTouchDLL.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RATE 48000
#define BLOCK 480
#define SECONDS 4
/* SoundTouch's setting numbers (SoundTouch.h). */
#define SETTING_SEQUENCE_MS 3
#define SETTING_SEEKWINDOW_MS 4
#define SETTING_OVERLAP_MS 5
#define SETTING_INITIAL_LATENCY 8

static void measure(const char *name, int sequence, int seek, int overlap, float tempo) {
    HANDLE stretcher = soundtouch_createInstance();
    soundtouch_setSampleRate(stretcher, RATE);
    soundtouch_setChannels(stretcher, 1);
    soundtouch_setTempo(stretcher, tempo);
    if (sequence > 0) {
        soundtouch_setSetting(stretcher, SETTING_SEQUENCE_MS, sequence);
        soundtouch_setSetting(stretcher, SETTING_SEEKWINDOW_MS, seek);
        soundtouch_setSetting(stretcher, SETTING_OVERLAP_MS, overlap);
    }
    int total = RATE * SECONDS;
    float *input = malloc(sizeof(float) * total), *output = malloc(sizeof(float) * total * 3);
    /* A 120 Hz voice: a fundamental and two harmonics. */
    for (int i = 0; i < total; i++) {
        double t = (double)i / RATE;
        input[i] = (float)(0.1 * sin(2 * M_PI * 120 * t) + 0.05 * sin(2 * M_PI * 240 * t) + 0.03 * sin(2 * M_PI * 360 * t));
    }
    long given = 0, returned = 0, held = 0, first = -1;
    for (int position = 0; position + BLOCK <= total; position += BLOCK) {
        soundtouch_putSamples(stretcher, input + position, BLOCK);
        given += BLOCK;
        returned += soundtouch_receiveSamples(stretcher, output + returned, BLOCK * 3);
        if (returned > 0 && first < 0) first = given;
        /* What it owes: the input scaled by the tempo, minus what came out. */
        long owed = (long)(given / tempo) - returned;
        if (position >= RATE && owed > held) held = owed;
    }
    printf("%-34s tempo %.2f: first output after %5.1f ms of input; holds up to %5.1f ms\n",
           name, tempo, first / (RATE / 1000.0), held / (RATE / 1000.0));
    free(input);
    free(output);
    soundtouch_destroyInstance(stretcher);
}

int main(void) {
    printf("SoundTouch %s, 48 kHz mono, 10 ms blocks\n", soundtouch_getVersionString());
    const float tempos[] = {1.0f, 1.25f};
    for (int t = 0; t < 2; t++) {
        measure("default (automatic windows)", 0, 0, 0, tempos[t]);
        measure("speech (40 ms / 15 ms / 8 ms)", 40, 15, 8, tempos[t]);
        measure("short (20 ms / 10 ms / 5 ms)", 20, 10, 5, tempos[t]);
        measure("shortest (10 ms / 5 ms / 3 ms)", 10, 5, 3, tempos[t]);
    }
    return 0;
}
