import NIOCore
import NIOHTTP1
import NIOPosix
import ParleyBasics
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A small client for etcd v3 (Debian's `etcd-server`) over its documented JSON gateway:
/// leases, puts, ranges, an atomic create-if-absent, a conditional delete, and watches
/// (``EtcdWatch``). It is what the cluster needs of a store and no more.
///
/// It speaks HTTP/1.1 with SwiftNIO's NIOHTTP1, which the relay already links for its admin
/// server; async-http-client would do the same for minutes more build on every clean clone,
/// and a watch is only a response whose body never ends, which NIOHTTP1 hands over chunk by
/// chunk. Requests share one kept-alive connection (``EtcdConnection``).
///
/// ```swift
/// let etcd = EtcdClient(endpoint: try EtcdEndpoint(parsing: "http://127.0.0.1:2379"), group: group)
/// let lease = try await etcd.grantLease(ttlSeconds: 2)
/// switch try await etcd.create("/parley/rooms/standup", value: bytes, lease: lease) { … }
/// ```
public final class EtcdClient: Sendable {
    public let endpoint: EtcdEndpoint
    let loop: any EventLoop
    let requestTimeout: TimeAmount
    private let connection = Mutex(ConnectionState.closed)
    private let requestCount = Atomic<Int>(0)
    /// Called after every request with its duration in nanoseconds and whether it succeeded.
    private let observe: @Sendable (_ nanoseconds: UInt64, _ succeeded: Bool) -> Void

    /// A gateway answer larger than this is not one Parley asked for.
    static let maximumResponseBytes = 16 << 20

    public init(
        endpoint: EtcdEndpoint, group: any EventLoopGroup, requestTimeout: TimeAmount = .seconds(1),
        observe: @escaping @Sendable (_ nanoseconds: UInt64, _ succeeded: Bool) -> Void = { _, _ in }
    ) {
        self.endpoint = endpoint
        self.loop = group.next()
        self.requestTimeout = requestTimeout
        self.observe = observe
    }

    /// Requests sent so far (the benchmark counts store operations per join with it).
    public var requestsSent: Int { requestCount.load(ordering: .relaxed) }

    /// Closes the connection for good: a request made afterwards fails at once, without
    /// touching the event loop, which the owner may be about to shut down (a request queued
    /// on a loop that has stopped would never be answered).
    public func close() {
        let state = connection.withLock { state in
            defer { state = .shutDown }
            return state
        }
        switch state {
        case let .connected(open): open.close()
        case let .connecting(pending): pending.whenSuccess { $0.close() }
        case .closed, .shutDown: break
        }
    }

    private enum ConnectionState {
        /// No connection now; the next request opens one.
        case closed
        case connecting(EventLoopFuture<EtcdConnection>)
        case connected(EtcdConnection)
        /// `close()` was called.
        case shutDown
    }

    // MARK: Leases

    /// A new lease; keys put under it vanish when it expires. Returns its ID.
    public func grantLease(ttlSeconds: Int) async throws -> Int64 {
        let answer: EtcdMessages.LeaseGrantResponse = try await call("/v3/lease/grant", EtcdMessages.LeaseGrantRequest(TTL: "\(ttlSeconds)"))
        guard let id = answer.ID.flatMap(Int64.init), id != 0 else { throw EtcdError.unreadable("lease grant without an ID") }
        return id
    }

    /// Renews `lease`; returns the seconds it now has. Throws ``EtcdError/leaseNotFound`` once
    /// it has expired (the keys under it are gone).
    @discardableResult
    public func keepAlive(lease: Int64) async throws -> Int {
        let answer: EtcdMessages.Streamed<EtcdMessages.LeaseKeepAliveResult> = try await call("/v3/lease/keepalive", EtcdMessages.LeaseRequest(ID: "\(lease)"))
        if let error = answer.error { throw EtcdError.refused(status: 200, code: error.code, message: error.message ?? "keepalive failed") }
        guard let ttl = answer.result?.TTL.flatMap(Int.init), ttl > 0 else { throw EtcdError.leaseNotFound }
        return ttl
    }

    /// Ends `lease` now, deleting every key under it.
    public func revoke(lease: Int64) async throws {
        let _: EtcdMessages.RangeResponse = try await call("/v3/lease/revoke", EtcdMessages.LeaseRequest(ID: "\(lease)"))
    }

    // MARK: Keys

    public func put(_ key: String, value: [UInt8], lease: Int64? = nil) async throws {
        let request = EtcdMessages.PutRequest(key: Self.encode(key), value: Self.encode(value), lease: lease.map { "\($0)" })
        let _: EtcdMessages.RangeResponse = try await call("/v3/kv/put", request)
    }

    /// Every key starting with `prefix`, and the store's revision they were read at (a watch
    /// from the revision after it misses nothing).
    public func range(prefix: String) async throws -> (revision: Int64, entries: [EtcdEntry]) {
        let request = EtcdMessages.RangeRequest(key: Self.encode(prefix), range_end: Self.encode(Self.prefixEnd(prefix)))
        let answer: EtcdMessages.RangeResponse = try await call("/v3/kv/range", request)
        return (answer.header?.revision.flatMap(Int64.init) ?? 0, try (answer.kvs ?? []).map(EtcdEntry.init))
    }

    public func get(_ key: String) async throws -> EtcdEntry? {
        let answer: EtcdMessages.RangeResponse = try await call("/v3/kv/range", EtcdMessages.RangeRequest(key: Self.encode(key)))
        return try answer.kvs?.first.map(EtcdEntry.init)
    }

    public enum CreateOutcome: Sendable, Equatable {
        case created
        /// Someone created the key first; this is what it holds.
        case exists(EtcdEntry)
    }

    /// Creates `key` unless it exists, in one transaction (`create_revision == 0`): of any
    /// number of relays racing for a room, exactly one creates it and the others read its
    /// value in the same answer. Throws ``EtcdError/leaseNotFound`` if `lease` has expired.
    public func create(_ key: String, value: [UInt8], lease: Int64?) async throws -> CreateOutcome {
        let encodedKey = Self.encode(key)
        let request = EtcdMessages.TxnRequest(
            compare: [.init(key: encodedKey, target: "CREATE", create_revision: "0")],
            success: [.init(request_put: .init(key: encodedKey, value: Self.encode(value), lease: lease.map { "\($0)" }))],
            failure: [.init(request_range: .init(key: encodedKey))])
        let answer: EtcdMessages.TxnResponse = try await call("/v3/kv/txn", request)
        if answer.succeeded == true { return .created }
        guard let found = answer.responses?.first?.response_range?.kvs?.first else {
            // Deleted between the compare and the range: impossible in one transaction.
            throw EtcdError.unreadable("a failed create without the existing key")
        }
        return .exists(try EtcdEntry(found))
    }

    /// Deletes `key` only while it still holds `value` (a relay releases only its own claim).
    @discardableResult
    public func delete(_ key: String, ifValue value: [UInt8]) async throws -> Bool {
        let encodedKey = Self.encode(key)
        let request = EtcdMessages.TxnRequest(
            compare: [.init(key: encodedKey, target: "VALUE", value: Self.encode(value))],
            success: [.init(request_delete_range: .init(key: encodedKey))],
            failure: [])
        let answer: EtcdMessages.TxnResponse = try await call("/v3/kv/txn", request)
        return answer.succeeded == true
    }

    // MARK: Requests

    private func call<Request: Encodable, Answer: Decodable>(_ path: String, _ request: Request) async throws -> Answer {
        let body = Array(try JSONEncoder().encode(request))
        let started = MonotonicClock.now()
        requestCount.add(1, ordering: .relaxed)
        do {
            let response = try await post(path: path, body: body)
            let answer = try Self.decode(Answer.self, response)
            observe(MonotonicClock.now() &- started, true)
            return answer
        } catch {
            observe(MonotonicClock.now() &- started, false)
            throw error
        }
    }

    static func decode<Answer: Decodable>(_ type: Answer.Type, _ response: EtcdConnection.Response) throws -> Answer {
        guard response.status == .ok else {
            let error = try? JSONDecoder().decode(EtcdMessages.GatewayError.self, from: Data(response.body))
            let message = error?.message ?? error?.error ?? String(decoding: response.body.prefix(200), as: UTF8.self)
            if message.contains("lease not found") { throw EtcdError.leaseNotFound }
            throw EtcdError.refused(status: Int(response.status.code), code: error?.code, message: message)
        }
        do {
            return try JSONDecoder().decode(Answer.self, from: Data(response.body))
        } catch {
            throw EtcdError.unreadable("\(error)")
        }
    }

    private func post(path: String, body: [UInt8]) async throws -> EtcdConnection.Response {
        let connection = try await openConnection()
        return try await connection.post(path: path, host: endpoint.hostHeader, body: body, timeout: requestTimeout).get()
    }

    /// The kept-alive connection, or a new one when it closed.
    private func openConnection() async throws -> EtcdConnection {
        let future = connection.withLock { state -> EventLoopFuture<EtcdConnection>? in
            switch state {
            case .shutDown: return nil
            case let .connected(open) where open.isActive: return loop.makeSucceededFuture(open)
            case let .connecting(pending): return pending
            case .connected, .closed:
                let made = EtcdConnection.connect(host: endpoint.host, port: endpoint.port, on: loop, timeout: requestTimeout)
                state = .connecting(made)
                return made
            }
        }
        guard let future else { throw EtcdError.connectionClosed }
        do {
            let made = try await future.get()
            connection.withLock { state in
                if case let .connecting(pending) = state, pending === future { state = .connected(made) }
            }
            return made
        } catch {
            connection.withLock { state in
                if case let .connecting(pending) = state, pending === future { state = .closed }
            }
            throw error
        }
    }

    // MARK: Encoding

    static func encode(_ text: String) -> String { encode(Array(text.utf8)) }
    static func encode(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    /// The end of the range holding every key that starts with `prefix`: the prefix with
    /// its last byte increased (Parley's prefixes end in '/', so it never overflows).
    static func prefixEnd(_ prefix: String) -> String {
        var bytes = Array(prefix.utf8)
        bytes[bytes.count - 1] &+= 1
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// One key and its value as etcd holds it.
public struct EtcdEntry: Sendable, Equatable {
    public var key: String
    public var value: [UInt8]
    public var createRevision: Int64
    public var modRevision: Int64
    /// The lease the key lives under; 0 for none.
    public var lease: Int64

    init(_ kv: EtcdMessages.KeyValue) throws {
        guard let key = kv.key.flatMap({ Data(base64Encoded: $0) }) else { throw EtcdError.unreadable("a key that is not base64") }
        self.key = String(decoding: key, as: UTF8.self)
        value = kv.value.flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? []
        createRevision = kv.create_revision.flatMap(Int64.init) ?? 0
        modRevision = kv.mod_revision.flatMap(Int64.init) ?? 0
        lease = kv.lease.flatMap(Int64.init) ?? 0
    }

    public init(key: String, value: [UInt8], createRevision: Int64 = 0, modRevision: Int64 = 0, lease: Int64 = 0) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.lease = lease
    }
}

/// Where etcd's client API listens: `http://HOST:PORT` (the gateway on the client port).
public struct EtcdEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// "http://127.0.0.1:2379"; the error says what to write instead.
    public init(parsing text: String) throws(ConfigurationError) {
        let lowered = text.lowercased()
        if lowered.hasPrefix("https://") {
            throw ConfigurationError("is \"\(text)\"; the relay speaks plain HTTP to etcd, so keep etcd's client port on a private network or loopback and write http://HOST:PORT")
        }
        guard lowered.hasPrefix("http://") else {
            throw ConfigurationError("is \"\(text)\"; write etcd's client URL, e.g. http://127.0.0.1:2379")
        }
        var rest = text.dropFirst("http://".count)
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains("/") else {
            throw ConfigurationError("is \"\(text)\"; write only the scheme, host and port, e.g. http://127.0.0.1:2379")
        }
        let address: HostAndPort
        do {
            address = try HostAndPort(parsing: rest.contains(":") || rest.hasPrefix("[") ? String(rest) : "\(rest):2379")
        } catch {
            throw ConfigurationError("is \"\(text)\"; write etcd's client URL, e.g. http://127.0.0.1:2379 (\(error.message))")
        }
        guard address.port > 0 else { throw ConfigurationError("is \"\(text)\"; the port must be from 1 to 65535") }
        host = address.host
        port = address.port
    }

    var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public var description: String { "http://\(hostHeader)" }
}
