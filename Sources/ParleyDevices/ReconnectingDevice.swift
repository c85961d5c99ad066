import ParleyBasics
import Synchronization

/// What a reconnecting device reports when its sound device goes away or comes back.
public enum DeviceAvailability: Sendable, Equatable {
    /// The device failed (unplugged, its sound server gone): `reason` is ALSA's word for it.
    case lost(reason: String)
    /// The device opened again and is in use.
    case back
}

/// When to try a lost device again and what to do meanwhile, shared by both directions:
/// keep the device's pace with silence (capture) or by discarding (playback), so the call's
/// clocks, the RTP timeline and the jitter buffers carry on as if the device were there,
/// and try to open it again every `retryInterval`.
struct Reconnection<Device> {
    let open: () throws(DeviceError) -> Device
    let retryIntervalNanoseconds: UInt64
    let onChange: @Sendable (DeviceAvailability) -> Void
    var device: Device?
    var pacer = RealTimePacer(sampleRate: 48_000)
    var nextAttempt: UInt64 = 0
    /// Xruns of devices already closed.
    var earlierXruns = 0

    /// Starts with `device` open. `open` opens it again; a device that comes back at another
    /// rate or channel count than `device` (what the call runs at) counts as not back.
    init(device: Device, format: @escaping (Device) -> (rate: Int, channels: Int), retryIntervalMilliseconds: Int,
         open: @escaping () throws(DeviceError) -> Device, onChange: @escaping @Sendable (DeviceAvailability) -> Void) {
        let expected = format(device)
        self.open = { () throws(DeviceError) -> Device in
            let reopened = try open()
            let found = format(reopened)
            guard found == expected else {
                throw DeviceError("the device came back at \(found.rate) Hz × \(found.channels), not \(expected.rate) Hz × \(expected.channels)")
            }
            return reopened
        }
        retryIntervalNanoseconds = UInt64(max(1, retryIntervalMilliseconds)) * 1_000_000
        self.onChange = onChange
        self.device = device
    }

    /// The device failed: close it and start keeping its pace.
    mutating func lose(_ error: DeviceError, sampleRate: Int, xruns: Int) {
        device = nil
        earlierXruns += xruns
        pacer = RealTimePacer(sampleRate: sampleRate)
        nextAttempt = MonotonicClock.now() &+ retryIntervalNanoseconds
        onChange(.lost(reason: error.description))
    }

    /// Tries the device again if it is time; nil while it stays away.
    mutating func reopenIfDue() -> Device? {
        let now = MonotonicClock.now()
        guard now >= nextAttempt else { return nil }
        nextAttempt = now &+ retryIntervalNanoseconds
        guard let reopened = try? open() else { return nil }
        device = reopened
        onChange(.back)
        return reopened
    }
}

/// A capture device that survives being unplugged: while it is gone, `read` returns silence
/// at the device's pace and tries to open it again every `retryInterval`; when it opens, the
/// capture carries on from it. The first open happens before, so a device missing at the
/// start is still an error the caller reports.
public final class ReconnectingInput: AudioInput, @unchecked Sendable {
    // @unchecked: `reconnection` is touched only by the one capture thread that calls
    // `read` (the AudioInput contract); the counters other threads read are atomics.
    public let sampleRate: Int
    public let channels: Int
    public let periodFrames: Int
    private var reconnection: Reconnection<any AudioInput>
    private let xrunCount = Atomic<Int>(0)

    /// - Parameter open: opens the device again (the same name, the same parameters); it
    ///   must give the same rate and channels, or the attempt counts as failed.
    public init(
        _ device: any AudioInput, retryIntervalMilliseconds: Int = 500,
        open: @escaping () throws(DeviceError) -> any AudioInput, onChange: @escaping @Sendable (DeviceAvailability) -> Void
    ) {
        sampleRate = device.sampleRate
        channels = device.channels
        periodFrames = device.periodFrames
        reconnection = Reconnection(device: device, format: { ($0.sampleRate, $0.channels) }, retryIntervalMilliseconds: retryIntervalMilliseconds,
                                    open: open, onChange: onChange)
    }

    public var xruns: Int { xrunCount.load(ordering: .relaxed) }

    public func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
        if let device = reconnection.device ?? reconnection.reopenIfDue() {
            do {
                let count = try device.read(into: output)
                xrunCount.store(reconnection.earlierXruns + device.xruns, ordering: .relaxed)
                return count
            } catch {
                reconnection.lose(error, sampleRate: sampleRate, xruns: device.xruns)
            }
        }
        for index in output.indices { output[index] = 0 }
        let frames = output.count / channels
        reconnection.pacer.advance(by: frames)
        return frames
    }
}

/// A playback device that survives being unplugged: while it is gone, `write` takes the
/// samples at the device's pace and drops them, and tries to open it again every
/// `retryInterval`.
public final class ReconnectingOutput: AudioOutput, @unchecked Sendable {
    // @unchecked: as `ReconnectingInput`, with the one playback thread.
    public let sampleRate: Int
    public let channels: Int
    public let periodFrames: Int
    private var reconnection: Reconnection<any AudioOutput>
    private let xrunCount = Atomic<Int>(0)

    public init(
        _ device: any AudioOutput, retryIntervalMilliseconds: Int = 500,
        open: @escaping () throws(DeviceError) -> any AudioOutput, onChange: @escaping @Sendable (DeviceAvailability) -> Void
    ) {
        sampleRate = device.sampleRate
        channels = device.channels
        periodFrames = device.periodFrames
        reconnection = Reconnection(device: device, format: { ($0.sampleRate, $0.channels) }, retryIntervalMilliseconds: retryIntervalMilliseconds,
                                    open: open, onChange: onChange)
    }

    public var xruns: Int { xrunCount.load(ordering: .relaxed) }

    public func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
        if let device = reconnection.device ?? reconnection.reopenIfDue() {
            do {
                try device.write(samples)
                xrunCount.store(reconnection.earlierXruns + device.xruns, ordering: .relaxed)
                return
            } catch {
                reconnection.lose(error, sampleRate: sampleRate, xruns: device.xruns)
            }
        }
        reconnection.pacer.advance(by: samples.count / channels)
    }

    public func drain() throws(DeviceError) {
        try reconnection.device?.drain()
    }
}
