import Foundation

/// How well a signal keeps a talker's spectral envelope over time: the measure the echo
/// tests use for double talk (does the near end survive the canceller?) and the call tests
/// for what arrives (does the received speech match what was said?).
///
/// Each signal is cut into 20 ms frames; each frame's power in 20 bands spaced
/// logarithmically from 100 Hz to 8 kHz is taken in dB (floored at −100 dBFS); each band's
/// mean over the measured frames is removed (so a fixed colouring, or the spectral tilt
/// every voice shares, does not count as a match); the score is the Pearson correlation
/// of the two sets of values. 1 means the signal carries the near-end's syllables in the
/// same bands at the same times; echo of a different talker scores near 0, and so does a
/// canceller that gates the near end to silence.
public enum SpectralEnvelope {
    /// 20 ms at 48 kHz.
    public static let frame = 960
    public static let fftSize = 1_024
    static let bandEdges: [Int] = {
        (0...20).map { band in
            let hertz = 100 * pow(80.0, Double(band) / 20)  // 100 Hz … 8 kHz
            return Int(hertz * Double(fftSize) / 48_000)
        }
    }()

    /// Band powers in dB for frame `index`.
    public static func bands(_ signal: [Float], frameIndex: Int, fft: FFT) -> [Double] {
        var real = [Float](repeating: 0, count: fftSize)
        var imaginary = [Float](repeating: 0, count: fftSize)
        let start = frameIndex * frame
        for index in 0..<frame where start + index < signal.count {
            let window = 0.5 - 0.5 * cos(2 * Float.pi * Float(index) / Float(frame))
            real[index] = signal[start + index] * window
        }
        fft.transform(real: &real, imaginary: &imaginary)
        return (0..<20).map { band in
            var power = 0.0
            for bin in bandEdges[band]..<max(bandEdges[band + 1], bandEdges[band] + 1) {
                power += Double(real[bin] * real[bin] + imaginary[bin] * imaginary[bin])
            }
            return 10 * log10(max(power, 1e-10))
        }
    }

    /// The score of `signal` against `reference` over the frames listed.
    public static func correlation(_ signal: [Float], _ reference: [Float], frames: [Int]) -> Double {
        let fft = FFT(size: fftSize)
        let a = frames.map { bands(signal, frameIndex: $0, fft: fft) }
        let b = frames.map { bands(reference, frameIndex: $0, fft: fft) }
        var xs = [Double](), ys = [Double]()
        for band in 0..<20 {
            let meanA = a.reduce(0) { $0 + $1[band] } / Double(a.count)
            let meanB = b.reduce(0) { $0 + $1[band] } / Double(b.count)
            for row in a.indices {
                xs.append(a[row][band] - meanA)
                ys.append(b[row][band] - meanB)
            }
        }
        return pearson(xs, ys)
    }

    /// Frames (20 ms) in `range` where `signal` is within 30 dB of its loudest frame.
    public static func activeFrames(_ signal: [Float], in range: Range<Int>) -> [Int] {
        let first = range.lowerBound / frame
        let last = range.upperBound / frame
        let energies = (first..<last).map { index in
            signal[index * frame..<min((index + 1) * frame, signal.count)].reduce(0.0) { $0 + Double($1) * Double($1) }
        }
        let loudest = energies.max() ?? 0
        return zip(first..<last, energies).filter { $0.1 >= loudest * 1e-3 }.map(\.0)
    }

    /// The Pearson correlation of two mean-free series, 0 when either is flat.
    private static func pearson(_ a: [Double], _ b: [Double]) -> Double {
        var xy = 0.0, xx = 0.0, yy = 0.0
        for (x, y) in zip(a, b) {
            xy += x * y
            xx += x * x
            yy += y * y
        }
        return xx > 0 && yy > 0 ? xy / (xx * yy).squareRoot() : 0
    }
}
