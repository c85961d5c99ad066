import Foundation
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOPosix
import ParleyAudio
import ParleyBasics
import ParleyE2EE
import ParleyWire

/// The network edge of a call, on one SwiftNIO event loop: a datagram channel that talks
/// only with the relay, feeding its datagrams and a timer set for its next deadline to the
/// ``CallReceiver``, and sending what that answers.
///
/// The socket is ours, made before the channel and handed to SwiftNIO, so the capture thread
/// can send media on it directly (``MediaSender``) while the loop's channel reads it and
/// sends RTCP and control.
///
/// Everything mutable here is touched only on `eventLoop` (hence `@unchecked Sendable`);
/// other threads reach it through ``makeMediaSender()`` (the capture thread) and `submit`.
final class RelayConnection: @unchecked Sendable {
    let eventLoop: any EventLoop
    private let group: MultiThreadedEventLoopGroup
    private let configuration: CallConfiguration
    private let gate: MediaGate

    private var channel: (any Channel)?
    fileprivate var relayAddress: SocketAddress?
    /// The socket under `channel`, for the capture thread's `sendto`.
    private var socket: CInt = -1
    /// Where the capture thread sends: set once the channel is up, replaced when the link
    /// moves to another relay, cleared before the socket closes.
    private let destinations = VersionedValue<MediaDestination?>(nil)
    /// The link's relay as text ("HOST:PORT"), to notice when its cluster moves it.
    private var relayText: String?
    /// Everything the call does with what arrives; this class is only its socket and timer.
    let receiver: CallReceiver
    /// The link's sealer, which the capture thread's ``MediaSealer`` reads; the link itself stays on the loop.
    private let protector: LinkProtector
    private var scheduled: Scheduled<Void>?
    private var scheduledFor: UInt64?
    /// Datagrams from addresses other than the relay's.
    fileprivate(set) var droppedStrangers = 0

    /// `--packet-trace`: every packet sent and received, for offline replay.
    private let trace: PacketTraceWriter?

    init(configuration: CallConfiguration, gate: MediaGate, status: CallStatus, mix: PlaybackMix, epoch: UInt64, adaptation: EncoderAdaptation,
         sendingKey: SendingKey, trace: PacketTraceWriter? = nil, onEvent: @escaping @Sendable (LinkEvent) -> Void) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        eventLoop = group.next()
        self.configuration = configuration
        self.gate = gate
        self.trace = trace
        let wallClockOffset = WallClock.nanoseconds() &- MonotonicClock.now()
        receiver = CallReceiver(configuration: configuration, gate: gate, status: status, mix: mix, epoch: epoch, adaptation: adaptation,
                                wallClockOffset: wallClockOffset, sendingKey: sendingKey, onEvent: onEvent)
        protector = receiver.link.protector
        receiver.mediaReceived = { [unowned self] bytes, packet, now in
            copyReceived(bytes)
            self.trace?.record(.received, packet, nanoseconds: now)
        }
    }

    /// `--copy-received-rtp`: the packet as it arrived, opened, to each local listener.
    private func copyReceived(_ bytes: UnsafeRawBufferPointer) {
        guard let channel, !configuration.receivedRTPCopies.isEmpty else { return }
        for destination in configuration.receivedRTPCopies {
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: destination, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        }
    }

    /// Opens the socket and starts joining the relay at `relayAddress`.
    ///
    /// The socket is not connected: on Linux a connected UDP socket turns the relay's
    /// absence (an ICMP port unreachable while it restarts) into ECONNREFUSED on the next
    /// send, and SwiftNIO closes a datagram channel on that error, which would leave the
    /// call deaf for good instead of rejoining. Datagrams from anyone but the relay are dropped.
    func start(relayAddress: SocketAddress) throws {
        self.relayAddress = relayAddress
        let socket = try Self.makeSocket(for: relayAddress)
        let channel: any Channel
        do {
            channel = try DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_rcvbuf), value: 1 << 20)
                .channelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(Handler(connection: self))
                    }
                }
                .withBoundSocket(socket)
                .wait()
        } catch {
            // SwiftNIO owns the socket only once the channel exists.
            _ = Glibc.close(socket)
            throw error
        }
        try eventLoop.submit { [self] in
            ThreadPriority.favourCurrentThread()
            self.channel = channel
            self.socket = socket
            destinations.update { $0 = MediaDestination(socket: socket, address: relayAddress) }
            let now = MonotonicClock.now()
            send(receiver.start(now: now), now: now)
        }.wait()
    }

    /// Runs `body` on the loop and waits for its result (never call from the loop).
    func submit<Result: Sendable>(_ body: @escaping @Sendable () -> Result) -> Result? {
        try? eventLoop.submit(body).wait()
    }

    /// Leaves the room (the link waits up to a second for the relay's acknowledgement).
    func leave() {
        eventLoop.execute { [self] in
            gate.update { $0.open = false }
            let now = MonotonicClock.now()
            send(receiver.leave(now: now), now: now)
        }
    }

    /// Tells the room our muted/deafened state (on the loop; returns at once).
    func setMemberState(_ state: ControlMessage.MemberState) {
        eventLoop.execute { [self] in
            let now = MonotonicClock.now()
            send(receiver.setMemberState(state, now: now), now: now)
        }
    }

    /// Sends a text to the room; waits for the link to take it or say why not.
    func say(_ text: String) -> Result<Void, TextRefusal> {
        let outcome = submit { [self] () -> Result<Void, TextRefusal> in
            let now = MonotonicClock.now()
            do throws(TextRefusal) {
                send(try receiver.say(text, now: now), now: now)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        return outcome ?? .failure(.notInRoom("the call has ended"))
    }

    /// Sends a moderator's request to the relay; nil when the call is not in the room.
    func moderate(_ request: ControlMessage.ModerationRequest) -> UInt32? {
        submit { [self] in
            let now = MonotonicClock.now()
            let (sequence, datagrams) = receiver.moderate(request, now: now)
            send(datagrams, now: now)
            return sequence
        } ?? nil
    }

    /// Accepts `identity`'s changed identity key (end-to-end encryption); false when nobody of
    /// that name takes part in the room.
    func trust(_ identity: String) -> Bool {
        submit { [self] in
            let now = MonotonicClock.now()
            guard let datagrams = receiver.trust(identity, now: now) else { return false }
            send(datagrams, now: now)
            return true
        } ?? false
    }

    /// Closes the socket and stops the loop.
    func close() {
        try? eventLoop.submit { [self] in
            scheduled?.cancel()
            scheduled = nil
            // The call stops its capture thread first; no sender keeps the socket past this.
            destinations.update { $0 = nil }
            channel?.close(promise: nil)
            channel = nil
        }.wait()
        try? group.syncShutdownGracefully()
    }

    // MARK: Media out (capture thread)

    /// The capture thread's sender: sealed with the link's session (unless `--insecure`) and
    /// sent on this connection's socket, to the relay the link talks to now.
    func makeMediaSender() -> MediaSender {
        let sealer: MediaSealer?
        switch configuration.security {
        case .insecure: sealer = nil
        case .secure: sealer = MediaSealer(protector: protector)
        }
        return MediaSender(destinations: destinations, sealer: sealer)
    }

    /// An unbound-port UDP socket of the relay's family, bound to every address, close-on-exec.
    private static func makeSocket(for relay: SocketAddress) throws -> CInt {
        let family = relay.protocol == .inet6 ? AF_INET6 : AF_INET
        let socket = Glibc.socket(family, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw IOError(errnoCode: errno, reason: "socket") }
        let wildcard = try SocketAddress(ipAddress: relay.protocol == .inet6 ? "::" : "0.0.0.0", port: 0)
        let bound = wildcard.withSockAddr { Glibc.bind(socket, $0, socklen_t($1)) }
        guard bound == 0 else {
            let error = IOError(errnoCode: errno, reason: "bind")
            _ = Glibc.close(socket)
            throw error
        }
        return socket
    }

    // MARK: The loop

    fileprivate func received(_ buffer: ByteBuffer) {
        let now = MonotonicClock.now()
        let answers = buffer.withUnsafeReadableBytes { receiver.receive($0, now: now) }
        send(answers, now: now)
    }

    /// Sends the receiver's datagrams to the relay and sets the timer for its next deadline.
    private func send(_ datagrams: [[UInt8]], now: UInt64) {
        followLinkRelay()
        if let channel, let relayAddress, !datagrams.isEmpty {
            for datagram in datagrams {
                channel.write(AddressedEnvelope(remoteAddress: relayAddress, data: channel.allocator.buffer(bytes: datagram)), promise: nil)
            }
            channel.flush()
        }
        reschedule(now: now)
    }

    /// Points the socket at the relay the link now talks to, when a redirect or a failover
    /// moved it: datagrams go there, and only its datagrams are taken in.
    private func followLinkRelay() {
        let text = receiver.link.relayAddress
        if relayText == nil { relayText = text }
        guard text != relayText else { return }
        relayText = text
        guard let address = Self.resolve(text) else { return }
        relayAddress = address
        let socket = self.socket
        if socket >= 0 { destinations.update { $0 = MediaDestination(socket: socket, address: address) } }
    }

    /// "HOST:PORT" or "[v6]:PORT" as a socket address; nil if it names nothing.
    static func resolve(_ text: String) -> SocketAddress? {
        guard let parts = try? HostPortText(parsing: text), let port = parts.port, port >= 1 else { return nil }
        let host = String(parts.host)
        return (try? SocketAddress(ipAddress: host, port: port)) ?? (try? SocketAddress.makeAddressResolvingHost(host, port: port))
    }

    private func reschedule(now: UInt64) {
        guard let deadline = receiver.nextDeadline(after: now) else { return }
        if let scheduledFor, scheduledFor <= deadline, scheduled != nil { return }
        scheduled?.cancel()
        scheduledFor = deadline
        let delay = deadline > now ? Int64(deadline - now) : 0
        scheduled = eventLoop.scheduleTask(in: .nanoseconds(delay)) { [self] in
            scheduled = nil
            scheduledFor = nil
            let now = MonotonicClock.now()
            send(receiver.tick(now: now), now: now)
        }
    }

    // MARK: Status (on the loop)

    func speakerSnapshots() -> [CallStatistics.Speaker] { receiver.speakerSnapshots(now: MonotonicClock.now()) }

    func lossDown() -> Double? { receiver.lossDown() }

    /// Reads the relay's datagrams into the connection.
    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        let connection: RelayConnection

        init(connection: RelayConnection) { self.connection = connection }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let envelope = Self.unwrapInboundIn(data)
            guard envelope.remoteAddress == connection.relayAddress else {
                connection.droppedStrangers += 1
                return
            }
            connection.received(envelope.data)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            // A datagram socket's errors are transient (a full buffer, a route that comes
            // back); the link's timeouts decide what silence from the relay means.
        }
    }
}
