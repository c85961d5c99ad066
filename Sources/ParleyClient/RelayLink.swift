import Crypto
import ParleySecurity
import ParleyWire

/// The client's side of the conversation with a relay, as a state machine with time passed
/// in: join (through the secure handshake, or in plaintext with `--insecure`), address
/// confirmation, roster, keepalive and round-trip time, reliable messages, a clean leave,
/// and rejoining by itself when the relay restarts or the network drops.
///
/// It does no I/O. The transport hands it datagrams and clock ticks and sends what it
/// returns; the call reads its events. Media (RTP and RTCP) passes through: inbound packets
/// are opened into the link's own buffer and handed back (``receive(datagram:now:)``),
/// outbound ones are sealed with ``protector``, which the capture thread shares.
///
/// ```
///            start                cookie            response/joined          roster
///   idle ──────────▶ greeting ──────────▶ handshaking ─────────────▶ confirming ──────▶ active
///                 (plaintext: joining ─────────────── joined ───────▶)                 │
///                                                                                       │ lost, goodbye,
///     failed ◀── refused, key mismatch, unreachable            reconnecting ◀───────────┘ not joined
/// ```
///
/// In a cluster the relay the link talks to can change: a relay that does not host the room
/// answers the join with a redirect inside its handshake response (so only the pinned relay
/// can send the client elsewhere), and the link joins there; a `joined` lists other relays,
/// which the link tries when its relay falls silent (``Configuration/failoverAfterSilenceNanoseconds``).
/// Which relay that is, and which comes next, is ``RelayFailover``'s to say; the link acts on it.
///
/// One file, over 400 lines, on purpose: it is one state machine whose transitions (joining,
/// control, errors, reconnecting) read and write the same private fields; split into
/// extension files, those fields would have to be open to the whole module. What stands
/// alone is in files of its own: its configuration (`RelayLink+Configuration.swift`),
/// ``RelayFailover``, ``RosterAssembler``, ``RecentSequenceSet``, ``RoomOutbox``, ``PendingModeration``.
public struct RelayLink {
    public enum Phase: Sendable, Equatable {
        case idle
        /// Secure: hello sent, waiting for the address cookie.
        case greeting
        /// Secure: handshake init (carrying the join) sent.
        case handshaking
        /// Plaintext: join sent.
        case joining
        /// Joined; ready sent to prove our address, waiting for the roster.
        case confirming
        case active
        /// Lost or sent away; trying again with backoff.
        case reconnecting
        case leaving
        case failed(LinkFailure)
        case closed
    }

    /// What the transport should send, and what the call should know.
    public struct Output: Sendable {
        public var datagrams: [[UInt8]] = []
        public var events: [LinkEvent] = []
    }

    public let configuration: Configuration
    /// Seals outbound media with the current session; shared with the capture thread.
    public let protector = LinkProtector()
    /// Where sealed datagrams are opened, made once and grown only for a larger datagram.
    private let opened = OpenedDatagram()
    /// The receiving half of the session ``protector`` seals with, taken out of it: the link
    /// alone opens, on one thread, so opening takes no lock. Nil whenever the protector has
    /// no session.
    public private(set) var sessionReceiver: SecureSession.Receiver?
    public private(set) var phase: Phase = .idle
    /// The SSRC this member sends from: the configured one, until the relay says another
    /// member holds it (then a fresh random one, and the join starts over).
    public private(set) var ssrc: UInt32
    /// The identity and room the relay confirmed, once joined.
    public private(set) var joined: ControlMessage.Joined?
    /// Smoothed round-trip time (RFC 6298 style, 1/8 gain), nanoseconds.
    public private(set) var smoothedRoundTrip: UInt64?
    public private(set) var roster: [ControlMessage.Roster.Member] = []
    /// Inbound datagrams that were not for us or did not authenticate.
    public private(set) var droppedDatagrams = 0
    /// The relay the link talks to now, "HOST:PORT": the invite's, or one its cluster sent it to.
    public var relayAddress: String { failover.relayAddress }
    /// Other relays of the cluster, learned from redirects and `joined` answers (at most
    /// ``RelayFailover/maximumKnownRelays``); empty for a relay on its own.
    public var clusterRelays: [ControlMessage.ClusterRelay] { failover.clusterRelays }
    /// Which relay of the cluster the link talks to (and the key pinned for it), and where it goes next.
    private var failover: RelayFailover

    private var handshake: ClientHandshake?
    private var pendingSend: [UInt8]?          // the message being retransmitted in this phase
    private var sendsInPhase = 0
    private var nextAction: UInt64 = 0
    private var retransmitInterval: UInt64 = 0
    private var attemptStarted: UInt64 = 0
    private var cookieReceived = false
    private var everJoined = false
    private var lastHeard: UInt64 = 0
    private var lastPing: UInt64 = 0
    private var controlSequence: UInt32 = 0
    private var leaveSequence: UInt32?
    private var leaveDeadline: UInt64 = 0
    private var seenReliable = RecentSequenceSet()
    private var rosterAssembler = RosterAssembler()
    /// Our muted/deafened state and texts, until the relay has them.
    private var outbox: RoomOutbox
    /// The number of the last text the relay delivered in this session: one not newer is a
    /// copy already shown.
    private var lastTextReceived: UInt32?
    /// Plaintext "not joined" replies that echo one of our sealed packets, since the last
    /// datagram that authenticated: the relay lost our session only if a second one comes.
    private var boundNotJoinedReplies = 0
    /// When the first and the latest plaintext "no encryption here" echoing our hello arrived,
    /// and how many did (reset with each new hello).
    private var plaintextRelayReplies: (first: UInt64, latest: UInt64, count: Int)?
    /// Fresh SSRCs taken because the relay said another member holds ours.
    private var ssrcChanges = 0
    /// The relay's last "too many joins, later" during this join, if the join times out on it.
    private var lastRateLimit: ControlMessage.ErrorReply?
    /// A moderator's requests not yet answered.
    private var moderation = PendingModeration()

    /// SSRCs tried before a join gives up on `ssrcInUse` (a clash of random 32-bit values
    /// happens by accident once in billions; only someone squatting on ours repeats it).
    static let maximumSSRCChanges = 8
    /// Plaintext "no encryption here" replies, echoing our hello, over at least a second,
    /// before a first join gives up on the relay (an unauthenticated claim never counts alone).
    static let plaintextRelayRepliesToGiveUp = 3

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.ssrc = configuration.ssrc
        failover = RelayFailover(relayAddress: configuration.relayAddress, security: configuration.security)
        outbox = RoomOutbox(retransmitNanoseconds: configuration.retransmitNanoseconds,
                            maximumRetransmitNanoseconds: configuration.maximumRetransmitNanoseconds)
    }

    /// When ``tick(now:)`` should next be called, if ever.
    public var nextDeadline: UInt64? {
        switch phase {
        case .failed, .closed, .idle: return nil
        case .leaving: return min(nextAction, leaveDeadline)
        case .active: return min(nextAction, moderation.nextDeadline ?? .max, outbox.nextDeadline ?? .max)
        default: return nextAction
        }
    }

    // MARK: Inputs

    /// Sends a moderator's request (it is repeated until the relay answers, or for
    /// ``PendingModeration/giveUpNanoseconds``); the answer comes as ``LinkEvent/moderationAnswered(sequence:_:)``
    /// with the returned sequence. Nil when the call is not in the room or too many requests wait.
    public mutating func moderate(_ request: ControlMessage.ModerationRequest, now: UInt64) -> (sequence: UInt32?, output: Output) {
        var output = Output()
        guard phase == .active, !moderation.isFull else { return (nil, output) }
        controlSequence &+= 1
        let message = ControlMessage(sequence: controlSequence, body: .moderate(request))
        moderation.add(message, now: now)
        if let bytes = seal(message, now: now) { output.datagrams.append(bytes) }
        return (controlSequence, output)
    }

    public mutating func start(now: UInt64) -> Output {
        var output = Output()
        attemptStarted = now
        lastHeard = now
        beginJoin(now: now, output: &output)
        return output
    }

    /// Leaves the room: sends a reliable leave and waits a moment for the acknowledgement.
    public mutating func leave(now: UInt64) -> Output {
        var output = Output()
        guard case .active = phase else {
            phase = .closed
            dropSession()
            output.events.append(.left)
            return output
        }
        controlSequence &+= 1
        leaveSequence = controlSequence
        let message = ControlMessage(sequence: controlSequence, isReliable: true, body: .leave(.init()))
        pendingSend = seal(message, now: now)
        phase = .leaving
        leaveDeadline = now + configuration.leaveTimeoutNanoseconds
        retransmitInterval = configuration.retransmitNanoseconds
        nextAction = now + retransmitInterval
        if let pendingSend { output.datagrams.append(pendingSend) }
        return output
    }

    /// Ends the link for good with `failure`, telling the relay once (unacknowledged) that we
    /// leave, so the room sees us go: the call found it cannot go on (an end-to-end encrypted
    /// room it requires is not one).
    public mutating func abandon(_ failure: LinkFailure, now: UInt64) -> Output {
        var output = Output()
        if phase == .active || phase == .confirming {
            controlSequence &+= 1
            if let bytes = seal(ControlMessage(sequence: controlSequence, isReliable: true, body: .leave(.init())), now: now) {
                output.datagrams.append(bytes)
            }
        }
        fail(failure, output: &output)
        return output
    }

    /// Tells the room our muted/deafened state (the newest only, once joined; again after a rejoin).
    public mutating func setMemberState(_ state: ControlMessage.MemberState, now: UInt64) -> Output {
        var output = Output()
        outbox.setState(state)
        if phase == .active { sendOutbox(now: now, output: &output) }
        return output
    }

    /// Sends a text to the room, or says at once why it cannot go (empty, too long, too many
    /// too fast, not in the room). Delivered reliably; a refusal by the relay comes later as
    /// a ``LinkEvent/textRefused(text:reason:)``.
    public mutating func say(_ text: String, now: UInt64) throws(TextRefusal) -> Output {
        guard phase == .active else {
            throw .notInRoom("the call is not in the room right now (\(phase == .reconnecting ? "reconnecting" : "not joined")); send it once it is")
        }
        try outbox.say(text, now: now)
        var output = Output()
        sendOutbox(now: now, output: &output)
        return output
    }

    /// Sends sealed media keys for the relay to deliver to other members (end-to-end
    /// encryption), reliably; before the link is active they wait for it.
    public mutating func sendMediaKeys(_ keys: [ControlMessage.MediaKeys], now: UInt64) -> Output {
        var output = Output()
        outbox.send(keys)
        if phase == .active { sendOutbox(now: now, output: &output) }
        return output
    }

    private mutating func sendOutbox(now: UInt64, output: inout Output) {
        var sequence = controlSequence
        let messages = outbox.due(now: now) {
            sequence &+= 1
            return sequence
        }
        controlSequence = sequence
        for message in messages {
            if let bytes = seal(message, now: now) { output.datagrams.append(bytes) }
        }
    }

    public mutating func tick(now: UInt64) -> Output {
        var output = Output()
        switch phase {
        case .idle, .failed, .closed:
            return output
        case .greeting, .handshaking, .joining, .confirming:
            guard now >= nextAction else { return output }
            if let failure = firstJoinTimedOut(now: now) {
                fail(failure, output: &output)
                return output
            }
            // Rejoining, and this relay has not answered four hellos: try another of the cluster.
            if everJoined, phase == .greeting || phase == .joining, sendsInPhase >= 4, let next = failover.moveToAnotherRelay() {
                output.events.append(.reconnecting(reason: "no answer from the relay; trying \(next)"))
                beginJoin(now: now, output: &output)
                return output
            }
            // A secure init unanswered several times may hold a stale cookie: start over.
            if phase == .handshaking, sendsInPhase >= 4 {
                beginJoin(now: now, output: &output)
                return output
            }
            retransmit(now: now, output: &output)
        case .reconnecting:
            guard now >= nextAction else { return output }
            if let failure = firstJoinTimedOut(now: now) {
                fail(failure, output: &output)
                return output
            }
            beginJoin(now: now, output: &output)
        case .active:
            let silence = now - lastHeard
            let canFailOver = failover.canFailOver
            let lostAfter = canFailOver ? configuration.failoverAfterSilenceNanoseconds : configuration.lostAfterSilenceNanoseconds
            let probeAfter = canFailOver ? configuration.failoverProbeAfterSilenceNanoseconds : configuration.probeAfterSilenceNanoseconds
            if silence >= lostAfter {
                let heard = "nothing heard from the relay for \(silence / 1_000_000_000).\(silence / 100_000_000 % 10) s"
                failover.lost(now: now)
                if canFailOver, let next = failover.moveToAnotherRelay() {
                    reconnect(reason: "\(heard); rejoining through \(next)", now: now, output: &output)
                } else {
                    reconnect(reason: heard, now: now, output: &output)
                }
                return output
            }
            let interval: UInt64
            if silence >= probeAfter {
                interval = canFailOver ? 250_000_000 : 1_000_000_000
            } else {
                interval = UInt64(joined?.keepaliveIntervalMilliseconds ?? 5_000) * 1_000_000
            }
            if now - lastPing >= interval {
                sendPing(now: now, output: &output)
            }
            let (resend, expired) = moderation.due(now: now)
            for message in resend {
                if let bytes = seal(message, now: now) { output.datagrams.append(bytes) }
            }
            for sequence in expired {
                output.events.append(.moderationAnswered(sequence: sequence, .init(
                    outcome: .unknown, message: "the relay did not answer within \(PendingModeration.giveUpNanoseconds / 1_000_000_000) s; check the call's link and try again")))
            }
            nextAction = min(lastPing + interval, lastHeard + lostAfter)
            if silence < probeAfter { nextAction = min(nextAction, lastHeard + probeAfter) }
            sendOutbox(now: now, output: &output)
        case .leaving:
            if now >= leaveDeadline {
                finishLeave(output: &output)
            } else if now >= nextAction {
                retransmit(now: now, output: &output)
            }
        }
        return output
    }

    /// Handles one datagram from the relay. Media inside it (RTP or RTCP, unsealed) goes to `media`.
    public mutating func handle(
        datagram: UnsafeRawBufferPointer, now: UInt64, media: (UnsafeRawBufferPointer) -> Void
    ) -> Output {
        let (output, inner) = receive(datagram: datagram, now: now)
        if let inner { media(inner) }
        return output
    }

    /// Handles one datagram from the relay; returns what to send and tell, and the media inside
    /// it (RTP or RTCP, unsealed), if it is media. The media lies in `datagram` or in the link's
    /// own buffer, valid until the next datagram: nothing is allocated for a media packet.
    public mutating func receive(datagram: UnsafeRawBufferPointer, now: UInt64) -> (Output, media: UnsafeRawBufferPointer?) {
        var output = Output()
        switch PacketKind(datagram) {
        case .handshake:
            handleHandshake(datagram, now: now, output: &output)
        case .sealed:
            let plaintext = opened.reserve(datagram.count)
            guard let count = try? sessionReceiver?.open(datagram, into: plaintext) else {
                droppedDatagrams += 1
                return (output, nil)
            }
            lastHeard = now
            boundNotJoinedReplies = 0
            let inner = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(plaintext)[0..<count])
            switch PacketKind(inner) {
            case .control:
                if let message = try? ControlMessage(parsing: inner) {
                    handleControl(message, authenticated: true, now: now, output: &output)
                }
            case .rtp, .rtcp:
                return (output, inner)
            default:
                droppedDatagrams += 1
            }
        case .control:
            guard let message = try? ControlMessage(parsing: datagram) else { droppedDatagrams += 1; return (output, nil) }
            if case .insecure = configuration.security {
                lastHeard = now
                handleControl(message, authenticated: true, now: now, output: &output)
            } else if case let .error(error) = message.body {
                handleUnauthenticatedError(error, now: now, output: &output)
            } else {
                droppedDatagrams += 1
            }
        case .rtp, .rtcp:
            if case .insecure = configuration.security, phase == .active {
                lastHeard = now
                return (output, datagram)
            }
            droppedDatagrams += 1
        case .stun, .dtls, .unknown:
            droppedDatagrams += 1
        }
        return (output, nil)
    }

    // MARK: Joining

    /// Why the first join has failed, once it has tried for the join timeout; nil before, or
    /// once the call has been joined (after that the link rejoins for as long as it runs).
    private func firstJoinTimedOut(now: UInt64) -> LinkFailure? {
        guard !everJoined, now - attemptStarted >= configuration.joinTimeoutNanoseconds else { return nil }
        if let refusal = lastRateLimit {
            // The relay answered, and kept saying "later": say that, not "unreachable".
            return .refused(code: refusal.code, message: refusal.message)
        }
        if cookieReceived { return .handshakeUnanswered(relay: relayAddress) }
        return .unreachable(relay: relayAddress, seconds: Int(configuration.joinTimeoutNanoseconds / 1_000_000_000))
    }

    private mutating func beginJoin(now: UInt64, output: inout Output) {
        dropSession()
        rosterAssembler = RosterAssembler()
        // A new session numbers the relay's messages afresh (a restarted relay counts from its
        // first sequence again), so numbers seen in the old one say nothing about duplicates:
        // kept, they made the new relay's roster look like a retransmission and the link
        // waited for it forever.
        seenReliable = RecentSequenceSet()
        lastTextReceived = nil
        boundNotJoinedReplies = 0
        plaintextRelayReplies = nil
        sendsInPhase = 0
        retransmitInterval = configuration.retransmitNanoseconds
        switch failover.security {
        case let .secure(relayKey):
            let handshake = ClientHandshake(relayPublicKey: relayKey)
            pendingSend = handshake.helloBytes
            self.handshake = handshake
            phase = .greeting
        case .insecure:
            pendingSend = try? joinMessage().serialized()
            phase = .joining
        }
        retransmit(now: now, output: &output)
    }

    private func joinMessage() -> ControlMessage {
        ControlMessage(body: .join(.init(
            ssrc: ssrc, room: configuration.room, token: configuration.token, software: configuration.software,
            capabilities: configuration.capabilities, identityKey: configuration.identityKey
        )))
    }

    private mutating func retransmit(now: UInt64, output: inout Output) {
        if let pendingSend { output.datagrams.append(pendingSend) }
        sendsInPhase += 1
        nextAction = now + retransmitInterval
        retransmitInterval = min(retransmitInterval * 2, configuration.maximumRetransmitNanoseconds)
    }

    private mutating func handleHandshake(_ datagram: UnsafeRawBufferPointer, now: UInt64, output: inout Output) {
        guard var handshake else { droppedDatagrams += 1; return }
        switch (phase, datagram.first.flatMap(SecureMessageType.init(rawValue:))) {
        case (.greeting, .cookie):
            do {
                let initBytes = try handshake.makeInit(cookieReply: datagram, payload: try joinMessage().serialized())
                self.handshake = handshake
                cookieReceived = true
                lastHeard = now
                pendingSend = initBytes
                phase = .handshaking
                sendsInPhase = 0
                retransmitInterval = configuration.retransmitNanoseconds
                retransmit(now: now, output: &output)
            } catch SecurityError.relayKeyMismatch {
                fail(.relayKeyMismatch(relay: relayAddress), output: &output)
            } catch {
                droppedDatagrams += 1
            }
        case (.handshaking, .handshakeResponse):
            guard let (payload, session) = try? handshake.finish(response: datagram, nowNanoseconds: now),
                  let message = try? ControlMessage(parsing: payload) else {
                droppedDatagrams += 1
                return
            }
            self.handshake = nil
            lastHeard = now
            protector.set(session)
            sessionReceiver = session.takeReceiver()
            handleControl(message, authenticated: true, now: now, output: &output)
        default:
            droppedDatagrams += 1
        }
    }

    // MARK: Control

    private mutating func handleControl(_ received: ControlMessage, authenticated: Bool, now: UInt64, output: inout Output) {
        // Every string a relay sends is made safe here, where it enters the client, before
        // anything reads it (ControlMessage+Shown.swift).
        let message = received.madeSafeToShow()
        if message.isReliable, authenticated {
            sendControl(.ack(.init(sequence: message.sequence)), now: now, output: &output)
            guard seenReliable.insert(message.sequence) else { return }  // a retransmission we already acted on
        }
        switch message.body {
        case let .joined(joined):
            guard authenticated, [.handshaking, .joining, .confirming].contains(phase) else { return }
            self.joined = joined
            failover.learn(joined.clusterRelays)
            phase = .confirming
            sendsInPhase = 0
            retransmitInterval = configuration.retransmitNanoseconds
            pendingSend = seal(ControlMessage(body: .ready(.init(cookie: joined.cookie))), now: now)
            retransmit(now: now, output: &output)
        case let .roster(page):
            guard authenticated, let members = rosterAssembler.add(page) else { return }
            roster = members
            if phase == .confirming, let joined {
                phase = .active
                pendingSend = nil
                output.events.append(.joined(identity: joined.identity, room: joined.room, canPublish: joined.canPublish, rejoin: everJoined))
                everJoined = true
                lastRateLimit = nil
                failover.joined()
                lastPing = now
                nextAction = now + UInt64(joined.keepaliveIntervalMilliseconds) * 1_000_000
                // A new session at the relay: it knows nothing of our state yet.
                outbox.sessionStarted()
                sendOutbox(now: now, output: &output)
            }
            output.events.append(.roster(members))
        case let .pong(pong):
            guard authenticated, pong.timestamp <= now else { return }
            let sample = now - pong.timestamp
            smoothedRoundTrip = smoothedRoundTrip.map { $0 - $0 / 8 + sample / 8 } ?? sample
            output.events.append(.roundTrip(nanoseconds: sample))
        case let .ping(ping):
            guard authenticated else { return }
            sendControl(.pong(.init(timestamp: ping.timestamp)), now: now, output: &output)
        case let .ack(ack):
            if phase == .leaving, ack.sequence == leaveSequence { finishLeave(output: &output) }
            outbox.acknowledge(sequence: ack.sequence)
            if phase == .active { sendOutbox(now: now, output: &output) }  // the next text may go
        case let .error(error):
            // The relay refuses a text by answering its sequence number.
            if authenticated, phase == .active, message.sequence != 0, let text = outbox.refuse(sequence: message.sequence) {
                output.events.append(.textRefused(text: text, reason: error.message))
                sendOutbox(now: now, output: &output)
                return
            }
            handleError(error, now: now, output: &output)
        case let .text(text):
            // The relay sends texts only to members it counts as active, so one that overtook
            // our first roster (confirming) is already ours to show.
            guard authenticated, phase == .active || phase == .confirming else { return }
            if let last = lastTextReceived, Int32(bitPattern: text.number &- last) <= 0 { return }
            lastTextReceived = text.number
            output.events.append(.text(sender: text.sender, text: text.text))
        case let .mediaKeys(keys):
            // Delivered to members the relay counts as active, like texts.
            guard authenticated, phase == .active || phase == .confirming else { return }
            output.events.append(.mediaKeys(keys))
        case let .moderationReply(reply):
            guard authenticated, moderation.answered(message.sequence) else { return }
            output.events.append(.moderationAnswered(sequence: message.sequence, reply))
        case let .goodbye(goodbye):
            guard authenticated else { return }
            switch goodbye.reason {
            case .replaced:
                fail(.replaced, output: &output)
            case .kicked, .roomClosed:
                fail(.removed(goodbye.reason, message: goodbye.message), output: &output)
            case .relayShuttingDown, .idleTimeout, .unknown:
                let why = goodbye.reason == .relayShuttingDown ? "the relay is restarting" : "the relay closed the session"
                var reason = goodbye.message.isEmpty ? why : "\(why): \(goodbye.message)"
                // A relay of a cluster that stops has given its rooms back: rejoin through another.
                if goodbye.reason == .relayShuttingDown, failover.canFailOver, let next = failover.moveToAnotherRelay() { reason += "; rejoining through \(next)" }
                reconnect(reason: reason, now: now, output: &output)
            }
        case let .redirect(redirect):
            guard authenticated, [.handshaking, .joining].contains(phase), redirect.room == configuration.room else {
                droppedDatagrams += 1
                return
            }
            follow(redirect, now: now, output: &output)
        case .join, .ready, .leave, .moderate, .memberState:
            droppedDatagrams += 1  // client-to-relay messages
        }
    }

    /// An error the relay answered inside the session, the handshake, or (`--insecure`) in plaintext.
    private mutating func handleError(_ error: ControlMessage.ErrorReply, now: UInt64, output: inout Output) {
        switch error.code {
        case .notJoined:
            // The relay does not know us: it restarted, or dropped us after a silence.
            if phase == .active || phase == .confirming {
                reconnect(reason: "the relay no longer knows this session (it may have restarted)", now: now, output: &output)
            }
        case .placementUnavailable:
            // The relay's cluster could not place the room just now (its store is away, or it
            // is busy): ask again shortly; a first join that times out on it says why.
            guard [.greeting, .handshaking, .joining, .confirming].contains(phase) else { return }
            lastRateLimit = error
            restartJoin(at: now + 2 * configuration.retransmitNanoseconds)
        case .rateLimited:
            // Too many joins from here or with this identity: start over once the relay's
            // budget has refilled, with a new handshake (this one is spent).
            guard [.greeting, .handshaking, .joining, .confirming].contains(phase) else { return }
            lastRateLimit = error
            restartJoin(at: now + configuration.maximumRetransmitNanoseconds)
        case .ssrcInUse:
            // Another member took our SSRC (a session of ours that timed out left it free):
            // a stream ID is ours to choose, so choose another and join again.
            guard [.greeting, .handshaking, .joining, .confirming].contains(phase) else { return }
            guard ssrcChanges < Self.maximumSSRCChanges else {
                fail(.refused(code: error.code, message: error.message), output: &output)
                return
            }
            ssrcChanges += 1
            let taken = ssrc
            repeat { ssrc = UInt32.random(in: 1...UInt32.max) } while ssrc == taken
            beginJoin(now: now, output: &output)
        default:
            guard [.greeting, .handshaking, .joining, .confirming, .reconnecting].contains(phase) else { return }
            fail(.refused(code: error.code, message: error.message), output: &output)
        }
    }

    /// A plaintext error on an encrypted link. Anyone can send one with the relay's address,
    /// so it counts only when it echoes what an off-path sender cannot know, and even then it
    /// never ends the call by itself.
    private mutating func handleUnauthenticatedError(_ error: ControlMessage.ErrorReply, now: UInt64, output: inout Output) {
        switch error.code {
        case .notJoined where phase == .active || phase == .confirming:
            // The relay echoes the tag of the sealed packet it could not place. A second such
            // reply with nothing authenticated in between means it has really lost us (it
            // restarted); one alone may be a stray, so ask again at once with a ping.
            guard protector.sealedRecently(tag: error.echo) else { droppedDatagrams += 1; return }
            boundNotJoinedReplies += 1
            if boundNotJoinedReplies >= 2 {
                reconnect(reason: "the relay no longer knows this session (it may have restarted)", now: now, output: &output)
            } else {
                sendPing(now: now, output: &output)
            }
        case .encryptionUnavailable where phase == .greeting:
            // A relay started --insecure answers our hello so, echoing its nonce. It can never
            // make us talk plaintext; at most, before a first join, it tells the person why the
            // handshake goes unanswered, once it has said so repeatedly.
            guard let handshake, error.echo == handshake.hello.nonceBytes else { droppedDatagrams += 1; return }
            let first = plaintextRelayReplies?.first ?? now
            let count = (plaintextRelayReplies?.count ?? 0) + 1
            plaintextRelayReplies = (first, now, count)
            if !everJoined, count >= Self.plaintextRelayRepliesToGiveUp, now - first >= 1_000_000_000 {
                fail(.relayWithoutEncryption(relay: relayAddress), output: &output)
            }
        default:
            droppedDatagrams += 1
        }
    }

    private mutating func sendPing(now: UInt64, output: inout Output) {
        lastPing = now
        sendControl(.ping(.init(timestamp: now)), now: now, output: &output)
    }

    private mutating func sendControl(_ body: ControlMessage.Body, now: UInt64, output: inout Output) {
        if let bytes = seal(ControlMessage(body: body), now: now) { output.datagrams.append(bytes) }
    }

    /// Serialises a control message and seals it when the link is secure.
    private func seal(_ message: ControlMessage, now: UInt64) -> [UInt8]? {
        guard let bytes = try? message.serialized() else { return nil }
        guard case .secure = failover.security else { return bytes }
        return bytes.withUnsafeBytes { protector.protect($0, nowNanoseconds: now) }
    }

    /// Requests still waiting get an answer saying the link went before the relay's came.
    private mutating func abandonModeration(output: inout Output) {
        for sequence in moderation.abandonAll() {
            output.events.append(.moderationAnswered(sequence: sequence, .init(
                outcome: .unknown, message: "the link to the relay was lost before it answered; the request may or may not have been carried out")))
        }
    }

    private mutating func reconnect(reason: String, now: UInt64, output: inout Output) {
        abandonModeration(output: &output)
        dropSession()
        phase = .reconnecting
        output.events.append(.reconnecting(reason: reason))
        // Back off from a quarter second; the relay may still be starting.
        nextAction = now + configuration.retransmitNanoseconds
        attemptStarted = now
    }

    // MARK: The cluster

    /// Follows a redirect the pinned relay sent (authenticated): join where the room lives.
    private mutating func follow(_ redirect: ControlMessage.Redirect, now: UInt64, output: inout Output) {
        switch failover.follow(redirect, now: now) {
        case .askAgainSoon:
            restartJoin(at: now + 100_000_000)
        case let .giveUp(message):
            if everJoined {
                output.events.append(.reconnecting(reason: message))
                restartJoin(at: now + configuration.maximumRetransmitNanoseconds)
            } else {
                fail(.refused(code: .placementUnavailable, message: message), output: &output)
            }
        case let .follow(address):
            output.events.append(.redirected(to: address))
            beginJoin(now: now, output: &output)
        }
    }

    /// Abandons the join in progress (its handshake and session) and begins a new one at `time`.
    private mutating func restartJoin(at time: UInt64) {
        dropSession()
        handshake = nil
        phase = .reconnecting
        nextAction = time
    }

    /// The session ends (a rejoin, a leave, a failure): nothing is sealed or opened with it any more.
    private mutating func dropSession() {
        protector.set(nil)
        sessionReceiver = nil
    }

    private mutating func finishLeave(output: inout Output) {
        abandonModeration(output: &output)
        phase = .closed
        dropSession()
        output.events.append(.left)
    }

    private mutating func fail(_ failure: LinkFailure, output: inout Output) {
        abandonModeration(output: &output)
        phase = .failed(failure)
        dropSession()
        output.events.append(.failed(failure))
    }
}

/// The buffer a link opens the relay's sealed datagrams into: one per link, so a packet
/// allocates nothing; it grows only when a datagram is larger than any before.
private final class OpenedDatagram {
    private var bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 2_048, alignment: 16)

    deinit { bytes.deallocate() }

    /// The buffer, at least `count` bytes.
    func reserve(_ count: Int) -> UnsafeMutableRawBufferPointer {
        if bytes.count < count {
            bytes.deallocate()
            bytes = .allocate(byteCount: count, alignment: 16)
        }
        return bytes
    }
}
