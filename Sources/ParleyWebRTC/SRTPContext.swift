import CSRTP
import Synchronization

/// SRTP and SRTCP (RFC 3711; AES-GCM per RFC 7714) for one direction of one browser's media,
/// with libsrtp2: packets protected or unprotected in place, in the caller's buffer.
///
/// An inbound context opens what the browser sent (keyed by its DTLS-exported key). An
/// outbound one protects what the relay forwards to it: the packets of every other member.
/// Copies for one browser are protected by whichever relay loop received the sender's packet,
/// so the `srtp_t` sits behind this context's own lock (never one shared by contexts).
///
/// Each SSRC is a stream of its own inside libsrtp, made the first time that SSRC is protected
/// or authenticates, and kept for the context's life: at most `maximumStreams` of them, checked
/// on the SSRC in the clear header before libsrtp sees the packet, so neither a browser
/// inventing SSRCs nor a room's churn grows the context without bound. A stream is never
/// removed to make room: a new stream for an SSRC seen before would start its packet index
/// again and reuse AES-GCM nonces. For the same reason a packet whose SSRC and sequence number
/// were already protected is refused (`allow_repeat_tx` off): a hostile sender repeating a
/// sequence number with another payload would otherwise have both encrypted under one nonce.
/// Such a refusal is a dropped packet (``repeatsRefused``), nothing worse.
///
/// Owns its `srtp_t` and deallocates it in `deinit`.
public final class SRTPContext: @unchecked Sendable {
    public enum Direction: Sendable { case inbound, outbound }

    private let session: srtp_t
    /// The SSRCs `session` has streams for; held while libsrtp reads or writes them.
    private let streams = Mutex(Set<UInt32>())
    public let profile: SRTPProfile
    public let maximumStreams: Int
    private let repeats = Atomic<Int>(0)
    private let strangers = Atomic<Int>(0)

    /// Packets not protected because their SSRC and sequence number were protected before.
    public var repeatsRefused: Int { repeats.load(ordering: .relaxed) }
    /// Packets refused because their SSRC would have been a stream beyond ``maximumStreams``.
    public var streamsRefused: Int { strangers.load(ordering: .relaxed) }

    /// Enough for a browser's voice and its reports' SSRC inbound, and for a large room's
    /// voices, with churn, outbound.
    public static let defaultMaximumStreams = 1_024

    /// libsrtp's tables are set up once per process.
    private static let initialised: Bool = srtp_init() == srtp_err_status_ok

    /// A context for `keyAndSalt` (the master key followed by its salt, as
    /// ``SRTPKeyingMaterial`` gives them); nil if libsrtp refuses them.
    public init?(profile: SRTPProfile, keyAndSalt: [UInt8], direction: Direction, maximumStreams: Int = defaultMaximumStreams) {
        guard Self.initialised, keyAndSalt.count == profile.keySize + profile.saltSize, maximumStreams > 0 else { return nil }
        self.profile = profile
        self.maximumStreams = maximumStreams
        var policy = srtp_policy_t()
        switch profile {
        case .aes128CMHMACSHA1_80:
            srtp_crypto_policy_set_rtp_default(&policy.rtp)
            srtp_crypto_policy_set_rtcp_default(&policy.rtcp)
        case .aeadAES128GCM:
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp)
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp)
        }
        policy.ssrc.type = direction == .inbound ? ssrc_any_inbound : ssrc_any_outbound
        policy.window_size = 1_024
        policy.allow_repeat_tx = 0
        var key = keyAndSalt
        var made: srtp_t?
        let status = key.withUnsafeMutableBufferPointer { buffer -> srtp_err_status_t in
            policy.key = buffer.baseAddress
            return srtp_create(&made, &policy)
        }
        guard status == srtp_err_status_ok, let made else { return nil }
        session = made
    }

    deinit { srtp_dealloc(session) }

    /// Bytes ``protect(_:count:)`` adds to a packet of this kind.
    public func overhead(rtcp: Bool) -> Int { rtcp ? profile.rtcpOverhead : profile.rtpOverhead }

    /// Protects the `count`-byte RTP (or, `rtcp`, RTCP) packet at the start of `buffer`, which
    /// must have room for ``overhead(rtcp:)`` more bytes; returns the protected size, nil if
    /// refused (a packet too short to be RTP, no room, a repeated sequence number, or an SSRC
    /// beyond ``maximumStreams``).
    public func protect(_ buffer: UnsafeMutableRawBufferPointer, count: Int, rtcp: Bool) -> Int? {
        guard let base = buffer.baseAddress, count >= (rtcp ? 8 : 12), count + overhead(rtcp: rtcp) <= buffer.count else { return nil }
        let ssrc = Self.ssrc(of: UnsafeRawBufferPointer(buffer), rtcp: rtcp)
        return streams.withLock { streams -> Int? in
            let isNew = !streams.contains(ssrc)
            if isNew, streams.count >= maximumStreams {
                strangers.add(1, ordering: .relaxed)
                return nil
            }
            var length = Int32(count)
            let status = rtcp ? srtp_protect_rtcp(session, base, &length) : srtp_protect(session, base, &length)
            switch status {
            case srtp_err_status_ok:
                if isNew { streams.insert(ssrc) }
                return Int(length)
            case srtp_err_status_replay_fail, srtp_err_status_replay_old:
                repeats.add(1, ordering: .relaxed)
                return nil
            default:
                return nil
            }
        }
    }

    /// Authenticates and decrypts the `count`-byte SRTP (or SRTCP) packet at the start of
    /// `buffer` in place; returns the plaintext's size, or why it was refused.
    public func unprotect(_ buffer: UnsafeMutableRawBufferPointer, count: Int, rtcp: Bool) -> Result<Int, SRTPFailure> {
        guard let base = buffer.baseAddress, count >= (rtcp ? 8 : 12), count <= buffer.count else { return .failure(.malformed) }
        let ssrc = Self.ssrc(of: UnsafeRawBufferPointer(buffer), rtcp: rtcp)
        return streams.withLock { streams -> Result<Int, SRTPFailure> in
            let isNew = !streams.contains(ssrc)
            if isNew, streams.count >= maximumStreams {
                strangers.add(1, ordering: .relaxed)
                return .failure(.unexpectedSSRC)
            }
            var length = Int32(count)
            let status = rtcp ? srtp_unprotect_rtcp(session, base, &length) : srtp_unprotect(session, base, &length)
            switch status {
            case srtp_err_status_ok:
                if isNew { streams.insert(ssrc) }
                return .success(Int(length))
            case srtp_err_status_replay_fail, srtp_err_status_replay_old: return .failure(.replayed)
            case srtp_err_status_auth_fail: return .failure(.authenticationFailed)
            default: return .failure(.malformed)
            }
        }
    }

    /// The SSRC in the clear header: RTP's (bytes 8–11), or an RTCP packet's sender (4–7).
    /// The caller checked the packet is long enough.
    public static func ssrc(of packet: UnsafeRawBufferPointer, rtcp: Bool) -> UInt32 {
        let offset = rtcp ? 4 : 8
        return UInt32(packet[offset]) << 24 | UInt32(packet[offset + 1]) << 16 | UInt32(packet[offset + 2]) << 8 | UInt32(packet[offset + 3])
    }
}

/// Why an SRTP packet was not opened; each is a relay drop reason.
public enum SRTPFailure: Error, Sendable, Hashable {
    case authenticationFailed
    case replayed
    case malformed
    /// Its SSRC would be a stream beyond the context's ``SRTPContext/maximumStreams``.
    case unexpectedSSRC
}
