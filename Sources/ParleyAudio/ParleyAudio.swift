// ParleyAudio: Opus encoder and decoder, echo canceller and preprocessor on the outgoing
// path, jitter buffer, mixer, resampler and WAV files.
