import Crypto
import ParleyWire

/// What a ``RelayLink`` is told: where and how to join, and its timing (retransmission,
/// silence before probing, rejoining and failing over).
extension RelayLink {
    public enum Security: Sendable {
        /// Noise NK handshake against this pinned relay key; every packet sealed.
        case secure(relayKey: Curve25519.KeyAgreement.PublicKey)
        /// Plaintext, only with `--insecure` on both sides.
        case insecure
    }

    public struct Configuration: Sendable {
        public var relayAddress: String
        public var room: String
        public var token: String
        public var ssrc: UInt32
        public var security: Security
        public var software = ParleyVersion.software
        /// What this client tells the room it can receive (tests take it away to act as an older client).
        public var capabilities = ControlMessage.Capabilities.supported
        /// This member's identity key, which others seal their media keys to (end-to-end
        /// encryption); empty: the client takes no part, and says so in its capabilities.
        public var identityKey: [UInt8] = []
        /// How long the first join keeps trying before the relay counts as unreachable.
        public var joinTimeoutNanoseconds: UInt64 = 10_000_000_000
        /// First retransmission interval; it doubles up to ``maximumRetransmitNanoseconds``.
        public var retransmitNanoseconds: UInt64 = 250_000_000
        public var maximumRetransmitNanoseconds: UInt64 = 2_000_000_000
        /// With nothing heard from the relay for this long, probe with pings every second…
        public var probeAfterSilenceNanoseconds: UInt64 = 1_500_000_000
        /// …and after this long, count the link as lost and rejoin.
        public var lostAfterSilenceNanoseconds: UInt64 = 5_000_000_000
        /// How long a clean leave waits for the relay's acknowledgement.
        public var leaveTimeoutNanoseconds: UInt64 = 1_000_000_000
        /// When other relays of a cluster are known: silence after which the link probes four
        /// times a second (a live relay answers a ping within a round trip)…
        public var failoverProbeAfterSilenceNanoseconds: UInt64 = 750_000_000
        /// …and after which it gives the relay up and joins through another. The room's new
        /// relay is found within the store's lease (2 s) of the old one's death.
        public var failoverAfterSilenceNanoseconds: UInt64 = 1_500_000_000

        public init(relayAddress: String, room: String, token: String, ssrc: UInt32, security: Security) {
            self.relayAddress = relayAddress
            self.room = room
            self.token = token
            self.ssrc = ssrc
            self.security = security
        }
    }
}
