import Foundation
import NIOCore
import NIOPosix
import ParleyAudio
import ParleyClient
import ParleyE2EE
import ParleyNetSim
import ParleyRelay
import ParleySecurity

/// One room spread over relays on 127.0.0.11, 127.0.0.12 and 127.0.0.13 (away from the cluster
/// tests' 127.0.0.1–3, as the relay tests' `RelayTrio`), each with its own key,
/// sharing the token secret as a cluster's relays do, joined by trunks; one trunk may run
/// through the impairment proxy. Each talker's call joins the relay `placement` names, with
/// that relay's key pinned, as an invite naming that relay would make it.
final class CascadedRoom: @unchecked Sendable {
    let secret = TokenSecret.random()
    let room: String
    let keys: [RelayKey]
    let relays: [Relay]
    let placement: [String: Int]
    /// The room is end-to-end encrypted: tokens say so, and each talker takes part.
    let endToEnd: Bool
    private var proxyGroup: MultiThreadedEventLoopGroup?
    private(set) var proxy: ImpairmentProxy?
    let directory: String

    /// `trunks`: (opener, peer) pairs; `impaired`: the one pair whose trunk crosses the proxy.
    init(room: String, relayCount: Int, placement: [String: Int], trunks: [(Int, Int)],
         impaired: (opener: Int, peer: Int, scenario: Scenario)? = nil, seed: UInt64 = 7, endToEnd: Bool = false,
         acceptsBrowsers: Bool = false) async throws {
        self.room = room
        self.endToEnd = endToEnd
        self.placement = placement
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-cascade-\(room)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        keys = (0..<relayCount).map { _ in RelayKey() }
        var relays: [Relay] = []
        for index in 0..<relayCount {
            relays.append(try CallRoom.startRelay(port: 0, secret: secret, relayKey: keys[index], host: "127.0.0.\(index + 11)", acceptsBrowsers: acceptsBrowsers))
        }
        self.relays = relays
        let peers = relays.indices.map(peer)
        for (index, relay) in relays.enumerated() { relay.setTrustedRelays(peers.enumerated().filter { $0.offset != index }.map(\.element)) }
        for (opener, peer) in trunks { try relays[opener].openTrunk(room: room, to: peers[peer]) }
        if let impaired {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            try await group.next().submit { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, -11) }.get()
            proxyGroup = group
            let configuration = ImpairmentProxy.Configuration(
                listen: try SocketAddress(ipAddress: "127.0.0.1", port: 0), relay: relays[impaired.peer].localAddress,
                up: impaired.scenario.up, down: impaired.scenario.down, seed: seed)
            let proxy = try await ImpairmentProxy.start(configuration, on: group.next()).get()
            self.proxy = proxy
            let throughProxy = RelayPeer(address: HostAndPort(host: "127.0.0.1", port: proxy.localAddress.port!), publicKey: keys[impaired.peer].publicKey)
            // The peer sees the opener at the proxy's address, and trusts it there (trunk inits
            // are taken only from where a trusted relay is registered).
            let opener = RelayPeer(address: HostAndPort(host: "127.0.0.1", port: 1), publicKey: keys[impaired.opener].publicKey)
            relays[impaired.peer].setTrustedRelays(peers.enumerated().filter { $0.offset != impaired.peer }.map(\.element) + [opener])
            try relays[impaired.opener].openTrunk(room: room, to: throughProxy)
        }
        let expected = trunks.count + (impaired == nil ? 0 : 1)
        let deadline = Date().addingTimeInterval(5)
        while relays.reduce(0, { $0 + $1.openTrunks.count }) < 2 * expected, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
    }

    /// Relay `index` as the others know it (its address and key), to open a trunk to it later.
    func peer(_ index: Int) -> RelayPeer {
        RelayPeer(address: HostAndPort(host: "127.0.0.\(index + 11)", port: relays[index].localAddress.port!), publicKey: keys[index].publicKey)
    }

    /// Trunk ends open on all the relays (two per trunk).
    var openTrunkEnds: Int { relays.reduce(0) { $0 + $1.openTrunks.count } }

    func token(_ identity: String) -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return AccessToken(identity: identity, room: room, issuedAt: now, expiresAt: now + 3_600, endToEndEncrypted: endToEnd).signed(with: secret)
    }

    func configuration(for talker: String, input: CallConfiguration.Input, durationSeconds: Double) -> CallConfiguration {
        let relay = placement[talker]!
        var configuration = CallConfiguration(
            relayHost: "127.0.0.\(relay + 11)", relayPort: relays[relay].localAddress.port!, room: room, token: token(talker),
            security: .secure(relayKey: keys[relay].publicKey))
        configuration.name = talker
        if endToEnd { configuration.endToEnd = EndToEndIdentity(identity: IdentityKey(), required: true) }
        configuration.input = input
        configuration.output = .wav(path: directory + "/\(talker)-heard.wav")
        configuration.recordReceivedDirectory = directory + "/\(talker)-received"
        configuration.durationSeconds = durationSeconds
        return configuration
    }

    func run(_ conversation: Conversation, extraSeconds: Double = 1.5) async throws -> CallOutcome {
        var configurations: [String: CallConfiguration] = [:]
        for talker in Conversation.talkers {
            configurations[talker] = configuration(for: talker, input: .wav(path: conversation.path(of: talker)), durationSeconds: conversation.seconds + extraSeconds)
        }
        return try await CallOutcome.run(configurations)
    }

    /// What `listener` recorded of `talker`.
    var recordings: @Sendable (String, String) throws -> [Float] {
        { [directory] listener, talker in try WAVAudio(contentsOf: directory + "/\(listener)-received/\(talker).wav").samples }
    }

    func close() async {
        if let proxy { _ = try? await proxy.stop().get() }
        try? await proxyGroup?.shutdownGracefully()
        for relay in relays { relay.shutdown() }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
