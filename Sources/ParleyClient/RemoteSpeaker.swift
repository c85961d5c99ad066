import ParleyAudio
import ParleyWire

/// One remote member's stream as this client receives it: the jitter buffer the playback
/// thread pulls from, and the RFC 3550 reception statistics its receiver reports carry.
///
/// Owned by the network loop (the buffer itself is shared with the playback thread through
/// its own lock). Created on the stream's first packet or when the roster names it;
/// removed when the member leaves, and replaced on a rejoin so a stale timeline adds no delay.
final class RemoteSpeaker {
    let ssrc: UInt32
    var identity: String?
    let buffer: SharedJitterBuffer
    private(set) var reception: RTPReceptionStatistics?
    /// Monotonic time of the last packet, and of creation.
    private(set) var lastPacketAt: UInt64?
    let createdAt: UInt64
    /// Packets that were not valid RTP for this stream (an unknown payload type, a RED
    /// payload that is malformed or not Opus).
    private(set) var rejected = 0
    /// The jitter-buffer delay, sampled about once a second while packets arrive.
    private var delaySum = 0.0
    private var delaySamples = 0

    /// Packets after which the buffer's target reflects the path rather than its default.
    static let packetsToLearnJitter: UInt64 = 50

    init(ssrc: UInt32, identity: String?, configuration: JitterBuffer.Configuration, now: UInt64) throws {
        self.ssrc = ssrc
        self.identity = identity
        buffer = try SharedJitterBuffer(configuration)
        createdAt = now
    }

    /// Opens this stream's frames in an end-to-end encrypted room (nil in a room without).
    var decryptor: StreamDecryptor?

    /// Files one RTP packet that arrived at `now` (nanoseconds; `seconds` on the playback
    /// timeline): its frame, and any redundant copies of earlier ones it carries, each opened
    /// first in an end-to-end encrypted room. A packet whose key has not come yet is held and
    /// filed when it does (``retryHeld(now:)``), with the time it arrived.
    func receive(_ packet: RTPPacketView, now: UInt64, seconds: Double) {
        guard let decryptor else {
            var accepted = false
            buffer.inserting(arrival: seconds) { insert in
                accepted = IncomingFrames.forEach(in: packet) { frame in
                    insert(frame.payload, frame.sequenceNumber, frame.timestamp, frame.isRedundant)
                }
            }
            guard accepted else {
                rejected += 1
                return
            }
            record(packet, now: now)
            return
        }
        switch file(packet, decryptor: decryptor, now: now, seconds: seconds) {
        case .accepted:
            record(packet, now: now)
        case .keyMissing:
            decryptor.hold(packet.bytes, arrivedAt: now, seconds: seconds)
            record(packet, now: now)  // the network delivered it: the loss figures say so
        case .rejected:
            rejected += 1
        }
    }

    /// Files the packets held for a key, if keys arrived since; any still without one wait on.
    func retryHeld(now: UInt64) {
        guard let decryptor else { return }
        for held in decryptor.takeHeld(now: now) {
            held.packet.withUnsafeBytes { bytes in
                guard let packet = try? RTPPacketView(parsing: bytes) else { return }
                if file(packet, decryptor: decryptor, now: now, seconds: held.seconds) == .keyMissing {
                    decryptor.hold(bytes, arrivedAt: held.arrivedAt, seconds: held.seconds)
                }
            }
        }
    }

    /// Opens the packet's frames and files them, under the jitter buffer's lock once.
    private func file(_ packet: RTPPacketView, decryptor: StreamDecryptor, now: UInt64, seconds: Double) -> IncomingFrames.Unwrapped {
        var outcome = IncomingFrames.Unwrapped.rejected
        buffer.inserting(arrival: seconds) { insert in
            outcome = IncomingFrames.forEach(
                payloadType: packet.payloadType, payload: packet.payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp,
                open: { decryptor.open($0, timestamp: $1, now: now) }, { insert($0.payload, $0.sequenceNumber, $0.timestamp, $0.isRedundant) })
        }
        return outcome
    }

    /// Reception statistics count the packets that came, whatever copies they carry: the
    /// loss they report is the path's, which the sender's protection answers.
    private func record(_ packet: RTPPacketView, now: UInt64) {
        if reception == nil {
            reception = RTPReceptionStatistics(ssrc: ssrc, clockRate: AudioClock.sampleRate, firstSequence: packet.sequenceNumber)
        }
        reception?.record(sequence: packet.sequenceNumber, rtpTimestamp: packet.timestamp, arrivalNanoseconds: now)
        lastPacketAt = now
        packetsSinceDelaySample &+= 1
    }

    func receiveSenderReport(_ report: RTCPSenderReport, now: UInt64) {
        reception?.recordSenderReport(report.ntpTimestamp, arrivalNanoseconds: now)
    }

    /// The report block for our next RTCP packet, once the stream is valid (RFC 3550 A.1).
    func makeReportBlock(now: UInt64) -> RTCPReportBlock? {
        guard var reception, reception.isValid else { return nil }
        let block = reception.makeReportBlock(nowNanoseconds: now)
        self.reception = reception
        return block
    }

    /// Samples the jitter buffer's delay (the network loop calls this about once a second),
    /// while the speaker talks: in their silences the figure means nothing.
    func sampleDelay(now: UInt64) {
        defer { packetsSinceDelaySample = 0 }
        // A talker sends 50 packets a second; DTX silence, 2 or 3.
        guard isReceiving(now: now), packetsSinceDelaySample >= 25 else { return }
        delaySum += buffer.statistics.currentDelayMilliseconds
        delaySamples += 1
    }

    /// Counted here rather than read off the reception statistics, whose count starts again
    /// from zero whenever the sender's sequence jumps (RFC 3550 A.1's restart).
    private var packetsSinceDelaySample = 0

    func isReceiving(now: UInt64) -> Bool {
        guard let lastPacketAt else { return false }
        return now &- lastPacketAt < 1_000_000_000
    }

    /// Loss before repair, over the whole stream: what the network did.
    var lossFraction: Double? {
        guard let reception, reception.expected > 0 else { return nil }
        return max(0, Double(reception.cumulativeLost) / Double(reception.expected))
    }

    func snapshot(now: UInt64) -> CallStatistics.Speaker {
        let jitter = buffer.statistics
        // A dry spell still going on is not counted until a packet says what it was.
        let underruns = jitter.underruns - (jitter.unresolvedUnderrunSamples > 0 ? 1 : 0)
        // The frames that were due: played from their packet or a later one's redundant
        // copy, rebuilt from the next one's FEC, or concealed because they were lost. (The
        // buffer's concealment while it waits in a dry spell is not in here: in a DTX
        // silence it is the sender's silence.)
        let frames = Double(jitter.decodedFrames + jitter.redundancyRecovered + jitter.fecRecovered + jitter.concealedFrames)
        func percent(_ value: Double) -> Double { frames > 0 ? 100 * value / frames : 0 }
        return CallStatistics.Speaker(
            identity: identity ?? String(ssrc, radix: 16), ssrc: ssrc,
            packetsReceived: Int(reception?.received ?? 0),
            packetsLost: max(0, Int(reception?.cumulativeLost ?? 0)),
            lossPercent: (lossFraction ?? 0) * 100,
            fecRecoveredFrames: jitter.fecRecovered,
            fecRecoveredPercent: percent(Double(jitter.fecRecovered)),
            redundancyRecoveredFrames: jitter.redundancyRecovered,
            redundancyRecoveredPercent: percent(Double(jitter.redundancyRecovered)),
            concealedFrames: jitter.concealedFrames,
            concealedPercent: percent(Double(jitter.concealedFrames)),
            underruns: underruns,
            latePackets: jitter.late,
            duplicatePackets: jitter.duplicates,
            jitterBufferDelayMilliseconds: jitter.currentDelayMilliseconds,
            jitterBufferTargetMilliseconds: jitter.targetDelayMilliseconds,
            networkJitterMilliseconds: (reception?.jitterSeconds ?? 0) * 1_000,
            restarts: jitter.restarts,
            audioFrames: frames,
            meanJitterBufferDelayMilliseconds: delaySamples > 0 ? delaySum / Double(delaySamples) : nil,
            receiving: isReceiving(now: now),
            acceleratedMilliseconds: Double(jitter.acceleratedSamples) * 1_000 / Double(AudioClock.sampleRate),
            stretchedMilliseconds: Double(jitter.expandedSamples + jitter.waitStretchedSamples) * 1_000 / Double(AudioClock.sampleRate))
    }
}
