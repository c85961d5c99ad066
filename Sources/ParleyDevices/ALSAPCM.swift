import CALSA
import Foundation
import ParleyAudio
import Synchronization

/// One open ALSA PCM (`snd_pcm_t`), configured for interleaved signed 16-bit samples.
///
/// Owns the handle and closes it in `deinit`. Reads and writes block (a dedicated audio
/// thread calls them), never for longer than 100 ms at a time inside ALSA, and recover from
/// xruns with `snd_pcm_recover`, counting each. The xrun count is atomic, so a status line
/// on another thread can read it.
final class ALSAPCM: @unchecked Sendable {
    // @unchecked: the handle is used by one audio thread at a time (the protocol's
    // contract); only `xrunCount` is shared, and it is atomic.
    let handle: OpaquePointer
    let name: String
    let stream: snd_pcm_stream_t
    let sampleRate: Int
    let channels: Int
    let periodFrames: Int
    let bufferFrames: Int
    private let xrunCount = Atomic<Int>(0)
    private var conversion: [Int16] = []

    var xruns: Int { xrunCount.load(ordering: .relaxed) }

    /// Opens `configuration.name` by name, from the system's or the given ALSA configuration.
    convenience init(_ configuration: ALSADeviceConfiguration, stream: snd_pcm_stream_t) throws(DeviceError) {
        try configuration.validate()
        let direction = stream == SND_PCM_STREAM_CAPTURE ? "capture" : "playback"
        var pcm: OpaquePointer?
        var result: Int32
        if let text = configuration.configurationText {
            var config: OpaquePointer?
            guard snd_config_top(&config) == 0, let config else { throw DeviceError("ALSA could not create a configuration") }
            defer { snd_config_delete(config) }
            var input: OpaquePointer?
            result = text.withCString { snd_input_buffer_open(&input, $0, strlen($0)) }
            if result == 0 {
                result = snd_config_load(config, input)
                snd_input_close(input)
            }
            guard result == 0 else {
                throw DeviceError.alsa("reading the ALSA configuration text", device: configuration.name, code: result)
            }
            result = snd_pcm_open_lconf(&pcm, configuration.name, stream, SND_PCM_NONBLOCK, config)
        } else {
            result = snd_pcm_open(&pcm, configuration.name, stream, SND_PCM_NONBLOCK)
        }
        guard result == 0, let pcm else {
            throw DeviceError.alsa(
                "opening for \(direction)", device: configuration.name, code: result,
                hint: "`parley devices` lists the devices this machine has")
        }
        // Opened without blocking, so a device another program holds answers "busy" at once
        // instead of hanging the caller (a call trying to get an unplugged headset back);
        // reads and writes then block, as the audio threads expect.
        snd_pcm_nonblock(pcm, 0)
        try self.init(handle: pcm, configuration: configuration, stream: stream)
    }

    /// Takes ownership of an open handle and sets its parameters (closing it on failure).
    init(handle: OpaquePointer, configuration: ALSADeviceConfiguration, stream: snd_pcm_stream_t) throws(DeviceError) {
        self.handle = handle
        name = configuration.name
        self.stream = stream
        channels = configuration.channels
        do {
            (sampleRate, periodFrames, bufferFrames) = try Self.configure(handle, configuration, stream)
        } catch {
            snd_pcm_close(handle)
            throw error
        }
        conversion = [Int16](repeating: 0, count: periodFrames * channels)
    }

    deinit { snd_pcm_close(handle) }

    private static func configure(
        _ pcm: OpaquePointer, _ configuration: ALSADeviceConfiguration, _ stream: snd_pcm_stream_t
    ) throws(DeviceError) -> (Int, Int, Int) {
        let name = configuration.name
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        defer { snd_pcm_hw_params_free(hw) }
        func check(_ result: Int32, _ what: String, _ hint: String? = nil) throws(DeviceError) {
            guard result >= 0 else { throw DeviceError.alsa(what, device: name, code: result, hint: hint) }
        }
        try check(snd_pcm_hw_params_any(pcm, hw), "reading the hardware parameters")
        try check(snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED), "setting interleaved access")
        try check(
            snd_pcm_hw_params_set_format(pcm, hw, SND_PCM_FORMAT_S16_LE), "setting 16-bit samples",
            "use a `plughw:` or `default` device, which converts formats")
        try check(
            snd_pcm_hw_params_set_channels(pcm, hw, UInt32(configuration.channels)),
            "setting \(configuration.channels) channel(s)", "use a `plughw:` or `default` device, which converts channel counts")
        var rate = UInt32(configuration.sampleRate)
        try check(snd_pcm_hw_params_set_rate_near(pcm, hw, &rate, nil), "setting the sample rate")
        guard Int(rate) == configuration.sampleRate else {
            throw DeviceError(
                "ALSA device '\(name)' runs at \(rate) Hz, not \(configuration.sampleRate) Hz; use a `plughw:` or `default` device, which resamples")
        }
        var period = snd_pcm_uframes_t(configuration.periodFrames)
        try check(snd_pcm_hw_params_set_period_size_near(pcm, hw, &period, nil), "setting a period of \(configuration.periodFrames) frames")
        var buffer = snd_pcm_uframes_t(max(configuration.bufferFrames, 2 * Int(period)))
        try check(snd_pcm_hw_params_set_buffer_size_near(pcm, hw, &buffer), "setting a buffer of \(configuration.bufferFrames) frames")
        try check(snd_pcm_hw_params(pcm, hw), "applying the hardware parameters")
        snd_pcm_hw_params_get_period_size(hw, &period, nil)
        snd_pcm_hw_params_get_buffer_size(hw, &buffer)

        var sw: OpaquePointer?
        snd_pcm_sw_params_malloc(&sw)
        defer { snd_pcm_sw_params_free(sw) }
        try check(snd_pcm_sw_params_current(pcm, sw), "reading the software parameters")
        // Playback starts once two periods are queued: enough to survive one late wake-up
        // without waiting for the whole buffer (which would add its length to the latency).
        let start = stream == SND_PCM_STREAM_PLAYBACK ? min(2 * period, buffer) : 1
        try check(snd_pcm_sw_params_set_start_threshold(pcm, sw, start), "setting the start threshold")
        try check(snd_pcm_sw_params_set_avail_min(pcm, sw, period), "setting the wake-up size")
        try check(snd_pcm_sw_params(pcm, sw), "applying the software parameters")
        return (Int(rate), Int(period), Int(buffer))
    }

    /// How long a device may give nothing, although it said it would block until it could,
    /// before it counts as gone (a sound server that died leaves its PCM answering "try
    /// again" for ever).
    static let stallLimitMilliseconds: Int32 = 2_000

    /// Recovers from an xrun or suspend (counting it) or throws for anything else. "Try
    /// again" waits for the device, up to `stallLimitMilliseconds` in all.
    private func recover(_ code: Int, _ what: String, stalled: inout Int32) throws(DeviceError) {
        let error = Int32(code)
        if error == -EINTR { return }
        if error == -EAGAIN {
            let waited = snd_pcm_wait(handle, 100)
            if waited < 0 { return try recover(Int(waited), what, stalled: &stalled) }
            if waited == 0 { try countStall(what, stalled: &stalled) }
            return
        }
        if error == -EPIPE || error == -ESTRPIPE {
            xrunCount.add(1, ordering: .relaxed)
        }
        let recovered = snd_pcm_recover(handle, error, 1)
        guard recovered >= 0 else { throw DeviceError.alsa(what, device: name, code: error) }
    }

    /// Waits, 100 ms at a time, until a running device can take a read or write of a period
    /// without blocking; true when it can. The time it gives nothing counts towards
    /// `stallLimitMilliseconds`. A blocking read or write would do this wait inside ALSA with
    /// no timeout, and a sound server killed at the wrong moment leaves that wait hanging for
    /// ever: a capture thread that never returned, so the call neither said the microphone
    /// was gone nor could stop. A device not yet running is started by the read or write.
    private func waitUntilReady(_ what: String, stalled: inout Int32) throws(DeviceError) -> Bool {
        guard snd_pcm_state(handle) == SND_PCM_STATE_RUNNING else { return true }
        let ready = snd_pcm_wait(handle, 100)
        if ready > 0 { return true }
        if ready < 0 {
            try recover(Int(ready), what, stalled: &stalled)
            return false
        }
        try countStall(what, stalled: &stalled)
        return false
    }

    /// Another 100 ms in which the device gave nothing; past the limit it counts as gone.
    private func countStall(_ what: String, stalled: inout Int32) throws(DeviceError) {
        stalled += 100
        if stalled >= Self.stallLimitMilliseconds {
            throw DeviceError("\(what) on ALSA device '\(name)' failed: it gave nothing for \(stalled / 1_000) s (gone or stuck)")
        }
    }

    /// Reads exactly `output.count / channels` frames (blocking), recovering from overruns.
    /// Returns fewer only when the device reports the end of its data.
    func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
        let frames = output.count / channels
        var done = 0
        var stalled: Int32 = 0
        while done < frames {
            guard try waitUntilReady("reading", stalled: &stalled) else { continue }
            let chunk = min(frames - done, conversion.count / channels)
            let result = conversion.withUnsafeMutableBufferPointer { buffer in
                snd_pcm_readi(handle, buffer.baseAddress, snd_pcm_uframes_t(chunk))
            }
            if result < 0 {
                try recover(result, "reading", stalled: &stalled)
                continue
            }
            if result == 0 { break }
            let count = Int(result) * channels
            for index in 0..<count { output[done * channels + index] = SampleConversion.float(conversion[index]) }
            done += Int(result)
        }
        return done
    }

    /// Writes all of `samples` (blocking), recovering from underruns.
    func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
        let frames = samples.count / channels
        var done = 0
        var stalled: Int32 = 0
        while done < frames {
            let chunk = min(frames - done, conversion.count / channels)
            for index in 0..<chunk * channels { conversion[index] = SampleConversion.int16(samples[done * channels + index]) }
            var offset = 0
            while offset < chunk {
                guard try waitUntilReady("writing", stalled: &stalled) else { continue }
                let result = conversion.withUnsafeBufferPointer { buffer in
                    snd_pcm_writei(handle, buffer.baseAddress! + offset * channels, snd_pcm_uframes_t(chunk - offset))
                }
                if result < 0 {
                    try recover(result, "writing", stalled: &stalled)
                    continue
                }
                offset += Int(result)
            }
            done += chunk
        }
    }

    func drain() throws(DeviceError) {
        let result = snd_pcm_drain(handle)
        guard result >= 0 else { throw DeviceError.alsa("draining", device: name, code: result) }
    }

    /// The current state, for tests and diagnostics.
    var state: snd_pcm_state_t { snd_pcm_state(handle) }
}
