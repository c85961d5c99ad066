import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import ParleyWire
import Synchronization

/// One peer's end of an established secure session: it seals packets for the peer and
/// opens the peer's packets, with a replay window and scheduled rekeying.
///
/// Each sealed packet carries an explicit counter (the ChaCha20-Poly1305 nonce), so packets
/// may arrive lost or reordered — unlike Noise's own transport phase, which assumes an
/// ordered stream. The counter never repeats under a key: it only grows, and a session
/// refuses to seal once it nears 2^64.
///
/// Rekeying uses Noise's `Rekey()` (a one-way step of the key), so an attacker who later
/// steals the current key cannot read earlier traffic. The sender rekeys after
/// ``Policy/rekeyAfterPackets`` packets or ``Policy/rekeyAfterSeconds`` and flips the key
/// phase bit; the receiver follows on the first packet of the new phase that authenticates,
/// and keeps the previous key for stragglers. A newest packet that opens under neither
/// expected key is tried a few rekeys further on (``maximumKeysAhead``), so losing every
/// packet sealed under a key never leaves the receiver a key behind for good. A rejoin makes
/// a whole new session.
///
/// Thread safety: the relay seals for one receiver from several event loops, so sending
/// and receiving each sit behind their own per-session `Mutex` (never a global lock). A
/// party that opens on one thread only (the client's network loop) takes the receiving half
/// out (``takeReceiver()``) and opens through it without a lock; the session then opens
/// nothing itself, so there is only ever one replay window.
public final class SecureSession: Sendable {
    public struct Policy: Sendable {
        public var rekeyAfterPackets: UInt64
        public var rekeyAfterSeconds: UInt64

        /// 2^30 packets is 200 days of one 50 pps stream; ten minutes bounds a stolen key's reach.
        public static let standard = Policy(rekeyAfterPackets: 1 << 30, rekeyAfterSeconds: 600)

        public init(rekeyAfterPackets: UInt64, rekeyAfterSeconds: UInt64) {
            self.rekeyAfterPackets = rekeyAfterPackets
            self.rekeyAfterSeconds = rekeyAfterSeconds
        }

        /// ``rekeyAfterSeconds`` in nanoseconds, saturating rather than wrapping for absurd policies.
        var rekeyAfterNanoseconds: UInt64 {
            let (product, overflow) = rekeyAfterSeconds.multipliedReportingOverflow(by: 1_000_000_000)
            return overflow ? .max : product
        }
    }

    /// The index the peer writes in packets to us (our session's name at our end).
    public let localIndex: UInt32
    /// The index we write in packets to the peer.
    public let remoteIndex: UInt32
    /// A name for the session both sides agree on (the Noise handshake hash).
    public let handshakeHash: [UInt8]

    /// A transport key and its cipher context, made once per key.
    fileprivate struct TransportKey {
        let key: SymmetricKey
        let cipher: PacketCipher

        init(_ key: SymmetricKey) {
            self.key = key
            cipher = PacketCipher(key)
        }

        /// Noise's `Rekey()` of this key.
        func next() -> TransportKey { TransportKey(SecureSession.rekey(key)) }
    }

    private struct SendState {
        var key: TransportKey
        var phase: Bool = false
        var counter: UInt64 = 0
        var packetsUnderKey: UInt64 = 0
        var keyCreatedNanoseconds: UInt64
    }

    /// How many rekeys a receiver looks ahead for a packet that does not open under the key it
    /// expects: every packet sealed under a key (or three keys in a row) may have been lost, and
    /// the one-bit key phase cannot say how many rekeys the sender made meanwhile.
    static let maximumKeysAhead = 4

    private let policy: Policy
    private let sendState: Mutex<SendState>
    /// The receiving half, until a single-threaded reader takes it (``takeReceiver()``).
    private let receiveState: Mutex<Receiver?>

    /// The largest counter ever used: Noise reserves 2^64 - 1 for `Rekey()`.
    static let counterLimit = UInt64.max - 1

    public init(keys: NoiseTransportKeys, localIndex: UInt32, remoteIndex: UInt32, policy: Policy = .standard, nowNanoseconds: UInt64) {
        self.localIndex = localIndex
        self.remoteIndex = remoteIndex
        self.handshakeHash = keys.handshakeHash
        self.policy = policy
        self.sendState = Mutex(SendState(key: TransportKey(keys.sending), keyCreatedNanoseconds: nowNanoseconds))
        self.receiveState = Mutex(Receiver(localIndex: localIndex, key: TransportKey(keys.receiving)))
    }

    /// Bytes a sealed packet needs for a `plaintextCount`-byte inner packet.
    public static func sealedSize(plaintextCount: Int) -> Int { plaintextCount + SealedHeader.overhead }

    /// Seals `plaintext` (an RTP, RTCP or control packet) into `output`; returns the bytes written.
    public func seal(_ plaintext: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, nowNanoseconds: UInt64) throws(SecurityError) -> Int {
        let needed = Self.sealedSize(plaintextCount: plaintext.count)
        guard output.count >= needed else { throw .malformed("output buffer too small for the sealed packet") }
        let (key, header) = try sendState.withLock { state throws(SecurityError) -> (TransportKey, SealedHeader) in
            // Several threads seal with their own reading of the clock, and a batch carries one
            // time for many packets, so `nowNanoseconds` may be older than the key: that is no
            // time at all under it, never a wrapped-around eternity that rekeys again at once.
            let keyAge = nowNanoseconds > state.keyCreatedNanoseconds ? nowNanoseconds - state.keyCreatedNanoseconds : 0
            if state.packetsUnderKey >= policy.rekeyAfterPackets || keyAge >= policy.rekeyAfterNanoseconds {
                state.key = state.key.next()
                state.phase.toggle()
                state.packetsUnderKey = 0
                state.keyCreatedNanoseconds = nowNanoseconds
            }
            guard state.counter < Self.counterLimit else { throw .counterExhausted }
            let header = SealedHeader(keyPhase: state.phase, receiverIndex: remoteIndex, counter: state.counter)
            state.counter += 1
            state.packetsUnderKey += 1
            return (state.key, header)
        }
        var writer = ByteWriter(output)
        try? header.write(to: &writer)  // cannot fail: the size was checked above
        let headerBytes = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(output)[0..<SealedHeader.size])
        let body = UnsafeMutableRawBufferPointer(rebasing: output[SealedHeader.size..<needed])
        guard key.cipher.seal(plaintext, counter: header.counter, associatedData: headerBytes, into: body) else {
            throw .malformed("sealing failed")
        }
        return needed
    }

    /// Opens a sealed packet into `output` (at least `packet.count - SealedHeader.overhead` bytes); returns the
    /// inner packet's size. Replays, stale packets and anything that fails authentication
    /// throw, and leave the session exactly as it was.
    public func open(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SecurityError) -> Int {
        try receiveState.withLock { receiver throws(SecurityError) in
            guard receiver != nil else { throw .malformed("this session's receiving half was taken by its reader") }
            return try receiver!.open(packet, into: output)
        }
    }

    /// Opens a sealed packet where it lies, its `header` already parsed: the inner packet is
    /// written over the ciphertext, at `SealedHeader.size ..< SealedHeader.size + count`, and
    /// its `count` returned. Nothing is allocated. What fails (the packet is then garbage)
    /// throws and leaves the session exactly as it was, as ``open(_:into:)`` does.
    public func openInPlace(_ packet: UnsafeMutableRawBufferPointer, header: SealedHeader) throws(SecurityError) -> Int {
        try receiveState.withLock { receiver throws(SecurityError) in
            guard receiver != nil else { throw .malformed("this session's receiving half was taken by its reader") }
            return try receiver!.openInPlace(packet, header: header)
        }
    }

    /// Takes the receiving half out, for a reader on one thread to open with and no lock;
    /// from then on the session's own ``open(_:into:)`` refuses everything. Nil if it was taken.
    public func takeReceiver() -> Receiver? {
        receiveState.withLock { receiver in
            defer { receiver = nil }
            return receiver
        }
    }

    /// Noise `Rekey(k)`: the first 32 bytes of ENCRYPT(k, 2^64 - 1, empty, 32 zero bytes).
    static func rekey(_ key: SymmetricKey) -> SymmetricKey {
        let box = try! ChaChaPoly.seal([UInt8](repeating: 0, count: 32), using: key, nonce: Noise.nonce(UInt64.max))
        return SymmetricKey(data: box.ciphertext.prefix(32))
    }

    /// The counter the next sealed packet will carry (for tests and diagnostics).
    public var nextSendCounter: UInt64 { sendState.withLock { $0.counter } }
    /// The current sending key phase.
    public var sendingKeyPhase: Bool { sendState.withLock { $0.phase } }
}

extension SecureSession {
    /// A session's receiving half: its keys, its replay window and how it follows the peer's
    /// rekeying. Inside a session it sits behind the session's lock; taken out
    /// (``SecureSession/takeReceiver()``), it belongs to the one thread that opens, which
    /// needs no lock for it.
    public struct Receiver: Sendable {
        /// The index the peer writes in packets to us.
        public let localIndex: UInt32
        private var state: ReceiveState

        fileprivate init(localIndex: UInt32, key: TransportKey) {
            self.localIndex = localIndex
            state = ReceiveState(key: key)
        }

        private struct ReceiveState {
            var key: TransportKey
            var phase: Bool = false
            /// The lowest counter seen under the current key; older packets of the other phase
            /// belong to the previous key.
            var phaseStartCounter: UInt64 = 0
            var previousKey: TransportKey?
            var window = ReplayWindow()
            /// The keys after ``key`` (one, two, … rekeys ahead), made when first needed and kept
            /// until the receiver moves to one of them, so a forged packet costs no key derivation
            /// after the first.
            var keysAhead: [TransportKey] = []

            /// The key `steps` rekeys after the current one (0: the current key).
            mutating func key(ahead steps: Int) -> TransportKey {
                guard steps > 0 else { return key }
                while keysAhead.count < steps { keysAhead.append((keysAhead.last ?? key).next()) }
                return keysAhead[steps - 1]
            }

            /// Moves to the key `steps` ahead, which `counter` was the first packet to open under.
            mutating func advance(by steps: Int, counter: UInt64) {
                previousKey = key(ahead: steps - 1)
                key = key(ahead: steps)
                keysAhead.removeFirst(steps)
                if steps % 2 == 1 { phase.toggle() }
                phaseStartCounter = counter
            }
        }

        /// Opens a sealed packet into `output` (at least `packet.count - SealedHeader.overhead` bytes); returns the
        /// inner packet's size. Replays, stale packets and anything that fails authentication
        /// throw, and leave the session exactly as it was.
        public mutating func open(_ packet: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(SecurityError) -> Int {
            let header: SealedHeader
            do { header = try SealedHeader(parsing: packet) } catch { throw .malformed(error.description) }
            guard header.receiverIndex == localIndex else { throw .authenticationFailed }
            let plaintextCount = packet.count - SealedHeader.overhead
            guard output.count >= plaintextCount else { throw .malformed("output buffer too small for the opened packet") }
            let headerBytes = UnsafeRawBufferPointer(rebasing: packet[0..<SealedHeader.size])
            let sealed = UnsafeRawBufferPointer(rebasing: packet[SealedHeader.size...])
            try open(header) { key in
                key.cipher.open(sealed, counter: header.counter, associatedData: headerBytes, into: output) == plaintextCount
            }
            return plaintextCount
        }

        /// Opens a sealed packet where it lies, its `header` already parsed: the inner packet is
        /// written over the ciphertext, at `SealedHeader.size ..< SealedHeader.size + count`, and
        /// its `count` returned. Nothing is allocated. What fails (the packet is then garbage)
        /// throws and leaves the session exactly as it was, as ``open(_:into:)`` does.
        public mutating func openInPlace(_ packet: UnsafeMutableRawBufferPointer, header: SealedHeader) throws(SecurityError) -> Int {
            guard header.receiverIndex == localIndex else { throw .authenticationFailed }
            guard packet.count >= SealedHeader.overhead else { throw .malformed("shorter than a sealed packet's header and tag") }
            let plaintextCount = packet.count - SealedHeader.overhead
            let headerBytes = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(packet)[0..<SealedHeader.size])
            let body = UnsafeMutableRawBufferPointer(rebasing: packet[SealedHeader.size...])
            // The cipher decrypts before it checks the tag, so an attempt under the wrong key
            // leaves garbage where the ciphertext was: a copy on the stack brings it back for the
            // next key to try (a rekey's first packets, stragglers of the previous key).
            let result: Result<Void, SecurityError> = withUnsafeTemporaryAllocation(byteCount: body.count, alignment: 16) { saved in
                saved.copyMemory(from: UnsafeRawBufferPointer(body))
                var attempts = 0
                do throws(SecurityError) {
                    try open(header) { key in
                        if attempts > 0 { body.copyMemory(from: UnsafeRawBufferPointer(saved)) }
                        attempts += 1
                        return key.cipher.open(UnsafeRawBufferPointer(body), counter: header.counter, associatedData: headerBytes, into: body)
                            == plaintextCount
                    }
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            try result.get()
            return plaintextCount
        }

        /// The receiving side of opening: checks the replay window, tries the keys the packet may
        /// be under (`opens` tries one), and moves the session only for a packet that opened.
        private mutating func open(_ header: SealedHeader, _ opens: (TransportKey) -> Bool) throws(SecurityError) {
            guard state.window.mayAccept(header.counter) else { throw .replayed(counter: header.counter) }
            if header.keyPhase != state.phase, header.counter < state.phaseStartCounter, let previous = state.previousKey {
                // A straggler sealed before the sender's last rekey.
                guard opens(previous) else { throw .authenticationFailed }
                state.window.record(header.counter)
                return
            }
            // The current key for its phase, else the next key of the packet's phase. Only a
            // packet newer than any seen may be from keys further ahead (the packets of the
            // keys between were all lost), and only a packet that authenticates moves the session.
            let isNewest = state.window.highestCounter.map { header.counter > $0 } ?? true
            let first = header.keyPhase == state.phase ? 0 : 1
            let last = isNewest ? SecureSession.maximumKeysAhead : first
            for steps in stride(from: first, through: last, by: 2) where opens(state.key(ahead: steps)) {
                state.window.record(header.counter)
                if steps > 0 {
                    state.advance(by: steps, counter: header.counter)
                } else {
                    state.phaseStartCounter = min(state.phaseStartCounter, header.counter)
                }
                return
            }
            throw .authenticationFailed
        }
    }
}
