@testable import ParleyAdmin
import Testing

/// Which address the answer's ICE candidate names when the relay listens on every interface.
@Suite("Browser candidate address")
struct BrowserCandidateHostTests {
    @Test func anAddressInHostIsUsedADNSNameTakesTheConnectionsAddress() {
        #expect(BrowserWebHandler.candidateHost(hostHeader: "198.51.100.2:8080", localAddress: "10.0.0.5") == "198.51.100.2")
        #expect(BrowserWebHandler.candidateHost(hostHeader: "[2001:db8::1]:8080", localAddress: "10.0.0.5") == "2001:db8::1")
        #expect(BrowserWebHandler.candidateHost(hostHeader: "relay.example.org", localAddress: "203.0.113.5") == "203.0.113.5")
        #expect(BrowserWebHandler.candidateHost(hostHeader: "relay.example.org:8080", localAddress: "::ffff:203.0.113.5") == "203.0.113.5")
        #expect(BrowserWebHandler.candidateHost(hostHeader: "localhost:8080", localAddress: "127.0.0.1") == "127.0.0.1")
    }

    /// A DNS name reached through a proxy on the relay's machine: the relay cannot know its
    /// public address, and says so instead of naming 127.0.0.1 to a browser elsewhere.
    @Test func aProxiedDNSNameGivesNoAddress() {
        #expect(BrowserWebHandler.candidateHost(hostHeader: "relay.example.org", localAddress: "127.0.0.1") == nil)
        #expect(BrowserWebHandler.candidateHost(hostHeader: "relay.example.org", localAddress: "::1") == nil)
        #expect(BrowserWebHandler.candidateHost(hostHeader: "relay.example.org", localAddress: nil) == nil)
        #expect(BrowserWebHandler.candidateHost(hostHeader: "", localAddress: "127.0.0.1") == nil)
    }
}
