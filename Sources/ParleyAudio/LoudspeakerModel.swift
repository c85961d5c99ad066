import Foundation

/// What the loudspeaker does to the far end before the room does: the playback chain's
/// high-pass, then the amplifier's limit. A loudspeaker driven past its limit plays
/// clip(HP(far)); the room's response after it is linear (a Hammerstein model). SpeexDSP's
/// filter can only model the linear part, so in such a room it stops near 18 dB of ERLE
/// whatever surrounds it; given the reference passed through this model, the echo is linear
/// in it again and the filter cancels it like any other (BENCHMARKS.md, echo cancellation).
///
/// Found from the signals by `LoudspeakerIdentifier`, never configured: a user cannot know
/// where their laptop's amplifier clips.
public struct LoudspeakerModel: Sendable, Equatable, CustomStringConvertible {
    /// The candidate high-passes, Hz (second-order Butterworth); nil is none.
    public static let highPasses: [Int?] = [nil, 100, 200, 300]

    /// Index into `highPasses`.
    public var highPassIndex: Int
    /// Where the amplifier clips, dBFS.
    public var limitDecibels: Float

    public init(highPassIndex: Int, limitDecibels: Float) {
        precondition(Self.highPasses.indices.contains(highPassIndex), "no high-pass candidate \(highPassIndex)")
        self.highPassIndex = highPassIndex
        self.limitDecibels = limitDecibels
    }

    public var highPassHertz: Int? { Self.highPasses[highPassIndex] }
    /// The limit as a sample magnitude (full scale 1).
    public var limit: Float { Float(pow(10, Double(limitDecibels) / 20)) }

    public var description: String {
        let highPass = highPassHertz.map { "high-pass \($0) Hz" } ?? "no high-pass"
        return "\(highPass), limit \(String(format: "%.1f", limitDecibels)) dBFS"
    }
}

/// A second-order Butterworth high-pass (the bilinear transform with its cut-off prewarped,
/// as in RBJ's cookbook with Q = 1/√2), transposed direct form II. The state is Double: at
/// 100 Hz and 48 kHz the poles sit 0.01 from the unit circle, where Float's rounding adds
/// audible low-frequency noise to a reference the filter must match to 40 dB.
struct HighPass {
    private let b0, b1, b2, a1, a2: Double
    private var z1 = 0.0
    private var z2 = 0.0

    init(hertz: Int, sampleRate: Int) {
        let w0 = 2 * Double.pi * Double(hertz) / Double(sampleRate)
        let alpha = sin(w0) / (2 * 0.5.squareRoot())
        let cosine = cos(w0)
        let a0 = 1 + alpha
        b0 = (1 + cosine) / 2 / a0
        b1 = -(1 + cosine) / a0
        b2 = b0
        a1 = -2 * cosine / a0
        a2 = (1 - alpha) / a0
    }

    mutating func filter(_ input: UnsafeBufferPointer<Float>, into output: UnsafeMutablePointer<Float>) {
        var s1 = z1
        var s2 = z2
        for index in 0..<input.count {
            let x = Double(input[index])
            let y = b0 * x + s1
            s1 = b1 * x - a1 * y + s2
            s2 = b2 * x - a2 * y
            output[index] = Float(y)
        }
        z1 = s1
        z2 = s2
    }
}
