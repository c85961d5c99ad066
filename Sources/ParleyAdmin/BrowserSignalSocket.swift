import Foundation
import NIOCore
import NIOHTTP1
import NIOWebSocket
import ParleyBasics
import ParleyRelay
import ParleyWire
import Synchronization

/// The page's signalling after its offer: one WebSocket per browser member, on the web port
/// (`GET /whip/<id>/signal?after=N` with `Upgrade: websocket`). The relay pushes what it
/// tells the member as it happens (joined, connected, rosters, texts, moderation answers,
/// errors, the end of the call); the page sends its requests (its mute state, a text, a
/// moderator's request) and gets each answered with an HTTP-like status and words for the
/// person.
///
/// **Who may open it.** Browsers cannot put an `Authorization` header on a WebSocket, and a
/// secret in the path would reach proxies' access logs, so the page proves itself in the
/// handshake's `Sec-WebSocket-Protocol`: it offers ``subprotocol`` and `parley-key.<key>`,
/// the call's signalling key from its offer's answer (256 random bits, compared hashed); the
/// relay chooses ``subprotocol``, so the key is never echoed. The `Origin` must be the relay's
/// own (the page's scheme and the `Host` it was loaded from). All of it is checked before the
/// upgrade, from the request's head alone: a stranger gets an HTTP refusal and the relay keeps
/// nothing (``admit(_:relay:)``). Upgraded sockets leave the web port's connection limit for
/// plain requests; there is at most one per member, a newer one replacing the older.
///
/// **Limits.** Frames of at most ``maximumFrameBytes`` (larger: closed with 1009), text only,
/// masked, a message in at most 4 fragments; ``requestsPerSecond`` requests a second
/// (``requestBurst`` at once; beyond, each is answered 429, and a page that also does not
/// read its answers is closed); events are written only while the connection is writable (at
/// most ``writeBufferHighWater`` bytes waiting in the relay, plus one batch of
/// ``eventsPerBatch``): a page that does not read leaves the events in its member's bounded
/// log, and when it reads again it gets them, or a "missed" event when the log could not keep
/// them all. A ping every ``pingInterval``; a socket that sends nothing, not even the pong, for
/// ``idleTimeout`` is closed.
///
/// **Closing it ends nothing else.** The call (the browser's media) goes on, the member's log
/// keeps what arrives, and the page opens the socket again, asking from the last event it saw.
/// A call ends when the page leaves (`DELETE /whip/<id>`), its media stops (the leg's timeout),
/// or the relay ends it: then the socket sends the "ended" event and closes (1000).
enum BrowserSignalling {
    static let subprotocol = "parley-signal.v1"
    static let keyPrefix = "parley-key."
    /// A request is at most a text of 500 bytes, which JSON's escapes may make six times that.
    static let maximumFrameBytes = 16 * 1024
    static let pingInterval = TimeAmount.seconds(15)
    static let idleTimeout = TimeAmount.seconds(45)
    static let requestsPerSecond = 10.0
    static let requestBurst = 30.0
    static let eventsPerBatch = 16
    static let writeBufferLowWater = 16 * 1024
    static let writeBufferHighWater = 64 * 1024

    /// Why a handshake was refused, as the HTTP answer that says so.
    struct Refusal: Error, Equatable {
        let status: HTTPResponseStatus
        let message: String
    }

    /// The member whose socket `/whip/<id>/signal` is, or nil for any other path.
    static func memberID(path: Substring) -> String? {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        guard segments.count == 4, segments[0].isEmpty, segments[1] == "whip", segments[3] == "signal", !segments[2].isEmpty else { return nil }
        return String(segments[2])
    }

    /// Whether the handshake `head` may open the socket of the member its path names: the
    /// relay's own Origin, the proof offered, the member there, the key its own. Cheap checks
    /// first; nothing is kept either way.
    static func admit(_ head: HTTPRequestHead, relay: Relay?) -> Result<BrowserMember, Refusal> {
        guard let id = memberID(path: head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]) else {
            return .failure(Refusal(status: .notFound, message: "not found; open /join with an invite"))
        }
        guard let origin = head.headers.first(name: "Origin"), isSameOrigin(origin, host: head.headers.first(name: "Host") ?? "") else {
            return .failure(Refusal(status: .forbidden, message: "the call's signalling is only for the relay's own page, "
                + "and this request comes from \(head.headers.first(name: "Origin").map { "another page (\($0.prefix(100)))" } ?? "no page")"))
        }
        let offered = head.headers[canonicalForm: "Sec-WebSocket-Protocol"].map { $0.trimmingCharacters(in: .whitespaces) }
        guard offered.contains(subprotocol), let key = offered.first(where: { $0.hasPrefix(keyPrefix) })?.dropFirst(keyPrefix.count) else {
            return .failure(Refusal(status: .unauthorized, message: "open the call from the relay's page: its connection carries the call's key"))
        }
        guard let relay else { return .failure(Refusal(status: .serviceUnavailable, message: "the relay has stopped")) }
        guard let member = relay.browserMember(id: id) else {
            return .failure(Refusal(status: .notFound, message: "no such call: it ended, or never started; reload the page to join again"))
        }
        guard member.matchesSignallingKey(key) else {
            return .failure(Refusal(status: .forbidden, message: "this is not the call's key; reload the page to join again"))
        }
        return .success(member)
    }

    /// Whether `origin` (`scheme://host[:port]`, as a browser sends it) is the origin the page
    /// was loaded from: its host and port those of `host` (the request's Host). Behind a proxy
    /// that ends TLS the relay cannot see the scheme, so a Host without a port matches either
    /// default port (what the browser sent, or a proxy that keeps only the name).
    static func isSameOrigin(_ origin: String, host: String) -> Bool {
        let lowered = origin.lowercased()
        let defaultPort: Int
        let authority: Substring
        if lowered.hasPrefix("https://") {
            defaultPort = 443
            authority = lowered.dropFirst("https://".count)
        } else if lowered.hasPrefix("http://") {
            defaultPort = 80
            authority = lowered.dropFirst("http://".count)
        } else {
            return false
        }
        guard let page = try? HostPortText(parsing: String(authority)), let served = try? HostPortText(parsing: host.lowercased()),
              !page.host.isEmpty, page.host == served.host else { return false }
        guard let servedPort = served.port else { return true }
        return (page.port ?? defaultPort) == servedPort
    }

    /// The number of the first event the page has not seen (`?after=N`), 0 if it says none.
    static func after(uri: String) -> Int {
        let parts = uri.split(separator: "?", maxSplits: 1)
        guard parts.count == 2 else { return 0 }
        return BrowserWebHandler.queryValue("after", in: String(parts[1])).flatMap(Int.init).map { max(0, $0) } ?? 0
    }

    /// The WebSocket upgrader of the web port: admits the handshake (``admit(_:relay:)``) and
    /// then puts the socket's handlers in the pipeline.
    static func upgrader(relay: Relay?) -> NIOWebSocketServerUpgrader {
        NIOWebSocketServerUpgrader(
            maxFrameSize: maximumFrameBytes, automaticErrorHandling: false,
            shouldUpgrade: { [weak relay] channel, head in
                guard case .success = admit(head, relay: relay) else { return channel.eventLoop.makeSucceededFuture(nil) }
                var headers = HTTPHeaders()
                headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol)
                return channel.eventLoop.makeSucceededFuture(headers)
            },
            upgradePipelineHandler: { [weak relay] channel, head in
                channel.eventLoop.makeCompletedFuture {
                    // Looked up again: the member may have gone in the moment between.
                    guard case let .success(member) = admit(head, relay: relay) else {
                        channel.close(promise: nil)
                        return
                    }
                    try channel.pipeline.syncOperations.addHandler(NIOWebSocketFrameAggregator(
                        minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: 4, maxAccumulatedFrameSize: maximumFrameBytes))
                    try channel.pipeline.syncOperations.addHandler(BrowserSignalSocket(member: member, after: after(uri: head.uri)))
                }
            })
    }

    /// A request from the page: `{"id": 7, "type": "state", "muted": true, "deafened": false}`,
    /// `{"id": 8, "type": "text", "text": "…"}`, or `{"id": 9, "type": "moderate", "action":
    /// "server_mute", "target": "bob", "reason": "…"}` (or `server_unmute`, `kick`), or in an
    /// end-to-end encrypted room `{"id": 10, "type": "mediaKeys", "keys": [{"ssrc": 1234,
    /// "package": "<base64url>"}]}` (sealed keys, each for the member with that SSRC).
    struct Request: Decodable {
        struct MediaKey: Decodable {
            let ssrc: UInt32
            let package: String
        }

        let id: Int?
        let type: String
        let muted: Bool?
        let deafened: Bool?
        let text: String?
        let action: String?
        let target: String?
        let reason: String?
        let keys: [MediaKey]?
    }

    /// The answer to a request: its id, a status as HTTP would give (204 done, 202 sent to the
    /// relay, which answers with an event; 400, 409, 422, 429 refused), and why, for the person.
    struct Reply: Encodable {
        var kind = "reply"
        let id: Int?
        let status: Int
        let error: String?
    }

    /// What becomes of `request` (already decoded), as the member's checks decide.
    static func answer(_ request: Request, member: BrowserMember) -> (status: HTTPResponseStatus, error: String?) {
        switch request.type {
        case "state":
            guard let muted = request.muted else { return (.badRequest, "send {\"type\": \"state\", \"muted\": true or false, \"deafened\": true or false}") }
            return member.setState(muted: muted, deafened: request.deafened ?? false) ? (.noContent, nil) : (.conflict, "the call is not connected yet")
        case "text":
            guard let text = request.text else { return (.badRequest, "send {\"type\": \"text\", \"text\": \"…\"}") }
            return member.say(text).map { (.unprocessableEntity, $0) } ?? (.noContent, nil)
        case "moderate":
            guard let target = request.target, let action = request.action.flatMap({ moderationActions[$0] }) else {
                return (.badRequest, "send {\"type\": \"moderate\", \"action\": \"server_mute\", \"server_unmute\" or \"kick\", \"target\": a member's name}")
            }
            // Whether this member may is the relay's decision (its token), answered as an event.
            switch member.moderate(action, target: target, reason: request.reason ?? "") {
            case .sent: return (.accepted, nil)
            case .notConnected: return (.conflict, "the call is not connected yet")
            case let .refused(problem): return (.unprocessableEntity, problem)
            }
        case "mediaKeys":
            guard let keys = request.keys else {
                return (.badRequest, "send {\"type\": \"mediaKeys\", \"keys\": [{\"ssrc\": a member's SSRC, \"package\": base64url}]}")
            }
            switch member.sendMediaKeys(keys.map { ($0.ssrc, $0.package) }) {
            case .sent: return (.accepted, nil)
            case .notConnected: return (.conflict, "the call is not connected yet")
            case let .refused(problem): return (.unprocessableEntity, problem)
            }
        default:
            return (.badRequest, "the relay does not know the request \"\(request.type.prefix(40))\"; it knows state, text, moderate and mediaKeys")
        }
    }

    /// What a page may ask, by the words the relay's metrics and logs use for them.
    static let moderationActions: [String: ControlMessage.ModerationAction] = Dictionary(
        uniqueKeysWithValues: [ControlMessage.ModerationAction.serverMute, .serverUnmute, .kick].map { ($0.label, $0) })
}

/// One page's signalling socket, on the web port's event loop: the member's events written in
/// order as they arrive (while the connection is writable), the page's requests answered.
final class BrowserSignalSocket: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// What wakes the socket, through its pipeline from the thread that woke it.
    enum Wake: Sendable {
        case events
        case replaced
    }

    /// The member's side of the socket: wakes it at most once until it has run.
    final class Listener: BrowserPageListener {
        private let channel: any Channel
        private let pending = Atomic<Bool>(false)

        init(channel: any Channel) { self.channel = channel }

        func eventsArrived() {
            guard !pending.exchange(true, ordering: .acquiringAndReleasing) else { return }
            channel.pipeline.fireUserInboundEventTriggered(Wake.events)
        }

        func replaced() { channel.pipeline.fireUserInboundEventTriggered(Wake.replaced) }

        /// The socket ran: the next event wakes it again.
        func ran() { pending.store(false, ordering: .releasing) }
    }

    private let member: BrowserMember
    /// The number of the next event to write.
    private var next: Int
    private var listener: Listener?
    private var pinger: RepeatedTask?
    private var lastHeard = NIODeadline.now()
    private var requestTokens = BrowserSignalling.requestBurst
    private var tokensAt = NIODeadline.now()
    private var isClosing = false

    init(member: BrowserMember, after: Int) {
        self.member = member
        next = after
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let listener = Listener(channel: context.channel)
        self.listener = listener
        member.listen(listener)
        lastHeard = .now()
        let channel = context.channel
        pinger = context.eventLoop.scheduleRepeatedTask(initialDelay: BrowserSignalling.pingInterval, delay: BrowserSignalling.pingInterval) { _ in
            channel.pipeline.fireUserInboundEventTriggered(Ping())
        }
        writeEvents(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        pinger?.cancel()
        if let listener { member.stopListening(listener) }
    }

    private struct Ping {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let wake as Wake where wake == .events:
            listener?.ran()
            writeEvents(context: context)
        case let wake as Wake where wake == .replaced:
            close(context: context, code: .unknown(4001), reason: "the page opened a newer connection")
        case is Ping:
            if NIODeadline.now() - lastHeard > BrowserSignalling.idleTimeout {
                close(context: context, code: .goingAway, reason: "nothing heard from the page, not even a pong")
            } else {
                send(WebSocketFrame(fin: true, opcode: .ping, data: context.channel.allocator.buffer(string: "parley")), context: context, flush: true)
            }
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        writeEvents(context: context)
        context.fireChannelWritabilityChanged()
    }

    /// The events the page has not had, a batch at a time while the connection takes them;
    /// the rest wait in the member's log until it is writable again.
    private func writeEvents(context: ChannelHandlerContext) {
        var wrote = false
        defer { if wrote { context.flush() } }
        while !isClosing, context.channel.isWritable {
            let (events, next) = member.events(after: next, limit: BrowserSignalling.eventsPerBatch)
            self.next = next
            guard !events.isEmpty else {
                // A page that already had the end has nothing more to hear.
                if member.isEnded { close(context: context, code: .normalClosure, reason: "the call ended") }
                return
            }
            for event in events {
                send(json: event, context: context)
                wrote = true
                if event.kind == "ended" {
                    context.flush()
                    return close(context: context, code: .normalClosure, reason: "the call ended")
                }
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        lastHeard = .now()
        guard !isClosing else { return }
        guard frame.maskKey != nil else { return close(context: context, code: .protocolError, reason: "a page's frames are masked") }
        switch frame.opcode {
        case .text:
            request(frame.unmaskedData, context: context)
        case .ping:
            var data = frame.unmaskedData
            send(WebSocketFrame(fin: true, opcode: .pong, data: data.readSlice(length: min(data.readableBytes, 125)) ?? data), context: context, flush: true)
        case .pong:
            break
        case .connectionClose:
            close(context: context, code: .normalClosure, reason: "")
        default:
            close(context: context, code: .unacceptableData, reason: "send requests as text frames of JSON")
        }
    }

    private func request(_ data: ByteBuffer, context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        let seconds = Double((now - tokensAt).nanoseconds) / 1e9
        tokensAt = now
        requestTokens = min(BrowserSignalling.requestBurst, requestTokens + seconds * BrowserSignalling.requestsPerSecond)
        let decoded = try? JSONDecoder().decode(BrowserSignalling.Request.self, from: Data(data.readableBytesView))
        let reply: BrowserSignalling.Reply
        if requestTokens < 1 {
            // A page that sends too fast and does not even read the answers is not a person's.
            guard context.channel.isWritable else { return close(context: context, code: .policyViolation, reason: "too many requests") }
            reply = .init(id: decoded?.id, status: 429, error: "too many requests at once; wait a moment")
        } else if let decoded {
            requestTokens -= 1
            let (status, error) = BrowserSignalling.answer(decoded, member: member)
            reply = .init(id: decoded.id, status: Int(status.code), error: error)
        } else {
            requestTokens -= 1
            reply = .init(id: nil, status: 400, error: "the page sent a request the relay cannot read (JSON with an id and a type)")
        }
        send(json: reply, context: context)
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        switch error {
        case NIOWebSocketError.invalidFrameLength, NIOWebSocketFrameAggregator.Error.accumulatedFrameSizeIsTooLarge:
            close(context: context, code: .messageTooLarge, reason: "a request is at most \(BrowserSignalling.maximumFrameBytes) bytes")
        case is NIOWebSocketError, is NIOWebSocketFrameAggregator.Error:
            close(context: context, code: .protocolError, reason: "not a WebSocket frame the relay can read")
        default:
            context.close(promise: nil)
        }
    }

    private func send(json value: some Encodable, context: ChannelHandlerContext) {
        guard let bytes = try? JSONEncoder().encode(value) else { return }
        send(WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(bytes: bytes)), context: context, flush: false)
    }

    private func send(_ frame: WebSocketFrame, context: ChannelHandlerContext, flush: Bool) {
        if flush {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        } else {
            context.write(wrapOutboundOut(frame), promise: nil)
        }
    }

    /// A close frame with `code` and `reason`, then the connection closes; the member is not
    /// touched (its call goes on).
    private func close(context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String) {
        guard !isClosing else { return }
        isClosing = true
        var data = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        data.write(webSocketErrorCode: code)
        data.writeString(String(decoding: reason.utf8.prefix(120), as: UTF8.self))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
