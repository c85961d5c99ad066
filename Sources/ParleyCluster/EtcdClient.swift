import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import ParleyBasics
import ParleyRelay
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A client for etcd v3 (Debian's `etcd-server`) over its documented JSON gateway: leases,
/// puts, ranges, an atomic create-if-absent, a conditional delete, and watches
/// (``EtcdWatch``). It is what the cluster needs of a store and no more.
///
/// HTTP, TLS and connection pooling are async-http-client's, with SwiftNIO SSL (BoringSSL):
/// `https://` with the store's CA, a client certificate, and etcd's users (a token from
/// `/v3/auth/authenticate`, sent with every request and fetched again when etcd says it
/// expired). Requests go over kept-alive HTTP/1.1 connections, each bounded by the request
/// timeout; a watch, whose answer never ends and may be quiet for minutes, runs on a client of
/// its own with no read timeout, so it has a connection of its own.
///
/// ```swift
/// let etcd = try EtcdClient(endpoint: try EtcdEndpoint(parsing: "https://10.0.0.2:2379"),
///                           credentials: EtcdCredentials(certificateAuthorityFile: "/etc/parley/etcd-ca.pem"), group: group)
/// let lease = try await etcd.grantLease(ttlSeconds: 2)
/// switch try await etcd.create("/parley/rooms/standup", value: bytes, lease: lease) { … }
/// ```
public final class EtcdClient: Sendable {
    public let endpoint: EtcdEndpoint
    let requestTimeout: TimeAmount
    private let requests: HTTPClient
    private let watches: HTTPClient
    private let login: EtcdCredentials.Login?
    /// etcd's token for ``login``; nil until the first request, and after etcd refused it.
    private let token = Mutex<String?>(nil)
    /// The login in flight, which every request that needs a token waits for: etcd checks a
    /// password with bcrypt (tens of milliseconds each), so a burst of requests at start logs
    /// in once, not once each.
    private let loggingIn = Mutex<Task<String, any Error>?>(nil)
    private let closed = Atomic<Bool>(false)
    private let requestCount = Atomic<Int>(0)
    /// Called after every request with its duration in nanoseconds and whether it succeeded.
    private let observe: @Sendable (_ nanoseconds: UInt64, _ succeeded: Bool) -> Void

    /// A gateway answer larger than this is not one Parley asked for.
    static let maximumResponseBytes = 16 << 20

    /// Reads the credentials' files (the errors say which and why) and makes the clients.
    public init(
        endpoint: EtcdEndpoint, credentials: EtcdCredentials = EtcdCredentials(), group: any EventLoopGroup,
        requestTimeout: TimeAmount = .seconds(1),
        observe: @escaping @Sendable (_ nanoseconds: UInt64, _ succeeded: Bool) -> Void = { _, _ in }
    ) throws(ConfigurationError) {
        let tls = try credentials.tlsConfiguration(for: endpoint)
        login = try credentials.login()
        self.endpoint = endpoint
        self.requestTimeout = requestTimeout
        self.observe = observe
        func configuration(read: TimeAmount?) -> HTTPClient.Configuration {
            var configuration = HTTPClient.Configuration(
                tlsConfiguration: tls, redirectConfiguration: .disallow, timeout: .init(connect: requestTimeout, read: read),
                connectionPool: .init(idleTimeout: .seconds(60)))
            configuration.httpVersion = .http1Only
            return configuration
        }
        requests = HTTPClient(eventLoopGroup: group, configuration: configuration(read: requestTimeout))
        watches = HTTPClient(eventLoopGroup: group, configuration: configuration(read: nil))
    }

    deinit { close() }

    /// Requests sent so far (the benchmark counts store operations per join with it).
    public var requestsSent: Int { requestCount.load(ordering: .relaxed) }

    /// Closes the connections for good: a request made afterwards fails at once. Returns at
    /// once; the connections close in the background.
    public func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        requests.shutdown(queue: .global()) { _ in }
        watches.shutdown(queue: .global()) { _ in }
    }

    /// Closes the connections for good and waits until they are closed (before the event
    /// loops they run on may be shut down).
    public func shutdown() async {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        try? await requests.shutdown()
        try? await watches.shutdown()
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
        let request = EtcdMessages.PutRequest(key: EtcdMessages.encode(key), value: EtcdMessages.encode(value), lease: lease.map { "\($0)" })
        let _: EtcdMessages.RangeResponse = try await call("/v3/kv/put", request)
    }

    /// Every key starting with `prefix`, and the store's revision they were read at (a watch
    /// from the revision after it misses nothing).
    public func range(prefix: String) async throws -> (revision: Int64, entries: [EtcdEntry]) {
        let request = EtcdMessages.RangeRequest(key: EtcdMessages.encode(prefix), range_end: EtcdMessages.encode(EtcdMessages.prefixEnd(prefix)))
        let answer: EtcdMessages.RangeResponse = try await call("/v3/kv/range", request)
        return (answer.header?.revision.flatMap(Int64.init) ?? 0, try (answer.kvs ?? []).map(EtcdEntry.init))
    }

    public func get(_ key: String) async throws -> EtcdEntry? {
        let answer: EtcdMessages.RangeResponse = try await call("/v3/kv/range", EtcdMessages.RangeRequest(key: EtcdMessages.encode(key)))
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
        let encodedKey = EtcdMessages.encode(key)
        let request = EtcdMessages.TxnRequest(
            compare: [.init(key: encodedKey, target: "CREATE", create_revision: "0")],
            success: [.init(request_put: .init(key: encodedKey, value: EtcdMessages.encode(value), lease: lease.map { "\($0)" }))],
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
        let encodedKey = EtcdMessages.encode(key)
        let request = EtcdMessages.TxnRequest(
            compare: [.init(key: encodedKey, target: "VALUE", value: EtcdMessages.encode(value))],
            success: [.init(request_delete_range: .init(key: encodedKey))],
            failure: [])
        let answer: EtcdMessages.TxnResponse = try await call("/v3/kv/txn", request)
        return answer.succeeded == true
    }

    // MARK: Watches

    /// Watches every key under `prefix` from `revision` (``EtcdWatch``): returns once etcd
    /// answered the watch, after which `onChanges` gets each batch with the revision it
    /// brings the reader to, and `onEnd` is called once if the watch ends by itself.
    public func watch(
        prefix: String, fromRevision revision: Int64,
        onChanges: @escaping @Sendable ([EtcdChange], Int64) -> Void,
        onEnd: @escaping @Sendable (any Error) -> Void
    ) async throws -> EtcdWatch {
        let body = EtcdMessages.WatchCreate(create_request: .init(
            key: EtcdMessages.encode(prefix), range_end: EtcdMessages.encode(EtcdMessages.prefixEnd(prefix)), start_revision: "\(revision)"))
        let response = try await authorized { authorization in
            try await self.send("/v3/watch", try JSONEncoder().encode(body), authorization: authorization, on: self.watches)
        }
        guard response.status == .ok else {
            let bytes = try await Self.collect(response.body, limit: 64 << 10)
            throw failure(status: response.status, body: bytes)
        }
        return EtcdWatch(body: response.body, onChanges: onChanges, onEnd: onEnd)
    }

    // MARK: Requests

    private func call<Request: Encodable, Answer: Decodable>(_ path: String, _ request: Request) async throws -> Answer {
        let body = try JSONEncoder().encode(request)
        let started = MonotonicClock.now()
        requestCount.add(1, ordering: .relaxed)
        do {
            let answer: Answer = try await authorized { authorization in
                let response = try await self.send(path, body, authorization: authorization, on: self.requests)
                let bytes = try await Self.collect(response.body, limit: Self.maximumResponseBytes)
                guard response.status == .ok else { throw self.failure(status: response.status, body: bytes) }
                do {
                    return try JSONDecoder().decode(Answer.self, from: Data(bytes))
                } catch {
                    throw EtcdError.unreadable("\(error)")
                }
            }
            observe(MonotonicClock.now() &- started, true)
            return answer
        } catch {
            observe(MonotonicClock.now() &- started, false)
            throw error
        }
    }

    /// Runs `attempt` with etcd's token for the relay's user (none without a user), fetching
    /// the token first if there is none; once more with a new token if etcd says it expired
    /// (etcd's simple tokens lapse after five idle minutes, and with a restart).
    private func authorized<T>(_ attempt: (String?) async throws -> T) async throws -> T {
        guard let login else { return try await attempt(nil) }
        guard let known = token.withLock({ $0 }) else { return try await attempt(try await logIn(login)) }
        do {
            return try await attempt(known)
        } catch EtcdError.notAuthenticated {
            token.withLock { if $0 == known { $0 = nil } }
            return try await attempt(try await logIn(login))
        }
    }

    /// A token: the one a login in flight brings, or a new login's.
    private func logIn(_ login: EtcdCredentials.Login) async throws -> String {
        let task = loggingIn.withLock { current in
            if let current { return current }
            let task = Task { try await self.authenticate(login) }
            current = task
            return task
        }
        defer { loggingIn.withLock { if $0 == task { $0 = nil } } }
        return try await task.value
    }

    private func authenticate(_ login: EtcdCredentials.Login) async throws -> String {
        let request = try JSONEncoder().encode(EtcdMessages.AuthenticateRequest(name: login.user, password: login.password))
        let response = try await send("/v3/auth/authenticate", request, authorization: nil, on: requests)
        let bytes = try await Self.collect(response.body, limit: 64 << 10)
        guard response.status == .ok else {
            let failure = failure(status: response.status, body: bytes)
            if case let .refused(_, _, message) = failure, message.contains("authentication failed") || message.contains("user name") {
                throw EtcdError.notAuthenticated("etcd refused the user \(login.user) and its password (cluster-user, cluster-password-file): \(message)")
            }
            throw failure
        }
        guard let answer = try? JSONDecoder().decode(EtcdMessages.AuthenticateResponse.self, from: Data(bytes)), let token = answer.token, !token.isEmpty else {
            throw EtcdError.unreadable("an authentication answer without a token")
        }
        self.token.withLock { $0 = token }
        return token
    }

    private func send(_ path: String, _ body: Data, authorization: String?, on client: HTTPClient) async throws -> HTTPClientResponse {
        guard !closed.load(ordering: .relaxed) else { throw EtcdError.connectionClosed }
        var request = HTTPClientRequest(url: endpoint.url(path))
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            return try await client.execute(request, timeout: requestTimeout)
        } catch {
            throw Self.failure(error)
        }
    }

    static func collect(_ body: HTTPClientResponse.Body, limit: Int) async throws -> [UInt8] {
        do {
            return Array(buffer: try await body.collect(upTo: limit))
        } catch is NIOTooManyBytesError {
            throw EtcdError.responseTooLarge
        } catch {
            throw failure(error)
        }
    }

    // MARK: Errors, in words an operator can act on

    /// What a gateway's refusal means. etcd answers errors as JSON with a gRPC code and its
    /// message; a request it refuses before the gateway (a client certificate it will not
    /// take) as text.
    func failure(status: HTTPResponseStatus, body: [UInt8]) -> EtcdError {
        let error = try? JSONDecoder().decode(EtcdMessages.GatewayError.self, from: Data(body))
        let message = error?.message ?? error?.error ?? String(decoding: body.prefix(200), as: UTF8.self).trimmingWhitespace
        if message.contains("lease not found") { return .leaseNotFound }
        if message.contains("invalid auth token") || message.contains("user name is empty") || message.contains("auth token is expired") {
            return .notAuthenticated("etcd asks for a user: give the relay one with cluster-user and cluster-password-file (etcd says: \(message))")
        }
        if message.contains("permission denied") {
            guard let login else {
                return .notAuthenticated("etcd refused a request from no user: give the relay one with cluster-user and cluster-password-file (etcd says: \(message))")
            }
            return .permissionDenied("etcd refused the relay's user \(login.user): give its role readwrite on the prefix /parley/ "
                + "(etcdctl role grant-permission ROLE --prefix=true readwrite /parley/)")
        }
        if message.contains("CommonName of client") {
            return .notAuthenticated("etcd refuses a client certificate with a Common Name on its JSON gateway while its authentication is on; "
                + "make the relay's certificate without one (openssl req -subj /O=parley-relay) and give the relay an etcd user (cluster-user)")
        }
        return .refused(status: Int(status.code), code: error?.code, message: message)
    }

    /// A failure on the way (no answer at all), as an ``EtcdError``; a task's cancellation
    /// stays one, so whoever cancelled sees it.
    static func failure(_ error: any Error) -> any Error {
        if error is EtcdError || error is CancellationError { return error }
        // The answer cut off (the store went away in the middle of it).
        if error is HTTPParserError { return EtcdError.connectionClosed }
        guard let error = error as? HTTPClientError else { return EtcdError.unreachable("\(error)") }
        switch error {
        case .deadlineExceeded, .readTimeout, .connectTimeout, .writeTimeout, .tlsHandshakeTimeout, .getConnectionFromPoolTimeout:
            return EtcdError.timedOut
        case .remoteConnectionClosed, .cancelled, .alreadyShutdown:
            return EtcdError.connectionClosed
        default:
            return EtcdError.unreachable("\(error)")
        }
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
