import Logging
import NIOCore
import ParleyBasics
import ParleyWire

/// What the relay itself can be told by `parley-relay serve`, with defaults suited to a small
/// VPS. Its admin port (`ParleyAdmin`) and its cluster (`ParleyCluster`) have settings of their
/// own, read from the same layers (``ConfigurationLayers``): command-line flags win over
/// environment variables (`PARLEY_RELAY_MAX_ROOMS`), which win over the config file
/// (`max-rooms = 500`), which wins over the defaults. Every setting has the same name in all
/// three places.
///
/// apple/swift-configuration 1.4.0 was evaluated for this and not used: it reads JSON and
/// YAML files while the relay's secret file is `key = value` text that people edit by hand
/// and keygen will extend, its file provider is async-only, and it adds five packages
/// (swift-system, swift-collections, swift-service-lifecycle, Yams, swift-async-algorithms)
/// to a binary meant to stay small. What the relay needs — three layers, a dozen keys, and
/// an error naming the layer a bad value came from — is the short resolver below.
public struct RelayConfiguration: Sendable {
    public var listen: HostAndPort = HostAndPort(host: "0.0.0.0", port: InviteURL.defaultPort)
    public var secretFile = "/etc/parley/relay.secret"
    /// Forwarding loops (``DatagramLoop``): a thread and a UDP socket each (SO_REUSEPORT).
    public var threads = System.coreCount
    public var logLevel: Logger.Level = .info
    /// Requested SO_RCVBUF and SO_SNDBUF; the kernel may grant less (see the log at start).
    public var socketBufferBytes = 4 << 20
    /// Datagrams read per recvmmsg call.
    public var vectorReadCount = 64
    public var limits = RelayLimits()
    /// How long shutdown keeps telling members goodbye before closing.
    public var shutdownGraceMilliseconds = 1_000
    /// Plaintext on the wire, no handshake: for tests and trusted networks only. Clients must
    /// pass `--insecure` too; each side refuses the other mode with a clear error.
    public var insecure = false
    /// Browser members on the UDP port (ICE-lite, DTLS-SRTP), whose offers reach the relay
    /// over its web port (`Relay+Browsers.swift`); on when `parley-relay serve` serves one.
    public var acceptsBrowsers = false
    /// Where browsers reach the UDP port when that is not the address it listens on (a NAT's
    /// or a port forward's, `--public-address`): their ICE candidate. Nil: the listen address,
    /// or for a wildcard the address the page was loaded from, and the port it listens on.
    public var browserCandidate: HostAndPort?
    /// Admitted handshakes remembered per cookie epoch before the oldest are forgotten (see
    /// ``HandshakeReplayCache``); not a setting, a knob for tests that fill it.
    var handshakeReplayCapacity = 100_000

    public init() {}

    /// The default config file, read when it exists and no other is named.
    public static let defaultConfigFile = "/etc/parley/relay.conf"

    // MARK: Settings

    public static let settings: [Setting<RelayConfiguration>] = [
        Setting(key: "listen", help: "UDP address for clients, HOST:PORT") { configuration, text throws(ConfigurationError) in
            configuration.listen = try HostAndPort(parsing: text)
        },
        Setting(key: "secret-file", help: "the file written by `parley-relay keygen`") { configuration, text throws(ConfigurationError) in
            guard !text.isEmpty else { throw ConfigurationError("is empty; give the path of the file `parley-relay keygen` wrote") }
            configuration.secretFile = text
        },
        Setting(key: "threads", help: "forwarding loops, a thread and a socket each (one per core is best)") { configuration, text throws(ConfigurationError) in
            configuration.threads = try parseInteger(text, in: 1...256)
        },
        Setting(key: "log-level", help: "trace, debug, info, notice, warning, error or critical") { configuration, text throws(ConfigurationError) in
            guard let level = Logger.Level(rawValue: text.lowercased()) else {
                throw ConfigurationError("is \"\(text)\"; use trace, debug, info, notice, warning, error or critical")
            }
            configuration.logLevel = level
        },
        Setting(key: "socket-buffer", help: "socket receive and send buffer, e.g. 4MiB") { configuration, text throws(ConfigurationError) in
            configuration.socketBufferBytes = try parseByteCount(text, in: 64 << 10...1 << 30)
        },
        Setting(key: "max-rooms", help: "rooms open at once") { configuration, text throws(ConfigurationError) in
            configuration.limits.maximumRooms = try parseInteger(text, in: 1...100_000)
        },
        Setting(key: "max-members-per-room", help: "members in one room") { configuration, text throws(ConfigurationError) in
            configuration.limits.maximumMembersPerRoom = try parseInteger(text, in: 2...1_000)
        },
        Setting(key: "max-packet-rate", help: "media packets per second one member may send") { configuration, text throws(ConfigurationError) in
            configuration.limits.packetsPerSecondPerMember = try parseInteger(text, in: 10...100_000)
        },
        Setting(key: "max-member-bitrate", help: "media bits per second one member may send, e.g. 640k") { configuration, text throws(ConfigurationError) in
            configuration.limits.maximumMemberBitsPerSecond = try parseBitrate(text, in: 16_000...1_000_000_000)
        },
        Setting(key: "max-packet-size", help: "largest datagram accepted, in bytes") { configuration, text throws(ConfigurationError) in
            configuration.limits.maximumPacketSize = try parseInteger(text, in: 576...65_507)
        },
        Setting(key: "keepalive-interval", help: "how often clients ping, e.g. 5s") { configuration, text throws(ConfigurationError) in
            configuration.limits.keepaliveIntervalMilliseconds = try parseMilliseconds(text, in: 100...600_000)
        },
        Setting(key: "idle-timeout", help: "silence after which a member is removed, e.g. 30s") { configuration, text throws(ConfigurationError) in
            configuration.limits.idleTimeoutMilliseconds = try parseMilliseconds(text, in: 500...3_600_000)
        },
        Setting(key: "insecure", help: "true to run without encryption (tests and trusted networks only)") { configuration, text throws(ConfigurationError) in
            switch text.lowercased() {
            case "true", "yes", "1", "on": configuration.insecure = true
            case "false", "no", "0", "off": configuration.insecure = false
            default: throw ConfigurationError("is \"\(text)\"; write true or false")
            }
        },
    ]

    public static var keys: [String] { settings.map(\.key) }

    /// The relay's settings from `layers` (whose keys the caller has checked against every
    /// part's), validated.
    public static func resolve(_ layers: ConfigurationLayers) throws(ConfigurationError) -> RelayConfiguration {
        var configuration = RelayConfiguration()
        try layers.apply(settings, to: &configuration)
        try configuration.validate()
        return configuration
    }

    /// The relay's settings alone, from layers that may hold no other key (tests, tools).
    public static func resolve(flags: [String: String], environment: [String: String], file: KeyValueFile?) throws(ConfigurationError) -> RelayConfiguration {
        let layers = ConfigurationLayers(flags: flags, environment: environment, file: file)
        try layers.checkKeys(known: keys)
        return try resolve(layers)
    }

    public func validate() throws(ConfigurationError) {
        try limits.validate()
        guard (1...256).contains(threads) else { throw ConfigurationError("threads is \(threads); it must be from 1 to 256") }
        guard (1...1024).contains(vectorReadCount) else {
            throw ConfigurationError("vectorReadCount is \(vectorReadCount); it must be from 1 to 1024 (the kernel's batch limit)")
        }
    }

    // MARK: Value parsers, each failing with the rest of a sentence that begins with the source

    static func parseInteger(_ text: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let value = Int(text.replacingUnderscores) else {
            throw ConfigurationError("is \"\(text)\"; it must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        guard range.contains(value) else {
            throw ConfigurationError("is \(value); it must be from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// "30s", "500ms", "2m", "1h"; a bare number is seconds.
    static func parseMilliseconds(_ text: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        guard let milliseconds = DurationText.milliseconds(text) else {
            throw ConfigurationError("is \"\(text)\"; write a duration such as 500ms, 30s, 2m or 1h")
        }
        guard range.contains(milliseconds) else {
            throw ConfigurationError("is \(text); it must be from \(range.lowerBound) ms to \(range.upperBound / 1000) s")
        }
        return milliseconds
    }

    /// "640k", "640kbit", "2M", "2Mbit/s", "64000" (bits per second, decimal prefixes as for bitrates).
    static func parseBitrate(_ text: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        var number = Substring(text.lowercased())
        for suffix in ["bit/s", "bps", "bit", "b/s"] where number.hasSuffix(suffix) {
            number = number.dropLast(suffix.count)
            break
        }
        var multiplier = 1
        if let last = number.last, let factor = ["k": 1_000, "m": 1_000_000, "g": 1_000_000_000][last] {
            number = number.dropLast()
            multiplier = factor
        }
        guard let value = Double(number.trimmingWhitespace), value.isFinite, value >= 0, value * Double(multiplier) < 1e15 else {
            throw ConfigurationError("is \"\(text)\"; write a bitrate such as 640k, 2M or 64000 (bits per second)")
        }
        let bits = Int((value * Double(multiplier)).rounded())
        guard range.contains(bits) else {
            throw ConfigurationError("is \(text); it must be from \(range.lowerBound / 1_000) kbit/s to \(range.upperBound / 1_000_000) Mbit/s")
        }
        return bits
    }

    /// "4MiB", "512KiB", "4M", "1048576".
    static func parseByteCount(_ text: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        let units: [(String, Int)] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
        var number = Substring(text)
        var multiplier = 1
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            number = text.dropLast(suffix.count)
            multiplier = factor
            break
        }
        guard let value = Int(number.trimmingWhitespace), value >= 0, value <= Int.max / multiplier else {
            throw ConfigurationError("is \"\(text)\"; write a size such as 4MiB, 512KiB or 1048576")
        }
        let bytes = value * multiplier
        guard range.contains(bytes) else {
            throw ConfigurationError("is \(text); it must be from \(range.lowerBound >> 10) KiB to \(range.upperBound >> 20) MiB")
        }
        return bytes
    }
}

extension String {
    var replacingUnderscores: String { String(filter { $0 != "_" }) }
}
