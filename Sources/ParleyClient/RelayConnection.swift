import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import ParleyAudio
import ParleyBasics
import ParleyDatagrams
import ParleyE2EE
import ParleyWire
import Synchronization

/// The network edge of a call, on its own thread: a ``DatagramLoop`` that owns the UDP
/// socket to the relay, reads its datagrams a batch at a time into preallocated slots,
/// hands each from the relay to the ``CallReceiver``, sends what that answers, and runs the
/// receiver's timers at the deadlines it sets.
///
/// Why not SwiftNIO's datagram channel, as the other sockets of the client use: it allocates
/// for every datagram read (a `SocketAddress` box, the buffer's envelope) and for every
/// timer moved (a scheduled task and its promise), the only allocations left on a call's
/// receive path, and it offers no way to read a socket oneself. The relay's threads read their
/// sockets the same way for the same reason; the loop is theirs (``DatagramLoop``).
///
/// The socket is also the capture thread's: it sends media on it directly (``MediaSender``)
/// while the loop reads it and sends RTCP and control.
///
/// Everything mutable here is touched only on the loop's thread (hence `@unchecked
/// Sendable`); other threads reach it through ``makeMediaSender()`` (the capture thread) and
/// `submit`.
final class RelayConnection: @unchecked Sendable {
    private let loop: DatagramLoop
    private let configuration: CallConfiguration
    private let gate: MediaGate

    /// Where the link's relay is, as the kernel writes a datagram's source: only its
    /// datagrams are taken in, and the loop's own sends go there.
    fileprivate var relayAddress: DatagramAddress?
    /// The socket the loop reads and both threads send on (-1 before `start` and after `close`).
    private var socket: CInt = -1
    private let batch = DatagramReceiveBatch(capacity: RelayConnection.readBatch, slotSize: RelayConnection.slotSize)
    /// Where the capture thread sends: set once the socket is up, replaced when the link
    /// moves to another relay, cleared before the socket closes.
    private let destinations = VersionedValue<MediaDestination?>(nil)
    /// The link's relay as text ("HOST:PORT"), to notice when its cluster moves it.
    private var relayText: String?
    /// Everything the call does with what arrives; this class is only its socket and timer.
    let receiver: CallReceiver
    /// The link's sealer, which the capture thread's ``MediaSealer`` reads; the link itself stays on the loop.
    private let protector: LinkProtector
    /// When the receiver's timers next need to run (nil: not until something arrives).
    private var deadline: UInt64?
    /// Set by `close`: the loop's timer and tasks do nothing after it.
    private var closed = false
    /// Whether `start` started the loop: before that, nothing is handed to it (it would wait
    /// for a thread that does not exist yet).
    private let started = Atomic<Bool>(false)
    /// `--copy-received-rtp`: where each received packet goes again, opened.
    private let copies: [DatagramAddress]
    /// Datagrams from addresses other than the relay's.
    fileprivate(set) var droppedStrangers = 0
    /// Datagrams longer than a slot (no relay sends one): dropped, not read in part.
    private(set) var droppedOversize = 0

    /// `--packet-trace`: every packet sent and received, for offline replay.
    private let trace: PacketTraceWriter?

    /// Datagrams per read: a talker's packets come 50 a second per speaker, so a batch is
    /// mostly one; more wait only after the loop was kept from its core.
    static let readBatch = 8
    /// Bytes per read slot: more than the relay's largest datagram (its packets are limited
    /// to a path's MTU, 1,500 bytes by default).
    static let slotSize = 4_096

    init(configuration: CallConfiguration, gate: MediaGate, status: CallStatus, mix: PlaybackMix, epoch: UInt64, adaptation: EncoderAdaptation,
         sendingKey: SendingKey, trace: PacketTraceWriter? = nil, onEvent: @escaping @Sendable (LinkEvent) -> Void) throws(CallError) {
        do {
            loop = try DatagramLoop(name: "parley network", logger: Logger(label: "parley.network"))
        } catch {
            throw .unexpected("\(error)")
        }
        self.configuration = configuration
        self.gate = gate
        self.trace = trace
        copies = configuration.receivedRTPCopies.map(DatagramAddress.init)
        let wallClockOffset = WallClock.nanoseconds() &- MonotonicClock.now()
        receiver = CallReceiver(configuration: configuration, gate: gate, status: status, mix: mix, epoch: epoch, adaptation: adaptation,
                                wallClockOffset: wallClockOffset, sendingKey: sendingKey, onEvent: onEvent)
        protector = receiver.link.protector
        // Only the diagnostics want each packet again, as plain RTP; in an end-to-end encrypted
        // room that means opening its frames a second time, into new arrays: not done without them.
        if trace != nil || !copies.isEmpty {
            receiver.mediaReceived = { [unowned self] bytes, packet, now in
                copyReceived(bytes)
                self.trace?.record(.received, packet, nanoseconds: now)
            }
        }
    }

    /// `--copy-received-rtp`: the packet as it arrived, opened, to each local listener.
    private func copyReceived(_ bytes: UnsafeRawBufferPointer) {
        guard socket >= 0 else { return }
        for destination in copies { _ = Self.send(bytes, on: socket, to: destination) }
    }

    /// Opens the socket and starts joining the relay at `relayAddress`.
    ///
    /// The socket is not connected: on Linux a connected UDP socket turns the relay's
    /// absence (an ICMP port unreachable while it restarts) into ECONNREFUSED on the next
    /// send and read, which would leave the call deaf instead of rejoining. Datagrams from
    /// anyone but the relay are dropped.
    func start(relayAddress: SocketAddress) throws {
        let socket = try Self.makeSocket(for: relayAddress)
        // Set before the loop's thread exists, which therefore sees them.
        self.socket = socket
        self.relayAddress = DatagramAddress(relayAddress)
        do {
            try loop.start(socket: socket, readable: { [unowned self] in readSocket() }, timer: { [unowned self] now in runTimers(now: now) })
        } catch {
            self.socket = -1
            _ = Glibc.close(socket)
            throw error
        }
        started.store(true, ordering: .releasing)
        loop.submit { [self] in
            ThreadPriority.favourCurrentThread()
            destinations.update { $0 = MediaDestination(socket: socket, address: relayAddress) }
            let now = MonotonicClock.now()
            send(receiver.start(now: now), now: now)
        }
    }

    /// Runs `body` on the loop and waits for its result (from the loop itself, at once); nil
    /// once the connection has closed.
    func submit<Result: Sendable>(_ body: @escaping @Sendable () -> Result) -> Result? {
        guard started.load(ordering: .acquiring) else { return nil }
        return loop.submit { [self] in closed ? nil : body() }
    }

    /// Runs `body` on the loop soon, unless the connection never started or has closed.
    private func execute(_ body: @escaping @Sendable () -> Void) {
        guard started.load(ordering: .acquiring) else { return }
        loop.execute { [self] in if !closed { body() } }
    }

    /// Leaves the room (the link waits up to a second for the relay's acknowledgement).
    func leave() {
        execute { [self] in
            gate.update { $0.open = false }
            let now = MonotonicClock.now()
            send(receiver.leave(now: now), now: now)
        }
    }

    /// Tells the room our muted/deafened state (on the loop; returns at once).
    func setMemberState(_ state: ControlMessage.MemberState) {
        execute { [self] in
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

    /// Stops the loop and closes the socket; later calls do nothing.
    func close() {
        loop.stop()
        // The loop has finished (or never started): from here its tasks run on their callers'
        // threads one at a time, this one among them.
        loop.submit { [self] in
            // The call stops its capture thread first; no sender keeps the socket past this.
            destinations.update { $0 = nil }
            closed = true
            deadline = nil
            if socket >= 0 {
                _ = Glibc.close(socket)
                socket = -1
            }
        }
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
        // A megabyte of room for what arrives while the loop waits for a core; the kernel may
        // grant less (net.core.rmem_max), which still works.
        var receiveBuffer: CInt = 1 << 20
        _ = setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &receiveBuffer, socklen_t(MemoryLayout<CInt>.size))
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

    /// The socket has datagrams: read them a batch at a time (a full batch is followed by
    /// another read, up to four), hand the relay's on, drop the rest.
    private func readSocket() {
        guard socket >= 0, let relayAddress else { return }
        for _ in 0..<4 {
            // An error (a full buffer, an ICMP error the kernel reports once) reads as none:
            // the link's timeouts decide what silence from the relay means.
            let count = batch.receive(on: socket)
            guard count > 0 else { return }
            let now = MonotonicClock.now()
            for index in 0..<count {
                guard batch.source(index).isSameEndpoint(as: relayAddress) else {
                    droppedStrangers += 1
                    continue
                }
                guard !batch.isTruncated(index) else {
                    droppedOversize += 1
                    continue
                }
                send(receiver.receive(UnsafeRawBufferPointer(batch.bytes(index)), now: now), now: now)
                // The receiver may have ended the call's link, or moved it to another relay.
                if closed { return }
            }
            guard count == batch.capacity else { return }
        }
    }

    /// The loop's timer: the receiver's, when due; returns when it is next due.
    private func runTimers(now: UInt64) -> UInt64? {
        guard !closed else { return nil }
        if let due = deadline, now >= due {
            deadline = nil
            send(receiver.tick(now: now), now: now)
        }
        return deadline
    }

    /// Sends the receiver's datagrams to the relay and moves the timer to its next deadline.
    private func send(_ datagrams: [[UInt8]], now: UInt64) {
        followLinkRelay()
        if socket >= 0, let relayAddress {
            for datagram in datagrams {
                _ = datagram.withUnsafeBytes { Self.send($0, on: socket, to: relayAddress) }
            }
        }
        reschedule(now: now)
    }

    /// One datagram on the socket; false when the kernel did not take it (a full send buffer:
    /// dropped, as the network would drop it).
    private static func send(_ bytes: UnsafeRawBufferPointer, on socket: CInt, to address: DatagramAddress) -> Bool {
        withUnsafePointer(to: address.storage) { storage in
            storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(socket, bytes.baseAddress, bytes.count, CInt(MSG_DONTWAIT), $0, address.length) }
        } == bytes.count
    }

    /// Points the socket at the relay the link now talks to, when a redirect or a failover
    /// moved it: datagrams go there, and only its datagrams are taken in.
    private func followLinkRelay() {
        let text = receiver.link.relayAddress
        if relayText == nil { relayText = text }
        guard text != relayText else { return }
        relayText = text
        guard let address = Self.resolve(text) else { return }
        relayAddress = DatagramAddress(address)
        let socket = self.socket
        if socket >= 0 { destinations.update { $0 = MediaDestination(socket: socket, address: address) } }
    }

    /// "HOST:PORT" or "[v6]:PORT" as a socket address; nil if it names nothing.
    static func resolve(_ text: String) -> SocketAddress? {
        guard let parts = try? HostPortText(parsing: text), let port = parts.port, port >= 1 else { return nil }
        let host = String(parts.host)
        return (try? SocketAddress(ipAddress: host, port: port)) ?? (try? SocketAddress.makeAddressResolvingHost(host, port: port))
    }

    /// Keeps the earlier of the deadline set and the receiver's next: a deadline is not pushed
    /// back by traffic (the end-to-end check, "a few times a second", would never come while
    /// packets flow).
    private func reschedule(now: UInt64) {
        guard let next = receiver.nextDeadline(after: now) else { return }
        if let deadline, deadline <= next { return }
        deadline = next
    }

    // MARK: Status (on the loop)

    func speakerSnapshots() -> [CallStatistics.Speaker] { receiver.speakerSnapshots(now: MonotonicClock.now()) }

    func lossDown() -> Double? { receiver.lossDown() }
}
