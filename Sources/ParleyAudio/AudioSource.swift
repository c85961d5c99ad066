/// Something the mixer can pull one playback period of audio from.
public protocol AudioSource: AnyObject {
    /// Fills `output` with the next audio at `now` (seconds, the playback clock). Returns
    /// false when it wrote silence because it has nothing to play.
    func read(into output: UnsafeMutableBufferPointer<Float>, now: Double) -> Bool
}

extension JitterBuffer: AudioSource {}
