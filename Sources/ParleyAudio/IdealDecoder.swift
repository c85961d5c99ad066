/// The best any receiver could do with a reference encoding of a signal and a path's
/// packet fates: the ceiling a call's quality is judged against (`parley-bench
/// ideal-decoder`, `Benchmarks/one-talker-report`).
///
/// The signal is encoded in 20 ms Opus frames with the configuration given (the benchmark
/// uses in-band FEC and 10 % expected loss at the call's bitrate ceiling). Each frame then
/// either arrived or was lost, and the receiver knows every fate in advance and has no
/// deadline: frame N is decoded from its own packet when it arrived, else rebuilt from
/// N+1's in-band FEC whenever N+1 arrived, else concealed (Opus PLC). With every frame
/// arrived this is the codec's own ceiling.
///
/// The output is aligned sample for sample with the input (the encoder's look-ahead
/// removed) and has the same length.
public enum IdealDecoder {
    public enum Repair: Sendable, Equatable {
        /// From the frame's own packet.
        case decode
        /// Rebuilt from the next packet's in-band FEC.
        case fec
        /// Concealed: neither it nor the next packet arrived.
        case conceal
    }

    public struct Output: Sendable {
        public var audio: [Float]
        /// What was done for each frame.
        public var repairs: [Repair]

        public func count(_ repair: Repair) -> Int { repairs.reduce(0) { $0 + ($1 == repair ? 1 : 0) } }
    }

    /// The repair for each frame, given which arrived. A frame past the end of `arrived`
    /// counts as arrived (a caller that knows fewer fates than frames has nothing lost there).
    public static func repairs(arrived: [Bool], frames: Int) -> [Repair] {
        func got(_ index: Int) -> Bool { index >= arrived.count || arrived[index] }
        return (0..<frames).map { index in
            if got(index) { return .decode }
            return index + 1 < frames && got(index + 1) ? .fec : .conceal
        }
    }

    /// Encodes `signal` (48 kHz mono) with `configuration` (20 ms frames) and decodes it
    /// with the fates `arrived` (frame k covers samples 960k ..< 960k + 960).
    public static func run(signal: [Float], arrived: [Bool], configuration: OpusEncoder.Configuration) throws(OpusError) -> Output {
        var configuration = configuration
        configuration.channels = 1
        configuration.frameDuration = .ms20
        let encoder = try OpusEncoder(configuration)
        let decoder = try OpusDecoder(channels: 1)
        let frameSamples = encoder.frameSamples
        let lookahead = encoder.lookahead
        // Enough frames that the look-ahead's worth at the end comes out too.
        let frames = (signal.count + lookahead + frameSamples - 1) / frameSamples
        var packets: [[UInt8]] = []
        packets.reserveCapacity(frames)
        var frame = [Float](repeating: 0, count: frameSamples)
        for index in 0..<frames {
            let start = index * frameSamples
            for offset in 0..<frameSamples {
                frame[offset] = start + offset < signal.count ? signal[start + offset] : 0
            }
            packets.append(try encoder.encode(frame))
        }

        let plan = repairs(arrived: arrived, frames: frames)
        var decoded = [Float](repeating: 0, count: frames * frameSamples)
        var failure: OpusError?
        for index in 0..<frames where failure == nil {
            let start = index * frameSamples
            let source = plan[index] == .fec ? packets[index + 1] : packets[index]
            decoded.withUnsafeMutableBufferPointer { all in
                let output = UnsafeMutableBufferPointer(rebasing: all[start..<start + frameSamples])
                source.withUnsafeBytes { packet in
                    do throws(OpusError) {
                        switch plan[index] {
                        case .decode: _ = try decoder.decode(packet, into: output)
                        case .fec: _ = try decoder.decodeFEC(from: packet, samples: frameSamples, into: output)
                        case .conceal: _ = try decoder.conceal(samples: frameSamples, into: output)
                        }
                    } catch {
                        failure = error
                    }
                }
            }
        }
        if let failure { throw failure }
        return Output(audio: Array(decoded[lookahead..<lookahead + signal.count]), repairs: plan)
    }
}
