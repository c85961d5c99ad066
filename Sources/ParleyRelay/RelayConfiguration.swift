import Logging
import NIOCore
import ParleyBasics
import ParleyWire

/// Everything `parley-relay serve` can be told, with defaults suited to a small VPS.
///
/// Values come in layers: command-line flags win over environment variables
/// (`PARLEY_RELAY_MAX_ROOMS`), which win over the config file (`max-rooms = 500`), which wins
/// over the defaults. Every setting has the same name in all three places.
///
/// apple/swift-configuration 1.4.0 was evaluated for this and not used: it reads JSON and
/// YAML files while the relay's secret file is `key = value` text that people edit by hand
/// and keygen will extend, its file provider is async-only, and it adds five packages
/// (swift-system, swift-collections, swift-service-lifecycle, Yams, swift-async-algorithms)
/// to a binary meant to stay small. What the relay needs — three layers, a dozen keys, and
/// an error naming the layer a bad value came from — is the short resolver below.
public struct RelayConfiguration: Sendable {
    public var listen: HostAndPort = HostAndPort(host: "0.0.0.0", port: InviteURL.defaultPort)
    /// Nil turns the admin HTTP server off.
    public var admin: HostAndPort? = HostAndPort(host: "127.0.0.1", port: 9800)
    public var secretFile = "/etc/parley/relay.secret"
    /// Forwarding loops (``RelayLoop``): a thread and a UDP socket each (SO_REUSEPORT).
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
    /// Membership of a cluster (`--cluster`, `--public-address`, `--region`); nil for a relay
    /// on its own, which then never touches a store.
    public var cluster: ClusterSettings?
    /// The cluster settings as given, one key at a time, before ``resolve`` puts them together.
    var clusterFlags = ClusterFlags()
    /// Admitted handshakes remembered per cookie epoch before the oldest are forgotten (see
    /// ``HandshakeReplayCache``); not a setting, a knob for tests that fill it.
    var handshakeReplayCapacity = 100_000

    public init() {}

    /// The default config file, read when it exists and no other is named.
    public static let defaultConfigFile = "/etc/parley/relay.conf"
    public static let environmentPrefix = "PARLEY_RELAY_"

    // MARK: Settings

    /// One setting: its key (the flag is `--key`, the variable `PARLEY_RELAY_KEY`), what it is,
    /// and how a text value is applied.
    struct Setting: Sendable {
        let key: String
        let help: String
        let apply: @Sendable (inout RelayConfiguration, String) throws(ConfigurationError) -> Void
    }

    static let settings: [Setting] = [
        Setting(key: "listen", help: "UDP address for clients, HOST:PORT") { configuration, text throws(ConfigurationError) in
            configuration.listen = try HostAndPort(parsing: text)
        },
        Setting(key: "admin", help: "HTTP address for /metrics and /healthz, HOST:PORT, or 'off'") { configuration, text throws(ConfigurationError) in
            configuration.admin = text == "off" ? nil : try HostAndPort(parsing: text)
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
        Setting(key: "cluster", help: "etcd's client URL, e.g. http://10.0.0.2:2379, to run as a member of a cluster") { configuration, text throws(ConfigurationError) in
            configuration.clusterFlags.endpoint = try EtcdEndpoint(parsing: text)
        },
        Setting(key: "public-address", help: "with cluster: where clients reach this relay, HOST:PORT") { configuration, text throws(ConfigurationError) in
            do throws(ConfigurationError) {
                configuration.clusterFlags.publicAddress = try HostAndPort(parsing: text)
            } catch {
                // The listen address's advice (0.0.0.0 for every interface) is wrong here.
                guard error.message.contains("not an IP address") else { throw error }
                throw ConfigurationError("is \"\(text)\"; give this relay's public IP address and port, e.g. 198.51.100.7:7800 "
                    + "(clients are sent there and other relays open trunks to it, without looking a name up)")
            }
        },
        Setting(key: "region", help: "with cluster: the region this relay serves, for tokens that name one") { configuration, text throws(ConfigurationError) in
            if let problem = ClusterSettings.problem(withRegion: text) { throw ConfigurationError(problem) }
            configuration.clusterFlags.region = text
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

    public static func environmentName(_ key: String) -> String {
        environmentPrefix + key.uppercased().replacingDashes
    }

    /// Resolves the layers. `flags` holds only the flags given, by key.
    public static func resolve(
        flags: [String: String],
        environment: [String: String],
        file: KeyValueFile?
    ) throws(ConfigurationError) -> RelayConfiguration {
        try file?.checkKeys(known: keys)
        for name in environment.keys where name.hasPrefix(environmentPrefix) && name != environmentPrefix + "CONFIG" {
            guard keys.contains(where: { environmentName($0) == name }) else {
                throw ConfigurationError("unknown environment variable \(name); known: \(keys.map(environmentName).joined(separator: ", "))")
            }
        }
        var configuration = RelayConfiguration()
        for setting in settings {
            let value: String
            let source: String
            if let flag = flags[setting.key] {
                (value, source) = (flag, "--\(setting.key)")
            } else if let variable = environment[environmentName(setting.key)] {
                (value, source) = (variable, environmentName(setting.key))
            } else if let entry = file?[setting.key] {
                (value, source) = (entry.value, "\(file!.source):\(entry.line): \(setting.key)")
            } else {
                continue
            }
            do {
                try setting.apply(&configuration, value.trimmingWhitespace)
            } catch {
                throw ConfigurationError("\(source) \(error.message)")
            }
        }
        configuration.cluster = try configuration.clusterFlags.settings()
        try configuration.validate()
        return configuration
    }

    public func validate() throws(ConfigurationError) {
        try limits.validate()
        guard (1...256).contains(threads) else { throw ConfigurationError("threads is \(threads); it must be from 1 to 256") }
        try cluster?.validate()
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

/// `cluster`, `public-address` and `region` as given; they make sense only together.
struct ClusterFlags: Sendable {
    var endpoint: EtcdEndpoint?
    var publicAddress: HostAndPort?
    var region: String?

    func settings() throws(ConfigurationError) -> ClusterSettings? {
        guard let endpoint else {
            if publicAddress != nil || region != nil {
                throw ConfigurationError("public-address and region are for a member of a cluster; add cluster (etcd's URL, e.g. --cluster http://127.0.0.1:2379) or leave them out")
            }
            return nil
        }
        guard let publicAddress else {
            throw ConfigurationError("cluster needs public-address: where clients reach this relay, e.g. --public-address 198.51.100.7:7800, since other relays send clients there")
        }
        return ClusterSettings(endpoint: endpoint, publicAddress: publicAddress, region: region)
    }
}

extension String {
    var replacingDashes: String { String(map { $0 == "-" ? "_" : $0 }) }
    var replacingUnderscores: String { String(filter { $0 != "_" }) }
}
