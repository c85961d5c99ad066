import Foundation
import Logging
import NIOCore
import NIOPosix
import ParleyBasics

/// An ``ImpairmentProxy`` run as a program runs it: addresses written `HOST:PORT`, its own
/// event loop thread, and calls that block, so a command line needs no event loop of its
/// own. (Everything here waits on the proxy's thread; never call it from that thread.)
public final class ProxyRunner: Sendable {
    /// An address as written on the command line: `127.0.0.1:7000`, `[::1]:7000`,
    /// `relay.example.org:9000`.
    public struct Endpoint: Sendable, Equatable, CustomStringConvertible {
        public let host: String
        public let port: Int

        /// Reads `HOST:PORT`; `flag` names the flag in errors; port 0 (any free port) only
        /// where `allowsAnyPort`.
        public init(parsing text: String, flag: String, allowsAnyPort: Bool = false) throws(ImpairmentOptionError) {
            let lowest = allowsAnyPort ? 0 : 1
            let badPort = ImpairmentOptionError(
                "\(flag) \(text): the port must be a number from \(lowest) to 65535" + (allowsAnyPort ? " (0 lets the system choose)" : ""))
            let parts: HostPortText
            do {
                parts = try HostPortText(parsing: text)
            } catch .badPort {
                throw badPort
            } catch {
                throw ImpairmentOptionError("\(flag) \(text): write an IPv6 address in brackets with a port, like [::1]:7000")
            }
            guard let port = parts.port else {
                throw ImpairmentOptionError("\(flag) \(text): give a host and a port, like 127.0.0.1:7000")
            }
            guard !parts.host.isEmpty else {
                throw ImpairmentOptionError("\(flag) \(text): the host is missing; give one, like 127.0.0.1:\(port)")
            }
            guard port >= lowest else { throw badPort }
            self.host = String(parts.host)
            self.port = port
        }

        public var description: String { HostPortText.format(host: host, port: port) }

        func resolved(flag: String) throws(ImpairmentOptionError) -> SocketAddress {
            do {
                return try SocketAddress.makeAddressResolvingHost(host, port: port)
            } catch {
                throw ImpairmentOptionError("\(flag) \(self): cannot find the host '\(host)'; check the name or give an IP address")
            }
        }
    }

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    private let group: MultiThreadedEventLoopGroup
    private let proxy: ImpairmentProxy
    private let stopRequested = LockedFlag()

    /// The address clients send to, as people write it.
    public var listeningAddress: String { Format.address(proxy.localAddress) }

    private init(group: MultiThreadedEventLoopGroup, proxy: ImpairmentProxy) {
        self.group = group
        self.proxy = proxy
    }

    /// Resolves both addresses (a name that does not resolve is the caller's mistake, an
    /// ``ImpairmentOptionError``) and starts the proxy (a socket that cannot be bound is the
    /// machine's, a ``StartError``).
    public static func start(
        listen: Endpoint, relay: Endpoint, up: Impairment, down: Impairment, seed: UInt64,
        idleTimeout: Duration, maximumFlows: Int, logger: Logger
    ) throws -> ProxyRunner {
        var configuration = ImpairmentProxy.Configuration(
            listen: try listen.resolved(flag: "--listen"), relay: try relay.resolved(flag: "--to"),
            up: up, down: down, seed: seed)
        configuration.idleTimeout = idleTimeout
        configuration.maximumFlows = maximumFlows
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let proxy = try ImpairmentProxy.start(configuration, on: group.next(), logger: logger).wait()
            return ProxyRunner(group: group, proxy: proxy)
        } catch {
            try? group.syncShutdownGracefully()
            throw StartError(description: "cannot listen on \(listen): \(Self.reason(error)); choose another address or port")
        }
    }

    /// What the proxy has done so far.
    public func report() -> ProxyReport? {
        try? proxy.report().wait()
    }

    /// Stops the proxy and its thread, and returns the final report.
    public func stop() -> ProxyReport {
        stopRequested.set()
        let report = (try? proxy.stop().wait()) ?? ProxyReport()
        try? group.syncShutdownGracefully()
        return report
    }

    /// Blocks until the proxy stops; true if it stopped by itself (its socket failed)
    /// rather than because ``stop()`` was called.
    public func waitUntilClosed() -> Bool {
        try? proxy.closeFuture.wait()
        return !stopRequested.isSet
    }

    private static func reason(_ error: any Error) -> String {
        if let error = error as? IOError {
            return String(cString: strerror(error.errnoCode)).lowercased()
        }
        return "\(error)"
    }
}

/// A flag set once from one thread and read from another.
private final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
