import Foundation

/// An in-place radix-2 complex FFT over split real/imaginary `Float` arrays.
///
/// SpeexDSP and libopus each carry an FFT but export neither, and the delay estimator
/// needs one (GCC-PHAT); this is the textbook iterative Cooley–Tukey with precomputed
/// twiddles and bit-reversal, written over raw pointers so it stays fast in debug builds.
/// Immutable after creation; `transform` only touches the caller's buffers, so one `FFT`
/// can be shared between threads.
public final class FFT: Sendable {
    public let size: Int
    private let log2Size: Int
    private let cosines: [Float]
    private let sines: [Float]
    private let bitReversed: [Int32]

    /// - Parameter size: a power of two, 2…2²⁴.
    public init(size: Int) {
        precondition(size >= 2 && size <= 1 << 24 && size & (size - 1) == 0, "FFT size must be a power of two")
        self.size = size
        var bits = 0
        while 1 << bits < size { bits += 1 }
        log2Size = bits
        let half = size / 2
        cosines = (0..<half).map { Float(cos(2 * Double.pi * Double($0) / Double(size))) }
        sines = (0..<half).map { Float(-sin(2 * Double.pi * Double($0) / Double(size))) }
        bitReversed = (0..<size).map { index in
            var reversed = 0
            var value = index
            for _ in 0..<bits {
                reversed = (reversed << 1) | (value & 1)
                value >>= 1
            }
            return Int32(reversed)
        }
    }

    /// Forward transform (e^{−i2πkn/N}), or the inverse scaled by 1/N when `inverse`.
    public func transform(real: UnsafeMutablePointer<Float>, imaginary: UnsafeMutablePointer<Float>, inverse: Bool = false) {
        let n = size
        bitReversed.withUnsafeBufferPointer { reversed in
            for index in 0..<n {
                let other = Int(reversed[index])
                if other > index {
                    swap(&real[index], &real[other])
                    swap(&imaginary[index], &imaginary[other])
                }
            }
        }
        let sign: Float = inverse ? -1 : 1
        cosines.withUnsafeBufferPointer { cosTable in
            sines.withUnsafeBufferPointer { sinTable in
                var length = 2
                while length <= n {
                    let half = length / 2
                    let stride = n / length
                    var start = 0
                    while start < n {
                        var k = 0
                        for j in 0..<half {
                            let wr = cosTable[k]
                            let wi = sign * sinTable[k]
                            let a = start + j
                            let b = a + half
                            let tr = real[b] * wr - imaginary[b] * wi
                            let ti = real[b] * wi + imaginary[b] * wr
                            real[b] = real[a] - tr
                            imaginary[b] = imaginary[a] - ti
                            real[a] += tr
                            imaginary[a] += ti
                            k += stride
                        }
                        start += length
                    }
                    length <<= 1
                }
            }
        }
        if inverse {
            let scale = 1 / Float(n)
            for index in 0..<n {
                real[index] *= scale
                imaginary[index] *= scale
            }
        }
    }

    /// Linear convolution of two real signals by overlap-add, for building test signals and
    /// offline tools (echo paths of thousands of taps would take minutes directly).
    public static func convolve(_ signal: [Float], with kernel: [Float]) -> [Float] {
        guard !signal.isEmpty, !kernel.isEmpty else { return [] }
        var fftSize = 1
        while fftSize < 2 * kernel.count { fftSize <<= 1 }
        fftSize = max(fftSize, 1_024)
        let block = fftSize - kernel.count + 1
        let fft = FFT(size: fftSize)
        var kernelReal = [Float](repeating: 0, count: fftSize)
        var kernelImaginary = [Float](repeating: 0, count: fftSize)
        for index in kernel.indices { kernelReal[index] = kernel[index] }
        fft.transform(real: &kernelReal, imaginary: &kernelImaginary)
        var output = [Float](repeating: 0, count: signal.count + kernel.count - 1)
        var real = [Float](repeating: 0, count: fftSize)
        var imaginary = [Float](repeating: 0, count: fftSize)
        var start = 0
        while start < signal.count {
            let count = min(block, signal.count - start)
            for index in 0..<fftSize {
                real[index] = index < count ? signal[start + index] : 0
                imaginary[index] = 0
            }
            fft.transform(real: &real, imaginary: &imaginary)
            for index in 0..<fftSize {
                let r = real[index] * kernelReal[index] - imaginary[index] * kernelImaginary[index]
                let i = real[index] * kernelImaginary[index] + imaginary[index] * kernelReal[index]
                real[index] = r
                imaginary[index] = i
            }
            fft.transform(real: &real, imaginary: &imaginary, inverse: true)
            let produced = min(fftSize, output.count - start)
            output.withUnsafeMutableBufferPointer { out in
                for index in 0..<produced { out[start + index] += real[index] }
            }
            start += block
        }
        return output
    }
}
