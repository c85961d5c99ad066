import CSRTP
import Synchronization

/// SRTP and SRTCP (RFC 3711; AES-GCM per RFC 7714) for one direction of one browser's media,
/// with libsrtp2: packets protected or unprotected in place, in the caller's buffer.
///
/// An inbound context opens what the browser sent (every SSRC it uses, keyed by its
/// DTLS-exported key). An outbound one protects what the relay forwards to it: the packets of
/// every other member, each SSRC a stream of its own inside libsrtp. Copies for one browser
/// are protected by whichever relay loop received the sender's packet, so the `srtp_t` sits
/// behind this context's own lock (never one shared by contexts); forwarded packets may be
/// sent again with the same sequence number (RED's copies are new packets, but a sender's
/// retransmitted packet is not), which `allow_repeat_tx` permits.
///
/// Owns its `srtp_t` and deallocates it in `deinit`.
public final class SRTPContext: @unchecked Sendable {
    public enum Direction: Sendable { case inbound, outbound }

    private let session: srtp_t
    /// Held while libsrtp reads or writes `session`'s streams.
    private let lock = Mutex(())
    public let profile: SRTPProfile

    /// libsrtp's tables are set up once per process.
    private static let initialised: Bool = srtp_init() == srtp_err_status_ok

    /// A context for `keyAndSalt` (the master key followed by its salt, as
    /// ``SRTPKeyingMaterial`` gives them); nil if libsrtp refuses them.
    public init?(profile: SRTPProfile, keyAndSalt: [UInt8], direction: Direction) {
        guard Self.initialised, keyAndSalt.count == profile.keySize + profile.saltSize else { return nil }
        self.profile = profile
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
        policy.allow_repeat_tx = 1
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
    /// libsrtp refused (a packet too short to be RTP, or no room).
    public func protect(_ buffer: UnsafeMutableRawBufferPointer, count: Int, rtcp: Bool) -> Int? {
        guard let base = buffer.baseAddress, count >= (rtcp ? 8 : 12), count + overhead(rtcp: rtcp) <= buffer.count else { return nil }
        return lock.withLock { _ -> Int? in
            var length = Int32(count)
            let status = rtcp ? srtp_protect_rtcp(session, base, &length) : srtp_protect(session, base, &length)
            return status == srtp_err_status_ok ? Int(length) : nil
        }
    }

    /// Authenticates and decrypts the `count`-byte SRTP (or SRTCP) packet at the start of
    /// `buffer` in place; returns the plaintext's size, or why it was refused.
    public func unprotect(_ buffer: UnsafeMutableRawBufferPointer, count: Int, rtcp: Bool) -> Result<Int, SRTPFailure> {
        guard let base = buffer.baseAddress, count >= (rtcp ? 8 : 12), count <= buffer.count else { return .failure(.malformed) }
        return lock.withLock { _ -> Result<Int, SRTPFailure> in
            var length = Int32(count)
            let status = rtcp ? srtp_unprotect_rtcp(session, base, &length) : srtp_unprotect(session, base, &length)
            switch status {
            case srtp_err_status_ok: return .success(Int(length))
            case srtp_err_status_replay_fail, srtp_err_status_replay_old: return .failure(.replayed)
            case srtp_err_status_auth_fail: return .failure(.authenticationFailed)
            default: return .failure(.malformed)
            }
        }
    }
}

/// Why an SRTP packet was not opened; each is a relay drop reason.
public enum SRTPFailure: Error, Sendable, Hashable {
    case authenticationFailed
    case replayed
    case malformed
}
