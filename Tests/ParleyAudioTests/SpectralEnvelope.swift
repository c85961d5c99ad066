import Foundation
import ParleyAudio

/// The double-talk measure: how well a signal keeps the near-end talker's spectral
/// envelope over time.
///
/// Each signal is cut into 20 ms frames; each frame's power in 20 bands spaced
/// logarithmically from 100 Hz to 8 kHz is taken in dB (floored at −100 dBFS); each band's
/// mean over the measured frames is removed (so a fixed colouring, or the spectral tilt
/// every voice shares, does not count as a match); the score is the Pearson correlation
/// of the two sets of values. 1 means the signal carries the near-end's syllables in the
/// same bands at the same times; echo of a different talker scores near 0, and so does a
/// canceller that gates the near end to silence.
enum SpectralEnvelope {
    static let frame = 960
    static let fftSize = 1_024
    static let bandEdges: [Int] = {
        (0...20).map { band in
            let hertz = 100 * pow(80.0, Double(band) / 20)  // 100 Hz … 8 kHz
            return Int(hertz * Double(fftSize) / 48_000)
        }
    }()

    /// Band powers in dB for frame `index`.
    static func bands(_ signal: [Float], frameIndex: Int, fft: FFT) -> [Double] {
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
    static func correlation(_ signal: [Float], _ reference: [Float], frames: [Int]) -> Double {
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
        return pearsonCorrelation(xs, ys)
    }

    /// Frames (20 ms) in `range` where `signal` is within 30 dB of its loudest frame.
    static func activeFrames(_ signal: [Float], in range: Range<Int>) -> [Int] {
        let first = range.lowerBound / frame
        let last = range.upperBound / frame
        let energies = (first..<last).map { index in
            signal[index * frame..<min((index + 1) * frame, signal.count)].reduce(0.0) { $0 + Double($1) * Double($1) }
        }
        let loudest = energies.max() ?? 0
        return zip(first..<last, energies).filter { $0.1 >= loudest * 1e-3 }.map(\.0)
    }
}
