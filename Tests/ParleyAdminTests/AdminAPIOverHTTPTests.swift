import Foundation
import Logging
import ParleyAdmin
import ParleyRelay
import ParleyRelayTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The admin API on a running relay's admin port, over real HTTP: who gets in, what a
/// stranger's oversized body costs, and a relay whose secret file predates the API.
@Suite("The admin API over HTTP")
struct AdminAPIOverHTTPTests {
    /// A relay and its admin port; `stop` shuts both, as `parley-relay serve` does.
    static func relay(adminToken: AdminToken?) throws -> (Relay, HostAndPort, stop: () -> Void) {
        var configuration = RelayConfiguration()
        configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        configuration.insecure = true
        configuration.shutdownGraceMilliseconds = 200
        var logger = Logger(label: "admin-api-test")
        logger.logLevel = .error
        let relay = try Relay.start(configuration: configuration, secret: .random(), logger: logger)
        let admin = try AdminServer.start(serving: relay, at: HostAndPort(host: "127.0.0.1", port: 0), token: adminToken, logger: logger)
        return (relay, HostAndPort(host: "127.0.0.1", port: admin.localAddress!.port!), {
            relay.shutdown()
            admin.close()
        })
    }

    @Test func onlyTheAdminTokenOpensItAndAnOversizedBodyIsRefusedUnread() throws {
        let token = AdminToken.random()
        let (_, address, stop) = try Self.relay(adminToken: token)
        defer { stop() }
        let anonymous = try AdminClient.send(method: "GET", path: "/admin/rooms", token: nil, to: address)
        #expect(anonymous.status == 401)
        let wrong = try AdminClient.send(method: "GET", path: "/admin/rooms", token: AdminToken.random().text, to: address)
        #expect(wrong.status == 401 && String(decoding: wrong.body, as: UTF8.self).contains("admin token is wrong"))
        let rooms = try AdminClient.send(method: "GET", path: "/admin/rooms", token: token.text, to: address)
        #expect(rooms.status == 200 && String(decoding: rooms.body, as: UTF8.self) == "{\"rooms\":[]}\n")
        let large = try AdminClient.send(method: "POST", path: "/admin/kick", body: [UInt8](repeating: 0x61, count: 100_000), token: token.text, to: address)
        #expect(large.status == 413)
        let absent = try AdminClient.send(method: "POST", path: "/admin/kick", body: Array(#"{"room":"standup","identity":"bob"}"#.utf8), token: token.text, to: address)
        #expect(absent.status == 404 && String(decoding: absent.body, as: UTF8.self).contains("there is no room standup"))
        let metrics = try AdminClient.send(method: "GET", path: "/metrics", token: nil, to: address)
        #expect(metrics.status == 200 && String(decoding: metrics.body, as: UTF8.self).contains(#"parley_relay_moderation_refused_total{source="admin",reason="no_such_member"} 1"#))
    }

    @Test func aRelayWithoutAnAdminTokenServesMetricsAndHealthAndSaysTheAPIIsOff() throws {
        let (relay, address, stop) = try Self.relay(adminToken: nil)
        defer { stop() }
        #expect(try AdminClient.send(method: "GET", path: "/healthz", token: nil, to: address).status == 200)
        #expect(try AdminClient.send(method: "GET", path: "/metrics", token: nil, to: address).status == 200)
        let off = try AdminClient.send(method: "GET", path: "/admin/rooms", token: AdminToken.random().text, to: address)
        #expect(off.status == 404 && String(decoding: off.body, as: UTF8.self).contains("the admin API is off"))
        // The admin port outlives the relay's shutdown by a moment (it is closed after it):
        // a health check then hears that it is going, and a scrape still gets the last counts.
        relay.shutdown()
        #expect(try AdminClient.send(method: "GET", path: "/healthz", token: nil, to: address).status == 503)
        #expect(try AdminClient.send(method: "GET", path: "/metrics", token: nil, to: address).status == 200)
    }

    /// Idle and slow connections cost the relay a descriptor each until it closes them: it
    /// keeps a bounded number, closes one that has not sent a whole request in time, and a
    /// scrape made during such a flood is still answered.
    @Test func idleAndSlowConnectionsAreBoundedAndTimedOutWhileScrapesAreStillAnswered() async throws {
        let (_, address, stop) = try Self.relay(adminToken: nil)
        defer { stop() }
        // In tens, each given the time to be accepted (the kernel's accept queue is not the relay's).
        var idle: [LoopbackTCP] = []
        for _ in 0..<30 {
            idle += (0..<10).compactMap { _ in LoopbackTCP(port: address.port) }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(idle.count == 300)
        try await Task.sleep(for: .milliseconds(300))
        let healthz = try AdminClient.send(method: "GET", path: "/healthz", token: nil, to: address)
        #expect(healthz.status == 200, "a scrape during the flood is answered")
        let kept = idle.filter { !$0.closedByRelay }.count
        print("of 300 idle connections the admin port keeps \(kept)")
        #expect(kept <= 64, "the admin port holds a bounded number of connections")

        let slow = (0..<5).compactMap { _ in LoopbackTCP(port: address.port) }
        for connection in slow { connection.send("GET /metrics HTTP/1.1\r\nHost: relay\r\n") }
        let start = Date()
        while Date().timeIntervalSince(start) < 20, !(slow + idle).allSatisfy { $0.closedByRelay } {
            try await Task.sleep(for: .milliseconds(100))
        }
        let waited = Date().timeIntervalSince(start)
        print("connections without a whole request were closed after \(String(format: "%.1f", waited)) s")
        #expect((slow + idle).allSatisfy { $0.closedByRelay }, "a connection that sends no whole request is closed")
        // The request timeout is 5 s; a suite running beside this one on two cores has been
        // seen to add 3.4 s to when the closes are noticed. Without the timeout they stay open.
        #expect(waited < 11)
    }
}
