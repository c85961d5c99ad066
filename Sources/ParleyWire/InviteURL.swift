import ParleyBasics

/// An invite: everything a client needs to join a room, as one URL a person can paste.
///
/// ```
/// parley://relay.example.org:7800/standup?token=eyJhbGciOi...
/// parley://[2001:db8::1]:7800/standup?token=...
/// ```
///
/// The port defaults to ``defaultPort``. Query parameters other than those Parley knows
/// are ignored, so newer relays can add some without breaking older clients.
public struct InviteURL: Sendable, Hashable, CustomStringConvertible {
    public static let scheme = "parley"
    /// The relay's port when an invite names none.
    public static let defaultPort = 7800
    /// The query parameter holding the relay's public key (base64url X25519), which clients pin.
    public static let relayKeyParameter = "key"

    /// The relay's public key text, when the invite carries one.
    public var relayKeyText: String? { parameter(Self.relayKeyParameter) }

    /// A host name, an IPv4 address, or an IPv6 address without brackets.
    public var host: String
    public var port: Int
    public var room: String
    public var token: String
    /// Other query parameters, kept in order, for later additions (the relay's public key).
    public var parameters: [(name: String, value: String)]

    public init(host: String, port: Int = InviteURL.defaultPort, room: String, token: String, parameters: [(name: String, value: String)] = []) {
        self.host = host
        self.port = port
        self.room = room
        self.token = token
        self.parameters = parameters
    }

    public func parameter(_ name: String) -> String? {
        parameters.first { $0.name == name }?.value
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.host == rhs.host && lhs.port == rhs.port && lhs.room == rhs.room && lhs.token == rhs.token
            && lhs.parameters.map(\.name) == rhs.parameters.map(\.name)
            && lhs.parameters.map(\.value) == rhs.parameters.map(\.value)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(host)
        hasher.combine(port)
        hasher.combine(room)
        hasher.combine(token)
    }

    /// "host:port", with brackets around an IPv6 address.
    public var relayAddress: String { HostPortText.format(host: host, port: port) }

    public var description: String {
        var text = "\(Self.scheme)://\(relayAddress)/\(room)?token=\(Self.percentEncode(token))"
        for (name, value) in parameters {
            text += "&\(Self.percentEncode(name))=\(Self.percentEncode(value))"
        }
        return text
    }

    /// Parses an invite; the error's reason says what to fix.
    public init(parsing text: String) throws(WireError) {
        let text = text.trimmingWhitespace
        let prefix = Self.scheme + "://"
        guard text.lowercased().hasPrefix(prefix) else {
            throw .malformed(.inviteURL, reason: "an invite starts with parley://")
        }
        var rest = Substring(text.dropFirst(prefix.count))
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }

        guard let slash = rest.firstIndex(of: "/") else {
            throw .malformed(.inviteURL, reason: "the invite has no room (parley://host:port/ROOM?token=…)")
        }
        let authority = rest[..<slash]
        let (host, port) = try Self.parseAuthority(authority)

        let afterSlash = rest[rest.index(after: slash)...]
        let pathPart: Substring
        let queryPart: Substring
        if let question = afterSlash.firstIndex(of: "?") {
            pathPart = afterSlash[..<question]
            queryPart = afterSlash[afterSlash.index(after: question)...]
        } else {
            pathPart = afterSlash
            queryPart = ""
        }
        guard let room = Self.percentDecode(pathPart) else {
            throw .malformed(.inviteURL, reason: "the room has a bad %-escape")
        }
        if ParleyNames.problem(withRoom: room) != nil {
            throw .malformed(.inviteURL, reason: "the room name may use only letters, digits, '.', '_' and '-' (1 to 64)")
        }

        var token: String?
        var parameters: [(name: String, value: String)] = []
        for pair in queryPart.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.percentDecode(parts[0]),
                  let value = Self.percentDecode(parts.count > 1 ? parts[1] : "") else {
                throw .malformed(.inviteURL, reason: "a query parameter has a bad %-escape")
            }
            if name == "token" { token = value } else { parameters.append((name, value)) }
        }
        guard let token, !token.isEmpty else {
            throw .malformed(.inviteURL, reason: "the invite has no token (…?token=…)")
        }
        self.init(host: host, port: port, room: room, token: token, parameters: parameters)
    }

    /// Splits "host", "host:port", "[v6]" or "[v6]:port".
    static func parseAuthority(_ authority: Substring) throws(WireError) -> (String, Int) {
        let parts: HostPortText
        do {
            parts = try HostPortText(parsing: authority)
        } catch {
            throw .malformed(.inviteURL, reason: error.description)
        }
        let host = parts.host
        guard !host.isEmpty else { throw .malformed(.inviteURL, reason: "the invite has no relay host") }
        let hostAllowed = host.utf8.allSatisfy { byte in
            byte > 0x20 && byte < 0x7F && byte != 0x2F && byte != 0x3F && byte != 0x23 && byte != 0x40
        }
        guard hostAllowed else { throw .malformed(.inviteURL, reason: "the relay host has characters a host name cannot have") }
        let port = parts.port ?? defaultPort
        guard port >= 1 else { throw .malformed(.inviteURL, reason: HostPortText.Problem.badPort.description) }
        return (String(host), port)
    }

    static func percentDecode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            } else if byte == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Escapes everything but RFC 3986's unreserved characters.
    static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in text.utf8 {
            let unreserved = (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == 0x2D || byte == 0x2E || byte == 0x5F || byte == 0x7E
            if unreserved {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x41 + 10
    case 0x61...0x66: return byte - 0x61 + 10
    default: return nil
    }
}

