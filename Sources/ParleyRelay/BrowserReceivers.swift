import ParleyWebRTC
import ParleyWire
import Synchronization

/// Which of a browser's slots (receiving sections, ``WebRTCOffer/slotMids``) carries which
/// member's voice, and which voices share the browser's sending section instead.
///
/// A voice is placed by its first packet, and stays where it was placed while it is in the
/// room: a free slot if there is one, else the shared section. It never moves, because the
/// browser binds an SSRC to the section its first packets named (Chromium keeps delivering it
/// to the stream it made there, whatever MID later packets carry). A slot frees when its voice
/// leaves: when a roster that named it no longer does, or, for a voice no roster named (one the
/// page never saw), when it sent nothing for ``unlistedIdleNanoseconds``. A freed slot goes to
/// the next new voice; the browser plays that new SSRC on the same section as that slot's
/// track. Nothing here comes from the network but SSRCs and our own clock; no arithmetic can
/// overflow, and what is kept is bounded by the room's size.
struct ReceiverSlots: Sendable {
    enum Placement: Sendable, Hashable {
        case slot(Int)
        case shared
    }

    /// How long a voice no roster named keeps its slot after its last packet.
    static let unlistedIdleNanoseconds: UInt64 = 10_000_000_000
    /// Voices remembered on the shared section; beyond it a new voice is shared unremembered.
    static let maximumSharedVoices = 1_024

    private(set) var holders: [UInt32?]
    private var lastHeard: [UInt64]
    private var shared: Set<UInt32> = []
    /// The SSRCs the latest roster named.
    private var listed: Set<UInt32> = []

    init(count: Int) {
        holders = Array(repeating: nil, count: count)
        lastHeard = Array(repeating: 0, count: count)
    }

    /// Where `ssrc`'s packet goes.
    mutating func placement(of ssrc: UInt32, nowNanoseconds now: UInt64) -> Placement {
        var free: Int?
        for index in holders.indices {
            guard let holder = holders[index] else {
                if free == nil { free = index }
                continue
            }
            if holder == ssrc {
                lastHeard[index] = max(lastHeard[index], now)
                return .slot(index)
            }
            if free == nil, !listed.contains(holder), now > lastHeard[index], now - lastHeard[index] >= Self.unlistedIdleNanoseconds {
                free = index
            }
        }
        if shared.contains(ssrc) { return .shared }
        guard let free else {
            if shared.count < Self.maximumSharedVoices { shared.insert(ssrc) }
            return .shared
        }
        holders[free] = ssrc
        lastHeard[free] = now
        return .slot(free)
    }

    /// The room's roster as the browser is told it: the voices it named before and no longer
    /// does have left, and their places are free.
    mutating func rosterChanged(_ ssrcs: Set<UInt32>) {
        let left = listed.subtracting(ssrcs)
        for index in holders.indices where holders[index].map(left.contains) == true { holders[index] = nil }
        shared.subtract(left)
        listed = ssrcs
    }
}

/// A browser's slots and how a copy for it says which one it is on: the MID of the slot its
/// voice holds (or of the shared section when it has none), written into the copy's header
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

    /// The slot each voice holds now (for tests).
    var holders: [UInt32?] { slots.withLock { $0.holders } }

    /// The roster the browser was just told: voices that left free their places.
    func rosterChanged(_ ssrcs: Set<UInt32>) {
        slots.withLock { $0.rosterChanged(ssrcs) }
    }

    /// Writes the MID of the slot the RTP packet's voice is on into it, in place in `buffer`
    /// (the memory it was parsed from; it may grow up to `buffer.count`); the view of the
    /// stamped packet, or nil when it must not be sent (no slot and no shared section, or no
    /// room).
    func stamp(_ packet: RTPPacketView, in buffer: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) -> RTPPacketView? {
        let element: [UInt8]?
        switch slots.withLock({ $0.placement(of: packet.ssrc, nowNanoseconds: nowNanoseconds) }) {
        case let .slot(index): element = slotElements[index]
        case .shared: element = sharedElement
        }
        guard let element else { return nil }
        return element.withUnsafeBytes { RTPMidStamp.stamp(packet, in: buffer, midElement: $0, keepingID: audioLevelID) }
    }
}
