import CParleyDTLS
import ParleyWire

/// One DTLS association with a browser, the relay as server (`a=setup:passive`, RFC 5763
/// §5): datagrams in through ``receive(_:)``, datagrams out through ``nextDatagram(into:)``,
/// no socket. When the handshake is done, ``srtpKeys()`` gives the SRTP keys (RFC 5764 §4.2).
///
/// The peer's certificate must have the SHA-256 fingerprint its SDP announced: OpenSSL checks
/// it during the handshake, so a man in the middle fails before any key is exported.
///
/// Owns its `parley_dtls` (OpenSSL's SSL and BIOs) and frees it in `deinit`. Not thread-safe:
/// it belongs to the loop that receives its peer's datagrams.
public final class DTLSConnection {
    public enum State: Sendable, Hashable {
        case handshaking
        case established
        case failed
        /// The peer sent close_notify.
        case closed
    }

    private let connection: OpaquePointer
    /// Keeps the context (and its certificate) alive as long as the connection.
    private let context: DTLSContext
    public private(set) var state: State = .handshaking

    /// Datagrams are kept under this, below any path MTU a browser's traffic meets.
    public static let maximumDatagramSize: UInt16 = 1_200

    public init(context: DTLSContext, isServer: Bool = true, peerFingerprint: CertificateFingerprint) throws(DTLSError) {
        guard peerFingerprint.algorithm == "sha-256", peerFingerprint.bytes.count == 32 else {
            throw .unsupportedFingerprint(peerFingerprint.algorithm)
        }
        guard let made = parley_dtls_new(context.context, isServer ? 1 : 0, peerFingerprint.bytes, Self.maximumDatagramSize) else {
            throw .allocationFailed
        }
        connection = made
        self.context = context
    }

    deinit { parley_dtls_free(connection) }

    /// What a server's first datagram from a peer is (``listen(_:peer:)``).
    public enum Hello: Sendable, Hashable {
        /// A ClientHello with a valid cookie for the peer's address: ``start()`` goes on with it.
        case verified
        /// A ClientHello without one: a HelloVerifyRequest waits in ``takeDatagrams()``, no
        /// larger than the hello. Send it and drop this connection; nothing need be kept.
        case cookieRequested
        /// Not a ClientHello the relay can use.
        case refused
    }

    /// A server's first datagram from a peer at the address `peer` names (up to 32 bytes):
    /// RFC 6347's stateless cookie exchange, with a cookie that is an HMAC of the address
    /// under a key of this process, so a peer proves it receives at its address before any
    /// handshake work or state.
    public func listen(_ datagram: UnsafeRawBufferPointer, peer: [UInt8]) -> Hello {
        guard state == .handshaking, let base = datagram.baseAddress else { return .refused }
        switch parley_dtls_listen(connection, base.assumingMemoryBound(to: UInt8.self), datagram.count, peer, peer.count) {
        case 1: return .verified
        case 0: return .cookieRequested
        default: return .refused
        }
    }

    /// Starts the handshake (a client's ClientHello; a server waits for one, or goes on with the
    /// one ``listen(_:peer:)`` verified).
    @discardableResult
    public func start() -> State { update(parley_dtls_start(connection)) }

    /// One datagram from the peer.
    @discardableResult
    public func receive(_ datagram: UnsafeRawBufferPointer) -> State {
        guard state == .handshaking || state == .established, let base = datagram.baseAddress else { return state }
        return update(parley_dtls_receive(connection, base.assumingMemoryBound(to: UInt8.self), datagram.count))
    }

    /// Milliseconds until a lost flight is sent again, nil when no timer runs.
    public var retransmissionDelayMilliseconds: Int? {
        let milliseconds = parley_dtls_timeout_milliseconds(connection)
        return milliseconds < 0 ? nil : milliseconds
    }

    /// Sends the last flight again if its timer has fired.
    @discardableResult
    public func handleTimeout() -> State {
        guard state == .handshaking else { return state }
        return update(parley_dtls_handle_timeout(connection))
    }

    /// Copies the next datagram to send into `buffer`; returns its size, 0 when none waits.
    public func nextDatagram(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        return parley_dtls_next_datagram(connection, base.assumingMemoryBound(to: UInt8.self), buffer.count)
    }

    /// Every datagram waiting to be sent (tests and cold paths).
    public func takeDatagrams() -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        var buffer = [UInt8](repeating: 0, count: Int(Self.maximumDatagramSize) + 64)
        while true {
            let count = buffer.withUnsafeMutableBytes { nextDatagram(into: $0) }
            guard count > 0 else { return datagrams }
            datagrams.append(Array(buffer.prefix(count)))
        }
    }

    /// Tells the peer the association ends (close_notify, queued as a datagram).
    public func shutdown() {
        parley_dtls_shutdown(connection)
    }

    /// The keys for both directions, once established; nil before, or if no SRTP profile
    /// was agreed (a peer that offered none of ours).
    public func srtpKeys() -> SRTPKeyingMaterial? {
        guard state == .established, let profile = SRTPProfile(rawValue: parley_dtls_srtp_profile(connection)) else { return nil }
        var material = [UInt8](repeating: 0, count: 2 * (profile.keySize + profile.saltSize))
        guard parley_dtls_export_srtp_keying_material(connection, &material, material.count) == 1 else { return nil }
        return SRTPKeyingMaterial(profile: profile, exported: material)
    }

    private func update(_ result: Int32) -> State {
        switch result {
        case Int32(PARLEY_DTLS_ESTABLISHED): state = .established
        case Int32(PARLEY_DTLS_IN_PROGRESS): if state != .established { state = .handshaking }
        case Int32(PARLEY_DTLS_CLOSED): state = .closed
        default: state = .failed
        }
        return state
    }
}

/// The SRTP protection profiles the relay offers (RFC 5764 §4.1.2, RFC 7714 §14.2).
public enum SRTPProfile: Int32, Sendable, Hashable {
    case aes128CMHMACSHA1_80 = 0x0001
    case aeadAES128GCM = 0x0007

    public var keySize: Int { 16 }
    public var saltSize: Int { self == .aeadAES128GCM ? 12 : 14 }
    /// Bytes SRTP adds to an RTP packet (the authentication tag).
    public var rtpOverhead: Int { self == .aeadAES128GCM ? 16 : 10 }
    /// Bytes SRTCP adds to an RTCP packet (E flag and index, and the tag).
    public var rtcpOverhead: Int { 4 + rtpOverhead }
}

/// The SRTP master keys and salts both sides derive from the DTLS handshake.
public struct SRTPKeyingMaterial: Sendable, Hashable {
    public let profile: SRTPProfile
    /// What the DTLS client (the browser) protects with: key then salt.
    public let client: [UInt8]
    /// What the DTLS server (the relay) protects with.
    public let server: [UInt8]

    /// Splits RFC 5764 §4.2's layout: client key, server key, client salt, server salt.
    init(profile: SRTPProfile, exported: [UInt8]) {
        let key = profile.keySize
        let salt = profile.saltSize
        self.profile = profile
        client = Array(exported[0..<key]) + Array(exported[(2 * key)..<(2 * key + salt)])
        server = Array(exported[key..<(2 * key)]) + Array(exported[(2 * key + salt)..<(2 * key + 2 * salt)])
    }
}
