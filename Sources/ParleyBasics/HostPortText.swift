/// "HOST:PORT" as people, invites and records write it: `127.0.0.1:7800`, `[::1]:7800`,
/// `relay.example.org:7800`, or a host alone (`[2001:db8::1]`, `relay.example.org`) where
/// the caller has a default port. Split once, here; each caller then says which hosts and
/// ports it takes (an IP address only, port 0 or not, a default port) in its own words.
///
/// An IPv6 address needs its brackets whenever a port may follow, since its colons would
/// otherwise be read as one.
public struct HostPortText: Sendable, Equatable {
    /// The host without brackets; may be empty (`:7800`), which callers refuse or read as
    /// "every interface".
    public var host: Substring
    /// The port, 0 to 65535; nil when the text gave none.
    public var port: Int?

    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        /// `[2001:db8::1` with no `]`.
        case unclosedBracket
        /// `[::1]x`: something other than `:PORT` after the brackets.
        case textAfterBracket
        /// `2001:db8::1:7800`: which colon starts the port cannot be told.
        case unbracketedIPv6
        /// The port is not a number from 0 to 65535.
        case badPort

        public var description: String {
            switch self {
            case .unclosedBracket: return "an IPv6 address is missing its closing ']'"
            case .textAfterBracket: return "only :PORT may follow an IPv6 address's ']'"
            case .unbracketedIPv6: return "put an IPv6 address in brackets: [2001:db8::1]:7800"
            case .badPort: return "the port must be a number from 1 to 65535"
            }
        }
    }

    public init(host: Substring, port: Int?) {
        self.host = host
        self.port = port
    }

    public init(parsing text: some StringProtocol) throws(Problem) {
        let text = Substring(text)
        let portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw .unclosedBracket }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if after.isEmpty {
                portText = nil
            } else {
                guard after.hasPrefix(":") else { throw .textAfterBracket }
                portText = after.dropFirst()
            }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            guard !host.contains(":") else { throw .unbracketedIPv6 }
            portText = text[text.index(after: colon)...]
        } else {
            host = text
            portText = nil
        }
        if let portText {
            // Digits only: Int("+80") would pass.
            guard portText.utf8.count <= 5, !portText.isEmpty, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let port = Int(portText), port <= 65_535 else { throw .badPort }
            self.port = port
        } else {
            port = nil
        }
    }

    /// `host:port`, `[v6]:port`, or the host alone (bracketed if IPv6) without a port.
    public static func format(host: some StringProtocol, port: Int?) -> String {
        let shown = host.contains(":") ? "[\(host)]" : String(host)
        return port.map { "\(shown):\($0)" } ?? shown
    }
}
