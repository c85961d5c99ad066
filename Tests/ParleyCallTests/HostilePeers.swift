import Foundation
import ParleyBasics
import ParleySecurity
import ParleyWire
import Synchronization

/// Strings a hostile relay (or a relay of the room behind a trunk) puts in every field it
/// sends: an escape sequence that clears the screen, an OSC that sets the terminal's title,
/// a C1 control (CSI as one code point), a bell, a right-to-left override and a zero-width
/// space, around words that say which field each came from.
enum HostileText {
    static let clear = "\u{1B}[3J\u{1B}c"
    static let title = "\u{1B}]0;PWNED\u{07}"
    static let c1 = "\u{9B}31m"
    static let bell = "\u{07}"
    static let bidi = "\u{202E}"
    static let zeroWidth = "\u{200B}"

    /// `label` with every kind of hostile character in it (at most 64 bytes, so it fits any field).
    static func named(_ label: String) -> String { label + clear + title + c1 + bell + bidi + "x" + zeroWidth + "y" }

    /// What the bytes a terminal received must not contain: the raw characters, in UTF-8.
    static let forbidden: [(String, [UInt8])] = [
        ("OSC (ESC ])", [0x1B, 0x5D]), ("BEL", [0x07]), ("C1 CSI (U+009B)", [0xC2, 0x9B]),
        ("U+202E", Array("\u{202E}".utf8)), ("U+200B", Array("\u{200B}".utf8)), ("ESC [3J", [0x1B, 0x5B, 0x33, 0x4A]),
    ]

    /// Why `bytes` (what reached a terminal or an output stream) are unsafe, or nil. With
    /// `terminal`, the call's own drawing is allowed: ESC [ then digits and one of A, H, J, K.
    static func problems(in bytes: [UInt8], terminal: Bool) -> [String] {
        var problems: [String] = []
        for (name, sequence) in forbidden where contains(bytes, sequence) { problems.append("\(name) reached the output raw") }
        var index = 0
        while let escape = bytes[index...].firstIndex(of: 0x1B) {
            var end = escape + 1
            var own = terminal && end < bytes.count && bytes[end] == 0x5B
            if own {
                end += 1
                while end < bytes.count, (0x30...0x39).contains(bytes[end]) || bytes[end] == 0x3B { end += 1 }
                own = end < bytes.count && [0x41, 0x48, 0x4A, 0x4B].contains(bytes[end])
            }
            if !own {
                let context = String(decoding: bytes[max(0, escape - 20)..<min(bytes.count, escape + 12)], as: UTF8.self)
                problems.append("an escape sequence the call did not write itself: \(context.debugDescription)")
                break
            }
            index = end
        }
        return problems
    }

    static func contains(_ bytes: [UInt8], _ sequence: [UInt8]) -> Bool {
        guard bytes.count >= sequence.count else { return false }
        for start in 0...(bytes.count - sequence.count) where bytes[start] == sequence[0] {
            if Array(bytes[start..<start + sequence.count]) == sequence { return true }
        }
        return false
    }
}

/// A UDP socket on a loopback address, port chosen by the kernel.
final class LoopbackSocket: @unchecked Sendable {
    let descriptor: Int32
    let port: UInt16

    init(host: String = "127.0.0.1") {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = Self.address(host, 0)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        self.descriptor = descriptor
        port = UInt16(bigEndian: local.sin_port)
    }

    deinit { close(descriptor) }

    static func address(_ host: String, _ port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = port.bigEndian
        return address
    }

    func send(_ bytes: [UInt8], to destination: sockaddr_in) {
        var destination = destination
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &destination) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
    }

    /// The next datagram and its source, or nil after `timeout` seconds.
    func receive(timeout: Double) -> ([UInt8], sockaddr_in)? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1_000)) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        var source = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let count = buffer.withUnsafeMutableBytes { raw in
            withUnsafeMutablePointer(to: &source) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(descriptor, raw.baseAddress, raw.count, 0, $0, &length) } }
        }
        guard count > 0 else { return nil }
        return (Array(buffer[..<count]), source)
    }
}

/// A relay that completes the real handshake (the relay's Noise responder, the key the
/// invite pins) and then puts hostile text in every string field a relay sends a client:
/// the identity and room it confirms, the roster's names, texts and their senders, the
/// refusal of a text, a moderator's answer, the goodbye; or, as `redirecting`, the address
/// of a relay it sends the client to.
final class HostileRelay: @unchecked Sendable {
    let key = RelayKey()
    let socket = LoopbackSocket()
    let room: String
    let redirecting: Bool
    private let handshake: RelayHandshake
    private let replayCache = HandshakeReplayCache()
    private let state = Mutex<(session: SecureSession?, client: sockaddr_in?, sequence: UInt32, stop: Bool)>((nil, nil, 100, false))
    private let done = DispatchSemaphore(value: 0)

    static let identity = HostileText.named("me")
    static let others = ["esc", "osc", "c1", "bel", "bidi", "zw"].map { HostileText.named($0) }

    init(room: String, redirecting: Bool = false) {
        self.room = room
        self.redirecting = redirecting
        handshake = RelayHandshake(key: key)
        Thread.detachNewThread { [self] in run() }
    }

    var address: String { "127.0.0.1:\(socket.port)" }

    func stop() {
        state.withLock { $0.stop = true }
        done.wait()
    }

    /// Ends the call as a kick would, with hostile words.
    func kick() { send(.goodbye(.init(reason: .kicked, message: HostileText.named("bye"))), reliable: true) }

    private func run() {
        defer { done.signal() }
        var lastPing = MonotonicClock.now()
        while !state.withLock({ $0.stop }) {
            if let (datagram, source) = socket.receive(timeout: 0.05) { handle(datagram, from: source) }
            if MonotonicClock.now() - lastPing > 500_000_000 {
                lastPing = MonotonicClock.now()
                send(.ping(.init(timestamp: lastPing)))
            }
        }
    }

    private func handle(_ datagram: [UInt8], from source: sockaddr_in) {
        let addressBytes = withUnsafeBytes(of: source.sin_addr.s_addr, Array.init) + withUnsafeBytes(of: source.sin_port, Array.init)
        let now = WallClock.seconds()
        switch datagram.first.flatMap(SecureMessageType.init(rawValue:)) {
        case .hello:
            if let cookie = datagram.withUnsafeBytes({ handshake.cookieReply(toHello: $0, address: addressBytes, unixSeconds: UInt64(now)) }) {
                socket.send(cookie, to: source)
            }
        case .handshakeInit:
            guard var accepted = try? datagram.withUnsafeBytes({ try handshake.acceptInit($0, address: addressBytes, unixSeconds: UInt64(now), replayCache: replayCache) }),
                  let join = try? ControlMessage(parsing: accepted.payload), case let .join(request) = join.body else { return }
            let body: ControlMessage.Body
            if redirecting {
                body = .redirect(.init(room: request.room, relay: .init(address: HostileText.named("relay") + ":7800", publicKey: Array(key.publicKey.rawRepresentation))))
            } else {
                body = .joined(.init(cookie: 42, ssrc: request.ssrc, identity: Self.identity, room: HostileText.named("room"), canPublish: true,
                                     keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000))
            }
            guard let payload = try? ControlMessage(sequence: join.sequence, body: body).serialized(),
                  let (response, session) = try? accepted.respond(relayIndex: 7, payload: payload, nowNanoseconds: MonotonicClock.now()) else { return }
            state.withLock { state in
                state.session = session
                state.client = source
            }
            socket.send(response, to: source)
            joinedSSRC = request.ssrc
        case .sealed:
            guard let session = state.withLock({ $0.session }) else { return }
            var plaintext = [UInt8](repeating: 0, count: datagram.count)
            guard let count = try? datagram.withUnsafeBytes({ sealed in try plaintext.withUnsafeMutableBytes { try session.open(sealed, into: $0) } }),
                  let message = try? ControlMessage(parsing: Array(plaintext[..<count])) else { return }
            answer(message)
        default:
            break
        }
    }

    private var joinedSSRC: UInt32 = 0

    private func answer(_ message: ControlMessage) {
        switch message.body {
        case .ready:
            var members = [ControlMessage.Roster.Member(ssrc: joinedSSRC, identity: Self.identity, canPublish: true)]
            for (index, name) in Self.others.enumerated() {
                var member = ControlMessage.Roster.Member(ssrc: 1_000 + UInt32(index), identity: name, canPublish: true, isServerMuted: index == 1)
                member.state = index == 2 ? .muted : index == 3 ? .deafened : []
                members.append(member)
            }
            send(.roster(.init(version: 1, members: members)), reliable: true)
            for (index, name) in Self.others.enumerated() {
                send(.text(.init(number: UInt32(index + 1), sender: name, text: HostileText.named("text") + " from \(index)")), reliable: true)
            }
        case .ping(let ping):
            send(.pong(.init(timestamp: ping.timestamp)))
        case .text:
            send(.error(.init(code: .malformedRequest, message: HostileText.named("refused"))), sequence: message.sequence)
        case .moderate:
            send(.moderationReply(.init(outcome: .done, message: HostileText.named("moderated"))), sequence: message.sequence)
        case .leave:
            send(.ack(.init(sequence: message.sequence)))
        default:
            break
        }
        if message.isReliable { send(.ack(.init(sequence: message.sequence))) }
    }

    private func send(_ body: ControlMessage.Body, reliable: Bool = false, sequence explicit: UInt32? = nil) {
        let (session, client, sequence) = state.withLock { state -> (SecureSession?, sockaddr_in?, UInt32) in
            state.sequence &+= 1
            return (state.session, state.client, explicit ?? state.sequence)
        }
        guard let session, let client, let plaintext = try? ControlMessage(sequence: sequence, isReliable: reliable, body: body).serialized() else { return }
        var sealed = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        guard let count = try? plaintext.withUnsafeBytes({ raw in try sealed.withUnsafeMutableBytes { try session.seal(raw, into: $0, nowNanoseconds: MonotonicClock.now()) } }) else { return }
        socket.send(Array(sealed[..<count]), to: client)
    }
}

/// A relay of the room behind a trunk, trusted by the relay under test (its key in the
/// trusted set, at the address it registered), announcing members with hostile names and
/// sending texts with hostile words: what a compromised relay, or anyone who can write to
/// the cluster's store, can do.
final class HostileTrunkPeer: @unchecked Sendable {
    let key = RelayKey()
    let socket = LoopbackSocket()
    private let opened = Mutex<(relay: sockaddr_in, session: SecureSession)?>(nil)
    private let sequence = Mutex<UInt32>(10)

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// Where the relay under test must register it, as its cluster would.
    var port: Int { Int(socket.port) }

    /// Opens `room`'s trunk to the relay at 127.0.0.1:`relayPort` whose key is `relayKey`.
    func open(room: String, relayPort: Int, relayKey: RelayKey) throws {
        let relay = LoopbackSocket.address("127.0.0.1", UInt16(relayPort))
        var opener = TrunkOpener(relayKey: key, peerPublicKey: relayKey.publicKey)
        socket.send(opener.helloBytes, to: relay)
        guard let (cookie, _) = socket.receive(timeout: 2) else { throw Failure(description: "the relay sent no cookie") }
        let initBytes = try cookie.withUnsafeBytes { try opener.makeInit(cookieReply: $0, payload: try TrunkOpening(room: room).serialized()) }
        socket.send(initBytes, to: relay)
        guard let (response, _) = socket.receive(timeout: 2) else { throw Failure(description: "the relay did not answer the trunk init") }
        let session = try response.withUnsafeBytes { try opener.finish(response: $0, nowNanoseconds: MonotonicClock.now()) }.session
        opened.withLock { $0 = (relay, session) }
    }

    func send(_ body: ControlMessage.Body, reliable: Bool = true) {
        guard let (relay, session) = opened.withLock({ $0 }) else { return }
        let number = sequence.withLock { value -> UInt32 in
            value &+= 1
            return value
        }
        guard let plaintext = try? ControlMessage(sequence: number, isReliable: reliable, body: body).serialized() else { return }
        var sealed = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
        guard let count = try? plaintext.withUnsafeBytes({ raw in try sealed.withUnsafeMutableBytes { try session.seal(raw, into: $0, nowNanoseconds: MonotonicClock.now()) } }) else { return }
        socket.send(Array(sealed[..<count]), to: relay)
    }

    /// Keeps the trunk alive for `seconds` (its timeout is 5 s of silence), reading and dropping what the relay sends.
    func keepAlive(for seconds: Double) {
        let end = MonotonicClock.now() + UInt64(seconds * 1e9)
        var lastPing: UInt64 = 0
        while MonotonicClock.now() < end {
            if MonotonicClock.now() - lastPing > 500_000_000 {
                lastPing = MonotonicClock.now()
                send(.ping(.init(timestamp: lastPing)), reliable: false)
            }
            _ = socket.receive(timeout: 0.05)
        }
    }
}
