/// The best any receiver could do with a stream's packets and a path's fates: the ceilings
/// a call's quality is judged against (`parley-bench ideal-decoder`,
/// `Benchmarks/one-talker-report`).
///
/// Each 20 ms frame either arrived or was lost, and the receiver knows every fate in advance
/// and has no deadline: frame N is decoded from its own packet when it arrived, else from a
/// redundant copy of it that came in a later packet (RFC 2198 RED, when the sender sent
/// copies), else rebuilt from N+1's in-band FEC whenever N+1's packet (or a copy of it)
/// arrived and carries FEC, else concealed (Opus PLC). A frame the sender never sent (DTX
/// silence) is the decoder's comfort noise, as for any receiver.
///
/// Two streams are decoded this way: a reference encoding of the talker's signal
/// (`run(signal:arrived:configuration:)`, the ceiling of sender and receiver together), or
/// the packets the talker really sent (`decode(packets:arrived:)`, the ceiling of the
/// receiver alone). With every frame arrived, each is its encoder's own ceiling.
public enum IdealDecoder {
    public enum Repair: Sendable, Equatable {
        /// From the frame's own packet.
        case decode
        /// From a redundant copy of the frame in a later packet.
        case redundancy
        /// Rebuilt from the next packet's in-band FEC.
        case fec
        /// Concealed: it was lost, and so was the next packet (or it was never sent).
        case conceal
        /// Never sent (DTX): the decoder's comfort noise.
        case silence
    }

    public struct Output: Sendable {
        public var audio: [Float]
        /// What was done for each frame.
        public var repairs: [Repair]

        public func count(_ repair: Repair) -> Int { repairs.reduce(0) { $0 + ($1 == repair ? 1 : 0) } }
    }

    /// The repair for each of `frames` frames, given which arrived, which were sent, which
    /// had a redundant copy arrive, and which packets carry in-band FEC for the frame before.
    /// A frame past the end of `arrived` counts as arrived, one past the end of `sent` as sent,
    /// past the end of `copied` as not copied, past the end of `carriesFEC` as carrying FEC.
    public static func repairs(arrived: [Bool], sent: [Bool] = [], copied: [Bool] = [], carriesFEC: [Bool] = [], frames: Int) -> [Repair] {
        func got(_ index: Int) -> Bool { index >= arrived.count || arrived[index] }
        func exists(_ index: Int) -> Bool { index >= sent.count || sent[index] }
        func copy(_ index: Int) -> Bool { index < copied.count && copied[index] }
        func fec(_ index: Int) -> Bool { index >= carriesFEC.count || carriesFEC[index] }
        return (0..<frames).map { index in
            guard exists(index) else { return .silence }
            if got(index) { return .decode }
            if copy(index) { return .redundancy }
            let next = index + 1
            return next < frames && exists(next) && fec(next) && (got(next) || copy(next)) ? .fec : .conceal
        }
    }

    /// Encodes `signal` (48 kHz mono) with `configuration` (20 ms frames) and decodes it
    /// with the fates `arrived` (frame k covers samples 960k ..< 960k + 960). The output has
    /// the signal's length and is in step with it (the encoder's look-ahead removed).
    public static func run(signal: [Float], arrived: [Bool], configuration: OpusEncoder.Configuration) throws(OpusError) -> Output {
        var configuration = configuration
        configuration.channels = 1
        configuration.frameDuration = .ms20
        let encoder = try OpusEncoder(configuration)
        let frameSamples = encoder.frameSamples
        let lookahead = encoder.lookahead
        // Enough frames that the look-ahead's worth at the end comes out too.
        let frames = (signal.count + lookahead + frameSamples - 1) / frameSamples
        var packets: [[UInt8]?] = []
        packets.reserveCapacity(frames)
        var frame = [Float](repeating: 0, count: frameSamples)
        for index in 0..<frames {
            let start = index * frameSamples
            for offset in 0..<frameSamples {
                frame[offset] = start + offset < signal.count ? signal[start + offset] : 0
            }
            packets.append(try encoder.encode(frame))
        }
        var output = try decode(packets: packets, arrived: arrived, frameSamples: frameSamples)
        output.audio = Array(output.audio[lookahead..<lookahead + signal.count])
        return output
    }

    /// Decodes a stream given as one entry per frame (nil: never sent) with the fates
    /// `arrived`; `copies` holds, per frame, a redundant copy of it that arrived in a later
    /// packet (nil: none), and `carriesFEC` whether a frame's packet (and so its copies)
    /// carries FEC for the frame before. The output starts with frame 0 and still carries the
    /// encoder's look-ahead (`OpusEncoder.lookahead` of the encoder that made the packets).
    public static func decode(
        packets: [[UInt8]?], arrived: [Bool], copies: [[UInt8]?] = [], carriesFEC: [Bool] = [], frameSamples: Int = 960
    ) throws(OpusError) -> Output {
        let frames = packets.count
        let plan = repairs(
            arrived: arrived, sent: packets.map { $0 != nil }, copied: copies.map { $0 != nil }, carriesFEC: carriesFEC, frames: frames)
        func got(_ index: Int) -> Bool { index >= arrived.count || arrived[index] }
        let decoder = try OpusDecoder(channels: 1)
        var decoded = [Float](repeating: 0, count: frames * frameSamples)
        var failure: OpusError?
        for index in 0..<frames where failure == nil {
            let start = index * frameSamples
            let source: [UInt8]
            switch plan[index] {
            case .decode: source = packets[index] ?? []
            case .redundancy: source = copies[index] ?? []
            case .fec: source = (got(index + 1) ? packets[index + 1] : copies[index + 1]) ?? []
            case .conceal, .silence: source = []
            }
            decoded.withUnsafeMutableBufferPointer { all in
                let output = UnsafeMutableBufferPointer(rebasing: all[start..<start + frameSamples])
                source.withUnsafeBytes { packet in
                    do throws(OpusError) {
                        switch plan[index] {
                        case .decode, .redundancy: _ = try decoder.decode(packet, into: output)
                        case .fec: _ = try decoder.decodeFEC(from: packet, samples: frameSamples, into: output)
                        case .conceal, .silence: _ = try decoder.conceal(samples: frameSamples, into: output)
                        }
                    } catch {
                        failure = error
                    }
                }
            }
        }
        if let failure { throw failure }
        return Output(audio: decoded, repairs: plan)
    }
}
