import Foundation
import NIOCore
import NIOPosix
import ParleyAudio
import ParleyWire
import Synchronization

/// The network side of a call, on one SwiftNIO event loop: a datagram channel that talks
/// only with the relay, the `RelayLink` driven by what arrives and by a timer set for its next
/// deadline, the remote speakers' streams, RTCP both ways, and the encoder adaptation the
/// relay's reports drive.
///
/// Everything mutable here is touched only on `eventLoop` (hence `@unchecked Sendable`);
/// other threads reach it through `sendMedia` (the capture thread; the channel is
/// thread-safe) and `submit`.
final class RelayConnection: @unchecked Sendable {
    let eventLoop: any EventLoop
    private let group: MultiThreadedEventLoopGroup
    private let configuration: CallConfiguration
    private let shared: CallShared
    private let mix: PlaybackMix
    private let epoch: UInt64
    private let onEvent: @Sendable (LinkEvent) -> Void
    private let trace: PacketTraceWriter?

    private var channel: (any Channel)?
    fileprivate var relayAddress: SocketAddress?
    private var link: RelayLink
    private var reporter: RTCPReporter
    private var adaptation: EncoderAdaptation
    private var speakers: [UInt32: RemoteSpeaker] = [:]
    private var members: [ControlMessage.Roster.Member] = []
    /// Figures of streams that ended (members who left, streams replaced on a rejoin), for the summary.
    private var departed: [CallStatistics.Speaker] = []
    /// What each stream's jitter buffer had learned of the path when our rejoin replaced it
    /// (its target delay, seconds). The new buffer starts from it instead of the cautious
    /// default: a talker silent at the rejoin sends a DTX packet every 400 ms, so measuring
    /// afresh would take 10 s, and their next words would come 40 ms late and then drift in.
    private var learnedTargets: [UInt32: Double] = [:]
    /// The latest fraction lost each member reported for our stream (their SR's block about us).
    private var endToEndLoss: [UInt32: Double] = [:]
    private var scheduled: Scheduled<Void>?
    private var scheduledFor: UInt64?
    fileprivate(set) var droppedMedia = 0

    /// Remote streams kept at most (a room's limit is far lower; this bounds memory).
    static let maximumSpeakers = 64

    init(configuration: CallConfiguration, shared: CallShared, mix: PlaybackMix, epoch: UInt64, adaptation: EncoderAdaptation,
         trace: PacketTraceWriter? = nil, onEvent: @escaping @Sendable (LinkEvent) -> Void) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        eventLoop = group.next()
        self.configuration = configuration
        self.shared = shared
        self.mix = mix
        self.epoch = epoch
        self.adaptation = adaptation
        self.onEvent = onEvent
        self.trace = trace
        var linkConfiguration = RelayLink.Configuration(
            relayAddress: configuration.relay, room: configuration.room, token: configuration.token,
            ssrc: configuration.ssrc, security: configuration.security)
        configuration.tuneLink(&linkConfiguration)
        link = RelayLink(configuration: linkConfiguration)
        let cname = String(format: "%016llx", UInt64.random(in: 0...UInt64.max))
        reporter = RTCPReporter(ssrc: configuration.ssrc, cname: cname, name: configuration.name)
    }

    /// Opens the socket and starts joining the relay at `relayAddress`.
    ///
    /// The socket is not connected: on Linux a connected UDP socket turns the relay's
    /// absence (an ICMP port unreachable while it restarts) into ECONNREFUSED on the next
    /// send, and SwiftNIO closes a datagram channel on that error, which would leave the
    /// call deaf for good instead of rejoining. Datagrams from anyone but the relay are dropped.
    func start(relayAddress: SocketAddress) throws {
        self.relayAddress = relayAddress
        relayLock.withLock { $0 = relayAddress }
        let wildcard = relayAddress.protocol == .inet6 ? "::" : "0.0.0.0"
        let channel = try DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_rcvbuf), value: 1 << 20)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Handler(connection: self))
                }
            }
            .bind(host: wildcard, port: 0)
            .wait()
        try eventLoop.submit { [self] in
            ThreadPriority.favourCurrentThread()
            self.channel = channel
            apply(link.start(now: MonotonicClock.now()))
        }.wait()
    }

    /// Runs `body` on the loop and waits for its result (never call from the loop).
    func submit<Result: Sendable>(_ body: @escaping @Sendable () -> Result) -> Result? {
        try? eventLoop.submit(body).wait()
    }

    /// Leaves the room (the link waits up to a second for the relay's acknowledgement).
    func leave() {
        eventLoop.execute { [self] in
            shared.update { $0.mediaGate = false }
            apply(link.leave(now: MonotonicClock.now()))
        }
    }

    /// Closes the socket and stops the loop.
    func close() {
        try? eventLoop.submit { [self] in
            scheduled?.cancel()
            scheduled = nil
            channel?.close(promise: nil)
            channel = nil
        }.wait()
        try? group.syncShutdownGracefully()
    }

    // MARK: Media out (capture thread)

    /// Sends one RTP packet, sealed when the link is secure. Dropped (and counted) when the
    /// link is not joined.
    func sendMedia(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let channel = channelForSending, let relay = relayForSending else { return false }
        let bytes: [UInt8]
        switch configuration.security {
        case .insecure:
            bytes = Array(packet)
        case .secure:
            guard let sealed = link.protector.protect(packet, nowNanoseconds: MonotonicClock.now()) else { return false }
            bytes = sealed
        }
        channel.writeAndFlush(AddressedEnvelope(remoteAddress: relay, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        return true
    }

    // The channel as the capture thread sees it: set once on the loop before media flows.
    private let channelLock = Mutex<(any Channel)?>(nil)
    private var channelForSending: (any Channel)? { channelLock.withLock { $0 } }
    private let relayLock = Mutex<SocketAddress?>(nil)
    private var relayForSending: SocketAddress? { relayLock.withLock { $0 } }

    // MARK: The loop

    private func secondsOnTimeline(_ now: UInt64) -> Double { Double(Int64(bitPattern: now &- epoch)) / 1e9 }

    fileprivate func received(_ buffer: ByteBuffer) {
        let now = MonotonicClock.now()
        var media: [[UInt8]] = []
        let output = buffer.withUnsafeReadableBytes { datagram in
            link.handle(datagram: datagram, now: now) { media.append(Array($0)) }
        }
        for packet in media { packet.withUnsafeBytes { handleMedia($0, now: now) } }
        apply(output)
    }

    private func handleMedia(_ bytes: UnsafeRawBufferPointer, now: UInt64) {
        switch PacketKind(bytes) {
        case .rtp:
            guard let packet = try? RTPPacketView(parsing: bytes), packet.ssrc != configuration.ssrc else {
                droppedMedia += 1
                return
            }
            guard let speaker = speaker(for: packet.ssrc, now: now) else {
                droppedMedia += 1
                return
            }
            copyReceived(bytes)
            speaker.receive(packet, now: now, seconds: secondsOnTimeline(now))
            trace?.record(.received, packet, nanoseconds: now)
        case .rtcp:
            guard let packets = try? RTCPCompoundPacket.parse(bytes) else {
                droppedMedia += 1
                return
            }
            handleRTCP(packets, now: now)
        default:
            droppedMedia += 1
        }
    }

    /// `--copy-received-rtp`: the packet as it arrived, opened, to each local listener.
    private func copyReceived(_ bytes: UnsafeRawBufferPointer) {
        guard let channel, !configuration.receivedRTPCopies.isEmpty else { return }
        for destination in configuration.receivedRTPCopies {
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: destination, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        }
    }

    private func speaker(for ssrc: UInt32, now: UInt64) -> RemoteSpeaker? {
        if let speaker = speakers[ssrc] { return speaker }
        guard speakers.count < Self.maximumSpeakers else { return nil }
        let identity = members.first { $0.ssrc == ssrc }?.identity
        var jitterBuffer = configuration.jitterBuffer
        if let learned = learnedTargets.removeValue(forKey: ssrc) { jitterBuffer.delay.initialSeconds = learned }
        guard let speaker = try? RemoteSpeaker(ssrc: ssrc, identity: identity, configuration: jitterBuffer, now: now) else {
            return nil
        }
        speakers[ssrc] = speaker
        mix.add(ssrc: ssrc, identity: identity, source: speaker.buffer)
        return speaker
    }

    /// Report blocks about our stream drive the encoder: the relay's receiver reports (the
    /// leg to the relay) and the members' sender reports (the whole path to each of them).
    private func handleRTCP(_ packets: [RTCPPacket], now: UInt64) {
        for packet in packets {
            switch packet {
            case let .receiverReport(report) where speakers[report.ssrc] == nil:
                // Only the relay sends receiver reports to us (it forwards members' SRs only).
                for block in report.reportBlocks where block.ssrc == configuration.ssrc {
                    let arrival = NTPTimestamp(unixNanoseconds: Self.unixNanoseconds())
                    shared.update { state in
                        state.lossUp = block.lossFraction
                        // Cumulative lost over what we sent: the relay counts from its first packet of ours.
                        if state.packetsSent > 0 {
                            state.lossUpTotal = min(1, max(0, Double(block.cumulativeLost) / Double(state.packetsSent)))
                        }
                        if state.roundTripNanoseconds == nil, let rtt = block.roundTripTime(arrival: arrival) {
                            state.roundTripNanoseconds = UInt64(rtt) * 1_000_000_000 / 65_536
                        }
                    }
                    reportedLoss(block.lossFraction, by: nil)
                }
            case let .senderReport(report):
                speakers[report.ssrc]?.receiveSenderReport(report, now: now)
                for block in report.reportBlocks where block.ssrc == configuration.ssrc && speakers[report.ssrc] != nil {
                    reportedLoss(block.lossFraction, by: report.ssrc)
                }
            default:
                break
            }
        }
    }

    /// The one place a report about our stream reaches the encoder: the fraction lost on
    /// the way to our listeners, from the relay (`member` nil: our leg to it, about once a
    /// second) or from a member (the whole path to them). The adaptation runs once per
    /// relay report, on the worst of that leg and every member's latest path.
    private func reportedLoss(_ fraction: Double, by member: UInt32?) {
        guard let member else {
            adapt(to: max(fraction, endToEndLoss.values.max() ?? 0))
            return
        }
        endToEndLoss[member] = fraction
        let worst = endToEndLoss.values.max()
        shared.update { $0.lossUpEndToEnd = worst }
    }

    private func adapt(to loss: Double) {
        guard let setting = adaptation.report(lossFraction: loss) else { return }
        shared.update { $0.encoder = setting }
    }

    /// Redundancy only while every listener can read it: a member that cannot (an older
    /// client) would drop every RED packet and hear nothing of us.
    private func listenersChanged(_ roster: [ControlMessage.Roster.Member]) {
        let listeners = roster.filter { $0.ssrc != configuration.ssrc }
        let allRead = listeners.allSatisfy { $0.capabilities.contains(.redundantAudio) }
        guard let setting = adaptation.listeners(allReadRedundancy: allRead) else { return }
        shared.update { $0.encoder = setting }
    }

    private func sendRTCP(now: UInt64) {
        guard link.phase == .active else { return }
        let blocks = speakers.values.sorted { $0.ssrc < $1.ssrc }.compactMap { $0.makeReportBlock(now: now) }
        let sender = shared.snapshot.sender
        guard let bytes = try? reporter.compound(sender: sender, blocks: blocks, now: now, unixNanoseconds: Self.unixNanoseconds()) else { return }
        bytes.withUnsafeBytes { _ = sendOnLoop($0) }
    }

    private func sendOnLoop(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let channel, let relayAddress else { return false }
        let bytes: [UInt8]
        switch configuration.security {
        case .insecure: bytes = Array(packet)
        case .secure:
            guard let sealed = link.protector.protect(packet, nowNanoseconds: MonotonicClock.now()) else { return false }
            bytes = sealed
        }
        channel.writeAndFlush(AddressedEnvelope(remoteAddress: relayAddress, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        return true
    }

    /// Sends what the link asks, acts on its events, and sets the timer for its next deadline.
    private func apply(_ output: RelayLink.Output) {
        if let channel, let relayAddress {
            for datagram in output.datagrams {
                channel.write(AddressedEnvelope(remoteAddress: relayAddress, data: channel.allocator.buffer(bytes: datagram)), promise: nil)
            }
            if !output.datagrams.isEmpty { channel.flush() }
        }
        for event in output.events { handle(event) }
        reschedule()
    }

    private func handle(_ event: LinkEvent) {
        let now = MonotonicClock.now()
        switch event {
        case let .joined(identity, _, canPublish, rejoin):
            if rejoin {
                // A new timeline: the old buffers would add the outage's length as delay. What
                // they learned of the path's jitter still holds, so the new ones start from it.
                learnedTargets = [:]
                for (ssrc, speaker) in speakers where (speaker.reception?.received ?? 0) >= RemoteSpeaker.packetsToLearnJitter {
                    learnedTargets[ssrc] = speaker.buffer.statistics.targetDelayMilliseconds / 1_000
                }
                for ssrc in Array(speakers.keys) { removeSpeaker(ssrc, now: now) }
            }
            channelLock.withLock { $0 = channel }
            shared.update { state in
                state.mediaGate = canPublish
                state.joinGeneration += 1
                state.identity = identity
                state.phase = .inCall
                if rejoin { state.rejoins += 1 }
            }
        case let .roster(roster):
            members = roster
            listenersChanged(roster)
            shared.update { $0.members = roster.map(\.identity).sorted() }
            let present = Set(roster.map(\.ssrc))
            for member in roster where member.ssrc != configuration.ssrc && member.canPublish {
                if let speaker = speaker(for: member.ssrc, now: now), speaker.identity != member.identity {
                    speaker.identity = member.identity
                    mix.name(ssrc: member.ssrc, identity: member.identity)
                }
            }
            // A stream not in the roster has left, unless it is so new that the roster
            // naming it is still on its way.
            for (ssrc, speaker) in speakers where !present.contains(ssrc) {
                if speaker.identity != nil || now - speaker.createdAt > 2_000_000_000 {
                    removeSpeaker(ssrc, now: now)
                }
            }
        case let .roundTrip(nanoseconds):
            shared.update { state in
                state.roundTripNanoseconds = state.roundTripNanoseconds.map { $0 - $0 / 4 + nanoseconds / 4 } ?? nanoseconds
            }
        case .reconnecting:
            shared.update { state in
                state.mediaGate = false
                state.phase = .reconnecting
            }
        case .failed, .left:
            shared.update { state in
                state.mediaGate = false
                state.phase = .ended
            }
        }
        onEvent(event)
    }

    private func removeSpeaker(_ ssrc: UInt32, now: UInt64) {
        guard let speaker = speakers.removeValue(forKey: ssrc) else { return }
        mix.remove(ssrc: ssrc)
        endToEndLoss[ssrc] = nil
        if speaker.lastPacketAt != nil { departed.append(speaker.snapshot(now: now)) }
    }

    private func reschedule() {
        let now = MonotonicClock.now()
        var deadline = reporter.nextDeadline(after: now)
        if let linkDeadline = link.nextDeadline { deadline = min(deadline, linkDeadline) }
        if case .closed = link.phase { return }
        if case .failed = link.phase { return }
        if let scheduledFor, scheduledFor <= deadline, scheduled != nil { return }
        scheduled?.cancel()
        scheduledFor = deadline
        let delay = deadline > now ? Int64(deadline - now) : 0
        scheduled = eventLoop.scheduleTask(in: .nanoseconds(delay)) { [self] in
            scheduled = nil
            scheduledFor = nil
            tick()
        }
    }

    private func tick() {
        let now = MonotonicClock.now()
        if reporter.isDue(now: now) {
            sendRTCP(now: now)
            for speaker in speakers.values { speaker.sampleDelay(now: now) }
        }
        apply(link.tick(now: now))
    }

    // MARK: Status (on the loop)

    /// Every stream heard, one entry per identity: a member who rejoined (or whose stream
    /// was replaced on our rejoin) has their figures added up.
    func speakerSnapshots() -> [CallStatistics.Speaker] {
        let now = MonotonicClock.now()
        var byIdentity: [String: CallStatistics.Speaker] = [:]
        for snapshot in departed + speakers.values.map({ $0.snapshot(now: now) }) {
            guard let earlier = byIdentity[snapshot.identity] else {
                byIdentity[snapshot.identity] = snapshot
                continue
            }
            byIdentity[snapshot.identity] = CallStatistics.Speaker.merging(earlier, snapshot)
        }
        return byIdentity.values.sorted { $0.identity < $1.identity }
    }

    /// Loss on the way to us over every stream, before repair.
    func lossDown() -> Double? {
        var expected: UInt64 = 0
        var lost: Int64 = 0
        for speaker in speakers.values {
            guard let reception = speaker.reception else { continue }
            expected += reception.expected
            lost += max(0, reception.cumulativeLost)
        }
        return expected > 0 ? Double(lost) / Double(expected) : nil
    }

    static func unixNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Reads the relay's datagrams into the connection.
    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = AddressedEnvelope<ByteBuffer>
        let connection: RelayConnection

        init(connection: RelayConnection) { self.connection = connection }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let envelope = Self.unwrapInboundIn(data)
            guard envelope.remoteAddress == connection.relayAddress else {
                connection.droppedMedia += 1  // not from the relay
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
