import Foundation
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyDevices
import ParleyNetSim
import ParleyRelayTestSupport
import Synchronization

/// A laptop's speaker and microphone in a room, as an `AudioOutput` and an `AudioInput`
/// for one `CallSession`: what the call plays comes back into its microphone through a
/// room (a synthetic impulse response) after an acoustic delay, on top of the near-end
/// talker and a little microphone noise. Both run in real time like a sound card.
///
/// The room: a direct tap, then from 2 ms on exponentially decaying Gaussian noise whose
/// energy falls 60 dB over RT60 (Polack's statistical model of diffuse reverberation),
/// scaled so the echo is `echoLevelDecibels` relative to what was played (−3 dB: a laptop
/// turned up). The echo is computed as the call plays, by uniformly partitioned FFT
/// convolution (10 ms blocks), so it is exactly the echo of what was played.
final class EchoPath: Sendable {
    struct State {
        var played: [Float] = []
        var echo: [Float] = []
        var outputStarted: UInt64?
        var inputStarted: UInt64?
        var convolver: PartitionedConvolver
    }

    let state: Mutex<State>
    let delaySamples: Int
    let near: [Float]
    let noise: [Float]
    let output: Output
    let input: Input

    init(near: [Float], rt60: Double, delayMilliseconds: Int, echoLevelDecibels: Double = -3, noiseDecibels: Double = -70, seed: UInt64 = 1) {
        var response = Self.roomResponse(rt60: rt60, seed: seed)
        // An impulse response of unit energy leaves speech's level about where it was.
        let energy = response.reduce(0) { $0 + $1 * $1 }
        let gain = Float(pow(10, echoLevelDecibels / 20)) / energy.squareRoot()
        response = response.map { $0 * gain }
        state = Mutex(State(convolver: PartitionedConvolver(response: response, block: 480)))
        delaySamples = delayMilliseconds * 48
        self.near = near
        var random = SeededRandom(seed: seed &+ 99)
        let scale = Float(pow(10, noiseDecibels / 20))
        noise = (0..<near.count).map { _ in Float(random.nextGaussian()) * scale }
        output = Output()
        input = Input()
        output.path = self
        input.path = self
    }

    static func roomResponse(rt60: Double, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        let length = Int(rt60 * 48_000)
        var response = [Float](repeating: 0, count: length)
        var diffuse: Float = 0
        for index in 96..<length {
            let value = Float(random.nextGaussian()) * Float(exp(-3 * log(10.0) * Double(index) / 48_000 / rt60))
            response[index] = value
            diffuse += value * value
        }
        for index in 96..<length { response[index] /= diffuse.squareRoot() }
        response[0] = 1
        return response
    }

    /// The speaker: keeps what is played and its echo, paced like a sound card.
    final class Output: AudioOutput, @unchecked Sendable {
        // @unchecked: `path` is set once in EchoPath.init, before any thread uses it.
        unowned(unsafe) var path: EchoPath!
        let sampleRate = 48_000
        let channels = 1
        let periodFrames = 480
        var xruns: Int { 0 }
        private let pacer = Mutex(Pacer())

        func write(_ samples: UnsafeBufferPointer<Float>) throws(DeviceError) {
            path.state.withLock { state in
                if state.outputStarted == nil { state.outputStarted = MonotonicClock.now() }
                state.played.append(contentsOf: samples)
                let echo = state.convolver.process(Array(samples))
                state.echo.append(contentsOf: echo)
            }
            pacer.withLock { $0.advance(by: samples.count) }
        }

        func drain() throws(DeviceError) {}
    }

    /// The microphone: near-end talker + echo + noise, paced like a sound card.
    final class Input: AudioInput, @unchecked Sendable {
        unowned(unsafe) var path: EchoPath!
        let sampleRate = 48_000
        let channels = 1
        let periodFrames = 480
        var xruns: Int { 0 }
        private let position = Mutex((next: 0, pacer: Pacer()))

        func read(into output: UnsafeMutableBufferPointer<Float>) throws(DeviceError) -> Int {
            let start = position.withLock { state in
                defer { state.next += output.count }
                return state.next
            }
            path.state.withLock { state in
                if state.inputStarted == nil { state.inputStarted = MonotonicClock.now() }
                // The played sample heard now: the same instant on the output's timeline,
                // less the acoustic delay.
                var shift: Int?
                if let outputStarted = state.outputStarted, let inputStarted = state.inputStarted {
                    shift = Int(Int64(bitPattern: inputStarted &- outputStarted) * 48 / 1_000_000) - path.delaySamples
                }
                for index in 0..<output.count {
                    let sample = start + index
                    var value: Float = sample < path.near.count ? path.near[sample] + path.noise[sample] : 0
                    if let shift {
                        let source = sample + shift
                        if source >= 0 && source < state.echo.count { value += state.echo[source] }
                    }
                    output[index] = value
                }
            }
            position.withLock { $0.pacer.advance(by: output.count) }
            return output.count
        }
    }
}

/// Uniformly partitioned overlap-save convolution: the response cut into `block`-long
/// partitions, each transformed once (FFT size `size`, the power of two at least twice the
/// block); every input block is transformed once, with the samples before it, and
/// multiplied with each partition's spectrum against the matching older input spectrum.
struct PartitionedConvolver {
    let block: Int
    let size: Int
    let fft: FFT
    private var partitions: [(real: [Float], imaginary: [Float])] = []
    private var history: [(real: [Float], imaginary: [Float])] = []
    private var window: [Float]

    init(response: [Float], block: Int) {
        self.block = block
        var size = 1
        while size < 2 * block { size *= 2 }
        self.size = size
        fft = FFT(size: size)
        window = [Float](repeating: 0, count: size)
        var start = 0
        while start < response.count {
            var real = [Float](repeating: 0, count: size)
            var imaginary = [Float](repeating: 0, count: size)
            for index in 0..<min(block, response.count - start) { real[index] = response[start + index] }
            fft.transform(real: &real, imaginary: &imaginary)
            partitions.append((real, imaginary))
            start += block
        }
        let zero = (real: [Float](repeating: 0, count: size), imaginary: [Float](repeating: 0, count: size))
        history = Array(repeating: zero, count: partitions.count)
    }

    /// The next `block` output samples for `input` (exactly `block` long).
    mutating func process(_ input: [Float]) -> [Float] {
        precondition(input.count == block)
        window.removeFirst(block)
        window.append(contentsOf: input)
        var real = window
        var imaginary = [Float](repeating: 0, count: size)
        fft.transform(real: &real, imaginary: &imaginary)
        history.removeLast()
        history.insert((real, imaginary), at: 0)
        var sumReal = [Float](repeating: 0, count: size)
        var sumImaginary = [Float](repeating: 0, count: size)
        let size = self.size
        sumReal.withUnsafeMutableBufferPointer { sr in
            sumImaginary.withUnsafeMutableBufferPointer { si in
                for (spectrum, partition) in zip(history, partitions) {
                    spectrum.real.withUnsafeBufferPointer { xr in
                        spectrum.imaginary.withUnsafeBufferPointer { xi in
                            partition.real.withUnsafeBufferPointer { hr in
                                partition.imaginary.withUnsafeBufferPointer { hi in
                                    for bin in 0..<size {
                                        sr[bin] += xr[bin] * hr[bin] - xi[bin] * hi[bin]
                                        si[bin] += xr[bin] * hi[bin] + xi[bin] * hr[bin]
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        fft.transform(real: &sumReal, imaginary: &sumImaginary, inverse: true)
        // Overlap-save: the last `block` samples are free of the circular wrap.
        return Array(sumReal[(size - block)...])
    }
}

/// Sleeps to absolute deadlines from the first call: a device's pace without drift.
struct Pacer {
    private var start: UInt64?
    private var frames = 0

    mutating func advance(by count: Int) {
        let start = self.start ?? MonotonicClock.now()
        self.start = start
        frames += count
        MonotonicClock.sleep(until: start + UInt64(frames) * 1_000_000_000 / 48_000)
    }
}
