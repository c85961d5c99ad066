// The two echo cancellers Parley's is measured against, run on one scenario's recordings
// (Benchmarks/echo-report builds and runs this; it is a benchmark tool, not part of Parley):
//
//   speex-plain   SpeexDSP 1.2.1 as its documentation sets it up: 20 ms frames, a 200 ms
//                 filter, the preprocessor attached to it (residual echo suppression,
//                 noise suppression; every setting at its default). The reference is
//                 handed over as it was played: nothing aligns it.
//   speex-delay   The same, with the reference delayed by the scenario's true bulk delay
//                 (what a perfect delay estimator would give it).
//   webrtc        WebRTC's legacy AEC from Debian's webrtc-audio-processing 0.3, set up as
//                 a browser of its time did: high-pass filter, AEC (moderate suppression,
//                 extended filter) told the true bulk delay every 10 ms, noise
//                 suppression (moderate).
//
// Usage: echo_references MIC.wav FAR.wav DELAY_MS OUTDIR
// Writes OUTDIR/speex-plain.wav, speex-delay.wav, webrtc.wav (16-bit, 48 kHz, mono, the
// same length as MIC) and prints each one's CPU time per second of audio.
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>
#include <webrtc/modules/audio_processing/include/audio_processing.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kRate = 48000;

[[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "echo_references: %s\n", message.c_str());
    std::exit(1);
}

uint32_t le32(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }
uint16_t le16(const unsigned char* p) { return uint16_t(p[0] | p[1] << 8); }

// Reads a mono 48 kHz WAV (16-bit PCM or 32-bit float) as floats in -1...1.
std::vector<float> readWav(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) fail("cannot open " + path);
    std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (bytes.size() < 12 || std::memcmp(bytes.data(), "RIFF", 4) != 0 || std::memcmp(bytes.data() + 8, "WAVE", 4) != 0)
        fail(path + " is not a WAV file");
    int format = 0, channels = 0, bits = 0;
    uint32_t rate = 0;
    size_t at = 12;
    while (at + 8 <= bytes.size()) {
        uint32_t size = le32(&bytes[at + 4]);
        const unsigned char* body = &bytes[at + 8];
        if (at + 8 + size > bytes.size()) size = uint32_t(bytes.size() - at - 8);
        if (std::memcmp(&bytes[at], "fmt ", 4) == 0 && size >= 16) {
            format = le16(body);
            channels = le16(body + 2);
            rate = le32(body + 4);
            bits = le16(body + 14);
            if (format == 0xFFFE && size >= 26) format = le16(body + 24);
        } else if (std::memcmp(&bytes[at], "data", 4) == 0) {
            if (channels != 1 || rate != kRate) fail(path + " must be mono at 48 kHz");
            std::vector<float> samples;
            if (format == 1 && bits == 16) {
                for (uint32_t i = 0; i + 1 < size; i += 2) samples.push_back(int16_t(le16(body + i)) / 32768.0f);
            } else if (format == 3 && bits == 32) {
                for (uint32_t i = 0; i + 3 < size; i += 4) {
                    uint32_t word = le32(body + i);
                    float value;
                    std::memcpy(&value, &word, 4);
                    samples.push_back(value);
                }
            } else {
                fail(path + ": only 16-bit PCM and 32-bit float WAV are read");
            }
            return samples;
        }
        at += 8 + size + (size & 1);
    }
    fail(path + " has no audio");
}

void writeWav(const std::string& path, const std::vector<float>& samples) {
    std::ofstream file(path, std::ios::binary);
    if (!file) fail("cannot write " + path);
    auto put32 = [&](uint32_t v) { char b[4] = {char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; file.write(b, 4); };
    auto put16 = [&](uint16_t v) { char b[2] = {char(v), char(v >> 8)}; file.write(b, 2); };
    uint32_t data = uint32_t(samples.size() * 2);
    file.write("RIFF", 4); put32(36 + data); file.write("WAVE", 4);
    file.write("fmt ", 4); put32(16); put16(1); put16(1); put32(kRate); put32(kRate * 2); put16(2); put16(16);
    file.write("data", 4); put32(data);
    for (float sample : samples) put16(uint16_t(int16_t(std::lrint(std::clamp(sample, -1.0f, 32767.0f / 32768.0f) * 32768.0f))));
}

double threadSeconds() {
    timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

int16_t toInt16(float sample) { return int16_t(std::lrint(std::clamp(sample * 32768.0f, -32768.0f, 32767.0f))); }

// SpeexDSP as documented, the reference read `delay` samples late.
std::vector<float> speex(const std::vector<float>& mic, const std::vector<float>& far, int delay) {
    const int frame = kRate / 50;         // 20 ms
    const int tail = kRate / 5;           // 200 ms
    SpeexEchoState* echo = speex_echo_state_init(frame, tail);
    int rate = kRate;
    speex_echo_ctl(echo, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
    SpeexPreprocessState* preprocess = speex_preprocess_state_init(frame, kRate);
    speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_ECHO_STATE, echo);
    std::vector<float> out(mic.size(), 0);
    std::vector<int16_t> in(frame), ref(frame), cleaned(frame);
    for (size_t start = 0; start + frame <= mic.size(); start += frame) {
        for (int i = 0; i < frame; ++i) {
            long source = long(start) + i - delay;
            in[i] = toInt16(mic[start + i]);
            ref[i] = source >= 0 ? toInt16(far[size_t(source)]) : 0;
        }
        speex_echo_cancellation(echo, in.data(), ref.data(), cleaned.data());
        speex_preprocess_run(preprocess, cleaned.data());
        for (int i = 0; i < frame; ++i) out[start + i] = cleaned[i] / 32768.0f;
    }
    speex_preprocess_state_destroy(preprocess);
    speex_echo_state_destroy(echo);
    return out;
}

// WebRTC's legacy AEC, told the true delay.
std::vector<float> webrtcLegacy(const std::vector<float>& mic, const std::vector<float>& far, int delayMilliseconds) {
    webrtc::Config config;
    config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(true));
    config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(false));
    std::unique_ptr<webrtc::AudioProcessing> apm(webrtc::AudioProcessing::Create(config));
    if (!apm) fail("webrtc: could not create the audio processing module");
    apm->high_pass_filter()->Enable(true);
    apm->echo_cancellation()->enable_drift_compensation(false);
    apm->echo_cancellation()->set_suppression_level(webrtc::EchoCancellation::kModerateSuppression);
    apm->echo_cancellation()->Enable(true);
    apm->noise_suppression()->set_level(webrtc::NoiseSuppression::kModerate);
    apm->noise_suppression()->Enable(true);
    const int frame = kRate / 100;  // the module works on 10 ms
    webrtc::StreamConfig stream(kRate, 1);
    std::vector<float> out(mic.size(), 0), farFrame(frame), farOut(frame), micFrame(frame), cleaned(frame);
    for (size_t start = 0; start + frame <= mic.size(); start += frame) {
        std::copy(far.begin() + long(start), far.begin() + long(start) + frame, farFrame.begin());
        std::copy(mic.begin() + long(start), mic.begin() + long(start) + frame, micFrame.begin());
        const float* farIn[] = {farFrame.data()};
        float* farOutput[] = {farOut.data()};
        if (apm->ProcessReverseStream(farIn, stream, stream, farOutput) != 0) fail("webrtc: ProcessReverseStream failed");
        if (apm->set_stream_delay_ms(delayMilliseconds) != 0) fail("webrtc: set_stream_delay_ms refused the delay");
        const float* micIn[] = {micFrame.data()};
        float* micOut[] = {cleaned.data()};
        if (apm->ProcessStream(micIn, stream, stream, micOut) != 0) fail("webrtc: ProcessStream failed");
        std::copy(cleaned.begin(), cleaned.end(), out.begin() + long(start));
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) fail("usage: echo_references MIC.wav FAR.wav DELAY_MS OUTDIR");
    std::vector<float> mic = readWav(argv[1]);
    std::vector<float> far = readWav(argv[2]);
    const int delay = std::atoi(argv[3]);
    if (delay < 0 || delay > 500) fail("DELAY_MS must be 0-500");
    const std::string outdir = argv[4];
    far.resize(mic.size(), 0);
    const double seconds = double(mic.size()) / kRate;
    struct Run { const char* name; std::vector<float> (*body)(const std::vector<float>&, const std::vector<float>&, int); int delay; };
    for (const Run& run : {Run{"speex-plain", speex, 0}, Run{"speex-delay", speex, delay * kRate / 1000}, Run{"webrtc", webrtcLegacy, delay}}) {
        double began = threadSeconds();
        std::vector<float> out = run.body(mic, far, run.delay);
        double used = threadSeconds() - began;
        writeWav(outdir + "/" + run.name + ".wav", out);
        std::printf("%s %.3f\n", run.name, used / seconds * 1000);
    }
    return 0;
}
