/// A source of captured audio: a microphone (`ALSACapture`) or a file (`WAVFileInput`).
///
/// `read` blocks until `output` is full (or the stream ends) and is called from one
/// dedicated capture thread; the counters may be read from any thread.
public protocol AudioInput: AnyObject, Sendable {
    var sampleRate: Int { get }
    var channels: Int { get }
    /// Frames per period: the natural read size.
    var periodFrames: Int { get }
    /// Fills `output` with interleaved samples (−1…1); returns the frames read, fewer
    /// than asked only at the end of a finite stream (0 once it has ended).
    func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int
    /// Overruns recovered so far (capture data lost because the reader was late).
    var xruns: Int { get }
}

/// A sink for playback: a speaker (`ALSAPlayback`) or a file (`WAVFileOutput`).
///
/// `write` blocks until the device has taken all of `samples` and is called from one
/// dedicated playback thread; the counters may be read from any thread.
public protocol AudioOutput: AnyObject, Sendable {
    var sampleRate: Int { get }
    var channels: Int { get }
    var periodFrames: Int { get }
    /// Plays interleaved samples (−1…1; anything beyond is saturated, never wrapped).
    func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError)
    /// Waits until everything written has been played, then stops.
    func drain() throws(DeviceError)
    /// Underruns recovered so far (the device ran out of audio because the writer was late).
    var xruns: Int { get }
}

/// How a file device keeps time.
public enum Pacing: Sendable, Equatable {
    /// One period per period of wall-clock time, like a sound card: for headless use.
    case realTime
    /// No waiting: for tests and offline processing.
    case asFastAsPossible
}
