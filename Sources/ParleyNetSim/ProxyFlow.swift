import NIOCore

/// One client of the proxy: its address, the socket the relay sees it as, and the
/// impairment state of each direction. Lives on the proxy's event loop.
final class ProxyFlow {
    /// Numbered from 1 in order of first packet; with the base seed, it names the flow's
    /// random streams, so flow 2 of a run is impaired the same way in every run.
    let index: Int
    let client: SocketAddress
    /// The flow's own socket towards the relay; nil while it is being bound.
    var upstream: Channel?
    var upPipeline: ImpairmentPipeline
    var downPipeline: ImpairmentPipeline
    var lastActivity: NIODeadline
    /// Client packets that became due before the upstream socket was bound.
    var waitingForSocket: [ByteBuffer] = []
    var isClosed = false

    init(index: Int, client: SocketAddress, up: Impairment, down: Impairment, seed: UInt64, now: NIODeadline) {
        self.index = index
        self.client = client
        upPipeline = ImpairmentPipeline(up, seed: SeededRandom.derivedSeed(seed, UInt64(index), 0))
        downPipeline = ImpairmentPipeline(down, seed: SeededRandom.derivedSeed(seed, UInt64(index), 1))
        lastActivity = now
    }

    var report: ProxyReport.Flow {
        ProxyReport.Flow(
            index: index, client: client, relaySide: upstream?.localAddress,
            up: upPipeline.report, down: downPipeline.report, isOpen: !isClosed)
    }
}
