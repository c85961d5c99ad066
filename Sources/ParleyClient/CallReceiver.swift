import ParleyAudio
import ParleyE2EE
import ParleyWire
import Synchronization

/// What the call does with the relay's datagrams, and what it sends back besides media, as
/// plain Swift with time passed in: the link's state machine (``RelayLink``), one
/// ``RemoteSpeaker`` per stream heard, RTCP both ways, and the encoder adaptation the relay's
/// reports drive. It does no I/O and reads no clock, so a test (or the fuzzer) drives it with
/// bytes and times; ``RelayConnection`` is the socket and the timer around it.
///
/// Everything here belongs to the network loop. The jitter buffers it fills are read by the
/// playback thread through ``PlaybackMix``, each behind its own lock.
public final class CallReceiver {
    private let configuration: CallConfiguration
    private let gate: MediaGate
    private let status: CallStatus
    private let mix: PlaybackMix
    private let epoch: UInt64
    /// Wall-clock time minus monotonic time, taken once: sender reports carry wall-clock
    /// (NTP) times, and the receiver reads no clock of its own.
    private let wallClockOffset: UInt64
    private let onEvent: (LinkEvent) -> Void

    public private(set) var link: RelayLink
    private var reporter: RTCPReporter
    private var adaptation: EncoderAdaptation
    /// Our packets sent when the last loss report came, so the next says how many it covers.
    private var packetsSentAtLastReport = 0
    private var speakers: [UInt32: RemoteSpeaker] = [:]
    private var members: [ControlMessage.Roster.Member] = []
    /// The streams the relay drops because a moderator muted their member, as the last roster said.
    private var serverMutedSSRCs: Set<UInt32> = []
    /// Figures of streams that ended (members who left, streams replaced on a rejoin), for the summary.
    private var departed: [CallStatistics.Speaker] = []
    /// What each stream's jitter buffer had learned of the path when our rejoin replaced it
    /// (its target delay, seconds). The new buffer starts from it instead of the cautious
    /// default: a talker silent at the rejoin sends a DTX packet every 400 ms, so measuring
    /// afresh would take 10 s, and their next words would come 40 ms late and then drift in.
    private var learnedTargets: [UInt32: Double] = [:]
    /// Datagrams from the relay that carried nothing usable: not RTP or RTCP once opened,
    /// unparsable, or our own SSRC.
    public private(set) var droppedMedia = 0
    /// Each RTP packet a speaker took, as it arrived (opened), with its arrival time: where
    /// the connection copies and traces them (`--copy-received-rtp`, `--packet-trace`).
    var mediaReceived: ((UnsafeRawBufferPointer, RTPPacketView, UInt64) -> Void)?

    /// Remote streams kept at most (a room's limit is far lower; this bounds memory).
    static let maximumSpeakers = 64

    /// How this member's frames leave (plain, sealed, or withheld until an end-to-end
    /// encrypted join is confirmed); the capture thread's encoder reads it.
    let sendingKey: SendingKey
    /// The room's end-to-end encryption, once a join said the room has it.
    private(set) var endToEnd: EndToEndSession?
    /// Packets of an end-to-end encrypted room from a stream no trusted member owns (yet):
    /// not played, as nothing opens them.
    public private(set) var unkeyedMedia = 0

    init(configuration: CallConfiguration, gate: MediaGate, status: CallStatus, mix: PlaybackMix, epoch: UInt64, adaptation: EncoderAdaptation,
         wallClockOffset: UInt64, sendingKey: SendingKey, onEvent: @escaping (LinkEvent) -> Void) {
        self.sendingKey = sendingKey
        self.configuration = configuration
        self.gate = gate
        self.status = status
        self.mix = mix
        self.epoch = epoch
        self.adaptation = adaptation
        self.wallClockOffset = wallClockOffset
        self.onEvent = onEvent
        var linkConfiguration = RelayLink.Configuration(
            relayAddress: configuration.relay, room: configuration.room, token: configuration.token,
            ssrc: configuration.ssrc, security: configuration.security)
        if let endToEnd = configuration.endToEnd {
            linkConfiguration.identityKey = endToEnd.identity.publicKeyBytes
        } else {
            linkConfiguration.capabilities.remove(.endToEndEncryption)
        }
        configuration.tuneLink(&linkConfiguration)
        link = RelayLink(configuration: linkConfiguration)
        reporter = Self.makeReporter(ssrc: configuration.ssrc, name: configuration.name)
    }

    /// A receiver of its own (its own encoder adaptation and shared state), for tests and the
    /// fuzzer; `epoch` is where the playback timeline starts, `wallClockNanoseconds` the wall
    /// clock at monotonic time `epoch`.
    public convenience init(configuration: CallConfiguration, mix: PlaybackMix, epoch: UInt64, wallClockNanoseconds: UInt64,
                            onEvent: @escaping (LinkEvent) -> Void = { _ in }) {
        let adaptation = EncoderAdaptation()
        self.init(configuration: configuration, gate: MediaGate(initialSetting: adaptation.setting),
                  status: CallStatus(initialBitrate: adaptation.setting.bitrate), mix: mix, epoch: epoch,
                  adaptation: adaptation, wallClockOffset: wallClockNanoseconds &- epoch, sendingKey: Self.sendingKey(for: configuration),
                  onEvent: onEvent)
    }

    /// How frames leave before the join says what the room is: an invite that asks for end-to-end
    /// encryption lets nothing out in the clear, ever.
    static func sendingKey(for configuration: CallConfiguration) -> SendingKey {
        SendingKey(configuration.endToEnd?.required == true ? .withheld : .plain)
    }

    private static func makeReporter(ssrc: UInt32, name: String?) -> RTCPReporter {
        let cname = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return RTCPReporter(ssrc: ssrc, cname: cname, name: name)
    }

    // MARK: Driving it

    /// Starts joining; returns the datagrams to send.
    public func start(now: UInt64) -> [[UInt8]] {
        apply(link.start(now: now), now: now)
    }

    /// Leaves the room (the link waits for the relay's acknowledgement, or its timeout).
    public func leave(now: UInt64) -> [[UInt8]] {
        apply(link.leave(now: now), now: now)
    }

    /// Tells the room our muted/deafened state; returns the datagrams to send.
    public func setMemberState(_ state: ControlMessage.MemberState, now: UInt64) -> [[UInt8]] {
        apply(link.setMemberState(state, now: now), now: now)
    }

    /// Sends a text to the room; returns the datagrams to send, or why it cannot go.
    public func say(_ text: String, now: UInt64) throws(TextRefusal) -> [[UInt8]] {
        apply(try link.say(text, now: now), now: now)
    }

    /// Sends a moderator's request; its answer arrives as ``LinkEvent/moderationAnswered(sequence:_:)``
    /// with the returned sequence (nil: not in the room, or too many requests waiting).
    public func moderate(_ request: ControlMessage.ModerationRequest, now: UInt64) -> (sequence: UInt32?, datagrams: [[UInt8]]) {
        let (sequence, output) = link.moderate(request, now: now)
        return (sequence, apply(output, now: now))
    }

    /// One datagram from the relay's address: control for the link, media for the speakers.
    /// Returns the datagrams to send in answer.
    public func receive(_ datagram: UnsafeRawBufferPointer, now: UInt64) -> [[UInt8]] {
        let (output, media) = link.receive(datagram: datagram, now: now)
        if let media { handleMedia(media, now: now) }
        return apply(output, now: now)
    }

    /// The timers: RTCP when due (with a delay sample from each stream), and the link's
    /// retransmissions, keepalives and timeouts. Returns the datagrams to send.
    public func tick(now: UInt64) -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        if reporter.isDue(now: now) {
            if let report = makeReport(now: now) { datagrams.append(report) }
            for speaker in speakers.values { speaker.sampleDelay(now: now) }
        }
        if let endToEnd {
            endToEnd.tick(now: now)
            for speaker in speakers.values { speaker.retryHeld(now: now) }
            tellEndToEndNotices()
        }
        return datagrams + apply(link.tick(now: now), now: now)
    }

    /// When ``tick(now:)`` should next run; nil once the link has ended.
    public func nextDeadline(after now: UInt64) -> UInt64? {
        switch link.phase {
        case .closed, .failed: return nil
        default: break
        }
        var report = reporter.nextDeadline(after: now)
        // A fresh key's switch and held packets are checked a few times a second.
        if endToEnd != nil { report = min(report, now &+ EndToEndSession.tickNanoseconds) }
        return link.nextDeadline.map { min($0, report) } ?? report
    }

    // MARK: Media

    private func handleMedia(_ bytes: UnsafeRawBufferPointer, now: UInt64) {
        switch PacketKind(bytes) {
        case .rtp:
            guard let packet = try? RTPPacketView(parsing: bytes), packet.ssrc != link.ssrc,
                  let speaker = speaker(for: packet.ssrc, now: now) else {
                droppedMedia += 1
                return
            }
            // In an end-to-end encrypted room a frame is played only once opened with its
            // sender's key: a stream no trusted member owns is not played at all.
            if link.joined?.isEndToEndEncrypted == true, !attachDecryptor(to: speaker) {
                unkeyedMedia += 1
                return
            }
            speaker.receive(packet, now: now, seconds: secondsOnTimeline(now))
            guard let mediaReceived else { return }
            if let decryptor = speaker.decryptor {
                // The diagnostics get the person's own audio as plain RTP, opened here.
                guard let opened = decryptor.opened(packet, now: now) else { return }
                opened.withUnsafeBytes { raw in
                    guard let view = try? RTPPacketView(parsing: raw) else { return }
                    mediaReceived(raw, view, now)
                }
            } else {
                mediaReceived(bytes, packet, now)
            }
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

    /// Gives the speaker what opens its member's frames, if the stream is a trusted member's;
    /// false when nothing can.
    private func attachDecryptor(to speaker: RemoteSpeaker) -> Bool {
        guard let keys = endToEnd?.keys(forStream: speaker.ssrc) else {
            speaker.decryptor = nil
            return false
        }
        if speaker.decryptor?.keys !== keys { speaker.decryptor = StreamDecryptor(keys: keys, ssrc: speaker.ssrc) }
        return true
    }

    /// Seconds since 1970 at monotonic time `now` (what pinned keys are dated with).
    private func wallSeconds(_ now: UInt64) -> Int64 { Int64((now &+ wallClockOffset) / 1_000_000_000) }

    private func secondsOnTimeline(_ now: UInt64) -> Double { Double(Int64(bitPattern: now &- epoch)) / 1e9 }

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

    private func removeSpeaker(_ ssrc: UInt32, now: UInt64) {
        guard let speaker = speakers.removeValue(forKey: ssrc) else { return }
        mix.remove(ssrc: ssrc)
        guard speaker.lastPacketAt != nil else { return }
        // Kept for the summary: a stream that ended is heard no more, whenever its last packet came.
        var ended = speaker.snapshot(now: now)
        ended.receiving = false
        departed.append(ended)
    }

    /// Ends `ssrc`'s stream here and starts a new one for what comes next, keeping what its
    /// jitter buffer learned of the path: the packets between are not the network's to count.
    private func restartStream(_ ssrc: UInt32, now: UInt64) {
        guard let speaker = speakers[ssrc] else { return }
        if (speaker.reception?.received ?? 0) >= RemoteSpeaker.packetsToLearnJitter {
            learnedTargets[ssrc] = speaker.buffer.statistics.targetDelayMilliseconds / 1_000
        }
        removeSpeaker(ssrc, now: now)
    }

    // MARK: RTCP

    /// The relay terminates RTCP per leg: its receiver reports say what it received of our
    /// stream, and drive the encoder; members' sender reports reach us with nothing but their
    /// own stream's timing and counts.
    private func handleRTCP(_ packets: [RTCPPacket], now: UInt64) {
        for packet in packets {
            switch packet {
            case let .receiverReport(report) where speakers[report.ssrc] == nil:
                for block in report.reportBlocks where block.ssrc == link.ssrc {
                    let arrival = NTPTimestamp(unixNanoseconds: now &+ wallClockOffset)
                    // The packets this report covers: ours sent since the last one (our own count).
                    let sent = gate.sent.packets.load(ordering: .relaxed)
                    status.update { state in
                        state.lossUp = block.lossFraction
                        // Cumulative lost over what we sent: the relay counts from its first packet of ours.
                        if sent > 0 {
                            state.lossUpTotal = min(1, max(0, Double(block.cumulativeLost) / Double(sent)))
                        }
                        if state.roundTripNanoseconds == nil, let rtt = block.roundTripTime(arrival: arrival) {
                            state.roundTripNanoseconds = UInt64(rtt) * 1_000_000_000 / 65_536
                        }
                    }
                    let covered = max(0, sent - packetsSentAtLastReport)
                    packetsSentAtLastReport = sent
                    if let setting = adaptation.report(lossFraction: block.lossFraction, packets: covered) {
                        gate.update { $0.encoder = setting }
                    }
                }
            case let .senderReport(report):
                speakers[report.ssrc]?.receiveSenderReport(report, now: now)
            default:
                break
            }
        }
    }

    /// Redundancy only while every listener can read it: a member that cannot (an older
    /// client) would drop every RED packet and hear nothing of us.
    private func listenersChanged(_ roster: [ControlMessage.Roster.Member]) {
        let listeners = roster.filter { $0.ssrc != link.ssrc }
        let allRead = listeners.allSatisfy { $0.capabilities.contains(.redundantAudio) }
        guard let setting = adaptation.listeners(allReadRedundancy: allRead) else { return }
        gate.update { $0.encoder = setting }
    }

    private func makeReport(now: UInt64) -> [UInt8]? {
        guard link.phase == .active else { return nil }
        let blocks = speakers.values.sorted { $0.ssrc < $1.ssrc }.compactMap { $0.makeReportBlock(now: now) }
        let sender = gate.sent.sender
        guard let bytes = try? reporter.compound(sender: sender, blocks: blocks, now: now, unixNanoseconds: now &+ wallClockOffset) else {
            return nil
        }
        return seal(bytes, now: now)
    }

    /// Protects an outgoing packet as the link is set up: sealed, or as it is with `--insecure`.
    func seal(_ packet: [UInt8], now: UInt64) -> [UInt8]? {
        switch configuration.security {
        case .insecure: return packet
        case .secure: return packet.withUnsafeBytes { link.protector.protect($0, nowNanoseconds: now) }
        }
    }

    // MARK: Link events

    /// Acts on the link's events; returns the datagrams it asked to send, and those its
    /// events led to (media keys for a new roster).
    private func apply(_ output: RelayLink.Output, now: UInt64) -> [[UInt8]] {
        var datagrams = output.datagrams
        for event in output.events { datagrams += handle(event, now: now) }
        return datagrams
    }

    private func handle(_ event: LinkEvent, now: UInt64) -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        switch event {
        case let .joined(identity, _, canPublish, rejoin):
            // Before the media gate opens: the capture thread must seal from the first frame.
            if let failure = takePartInEndToEnd(identity: identity) {
                datagrams += apply(link.abandon(failure, now: now), now: now)
                return datagrams
            }
            if rejoin {
                // A new timeline: the old buffers would add the outage's length as delay. What
                // they learned of the path's jitter still holds, so the new ones start from it.
                learnedTargets = [:]
                for (ssrc, speaker) in speakers where (speaker.reception?.received ?? 0) >= RemoteSpeaker.packetsToLearnJitter {
                    learnedTargets[ssrc] = speaker.buffer.statistics.targetDelayMilliseconds / 1_000
                }
                for ssrc in Array(speakers.keys) { removeSpeaker(ssrc, now: now) }
            }
            if reporter.ssrc != link.ssrc {
                // The link took a new SSRC (ours was held by another member): our reports follow it.
                reporter = Self.makeReporter(ssrc: link.ssrc, name: configuration.name)
            }
            gate.update { state in
                state.ssrc = link.ssrc
                state.open = canPublish
                state.joinGeneration += 1
            }
            status.update { state in
                state.identity = identity
                state.phase = .inCall
                if rejoin { state.rejoins += 1 }
            }
        case let .roster(roster):
            members = roster
            listenersChanged(roster)
            if let endToEnd {
                let keys = endToEnd.rosterChanged(roster, now: now, wallSeconds: wallSeconds(now))
                datagrams += apply(link.sendMediaKeys(keys, now: now), now: now)
                tellEndToEndNotices()
            }
            // A member a moderator mutes keeps sending, and the relay drops it all: the
            // sequence numbers it skips are the mute's, not the network's. Its stream starts
            // afresh from here, so neither its loss nor its concealment counts the mute (nor
            // do the packets dropped before this roster came, which no packet after will
            // resolve in the old stream's figures).
            let mutedNow = Set(roster.filter(\.isServerMuted).map(\.ssrc))
            for ssrc in mutedNow.subtracting(serverMutedSSRCs) { restartStream(ssrc, now: now) }
            serverMutedSSRCs = mutedNow
            status.update { state in
                state.members = roster.map(\.identity).sorted()
                state.memberStates = Dictionary(roster.map { ($0.identity, $0.state) }, uniquingKeysWith: { $1 })
                state.serverMuted = roster.filter(\.isServerMuted).map(\.identity).sorted()
            }
            let present = Set(roster.map(\.ssrc))
            for member in roster where member.ssrc != link.ssrc && member.canPublish {
                if let speaker = speaker(for: member.ssrc, now: now), speaker.identity != member.identity {
                    speaker.identity = member.identity
                    mix.name(ssrc: member.ssrc, identity: member.identity)
                }
            }
            if endToEnd != nil {
                for speaker in speakers.values { _ = attachDecryptor(to: speaker) }
            }
            // A stream not in the roster has left, unless it is so new that the roster
            // naming it is still on its way.
            for (ssrc, speaker) in speakers where !present.contains(ssrc) {
                if speaker.identity != nil || now &- speaker.createdAt > 2_000_000_000 {
                    removeSpeaker(ssrc, now: now)
                }
            }
        case let .roundTrip(nanoseconds):
            status.update { state in
                state.roundTripNanoseconds = state.roundTripNanoseconds.map { $0 - $0 / 4 + nanoseconds / 4 } ?? nanoseconds
            }
        case .reconnecting:
            gate.update { $0.open = false }
            status.update { $0.phase = .reconnecting }
        case .redirected:
            gate.update { $0.open = false }
        case .failed, .left:
            gate.update { $0.open = false }
            status.update { $0.phase = .ended }
        case let .mediaKeys(keys):
            endToEnd?.received(keys, now: now)
            for speaker in speakers.values { speaker.retryHeld(now: now) }
            publishEndToEndStatus()
        case .text, .textRefused, .endToEnd:
            break  // for the call (CallSession) to show and keep
        case .moderationAnswered:
            break
        }
        onEvent(event)
        return datagrams
    }

    // MARK: End-to-end encryption

    /// The join is confirmed: in an end-to-end encrypted room, take part (from the first
    /// frame); in a room without, send plainly, unless the invite or an earlier join of this
    /// call said the room must be encrypted. Returns why the call cannot go on, if it cannot.
    private func takePartInEndToEnd(identity: String) -> LinkFailure? {
        guard link.joined?.isEndToEndEncrypted == true else {
            if configuration.endToEnd?.required == true || endToEnd != nil {
                sendingKey.use(.withheld)
                return .endToEndEncryptionMissing
            }
            sendingKey.use(.plain)
            return nil
        }
        guard let settings = configuration.endToEnd else {
            // The relay let in a client that did not offer to take part: it seals nothing and
            // hears nothing, so it sends nothing either.
            sendingKey.use(.withheld)
            return .endToEndEncryptionMissing
        }
        if endToEnd == nil {
            endToEnd = EndToEndSession(identity: settings.identity, room: configuration.room, pins: settings.pins,
                                       pinsPath: settings.pinsPath, sendingKey: sendingKey)
        }
        endToEnd?.joined(identity: identity, ssrc: link.ssrc)
        publishEndToEndStatus()
        return nil
    }

    /// Hands the end-to-end notices to the call, and the figures to the status.
    private func tellEndToEndNotices() {
        guard let endToEnd else { return }
        let notices = endToEnd.takeNotices()
        publishEndToEndStatus()
        for notice in notices { onEvent(.endToEnd(notice)) }
    }

    private func publishEndToEndStatus() {
        guard let endToEnd else { return }
        let status = endToEnd.status()
        self.status.update { $0.endToEnd = status }
    }

    /// The person accepted `identity`'s changed key; returns the datagrams to send, or nil when
    /// no member of that name takes part.
    public func trust(_ identity: String, now: UInt64) -> [[UInt8]]? {
        guard let endToEnd, let keys = endToEnd.accept(identity: identity, now: now, wallSeconds: wallSeconds(now)) else { return nil }
        let datagrams = apply(link.sendMediaKeys(keys, now: now), now: now)
        tellEndToEndNotices()
        return datagrams
    }

    // MARK: Figures

    /// Every stream heard, one entry per identity: a member who rejoined (or whose stream
    /// was replaced on our rejoin) has their figures added up.
    public func speakerSnapshots(now: UInt64) -> [CallStatistics.Speaker] {
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
    public func lossDown() -> Double? {
        var expected: UInt64 = 0
        var lost: UInt64 = 0
        for speaker in speakers.values {
            guard let reception = speaker.reception else { continue }
            expected &+= reception.expected
            lost &+= UInt64(max(0, reception.cumulativeLost))
        }
        return expected > 0 ? Double(lost) / Double(expected) : nil
    }

    /// The encoder setting the relay's reports have led to.
    public var encoderSetting: EncoderAdaptation.Setting { gate.snapshot.encoder }
}
