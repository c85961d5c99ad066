import ParleyWebRTC
import ParleyWire
import Synchronization

/// The frames each voice's last packets carried, kept for one browser so that its copy of a
/// voice's RED packet also carries the frame from two packets back.
///
/// Why: a `parley` sender's RED holds the frames one and three packets back. A `parley`
/// listener that is losing packets holds 60–75 ms and uses both; Chromium's NetEq holds about
/// 40 ms, and a page cannot ask it for more (`jitterBufferTarget` reaches only streams whose
/// SSRC the answer signalled). NetEq does not advance its timeline while it conceals, so a
/// frame that arrives in the first packet after a gap is still played; when a later one
/// arrives instead, it has already moved on to the newer frames it holds. So two lost packets
/// in a row cost a browser the older frame, which only the copy three back carried. With the
/// copy two back added, the first packet after a burst of up to three carries every frame of
/// it, whatever the browser's buffer.
///
/// The relay forwarded those packets itself, so the frames are the sender's own bytes (in an
/// end-to-end encrypted room, its sealed frames, which the page opens block by block). Only
/// RED packets are completed; Opus packets are remembered but pass as they came, since the
/// sender sends RED whenever a listener's path loses. Bounded: ``voiceCapacity`` voices (the
/// least recently heard is forgotten), two frames each of at most ``frameCapacity`` bytes;
/// nothing from the network is trusted for a length or an index, and sequence numbers and
/// timestamps are compared with wrapping arithmetic only. Its memory is its own (allocated
/// once, freed at its end), and ``BrowserRedundancy`` keeps it behind a lock.
struct EarlierFrames: ~Copyable, @unchecked Sendable {
    /// Voices remembered at once: as many as a browser has slots.
    static let voiceCapacity = WebRTCOffer.maximumSlots
    /// A frame longer than this is not kept (Opus at 20 ms is about 80 bytes at 32 kb/s and
    /// 320 at 128 kb/s).
    static let frameCapacity = 512
    /// How far back the added block reaches, in packets.
    static let distance: UInt16 = 2
    /// The most bytes a copy grows by.
    static let maximumGrowth = 4 + frameCapacity
    /// A copy is not grown beyond this, so that it stays within any path's MTU.
    static let maximumPacketSize = 1_200

    private struct Frame {
        var sequence: UInt16 = 0
        var timestamp: UInt32 = 0
        /// 0: nothing kept.
        var count = 0
    }

    private struct Voice {
        var ssrc: UInt32 = 0
        var isUsed = false
        var lastHeardNanoseconds: UInt64 = 0
        /// Indexed by the sequence number's parity: the packet two back shares a cell with
        /// this one, which is read before it is overwritten.
        var frames = (Frame(), Frame())
    }

    private let voices: UnsafeMutablePointer<Voice>
    /// `voiceCapacity * 2` cells of `frameCapacity` bytes.
    private let storage: UnsafeMutableRawPointer

    init() {
        voices = .allocate(capacity: Self.voiceCapacity)
        voices.initialize(repeating: Voice(), count: Self.voiceCapacity)
        storage = .allocate(byteCount: Self.voiceCapacity * 2 * Self.frameCapacity, alignment: 16)
    }

    deinit {
        voices.deinitialize(count: Self.voiceCapacity)
        voices.deallocate()
        storage.deallocate()
    }

    /// Completes the RTP `packet` (parsed from the first bytes of `buffer`, renumbered for
    /// the browser: `red` and `opus` are its payload types) with the frame two packets back
    /// when it is RED without one, and remembers its primary. Returns its length, grown (up to
    /// `buffer.count`) or not.
    mutating func complete(_ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer, red: UInt8, opus: UInt8, nowNanoseconds: UInt64) -> Int {
        packet.requireParsed(from: buffer)
        let count = packet.bytes.count
        guard packet.paddingCount == 0 else { return count }
        let isRED = packet.payloadType == red
        let primaryCount: Int
        if isRED {
            guard let payload = try? REDPayloadView(parsing: packet.payload), payload.primary.payloadType == opus else { return count }
            primaryCount = payload.primary.data.count
        } else {
            guard packet.payloadType == opus else { return count }
            primaryCount = packet.payload.count
        }
        let index = voiceIndex(packet.ssrc, nowNanoseconds: nowNanoseconds)
        let cell = Int(packet.sequenceNumber & 1)
        var length = count
        if isRED {
            let earlier = frame(index, cell)
            let offset = packet.timestamp &- earlier.timestamp
            if earlier.count > 0, earlier.sequence == packet.sequenceNumber &- Self.distance,
               offset >= 1, offset <= UInt32(REDPayload.maximumTimestampOffset),
               count + 4 + earlier.count <= Self.maximumPacketSize,
               let grown = REDPayload.insert(
                   UnsafeRawBufferPointer(start: cellBytes(index, cell), count: earlier.count), timestampOffset: UInt16(offset),
                   into: packet, in: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, Self.maximumPacketSize)])) {
                length = grown
            }
        }
        // The primary is the packet's last bytes (no padding), wherever the insertion left it.
        let kept = frame(index, cell)
        let isNewer = kept.count == 0 || Int16(bitPattern: packet.sequenceNumber &- kept.sequence) > 0
        if isNewer, primaryCount > 0, primaryCount <= Self.frameCapacity, let base = buffer.baseAddress {
            cellBytes(index, cell).copyMemory(from: base + (length - primaryCount), byteCount: primaryCount)
            setFrame(index, cell, Frame(sequence: packet.sequenceNumber, timestamp: packet.timestamp, count: primaryCount))
        } else if isNewer {
            setFrame(index, cell, Frame())
        }
        return length
    }

    /// The voice's place: where it is remembered, else a free one, else the least recently
    /// heard one's, forgotten.
    private func voiceIndex(_ ssrc: UInt32, nowNanoseconds: UInt64) -> Int {
        var chosen = 0
        for index in 0..<Self.voiceCapacity {
            let voice = voices[index]
            if voice.isUsed, voice.ssrc == ssrc {
                voices[index].lastHeardNanoseconds = max(voice.lastHeardNanoseconds, nowNanoseconds)
                return index
            }
            let best = voices[chosen]
            if best.isUsed, !voice.isUsed || voice.lastHeardNanoseconds < best.lastHeardNanoseconds { chosen = index }
        }
        voices[chosen] = Voice(ssrc: ssrc, isUsed: true, lastHeardNanoseconds: nowNanoseconds)
        return chosen
    }

    private func frame(_ voice: Int, _ cell: Int) -> Frame {
        cell == 0 ? voices[voice].frames.0 : voices[voice].frames.1
    }

    private func setFrame(_ voice: Int, _ cell: Int, _ frame: Frame) {
        if cell == 0 { voices[voice].frames.0 = frame } else { voices[voice].frames.1 = frame }
    }

    private func cellBytes(_ voice: Int, _ cell: Int) -> UnsafeMutableRawPointer {
        storage + (voice * 2 + cell) * Self.frameCapacity
    }
}

/// A browser's ``EarlierFrames``, behind a lock: several loops write copies for one browser.
/// Made only for a browser that takes RED. (`package` for parley-bench's allocation count.)
package final class BrowserRedundancy: Sendable {
    private let frames = Mutex(EarlierFrames())

    package init() {}

    /// See ``EarlierFrames/complete(_:in:red:opus:nowNanoseconds:)``.
    package func complete(_ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer, red: UInt8, opus: UInt8, nowNanoseconds: UInt64) -> Int {
        frames.withLock { $0.complete(packet, in: buffer, red: red, opus: opus, nowNanoseconds: nowNanoseconds) }
    }
}
