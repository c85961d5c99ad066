import ParleyClient
import ParleySecurity
import ParleyWire

/// A client's whole receive path (``CallReceiver``: link, speakers and their jitter buffers,
/// RTCP, encoder adaptation, the playback mix) joined to a relay played in-process with the
/// relay's real handshake and keys, so anything can reach it as a joined peer's datagrams
/// would: raw, or sealed with the session's keys. No socket, no clock: time is ours.
///
/// Shared by the property test in `swift test` and the libFuzzer target in `Fuzz/`, which
/// both feed it ``run(script:)``.
public final class JoinedPeer {
    public let receiver: CallReceiver
    public let mix: PlaybackMix
    /// Our SSRC, and the other member the roster names.
    public static let ownSSRC: UInt32 = 0x0A0A_0A0A
    public static let peerSSRC: UInt32 = 0x0B0B_0B0B
    private let relaySession: SecureSession
    private var relaySequence: UInt32 = 100
    public private(set) var now: UInt64
    private var played: UInt64 = 0
    private var period = [Float](repeating: 0, count: 480)
    /// The sum of squares of everything the playback mix has played: what a listener heard.
    public private(set) var heardEnergy = 0.0

    public enum SetupError: Error { case step(String) }

    public init() throws {
        let key = RelayKey()
        let relay = RelayHandshake(key: key)
        let address = Array("127.0.0.1:40000".utf8)
        var configuration = CallConfiguration(relayHost: "127.0.0.1", relayPort: 7800, room: "fuzz", token: "token",
                                              security: .secure(relayKey: key.publicKey))
        configuration.ssrc = Self.ownSSRC
        configuration.name = "fuzz"
        let start: UInt64 = 1_000_000_000
        let mix = PlaybackMix(recordingDirectory: nil)
        let receiver = CallReceiver(configuration: configuration, mix: mix, epoch: start, wallClockNanoseconds: 1_700_000_000_000_000_000)
        guard let hello = receiver.start(now: start).first,
              let cookie = hello.withUnsafeBytes({ relay.cookieReply(toHello: $0, address: address, unixSeconds: 1_000) }),
              let initBytes = cookie.withUnsafeBytes({ receiver.receive($0, now: start) }).first else {
            throw SetupError.step("hello and cookie")
        }
        var accepted = try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: HandshakeReplayCache()) }
        let joined = ControlMessage(body: .joined(.init(
            cookie: 7, ssrc: Self.ownSSRC, identity: "fuzz", room: "fuzz", canPublish: true,
            keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000)))
        let (response, session) = try accepted.respond(relayIndex: 9, payload: try joined.serialized(), nowNanoseconds: start)
        _ = response.withUnsafeBytes { receiver.receive($0, now: start) }
        self.mix = mix
        self.receiver = receiver
        relaySession = session
        now = start
        deliver(control: .roster(.init(version: 1, members: [
            .init(ssrc: Self.ownSSRC, identity: "fuzz", canPublish: true),
            .init(ssrc: Self.peerSSRC, identity: "peer", canPublish: true),
        ])), reliable: true)
        guard receiver.link.phase == .active else { throw SetupError.step("joining: \(receiver.link.phase)") }
    }

    // MARK: Inputs

    public func deliver(raw bytes: UnsafeRawBufferPointer) {
        _ = receiver.receive(bytes, now: now)
    }

    /// `plaintext` sealed by the relay with the session's keys, as the relay forwards it.
    public func deliver(sealed plaintext: UnsafeRawBufferPointer) {
        var sealed = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        guard let count = try? sealed.withUnsafeMutableBytes({ try relaySession.seal(plaintext, into: $0, nowNanoseconds: now) }) else { return }
        sealed.withUnsafeBytes { deliver(raw: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    public func deliver(control body: ControlMessage.Body, reliable: Bool = false) {
        relaySequence &+= 1
        guard let bytes = try? ControlMessage(sequence: relaySequence, isReliable: reliable, body: body).serialized() else { return }
        bytes.withUnsafeBytes { deliver(sealed: $0) }
    }

    /// Time passes: the receiver's timers run and the playback thread pulls what is due, as
    /// it would, 10 ms at a time.
    public func advance(milliseconds: Int) {
        let target = now &+ UInt64(milliseconds) * 1_000_000
        while now < target {
            now = min(target, now + 10_000_000)
            _ = receiver.tick(now: now)
            while played + 10_000_000 <= now - 1_000_000_000 {
                played += 10_000_000
                period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: Double(played) / 1e9) }
                heardEnergy += period.reduce(0) { $0 + Double($1 * $1) }
            }
        }
    }

    // MARK: Scripts

    /// Plays a script: a sequence of steps, each an operation byte and its operands, until
    /// the bytes run out (a step cut short is played with what there is).
    ///
    /// ```
    /// 0 len16 bytes          a datagram as it arrives, unsealed
    /// 1 len16 bytes          the relay seals it (RTP, RTCP, control: anything)
    /// 2 ms8                  time passes: 4 × ms8 milliseconds
    /// 3 ssrc8 seq16 ts32 len8 bytes   an RTP packet (payload type 111) from a chosen SSRC,
    ///                        its sequence and timestamp *added* to that SSRC's last ones
    /// ```
    public func run(script: UnsafeRawBufferPointer) {
        var reader = ScriptReader(script)
        var sequences: [UInt32: UInt16] = [:]
        var timestamps: [UInt32: UInt32] = [:]
        while let operation = reader.byte() {
            switch operation % 4 {
            case 0:
                let bytes = reader.bytes(Int(reader.uint16() % 1_600))
                bytes.withUnsafeBytes { deliver(raw: $0) }
            case 1:
                let bytes = reader.bytes(Int(reader.uint16() % 1_600))
                bytes.withUnsafeBytes { deliver(sealed: $0) }
            case 2:
                advance(milliseconds: 4 * Int(reader.byte() ?? 0))
            default:
                let choice = reader.byte() ?? 0
                let ssrc = [Self.peerSSRC, Self.ownSSRC, 0xC0C0_C0C0, UInt32(choice) << 24 | 0x00DD_DDDD][Int(choice % 4)]
                let sequence = (sequences[ssrc] ?? 0) &+ reader.uint16()
                let timestamp = (timestamps[ssrc] ?? 0) &+ reader.uint32()
                sequences[ssrc] = sequence
                timestamps[ssrc] = timestamp
                let payload = reader.bytes(Int(reader.byte() ?? 0))
                let header = RTPHeader(payloadType: RTPHeader.opusPayloadType, sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc)
                guard let packet = try? header.serialized(payload: payload) else { continue }
                packet.withUnsafeBytes { deliver(sealed: $0) }
            }
        }
        advance(milliseconds: 20)
    }
}

/// Reads a script's operands; past the end it gives zeros and empty byte strings.
public struct ScriptReader {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    public mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func uint16() -> UInt16 { UInt16(byte() ?? 0) << 8 | UInt16(byte() ?? 0) }

    public mutating func uint32() -> UInt32 { UInt32(uint16()) << 16 | UInt32(uint16()) }

    public mutating func bytes(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, offset + count)
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
}
