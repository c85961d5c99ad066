import NIOCore
import ParleyBasics

/// "host:port" as given by a person: an IPv4 address, `[IPv6]`, `localhost` or `*`.
public struct HostAndPort: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public init(parsing text: String) throws(ConfigurationError) {
        let example = "write HOST:PORT, e.g. 0.0.0.0:7800, [::]:7800 or 127.0.0.1:9800"
        let parts: HostPortText
        do {
            parts = try HostPortText(parsing: text)
        } catch .unbracketedIPv6 {
            throw ConfigurationError("is \"\(text)\"; put an IPv6 address in brackets, e.g. [::]:7800")
        } catch .badPort {
            throw ConfigurationError("is \"\(text)\"; the port must be a number from 1 to 65535")
        } catch {
            throw ConfigurationError("is \"\(text)\"; \(example)")
        }
        guard let port = parts.port else { throw ConfigurationError("is \"\(text)\" with no port; \(example)") }
        var host = parts.host
        if host.isEmpty || host == "*" { host = "0.0.0.0" }
        let hostText = host == "localhost" ? "127.0.0.1" : String(host)
        guard (try? SocketAddress(ipAddress: hostText, port: port)) != nil else {
            throw ConfigurationError("is \"\(text)\"; \"\(host)\" is not an IP address of this machine's form (use 0.0.0.0 for all interfaces)")
        }
        self.init(host: hostText, port: port)
    }

    public func socketAddress() throws -> SocketAddress {
        try SocketAddress(ipAddress: host, port: port)
    }

    public var description: String { HostPortText.format(host: host, port: port) }
}
