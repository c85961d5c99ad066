import ParleyWebRTC
import ParleyWire

/// What the relay does with a browser's datagram, by its first byte (RFC 7983): STUN to the
/// ICE-lite responder, DTLS to a server connection mid-handshake, SRTP and SRTCP to an inbound
/// context. None may trap; an answer to STUN is never larger than what came in.
///
/// libFuzzer calls the entry point from one thread, one input at a time, as the relay's loop
/// does with its datagrams: the state below is that loop's, shared by nothing else.
let responder = ICELiteResponder(localUsernameFragment: "fuzz", localPassword: "fuzzpasswordfuzzpassword", remoteUsernameFragment: "peer")
let context = try! DTLSContext()
let fingerprint = CertificateFingerprint(algorithm: "sha-256", bytes: Array(repeating: 7, count: 32))
let gcm = SRTPContext(profile: .aeadAES128GCM, keyAndSalt: Array(1...28), direction: .inbound)!
let counterMode = SRTPContext(profile: .aes128CMHMACSHA1_80, keyAndSalt: Array(1...30), direction: .inbound)!
nonisolated(unsafe) var answer = [UInt8](repeating: 0, count: ICELiteResponder.maximumAnswerSize)
nonisolated(unsafe) var scratch = [UInt8](repeating: 0, count: 4_096)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebRTC(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    guard let first = bytes.first, size <= scratch.count else { return 0 }
    switch first {
    case 0...3:
        if let message = try? STUNMessageView(parsing: bytes) {
            let outcome = answer.withUnsafeMutableBytes { responder.answer(message, from: .ipv4(0x7F00_0001, port: 9), into: $0) }
            if case let .answered(count, _) = outcome { precondition(count <= size, "an answer larger than the request") }
        }
    case 20...63:
        // A fresh server connection for each input: OpenSSL gives up on a connection after one
        // bad record, and the relay's own connections are made after a valid cookie exchange.
        guard let connection = try? DTLSConnection(context: context, peerFingerprint: fingerprint) else { return 0 }
        connection.receive(bytes)
        _ = connection.takeDatagrams()
    default:
        for srtp in [gcm, counterMode] {
            scratch.withUnsafeMutableBytes { raw in
                raw.copyMemory(from: bytes)
                let rtcp = size > 1 && (192...223).contains(bytes[1])
                if case let .success(count) = srtp.unprotect(raw, count: size, rtcp: rtcp) { precondition(count <= size) }
            }
        }
    }
    return 0
}
