// ParleyDevices: ALSA capture and playback, file devices, real-time pacing.
