import ArgumentParser
import Dispatch
import Logging
import ParleyAdmin
import ParleyCluster
import ParleyRelay

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the relay: forward each member's audio to the rest of its room.",
        discussion: """
        Settings come from flags, then PARLEY_RELAY_* environment variables, then the config file, then defaults; the same names work everywhere (--max-rooms, PARLEY_RELAY_MAX_ROOMS, max-rooms = 500). Example:

          parley-relay serve --listen 0.0.0.0:7800 --admin 127.0.0.1:9800 \\
              --secret-file /etc/parley/relay.secret --max-members-per-room 20

        /etc/parley/relay.conf, read if it exists (or --config FILE):

          listen = 0.0.0.0:7800
          admin = 127.0.0.1:9800
          secret-file = /etc/parley/relay.secret
          idle-timeout = 30s

        A cluster: every relay shares the token secret (the token-secret line of one secret file) but has its own key, and names the same etcd and its own public address; etcd reached over TLS with its CA, a client certificate and an etcd user (docs/CLUSTER.md):

          parley-relay serve --cluster https://10.0.0.2:2379 \\
              --public-address 198.51.100.7:7800 \\
              --cluster-ca /etc/parley/etcd-ca.pem \\
              --cluster-cert /etc/parley/etcd-client.pem \\
              --cluster-key /etc/parley/etcd-client.key \\
              --cluster-user parley \\
              --cluster-password-file /etc/parley/etcd-password

        SIGTERM or SIGINT: members are told goodbye, then the relay exits 0 within 2 s.
        """ + "\n\n" + ServeExitStatus.helpText
    )

    @Option(help: ArgumentHelp("Config file of `key = value` lines.", valueName: "file"))
    var config: String?
    @Option(help: ArgumentHelp("UDP address for clients. Default 0.0.0.0:7800.", valueName: "host:port"))
    var listen: String?
    @Option(help: ArgumentHelp("HTTP address for /metrics and /healthz, or 'off'. Default 127.0.0.1:9800.", valueName: "host:port"))
    var admin: String?
    @Option(help: ArgumentHelp("HTTP address for the browser page (/join) and its signalling, or 'off'. Default off.", valueName: "host:port"))
    var web: String?
    @Option(help: ArgumentHelp("The file `parley-relay keygen` wrote. Default /etc/parley/relay.secret.", valueName: "file"))
    var secretFile: String?
    @Option(help: ArgumentHelp("Forwarding loops, a thread and a UDP socket each. Default: one per core.", valueName: "n"))
    var threads: String?
    @Option(help: ArgumentHelp("trace, debug, info, notice, warning, error or critical. Default info.", valueName: "level"))
    var logLevel: String?
    @Option(help: ArgumentHelp("Socket receive and send buffer. Default 4MiB.", valueName: "size"))
    var socketBuffer: String?
    @Option(help: ArgumentHelp("Rooms open at once. Default 500.", valueName: "n"))
    var maxRooms: String?
    @Option(help: ArgumentHelp("Members in one room. Default 50.", valueName: "n"))
    var maxMembersPerRoom: String?
    @Option(help: ArgumentHelp("Media packets per second one member may send. Default 200.", valueName: "n"))
    var maxPacketRate: String?
    @Option(help: ArgumentHelp("Media bits per second one member may send, e.g. 640k or 2M. Default 640k.", valueName: "rate"))
    var maxMemberBitrate: String?
    @Option(help: ArgumentHelp("Largest datagram accepted, in bytes. Default 1500.", valueName: "bytes"))
    var maxPacketSize: String?
    @Option(help: ArgumentHelp("How often clients ping. Default 5s.", valueName: "duration"))
    var keepaliveInterval: String?
    @Option(help: ArgumentHelp("Silence after which a member is removed. Default 30s.", valueName: "duration"))
    var idleTimeout: String?
    @Option(help: ArgumentHelp("Join a cluster whose store is etcd at this URL, e.g. https://10.0.0.2:2379. Needs --public-address.", valueName: "url"))
    var cluster: String?
    @Option(help: ArgumentHelp("Where clients reach this relay's UDP port: with --cluster (other relays send them here), and with --web behind a NAT, a port forward or a proxy (browsers are told it).", valueName: "host:port"))
    var publicAddress: String?
    @Option(help: ArgumentHelp("With --cluster: this relay's region, for tokens that ask for one (\"region\" claim).", valueName: "name"))
    var region: String?
    @Option(help: ArgumentHelp("With an https:// cluster: the CA that signed etcd's certificate (PEM). Default: the system's CAs.", valueName: "file"))
    var clusterCa: String?
    @Option(help: ArgumentHelp("With an https:// cluster: this relay's client certificate (PEM), for etcd's --client-cert-auth.", valueName: "file"))
    var clusterCert: String?
    @Option(help: ArgumentHelp("With --cluster-cert: its private key (PEM).", valueName: "file"))
    var clusterKey: String?
    @Option(help: ArgumentHelp("With an https:// cluster: the etcd user this relay logs in as.", valueName: "name"))
    var clusterUser: String?
    @Option(help: ArgumentHelp("With --cluster-user: a file holding its password.", valueName: "file"))
    var clusterPasswordFile: String?
    @Flag(help: "Run WITHOUT encryption: tokens and audio in the clear. For tests and trusted networks only; clients need --insecure too.")
    var insecure = false

    func run() throws {
        let flags: [String: String?] = [
            "listen": listen, "admin": admin, "web": web, "secret-file": secretFile, "threads": threads, "log-level": logLevel,
            "socket-buffer": socketBuffer, "max-rooms": maxRooms, "max-members-per-room": maxMembersPerRoom,
            "max-packet-rate": maxPacketRate, "max-member-bitrate": maxMemberBitrate, "max-packet-size": maxPacketSize,
            "keepalive-interval": keepaliveInterval, "idle-timeout": idleTimeout,
            "cluster": cluster, "public-address": publicAddress, "region": region,
            "cluster-ca": clusterCa, "cluster-cert": clusterCert, "cluster-key": clusterKey,
            "cluster-user": clusterUser, "cluster-password-file": clusterPasswordFile,
            "insecure": insecure ? "true" : nil,
        ]
        // Each part reads its own settings from the same layers.
        let layers = try Self.layers(flags: flags.compactMapValues { $0 }, config: config)
        var configuration = try RelayConfiguration.resolve(layers)
        let adminSettings = try AdminSettings.resolve(layers)
        let webSettings = try WebSettings.resolve(layers)
        configuration.acceptsBrowsers = webSettings.address != nil
        configuration.browserCandidate = try ClusterSettings.publicAddress(layers)
        let clusterSettings = try ClusterSettings.resolve(layers, acceptsBrowsers: configuration.acceptsBrowsers)

        let level = configuration.logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "parley-relay")
        let secret = try SecretFile.load(path: configuration.secretFile) { warning in
            logger.warning("\(warning)")
        }

        // Signals are taken by a dispatch source, not a handler, so shutdown runs as normal code.
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        // The relay, what places its rooms in a cluster, and its admin port, side by side: the
        // relay starts its placement once its sockets are bound and leaves the cluster first
        // when it shuts down; the admin port serves it until after its shutdown.
        let metrics = RelayMetrics()
        let cluster = try clusterSettings.map { try ClusterMember(settings: $0, metrics: ClusterMetrics(registry: metrics.registry), logger: logger) }
        let relay: Relay
        let adminServer: AdminServer?
        let webServer: BrowserWebServer?
        do {
            relay = try Relay.start(configuration: configuration, secret: secret.tokenSecret, relayKey: secret.relayKey, placement: cluster,
                                    logger: logger, metrics: metrics)
            do {
                adminServer = try adminSettings.address.map { try AdminServer.start(serving: relay, at: $0, token: secret.adminToken, logger: logger) }
            } catch {
                relay.shutdown()
                throw error
            }
            do {
                webServer = try webSettings.address.map { try BrowserWebServer.start(serving: relay, at: $0, logger: logger) }
            } catch {
                relay.shutdown()
                adminServer?.close()
                throw error
            }
        } catch let error as ConfigurationError {
            throw error
        } catch {
            logger.critical("cannot start the relay: \(error); is another process using the port?")
            throw ExitCode(ServeExitStatus.cannotStart.rawValue)
        }
        if let clusterSettings {
            logger.info("member of a cluster", metadata: [
                "store": "\(clusterSettings.endpoint)", "public-address": "\(clusterSettings.publicAddress)",
                "region": "\(clusterSettings.region ?? "none")",
            ])
        }
        let done = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { done.signal() }
            source.resume()
            return source
        }
        done.wait()
        relay.shutdown()
        adminServer?.close()
        webServer?.close()
        withExtendedLifetime(sources) {}
    }

    static let configHint = "check the path given with --config or PARLEY_RELAY_CONFIG"

    /// Where every command reads the relay's settings: `flags`, then PARLEY_RELAY_* variables,
    /// then the config file (`config`, PARLEY_RELAY_CONFIG, or /etc/parley/relay.conf if it
    /// exists), then the defaults. Each part of the relay (``RelayConfiguration``, the admin
    /// port's ``AdminSettings``, the cluster's ``ClusterSettings``) reads its own keys from
    /// them; a key none of them has is a typo, refused here.
    static func layers(flags: [String: String], config: String?, environment: [String: String] = Self.environment()) throws -> ConfigurationLayers {
        var file: KeyValueFile?
        if let configPath = config ?? environment[ConfigurationLayers.configVariable] {
            file = try KeyValueFile(parsing: FileText.read(path: configPath, what: "config file", hint: Self.configHint), source: configPath)
        } else if access(RelayConfiguration.defaultConfigFile, F_OK) == 0 {
            let path = RelayConfiguration.defaultConfigFile
            file = try KeyValueFile(parsing: FileText.read(path: path, what: "config file", hint: Self.configHint), source: path)
        }
        let layers = ConfigurationLayers(flags: flags, environment: environment, file: file)
        try layers.checkKeys(known: RelayConfiguration.keys + AdminSettings.keys + WebSettings.keys + ClusterSettings.keys)
        return layers
    }

    static func environment() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}
