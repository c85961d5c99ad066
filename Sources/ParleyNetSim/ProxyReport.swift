import NIOCore

/// What the proxy has done: per direction over all flows, and per flow.
public struct ProxyReport: Sendable {
    public struct Flow: Sendable {
        public var index: Int
        public var client: SocketAddress
        /// The address the relay sees this client as.
        public var relaySide: SocketAddress?
        public var up: ImpairmentReport
        public var down: ImpairmentReport
        public var isOpen: Bool
    }

    /// Flows still open, in order of their first packet.
    public var openFlows: [Flow] = []
    /// Every flow's packets, client to relay, closed flows included.
    public var up = ImpairmentReport()
    /// Every flow's packets, relay to client, closed flows included.
    public var down = ImpairmentReport()
    public var flowsOpened = 0
    public var flowsExpired = 0
    /// Client packets dropped because the proxy already had its maximum number of flows.
    public var refusedPackets = 0
    /// Datagrams dropped because they filled the receive buffer (so may have been cut short).
    public var oversizedPackets = 0
    /// Datagrams reaching a flow's socket from somewhere other than the relay, dropped.
    public var strayPackets = 0
    /// Datagrams the proxy could not hand to its sockets (send buffer full, socket closed).
    public var failedSends = 0
    /// Datagrams still waiting for their delivery time when the proxy stopped.
    public var undeliveredAtStop = 0
    /// How long the proxy has been running.
    public var uptime: Duration = .zero

    public init() {}

    /// The live line: `netsim 1:05 · 3 flows · up 9,876 pkts, lost 10.0%, … · down …`.
    public var statusLine: String {
        "netsim \(Self.clock(uptime)) · \(openFlows.count) flow\(openFlows.count == 1 ? "" : "s") · "
            + "up \(Self.brief(up)) · down \(Self.brief(down))"
    }

    /// The report printed on exit, one line per direction and per open flow.
    public var finalReport: String {
        var lines = [
            "parley netsim ran \(Self.clock(uptime)): \(flowsOpened) flow\(flowsOpened == 1 ? "" : "s") "
                + "(\(flowsExpired) expired when idle)",
            "  up   (client → relay): \(up.summary)",
            "  down (relay → client): \(down.summary)",
        ]
        for flow in openFlows {
            lines.append("  flow \(flow.index) from \(Format.address(flow.client)):")
            lines.append("    up:   \(flow.up.summary)")
            lines.append("    down: \(flow.down.summary)")
        }
        var trouble: [String] = []
        if refusedPackets > 0 { trouble.append("\(refusedPackets) packets refused (too many flows; raise --max-flows)") }
        if oversizedPackets > 0 { trouble.append("\(oversizedPackets) datagrams too large to forward (4 KiB or more)") }
        if strayPackets > 0 { trouble.append("\(strayPackets) datagrams from strangers to the relay-side sockets dropped") }
        if failedSends > 0 { trouble.append("\(failedSends) datagrams could not be sent (socket busy or closed)") }
        if undeliveredAtStop > 0 { trouble.append("\(undeliveredAtStop) datagrams were still delayed when it stopped") }
        if !trouble.isEmpty { lines.append("  " + trouble.joined(separator: "; ")) }
        return lines.joined(separator: "\n")
    }

    private static func brief(_ report: ImpairmentReport) -> String {
        guard report.packets > 0 else { return "no packets" }
        var text = "\(report.packets) pkts, lost \(Format.share(report.lost + report.queueDropped, of: report.packets))"
        if report.duplicated > 0 { text += ", dup \(report.duplicated)" }
        if report.reordered > 0 { text += ", reord \(report.reordered)" }
        if report.delay.count > 0 {
            text += ", p50 \(Format.milliseconds(report.delay.median)) p99 \(Format.milliseconds(report.delay.percentile(99))) ms"
        }
        return text
    }

    /// 65 s → "1:05", 3700 s → "1:01:40".
    static func clock(_ duration: Duration) -> String {
        let seconds = Int(duration.components.seconds)
        let (hours, minutes, rest) = (seconds / 3600, seconds / 60 % 60, seconds % 60)
        let twoDigits = { (value: Int) in value < 10 ? "0\(value)" : "\(value)" }
        return hours > 0 ? "\(hours):\(twoDigits(minutes)):\(twoDigits(rest))" : "\(minutes):\(twoDigits(rest))"
    }
}
