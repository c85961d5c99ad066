/// What the speaker played, as the echo canceller reads it for one capture frame: the
/// stretch that lines up with the frame just captured (`delay` 0), or the stretch played
/// `delay` samples before it, where the echo now reaching the microphone came from.
///
/// The canceller reads the reference *late*, at the echo path's delay, rather than taking it
/// as it is played and delaying it itself: a live call's playback thread can fall a few
/// periods behind on a busy machine, and a sample not yet played when it was wanted would
/// otherwise be lost to the canceller for good, while its echo still reaches the microphone
/// a moment later. Read at the echo's delay, it has long been played. (WebRTC's AEC3 keeps its
/// render buffer the same way, filled by the render side and read at the estimated delay.)
public protocol PlayedSignal {
    /// Fills `output` (one capture frame long) with what was played `delay` samples before
    /// the stretch that lines up with the current capture frame; silence where nothing was.
    func read(delay: Int, into output: UnsafeMutableBufferPointer<Float>)
}
