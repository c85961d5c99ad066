import ParleyWebRTC
import ParleyWire
import Synchronization

/// Which of a browser's slots (receiving sections, ``WebRTCOffer/slotMids``) carries which
/// member's voice: the first packet of a voice takes a free slot, and keeps it while it goes on.
///
/// A slot whose voice sent nothing for ``idleNanoseconds`` (it left, or is muted and sends
/// nothing) is given to the next voice that needs one, the longest-silent first; until a slot
/// is needed it stays with its voice, so a member who pauses comes back on the same track, at
/// the volume the person chose for them. A voice that finds every slot busy has none (the
/// caller plays it on the shared section) and takes one as soon as one frees. Nothing here
/// comes from the network but an SSRC and our own clock; no arithmetic can overflow.
struct ReceiverSlots: Sendable {
    /// How long a slot's voice must be silent before another voice may take the slot: longer
    /// than a parley client's DTX gap (it sends at least every 400 ms while it is live), so
    /// only a member that left, muted or deafened loses its slot.
    static let idleNanoseconds: UInt64 = 3_000_000_000

    private(set) var holders: [UInt32?]
    private var lastHeard: [UInt64]

    init(count: Int) {
        holders = Array(repeating: nil, count: count)
        lastHeard = Array(repeating: 0, count: count)
    }

    /// The slot `ssrc`'s packet goes on, or nil when every slot is busy.
    mutating func slot(for ssrc: UInt32, nowNanoseconds now: UInt64) -> Int? {
        var free: Int?
        var stalest: Int?
        for index in holders.indices {
            guard let holder = holders[index] else {
                if free == nil { free = index }
                continue
            }
            if holder == ssrc {
                lastHeard[index] = max(lastHeard[index], now)
                return index
            }
            if now > lastHeard[index], now - lastHeard[index] >= Self.idleNanoseconds, stalest.map({ lastHeard[index] < lastHeard[$0] }) ?? true {
                stalest = index
            }
        }
        guard let chosen = free ?? stalest else { return nil }
        holders[chosen] = ssrc
        lastHeard[chosen] = now
        return chosen
    }
}

/// A browser's slots and how a copy for it says which one it is on: the MID of the slot its
/// voice holds (or of the shared section when none is free), written into the copy's header
/// extension as the browser negotiated it (``RTPMidStamp``). Copies for one browser are written
/// by several loops, so the slots are behind a lock; nothing here runs for any other kind of leg.
final class BrowserReceivers: Sendable {
    /// The browser's id for its audio level element, kept in the copies; the rest is dropped.
    let audioLevelID: UInt8?
    /// Each slot's MID element, in the slots' order.
    private let slotElements: [[UInt8]]
    /// The shared section's MID element: the browser's sending section, when it also receives.
    private let sharedElement: [UInt8]?
    private let slots: Mutex<ReceiverSlots>

    /// Nil when the browser did not negotiate the MID extension: then every voice arrives
    /// unmarked on its one receiving section, as before slots.
    init?(offer: WebRTCOffer) {
        guard let id = offer.midExtensionID else { return nil }
        slotElements = offer.slotMids.compactMap { RTPMidStamp.element(mid: $0, id: id) }
        sharedElement = offer.sendingMid.flatMap { mid in offer.receivingMids.contains(mid) ? RTPMidStamp.element(mid: mid, id: id) : nil }
        audioLevelID = offer.audioLevelExtensionID
        slots = Mutex(ReceiverSlots(count: slotElements.count))
    }

    /// The slot each voice holds now (for tests and the page's roster).
    var holders: [UInt32?] { slots.withLock { $0.holders } }

    /// Writes the MID of the slot the RTP packet's voice is on into it, in place (it may grow
    /// up to `packet.count`); its new length, or nil when it must not be sent (no slot and no
    /// shared section, or no room).
    func stamp(_ packet: UnsafeMutableRawBufferPointer, count: Int, nowNanoseconds: UInt64) -> Int? {
        guard count >= RTPHeader.fixedSize else { return nil }
        let ssrc = UInt32(bigEndian: packet.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        let slot = slots.withLock { $0.slot(for: ssrc, nowNanoseconds: nowNanoseconds) }
        guard let element = slot.map({ slotElements[$0] }) ?? sharedElement else { return nil }
        return element.withUnsafeBytes { RTPMidStamp.stamp(packet, count: count, midElement: $0, keepingID: audioLevelID) }
    }
}
