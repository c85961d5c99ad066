/// How to open an ALSA PCM.
public struct ALSADeviceConfiguration: Sendable, Equatable {
    /// The PCM name, as `parley devices` lists them: `default`, `plughw:CARD=PCH,DEV=0`, …
    public var name: String = "default"
    public var sampleRate: Int = 48_000
    public var channels: Int = 1
    /// Frames per period: the unit of each read or write (10 ms by default).
    public var periodFrames: Int = 480
    /// Frames in the device's ring buffer (4 periods by default): more survives scheduling
    /// hiccups, less gives lower latency.
    public var bufferFrames: Int = 1_920
    /// An ALSA configuration to read `name` from instead of the system's (the tests
    /// define `file`-plugin PCMs this way). Nil uses the system configuration.
    public var configurationText: String?

    public init(name: String = "default") { self.name = name }

    /// Checks the values a person can get wrong, with a message that says which.
    public func validate() throws(DeviceError) {
        guard !name.isEmpty else { throw DeviceError("the ALSA device name is empty; `parley devices` lists the names") }
        guard (8_000...192_000).contains(sampleRate) else {
            throw DeviceError("sample rate \(sampleRate) Hz is outside 8,000–192,000 Hz")
        }
        guard channels == 1 || channels == 2 else { throw DeviceError("\(channels) channels requested; Parley uses 1 (mono) or 2") }
        guard (16...96_000).contains(periodFrames) else {
            throw DeviceError("a period of \(periodFrames) frames is outside 16–96,000 frames")
        }
        guard bufferFrames >= 2 * periodFrames else {
            throw DeviceError("a buffer of \(bufferFrames) frames must hold at least two periods of \(periodFrames) frames")
        }
    }
}
