import ParleyWire

/// The relay's half of ICE with a browser: an ICE-lite agent (RFC 8445 §2.5) answers the
/// binding requests the browser's full agent sends to check the path and, later, to keep its
/// consent to send (RFC 7675); it sends none of its own.
///
/// A request is answered only when everything checks out, in this order, cheapest first:
/// a binding request, FINGERPRINT right, USERNAME naming this session's pair of ufrags,
/// MESSAGE-INTEGRITY with the relay's password. A stranger (no ufrag the relay gave out,
/// a wrong password) gets no answer at all, so the port reflects nothing to a forged source;
/// the answer to an authentic request (header, XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY,
/// FINGERPRINT: 64 bytes for IPv4, 76 for IPv6) is never larger than the request, which
/// carries USERNAME, PRIORITY, a role, MESSAGE-INTEGRITY and FINGERPRINT itself.
public struct ICELiteResponder: Sendable {
    /// The relay's ufrag and the browser's, as USERNAME joins them: "relay:browser".
    public let localUsernameFragment: String
    public let remoteUsernameFragment: String
    private let authentication: STUNAuthentication

    public init(localUsernameFragment: String, localPassword: String, remoteUsernameFragment: String) {
        self.localUsernameFragment = localUsernameFragment
        self.remoteUsernameFragment = remoteUsernameFragment
        authentication = STUNAuthentication(password: localPassword)
    }

    public enum Outcome: Sendable, Hashable {
        /// A success response of this many bytes is in the buffer; `nominated`: the request
        /// carried USE-CANDIDATE (the browser picked this path).
        case answered(count: Int, nominated: Bool)
        case ignored(STUNRefusal)
    }

    /// The largest answer: header, XOR-MAPPED-ADDRESS (IPv6), MESSAGE-INTEGRITY, FINGERPRINT.
    public static let maximumAnswerSize = 20 + 24 + 24 + 8

    /// Answers `request` from `source` into `buffer` (at least ``maximumAnswerSize`` bytes).
    public func answer(_ request: STUNMessageView, from source: STUNAddress, into buffer: UnsafeMutableRawBufferPointer) -> Outcome {
        guard request.type == .bindingRequest else { return .ignored(.notABindingRequest) }
        guard request.hasValidFingerprint else { return .ignored(.badFingerprint) }
        guard let username = request.username, Self.username(username, is: localUsernameFragment, remoteUsernameFragment) else {
            return .ignored(.unknownUsername)
        }
        guard authentication.isAuthentic(request) else { return .ignored(.badIntegrity) }
        guard request.unknownRequiredAttribute == nil else { return .ignored(.unknownAttribute) }
        do throws(WireError) {
            var writer = try STUNMessageWriter(type: .bindingSuccess, transactionID: request.transactionID, into: buffer)
            try writer.appendXORMappedAddress(source)
            try writer.appendMessageIntegrity(authentication.sign)
            try writer.appendFingerprint()
            guard writer.count <= request.bytes.count else { return .ignored(.answerLargerThanRequest) }
            return .answered(count: writer.count, nominated: request.useCandidate)
        } catch {
            return .ignored(.answerLargerThanRequest)
        }
    }

    /// The relay's ufrag out of a request's USERNAME ("relay:browser"), to find whose it is;
    /// nil if it is not two ice-char fragments.
    public static func localUsernameFragment(of username: UnsafeRawBufferPointer) -> Substring? {
        guard let text = String(validating: username, as: UTF8.self) else { return nil }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, ICECredentials.isValid(String(parts[0]), lengths: 4...256) else { return nil }
        return parts[0]
    }

    private static func username(_ bytes: UnsafeRawBufferPointer, is local: String, _ remote: String) -> Bool {
        let expected = local.utf8.count + 1 + remote.utf8.count
        guard bytes.count == expected else { return false }
        return bytes.elementsEqual(local.utf8 + [UInt8(ascii: ":")] + remote.utf8)
    }
}

/// Why a STUN datagram was not answered; each is counted.
public enum STUNRefusal: String, Sendable, Hashable {
    case notABindingRequest = "not a binding request"
    case badFingerprint = "no valid FINGERPRINT"
    case unknownUsername = "USERNAME names no session"
    case badIntegrity = "MESSAGE-INTEGRITY does not match"
    case unknownAttribute = "an attribute it must understand and does not"
    case answerLargerThanRequest = "the answer would be larger than the request"
}
