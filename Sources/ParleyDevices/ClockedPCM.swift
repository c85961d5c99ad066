import CALSA
import ParleyBasics
import Foundation

/// An ALSA PCM that lives in this process and runs on its own clock, like a sound card
/// with nothing attached: playback consumes frames at the sample rate and discards them,
/// capture produces silence at the sample rate.
///
/// Built on alsa-lib's ioplug layer (the API external ALSA plugins use), with a
/// `timerfd` ticking once per period to wake blocked reads and writes. Because the
/// position it reports follows the monotonic clock, a writer that stops feeding it
/// underruns, and a reader that stops reading overruns: alsa-lib then reports `-EPIPE`
/// exactly as it does for a hardware driver, and `snd_pcm_recover` brings it back. That
/// makes xrun handling testable on machines without a sound card, where the `file` and
/// `null` plugins never underrun (they take and give data as fast as asked).
enum ClockedPCM {
    /// Opens a clocked PCM for `stream`, configured like any ALSA device.
    static func open(_ configuration: ALSADeviceConfiguration, stream: snd_pcm_stream_t) throws(DeviceError) -> ALSAPCM {
        try configuration.validate()
        let clock = Clock(rate: configuration.sampleRate, stream: stream)
        let plugin = UnsafeMutablePointer<snd_pcm_ioplug_t>.allocate(capacity: 1)
        plugin.initialize(to: snd_pcm_ioplug_t())
        let name = strdup("parley-clocked")
        plugin.pointee.version = UInt32(SND_PCM_IOPLUG_VERSION_MAJOR << 16 | SND_PCM_IOPLUG_VERSION_MINOR << 8 | SND_PCM_IOPLUG_VERSION_TINY)
        plugin.pointee.name = UnsafePointer(name)
        plugin.pointee.flags = UInt32(SND_PCM_IOPLUG_FLAG_MONOTONIC)
        plugin.pointee.poll_fd = clock.timer
        // A timerfd only ever becomes readable; `poll_revents` turns its tick into POLLOUT
        // for playback.
        plugin.pointee.poll_events = UInt32(POLLIN)
        plugin.pointee.mmap_rw = 0
        plugin.pointee.callback = UnsafePointer(callbacks)
        plugin.pointee.private_data = Unmanaged.passRetained(Owner(clock: clock, plugin: plugin, name: name)).toOpaque()

        let created = snd_pcm_ioplug_create(plugin, "parley-clocked", stream, 0)
        guard created == 0, let handle = plugin.pointee.pcm else {
            Unmanaged<Owner>.fromOpaque(plugin.pointee.private_data).release()
            throw DeviceError.alsa("creating the clocked PCM", device: "parley-clocked", code: created)
        }
        var access = [UInt32(SND_PCM_ACCESS_RW_INTERLEAVED.rawValue)]
        var format = [UInt32(SND_PCM_FORMAT_S16_LE.rawValue)]
        snd_pcm_ioplug_set_param_list(plugin, Int32(SND_PCM_IOPLUG_HW_ACCESS), 1, &access)
        snd_pcm_ioplug_set_param_list(plugin, Int32(SND_PCM_IOPLUG_HW_FORMAT), 1, &format)
        snd_pcm_ioplug_set_param_minmax(plugin, Int32(SND_PCM_IOPLUG_HW_CHANNELS), 1, 2)
        let rate = UInt32(configuration.sampleRate)
        snd_pcm_ioplug_set_param_minmax(plugin, Int32(SND_PCM_IOPLUG_HW_RATE), rate, rate)
        snd_pcm_ioplug_set_param_minmax(plugin, Int32(SND_PCM_IOPLUG_HW_PERIOD_BYTES), 32, 1 << 20)
        snd_pcm_ioplug_set_param_minmax(plugin, Int32(SND_PCM_IOPLUG_HW_PERIODS), 2, 1_024)
        var named = configuration
        named.name = "parley-clocked"
        return try ALSAPCM(handle: handle, configuration: named, stream: stream)
    }

    /// The clock and its timer; read by the callbacks under alsa-lib's PCM lock.
    final class Clock {
        let rate: Int
        let stream: snd_pcm_stream_t
        let timer: Int32
        var start: UInt64?
        var periodFrames = 0
        var bufferFrames = 0

        init(rate: Int, stream: snd_pcm_stream_t) {
            self.rate = rate
            self.stream = stream
            timer = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        }

        deinit { close(timer) }

        static func now() -> UInt64 { MonotonicClock.now() }

        /// Frames the "hardware" has moved since it started.
        var elapsedFrames: Int {
            guard let start else { return 0 }
            return Int((Clock.now() - start) * UInt64(rate) / 1_000_000_000)
        }

        func arm(_ on: Bool) {
            let periodNanoseconds = on ? max(1, periodFrames) * 1_000_000_000 / rate : 0
            let interval = timespec(tv_sec: periodNanoseconds / 1_000_000_000, tv_nsec: periodNanoseconds % 1_000_000_000)
            var setting = itimerspec(it_interval: interval, it_value: interval)
            timerfd_settime(timer, 0, &setting, nil)
        }
    }

    /// Keeps the clock and the C allocations alive until alsa-lib closes the PCM.
    final class Owner {
        let clock: Clock
        let plugin: UnsafeMutablePointer<snd_pcm_ioplug_t>
        let name: UnsafeMutablePointer<CChar>?

        init(clock: Clock, plugin: UnsafeMutablePointer<snd_pcm_ioplug_t>, name: UnsafeMutablePointer<CChar>?) {
            self.clock = clock
            self.plugin = plugin
            self.name = name
        }

        deinit {
            free(name)
            plugin.deallocate()
        }
    }

    private static func clock(_ io: UnsafeMutablePointer<snd_pcm_ioplug_t>?) -> Clock {
        Unmanaged<Owner>.fromOpaque(io!.pointee.private_data).takeUnretainedValue().clock
    }

    /// The callback table, shared by every clocked PCM; alsa-lib keeps a pointer to it.
    nonisolated(unsafe) private static let callbacks: UnsafeMutablePointer<snd_pcm_ioplug_callback_t> = {
        let table = UnsafeMutablePointer<snd_pcm_ioplug_callback_t>.allocate(capacity: 1)
        table.initialize(to: snd_pcm_ioplug_callback_t())
        table.pointee.start = { io in
            let clock = ClockedPCM.clock(io)
            clock.periodFrames = Int(io!.pointee.period_size)
            clock.bufferFrames = Int(io!.pointee.buffer_size)
            clock.start = Clock.now()
            clock.arm(true)
            return 0
        }
        table.pointee.stop = { io in
            let clock = ClockedPCM.clock(io)
            clock.start = nil
            clock.arm(false)
            return 0
        }
        table.pointee.prepare = { io in
            // After an xrun `snd_pcm_recover` prepares the PCM again: the clock restarts
            // with the next start, not from where the stalled stream left it.
            let clock = ClockedPCM.clock(io)
            clock.start = nil
            clock.arm(false)
            return 0
        }
        table.pointee.pointer = { io in
            let clock = ClockedPCM.clock(io)
            guard clock.start != nil else { return 0 }
            let hardware = clock.elapsedFrames
            let application = Int(io!.pointee.appl_ptr)
            let buffer = max(1, Int(io!.pointee.buffer_size))
            // A real device reports an xrun when playback runs out of queued frames or
            // capture overwrites frames nobody read; this one does the same by its clock.
            if clock.stream == SND_PCM_STREAM_PLAYBACK ? hardware > application : hardware - application > buffer {
                return snd_pcm_sframes_t(-EPIPE)
            }
            return snd_pcm_sframes_t(hardware % buffer)
        }
        table.pointee.transfer = { io, areas, offset, size in
            // Playback frames are discarded; capture frames are silence.
            if ClockedPCM.clock(io).stream == SND_PCM_STREAM_CAPTURE, let area = areas?.pointee, let base = area.addr {
                let frameBytes = Int(area.step) / 8
                memset(base + Int(area.first) / 8 + Int(offset) * frameBytes, 0, Int(size) * frameBytes)
            }
            return snd_pcm_sframes_t(size)
        }
        table.pointee.poll_revents = { io, descriptors, count, revents in
            let clock = ClockedPCM.clock(io)
            var ticks: UInt64 = 0
            _ = read(clock.timer, &ticks, 8)
            revents?.pointee = UInt16(clock.stream == SND_PCM_STREAM_PLAYBACK ? POLLOUT : POLLIN)
            return 0
        }
        table.pointee.close = { io in
            let owner = Unmanaged<Owner>.fromOpaque(io!.pointee.private_data)
            owner.takeUnretainedValue().clock.arm(false)
            // The Owner frees the ioplug struct itself; alsa-lib does not touch it after close.
            owner.release()
            return 0
        }
        return table
    }()
}

extension ALSAPlayback {
    /// A playback device on `ClockedPCM`: consumes audio in real time and discards it.
    public static func clocked(_ configuration: ALSADeviceConfiguration = ALSADeviceConfiguration()) throws(DeviceError) -> ALSAPlayback {
        ALSAPlayback(pcm: try ClockedPCM.open(configuration, stream: SND_PCM_STREAM_PLAYBACK))
    }
}

extension ALSACapture {
    /// A capture device on `ClockedPCM`: produces silence in real time.
    public static func clocked(_ configuration: ALSADeviceConfiguration = ALSADeviceConfiguration()) throws(DeviceError) -> ALSACapture {
        ALSACapture(pcm: try ClockedPCM.open(configuration, stream: SND_PCM_STREAM_CAPTURE))
    }
}
