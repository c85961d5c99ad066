import Foundation
import Logging
@testable import ParleyAdmin
import ParleyBasics
@testable import ParleyRelay
import ParleyRelayTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The browser page's signalling socket on a running relay's web port, over real TCP, spoken
/// byte by byte as a browser (or someone pretending to be one) would: who may open it, what a
/// request gets, what arrives and how fast, and what hostile frames cost (only that socket).
@Suite("The browser page's signalling socket")
struct BrowserSignalSocketTests {
    /// A relay that takes browsers, its web port, and one call offered on it (no browser comes
    /// to its UDP port, so the call never connects: requests that need it are answered 409).
    final class Fixture {
        let relay: RelayFixture
        let web: BrowserWebServer
        let port: Int
        let id: String
        let key: String
        let token: String

        init() throws {
            relay = try RelayFixture.start { $0.acceptsBrowsers = true }
            var logger = Logger(label: "browser-signal-socket-test")
            logger.logLevel = .error
            web = try BrowserWebServer.start(serving: relay.relay, at: HostAndPort(host: "127.0.0.1", port: 0), logger: logger)
            port = web.localAddress!.port!
            token = relay.token(room: "signal", identity: "ada")
            let answer = try RawHTTP.exchange(port: port, """
                POST /whip HTTP/1.1\r
                Host: 127.0.0.1:\(port)\r
                Authorization: Bearer \(token)\r
                Content-Type: application/sdp\r
                Content-Length: \(Self.offer.utf8.count)\r
                Connection: close\r
                \r
                \(Self.offer)
                """)
            guard answer.status == 201, let location = answer.header("Location"), let key = answer.header("Parley-Signal-Key") else {
                throw TestFailure("the offer was not answered: \(answer.status) \(answer.body)")
            }
            id = String(location.dropFirst("/whip/".count))
            self.key = key
        }

        var member: BrowserMember { relay.relay.browserMember(id: id)! }

        func handshake(path: String? = nil, origin: String? = "http://127.0.0.1:PORT", protocols: String? = nil, upgrade: Bool = true) -> String {
            var lines = ["GET \(path ?? "/whip/\(id)/signal") HTTP/1.1", "Host: 127.0.0.1:\(port)"]
            if upgrade { lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"] }
            if let origin { lines.append("Origin: \(origin.replacingOccurrences(of: "PORT", with: "\(port)"))") }
            if let protocols { lines.append("Sec-WebSocket-Protocol: \(protocols)") }
            return lines.joined(separator: "\r\n") + "\r\n\r\n"
        }

        var proof: String { "parley-signal.v1, parley-key.\(key)" }

        /// An open socket, its handshake done.
        func open(after: Int = 0, smallReceiveBuffer: Bool = false) throws -> RawWebSocket {
            let socket = try RawWebSocket(port: port, smallReceiveBuffer: smallReceiveBuffer)
            let answer = try socket.handshake(handshake(path: "/whip/\(id)/signal?after=\(after)", protocols: proof))
            guard answer.status == 101 else { throw TestFailure("the handshake was refused: \(answer.status) \(answer.body)") }
            return socket
        }

        func stop() {
            web.close()
            relay.stop()
        }

        static let offer = """
            v=0\r
            o=- 4611731400430051336 2 IN IP4 127.0.0.1\r
            s=-\r
            t=0 0\r
            a=group:BUNDLE 0\r
            m=audio 9 UDP/TLS/RTP/SAVPF 111\r
            c=IN IP4 0.0.0.0\r
            a=ice-ufrag:brws\r
            a=ice-pwd:browserpasswordbrowserpassword\r
            a=fingerprint:sha-256 \((0..<32).map { _ in "AB" }.joined(separator: ":"))\r
            a=setup:actpass\r
            a=mid:0\r
            a=sendrecv\r
            a=rtcp-mux\r
            a=rtpmap:111 opus/48000/2\r
            a=ssrc:1111 cname:x\r

            """
    }

    @Test func theHandshakeNeedsTheCallsKeyAndTheRelaysOwnOriginAndKeepsNothingOtherwise() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let refusals: [(String, Int, String)] = [
            (fixture.handshake(), 401, "no proof"),
            (fixture.handshake(protocols: "parley-signal.v1"), 401, "the subprotocol without the key"),
            (fixture.handshake(protocols: "parley-signal.v1, parley-key.\(Base64URL.encode(Array(repeating: 7, count: 32)))"), 403, "a wrong key"),
            (fixture.handshake(protocols: "parley-signal.v1, parley-key.\(fixture.token)"), 403, "the token in place of the key"),
            (fixture.handshake(origin: "http://evil.example", protocols: fixture.proof), 403, "another site's page"),
            (fixture.handshake(origin: "http://127.0.0.1:1", protocols: fixture.proof), 403, "another port's page"),
            (fixture.handshake(origin: nil, protocols: fixture.proof), 403, "no Origin"),
            (fixture.handshake(origin: "null", protocols: fixture.proof), 403, "an opaque Origin"),
            (fixture.handshake(path: "/whip/\(Base64URL.encode(Array(repeating: 1, count: 16)))/signal", protocols: fixture.proof), 404, "another call's path"),
            (fixture.handshake(protocols: fixture.proof, upgrade: false), 426, "no upgrade asked"),
        ]
        for (request, status, what) in refusals {
            let socket = try RawWebSocket(port: fixture.port)
            let answer = try socket.handshake(request)
            #expect(answer.status == status, "\(what): \(answer.status) \(answer.body)")
            #expect(answer.body.count > 10, "\(what): the refusal says why: \(answer.body)")
            #expect(!answer.raw.contains(fixture.key), "\(what): the answer repeats the key")
        }
        // The right key from the relay's own page: upgraded, and the relay chose the protocol
        // name, never echoing the key.
        let socket = try RawWebSocket(port: fixture.port)
        let answer = try socket.handshake(fixture.handshake(protocols: fixture.proof))
        #expect(answer.status == 101)
        #expect(answer.header("Sec-WebSocket-Protocol") == "parley-signal.v1")
        #expect(!answer.raw.contains(fixture.key))
        // Behind a proxy that ends TLS, the page's origin is https and its Host has no port.
        #expect(BrowserSignalling.isSameOrigin("https://relay.example.org", host: "relay.example.org"))
        #expect(BrowserSignalling.isSameOrigin("https://relay.example.org", host: "relay.example.org:443"))
        #expect(!BrowserSignalling.isSameOrigin("https://relay.example.org.evil.example", host: "relay.example.org"))
        #expect(!BrowserSignalling.isSameOrigin("https://relay.example.org:8443", host: "relay.example.org:443"))
        #expect(!BrowserSignalling.isSameOrigin("file://", host: "relay.example.org"))
    }

    @Test func requestsGetTheRefusalsThePageUsedToGetOverHTTPAndTheEndArrivesAtOnce() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let socket = try fixture.open()
        func ask(_ json: String) throws -> [String: Any] {
            try socket.sendText(json)
            return try #require(try socket.nextMessage { $0["kind"] as? String == "reply" }, "no answer to \(json)")
        }
        let unreadable = try ask("{not json")
        #expect(unreadable["status"] as? Int == 400 && (unreadable["error"] as? String)?.contains("cannot read") == true, "\(unreadable)")
        #expect(try ask(#"{"id": 1, "type": "state", "muted": true}"#)["status"] as? Int == 409, "the state before the call is connected")
        let long = try ask(#"{"id": 2, "type": "text", "text": "\#(String(repeating: "a", count: 600))"}"#)
        #expect(long["id"] as? Int == 2 && long["status"] as? Int == 422 && (long["error"] as? String)?.contains("600 bytes") == true, "\(long)")
        let target = try ask(#"{"id": 3, "type": "moderate", "action": "kick", "target": "bob\u202E"}"#)
        #expect(target["status"] as? Int == 422 && (target["error"] as? String)?.contains("nobody can be called that") == true, "\(target)")
        #expect(try ask(#"{"id": 4, "type": "moderate", "action": "ban_forever", "target": "bob"}"#)["status"] as? Int == 400)
        #expect(try ask(#"{"id": 5, "type": "dance"}"#)["status"] as? Int == 400)

        // Leaving without the key is refused, and ends nothing.
        let stranger = try RawHTTP.exchange(port: fixture.port, "DELETE /whip/\(fixture.id) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(stranger.status == 403)
        #expect(!fixture.member.isEnded)
        // With it, the call ends, and the socket hears so as it happens, then closes.
        let start = Date()
        let leave = try RawHTTP.exchange(port: fixture.port, "DELETE /whip/\(fixture.id) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(fixture.key)\r\nConnection: close\r\n\r\n")
        #expect(leave.status == 200)
        let ended = try socket.nextMessage { $0["kind"] as? String == "ended" }
        let delay = Date().timeIntervalSince(start) * 1_000
        print("signalling socket: the end of the call reached the socket \(String(format: "%.1f", delay)) ms after the DELETE was sent")
        #expect(ended?["text"] as? String == "you left the call")
        #expect(delay < 250, "the event took \(delay) ms; the page used to ask every 500 ms")
        #expect(try socket.closeCode() == 1000)
    }

    @Test func oversizedFramesAndRandomBytesCloseOnlyThatSocket() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        // A frame over the limit: closed with 1009 (message too big), before it is read.
        let large = try fixture.open()
        // (The relay may close before the test has written it all.)
        try? large.sendFrame(opcode: 1, payload: Array(repeating: 0x61, count: BrowserSignalling.maximumFrameBytes + 1))
        #expect(try large.closeCode() == 1009)
        // Fragments adding up to more than the limit: the same.
        let fragmented = try fixture.open()
        for index in 0..<4 {
            try? fragmented.sendFrame(opcode: index == 0 ? 1 : 0, payload: Array(repeating: 0x61, count: 5_000), fin: index == 3)
        }
        #expect(try fragmented.closeCode() == 1009)
        // Unmasked (not a browser's), and binary: closed with a code that says so.
        let unmasked = try fixture.open()
        try unmasked.sendFrame(opcode: 1, payload: Array("{}".utf8), masked: false)
        #expect(try unmasked.closeCode() == 1002)
        let binary = try fixture.open()
        try binary.sendFrame(opcode: 2, payload: [1, 2, 3])
        #expect(try binary.closeCode() == 1003)
        // Random bytes after the upgrade, from a fixed seed: the socket is closed, nothing else.
        var generator = SplitMix64(seed: 27)
        for round in 0..<40 {
            let socket = try fixture.open()
            let bytes = (0..<Int.random(in: 1...3_000, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            try? socket.sendRaw(bytes)
            // Either the relay closes it, or it waits for the rest of a frame that never comes
            // (the idle timeout's business); a second socket for the call replaces it meanwhile.
            _ = round
        }
        let replaced = try fixture.open()
        let last = try fixture.open()
        #expect(try replaced.closeCode() == 4001, "a newer socket for the call closes the older")
        #expect(!fixture.member.isEnded, "hostile frames ended the call")
        let page = try RawHTTP.exchange(port: fixture.port, "GET /join HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(page.status == 200, "the web port stopped serving the page")
        try last.sendText(#"{"id": 9, "type": "state", "muted": false}"#)
        #expect(try last.nextMessage { $0["kind"] as? String == "reply" }?["status"] as? Int == 409, "the call's socket no longer answers")
    }

    /// Sealed media keys from a page are read as any request: malformed JSON or a wrong shape
    /// is a 400, and a page that joined without an identity key (it takes no part in
    /// end-to-end encryption) is refused with a reason (422); nothing reaches the relay.
    @Test func hostileMediaKeyRequestsAreRefusedWithAReason() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let socket = try fixture.open()
        let requests: [(String, Int)] = [
            (#"{"id": 1, "type": "mediaKeys"}"#, 400),
            (#"{"id": 2, "type": "mediaKeys", "keys": [{"ssrc": -1, "package": "AQ"}]}"#, 400),
            (#"{"id": 3, "type": "mediaKeys", "keys": [{"ssrc": 4294967296, "package": "AQ"}]}"#, 400),
            (#"{"id": 4, "type": "mediaKeys", "keys": "AQ"}"#, 400),
            (#"{"id": 5, "type": "mediaKeys", "keys": [{"ssrc": 7, "package": "AQ"}]}"#, 422),
        ]
        for (request, status) in requests {
            try socket.sendText(request)
            let reply = try socket.nextMessage { $0["kind"] as? String == "reply" }
            #expect(reply?["status"] as? Int == status, "\(request) was answered \(String(describing: reply))")
            if status == 422 { #expect((reply?["error"] as? String)?.contains("identity key") == true) }
        }
        #expect(!fixture.member.isEnded)
    }

    /// A page that stops reading: the relay writes only while the connection takes it, leaves
    /// the rest in the member's bounded log, and when the page reads again it gets a "missed"
    /// event and the newest events, with the latest roster.
    @Test func aPageThatDoesNotReadCostsTheRelayABoundedAmount() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let socket = try fixture.open(smallReceiveBuffer: true)
        let member = fixture.member
        member.append(BrowserPageEvent(kind: "roster", roster: [.init(identity: "ada", ssrc: 1, state: "live", serverMuted: false)]))
        let text = String(repeating: "x", count: 480)
        let count = 6_000
        for index in 0..<count { member.append(BrowserPageEvent(kind: "text", identity: "bob", text: "\(index) \(text)")) }
        Thread.sleep(forTimeInterval: 0.5)
        var kinds: [String] = [], lastText = ""
        while let message = try socket.nextMessage(timeout: 1, { _ in true }) {
            kinds.append(message["kind"] as? String ?? "?")
            if message["kind"] as? String == "text" { lastText = message["text"] as? String ?? "" }
        }
        let texts = kinds.filter { $0 == "text" }.count
        print("signalling socket: a page that did not read got \(texts) of \(count) texts of \(text.count) bytes, then read; the rest were not kept")
        #expect(kinds.contains("missed"), "the page was not told it missed texts")
        #expect(kinds.contains("roster"), "the latest roster was lost")
        #expect(texts < count, "every event was held for a page that did not read")
        #expect(lastText.hasPrefix("\(count - 1) "), "the newest text did not arrive: \(lastText.prefix(10))")
    }

    @Test func theEventLogKeepsTheLatestRosterAndSaysWhatWasMissed() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let member = fixture.member
        member.append(BrowserPageEvent(kind: "roster", roster: []))
        member.append(BrowserPageEvent(kind: "text", identity: "bob", text: "first"))
        member.append(BrowserPageEvent(kind: "roster", roster: [.init(identity: "bob", ssrc: 2, state: "muted", serverMuted: false)]))
        let (events, next) = member.events(after: 0)
        #expect(events.map(\.kind) == ["text", "roster"], "an older roster is replaced by the newer: \(events.map(\.kind))")
        #expect(next == 3 && events.map(\.index) == [1, 2])
        #expect(member.events(after: 3).events.isEmpty && member.events(after: 3).next == 3)
        for index in 0..<BrowserMember.maximumQueuedEvents { member.append(BrowserPageEvent(kind: "text", identity: "bob", text: "\(index)")) }
        let late = member.events(after: 1, limit: 4)
        #expect(late.events.map(\.kind) == ["missed", "roster", "text", "text", "text"], "\(late.events.map(\.kind))")
        #expect(!member.events(after: late.next).events.contains { $0.kind == "missed" })
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One HTTP answer as it came, headers looked up by name.
struct RawAnswer {
    let raw: String
    let status: Int
    let body: String

    init(_ raw: String) {
        self.raw = raw
        let head = raw.components(separatedBy: "\r\n\r\n").first ?? ""
        status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        body = raw.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
    }

    func header(_ name: String) -> String? {
        let head = raw.components(separatedBy: "\r\n\r\n").first ?? ""
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == name.lowercased() { return parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}

enum RawHTTP {
    /// Sends `request` on a new connection and reads until the relay closes it.
    static func exchange(port: Int, _ request: String) throws -> RawAnswer {
        let socket = try RawWebSocket(port: port)
        try socket.sendRaw(Array(request.utf8))
        var bytes: [UInt8] = []
        while let chunk = try socket.read(timeout: 5), !chunk.isEmpty { bytes += chunk }
        return RawAnswer(String(decoding: bytes, as: UTF8.self))
    }
}

/// A TCP connection that speaks WebSocket as a browser does (RFC 6455: the handshake, masked
/// frames), or anything else the test writes.
final class RawWebSocket {
    private let connection: LoopbackTCP
    var descriptor: Int32 { connection.descriptor }
    private var received: [UInt8] = []

    init(port: Int, smallReceiveBuffer: Bool = false) throws {
        guard let connection = LoopbackTCP(port: port, receiveBuffer: smallReceiveBuffer ? 4_096 : nil) else {
            throw TestFailure("could not connect to the web port")
        }
        self.connection = connection
    }

    func sendRaw(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw TestFailure("the relay closed the connection while the test wrote") }
            sent += count
        }
    }

    /// What arrives within `timeout` seconds: nil if nothing, empty at the end of the stream.
    func read(timeout: Double) throws -> [UInt8]? {
        var watch = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&watch, 1, Int32(timeout * 1_000)) > 0 else { return nil }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count <= 0 ? [] : Array(chunk[..<count])
    }

    /// Sends a handshake (or any request) and reads the answer's head, and its body if the
    /// connection was not upgraded.
    func handshake(_ request: String) throws -> RawAnswer {
        try sendRaw(Array(request.utf8))
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if let end = Self.find([13, 10, 13, 10], in: received) {
                let head = String(decoding: received[..<(end + 4)], as: UTF8.self)
                let answer = RawAnswer(head)
                received.removeSubrange(..<(end + 4))
                if answer.status == 101 { return answer }
                let length = Int(answer.header("Content-Length") ?? "0") ?? 0
                while received.count < length, let chunk = try read(timeout: 1), !chunk.isEmpty { received += chunk }
                return RawAnswer(head + String(decoding: received.prefix(length), as: UTF8.self))
            }
            guard let chunk = try read(timeout: 1) else { continue }
            guard !chunk.isEmpty else { break }
            received += chunk
        }
        return RawAnswer(String(decoding: received, as: UTF8.self))
    }

    func sendText(_ text: String) throws { try sendFrame(opcode: 1, payload: Array(text.utf8)) }

    func sendFrame(opcode: UInt8, payload: [UInt8], fin: Bool = true, masked: Bool = true) throws {
        var frame: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        let mask: UInt8 = masked ? 0x80 : 0
        if payload.count < 126 {
            frame.append(mask | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            frame += [mask | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(mask | 127)
            frame += (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        if masked {
            let key: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]
            frame += key
            frame += payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
        } else {
            frame += payload
        }
        try sendRaw(frame)
    }

    /// The next whole frame from the relay: its opcode and payload; nil if none within `timeout`
    /// or the connection ended.
    func nextFrame(timeout: Double = 5) throws -> (opcode: UInt8, payload: [UInt8])? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if received.count >= 2 {
                var length = Int(received[1] & 0x7F), offset = 2
                if length == 126, received.count >= 4 {
                    length = Int(received[2]) << 8 | Int(received[3])
                    offset = 4
                } else if length == 127, received.count >= 10 {
                    length = (2..<10).reduce(0) { $0 << 8 | Int(received[$1]) }
                    offset = 10
                }
                if length < 126 || offset > 2, received.count >= offset + length {
                    let frame = (received[0] & 0x0F, Array(received[offset..<(offset + length)]))
                    received.removeSubrange(..<(offset + length))
                    return frame
                }
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0, let chunk = try read(timeout: left), !chunk.isEmpty else { return nil }
            received += chunk
        }
    }

    /// The next text message that `wanted` accepts, as JSON (others skipped); nil if none comes.
    func nextMessage(timeout: Double = 5, _ wanted: ([String: Any]) -> Bool) throws -> [String: Any]? {
        while let frame = try nextFrame(timeout: timeout) {
            guard frame.opcode == 1 else {
                if frame.opcode == 8 { return nil }
                continue
            }
            if let message = try JSONSerialization.jsonObject(with: Data(frame.payload)) as? [String: Any], wanted(message) { return message }
        }
        return nil
    }

    /// The code of the close frame the relay sends next (other frames skipped), or nil.
    func closeCode(timeout: Double = 5) throws -> Int? {
        while let frame = try nextFrame(timeout: timeout) {
            if frame.opcode == 8 { return frame.payload.count >= 2 ? Int(frame.payload[0]) << 8 | Int(frame.payload[1]) : 1005 }
        }
        return nil
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for index in 0...(haystack.count - needle.count) where Array(haystack[index..<(index + needle.count)]) == needle { return index }
        return nil
    }
}
