import ParleyBasics
import Testing

/// "HOST:PORT" as people, invites and records write it, split in one place for every reader
/// (the relay's settings, invites, the proxy's flags, the client's relay address).
@Suite("HOST:PORT text")
struct HostPortTextTests {
    @Test(arguments: [
        ("127.0.0.1:7800", "127.0.0.1", 7800),
        ("[::1]:7800", "::1", 7800),
        ("relay.example.org:9000", "relay.example.org", 9000),
        ("[2001:db8::1]", "2001:db8::1", nil),
        ("relay.example.org", "relay.example.org", nil),
        (":7800", "", 7800),
        ("*:0", "*", 0),
    ] as [(String, String, Int?)])
    func hostsAndPortsAreSplitWithIPv6InBrackets(text: String, host: String, port: Int?) throws {
        let parts = try HostPortText(parsing: text)
        #expect(parts.host == Substring(host))
        #expect(parts.port == port)
        #expect(HostPortText.format(host: parts.host, port: parts.port) == (text.hasPrefix("*") ? "*:0" : text))
    }

    @Test(arguments: [
        ("[::1", HostPortText.Problem.unclosedBracket),
        ("[::1]7800", .textAfterBracket),
        ("2001:db8::1:7800", .unbracketedIPv6),
        ("host:", .badPort),
        ("host:65536", .badPort),
        ("host:+80", .badPort),
        ("host:80x", .badPort),
        ("host:0000080", .badPort),
    ])
    func whatIsWrongIsNamed(text: String, problem: HostPortText.Problem) {
        #expect(throws: problem) { try HostPortText(parsing: text) }
    }

    @Test func anyTextIsSplitOrRefusedWithoutTrapping() {
        var random = SplitMix64(seed: 26)
        let alphabet = Array("[]:0123456789abc.-*".utf8)
        for _ in 0..<20_000 {
            let text = String(decoding: (0..<Int.random(in: 0...24, using: &random)).map { _ in alphabet.randomElement(using: &random)! }, as: UTF8.self)
            if let parts = try? HostPortText(parsing: text) {
                #expect((0...65_535).contains(parts.port ?? 0), "\(text)")
                #expect(!parts.host.contains(":") || text.hasPrefix("["), "\(text): a colon in the host only inside brackets")
            }
        }
    }
}
