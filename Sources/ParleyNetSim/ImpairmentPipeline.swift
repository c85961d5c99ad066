/// The models of one ``Impairment``, applied in order to the packets of one direction of
/// one flow. Seeded and deterministic: the same seed, sizes and send times give the same
/// deliveries. Time is passed in; nothing here reads a clock.
///
/// The order follows a packet along a path:
///
/// 1. **Trace** replay decides loss or a recorded delay for the packet.
/// 2. **Loss** (independent or in bursts) drops it.
/// 3. **Duplication** makes a second copy; each copy goes on alone (on a path that keeps
///    order, the copy meets the same queue as its original and arrives right behind it).
/// 4. **Bottleneck** (``BottleneckLink``, `--rate`): the copy waits in the link's FIFO queue
///    or is tail-dropped. The link sits at the sender's edge (a home uplink, a VPS's shaped
///    port), before the path's own delay, so it sees packets in the order they were sent.
/// 5. **Delay**: mean delay, jitter, spikes and the trace's delay; packets overtake each
///    other only with reordering on (``DelayModel``).
/// 6. **Drift** maps the arrival time onto the receiver's clock.
///
/// Every stage has its own random stream derived from the seed, so turning one model on
/// does not change the decisions of another: the packets lost at 10% are the same with or
/// without jitter.
public struct ImpairmentPipeline: Sendable {
    public let impairment: Impairment
    public private(set) var loss: LossModel?
    public private(set) var duplication: DuplicationModel?
    public private(set) var bottleneck: BottleneckLink?
    public private(set) var delay: DelayModel?
    public let drift: ClockDrift?
    private var trace: TraceReplay?
    private var epoch: Int64?
    private var totals = ImpairmentReport()

    private enum Stage: UInt64 {
        case loss = 1, duplication, delay
    }

    /// Builds the models for `impairment`, which must be valid (``Impairment/validate()``).
    public init(_ impairment: Impairment, seed: UInt64) {
        self.impairment = impairment
        if impairment.loss > 0 {
            let seed = SeededRandom.derivedSeed(seed, Stage.loss.rawValue)
            loss = impairment.lossBurst.map { LossModel(rate: impairment.loss, meanBurstLength: $0, seed: seed) }
                ?? LossModel(rate: impairment.loss, seed: seed)
        }
        if impairment.duplicate > 0 {
            duplication = DuplicationModel(
                rate: impairment.duplicate, seed: SeededRandom.derivedSeed(seed, Stage.duplication.rawValue))
        }
        if let rate = impairment.rate {
            bottleneck = BottleneckLink(bitsPerSecond: rate, queueLimit: impairment.queue)
        }
        if impairment.delay > .zero || impairment.jitter > .zero || impairment.spike != nil || impairment.trace != nil {
            delay = DelayModel(
                delay: impairment.delay, jitter: impairment.jitter, distribution: impairment.jitterDistribution,
                reorder: impairment.reorder, spike: impairment.spike,
                seed: SeededRandom.derivedSeed(seed, Stage.delay.rawValue))
        }
        drift = impairment.drift == 0 ? nil : ClockDrift(partsPerMillion: impairment.drift)
        trace = impairment.trace.map(TraceReplay.init)
    }

    /// Sends a packet of `size` bytes at `sentAt` (on any time line, not decreasing from one
    /// call to the next) and returns when its copies arrive, on the same time line.
    public mutating func process(sentAt: Duration, size: Int) -> Deliveries {
        process(sentAtNanoseconds: sentAt.nanoseconds, size: size)
    }

    /// ``process(sentAt:size:)`` in nanoseconds, for the proxy's per-packet path.
    public mutating func process(sentAtNanoseconds sent: Int64, size: Int) -> Deliveries {
        let packet = totals.packets
        totals.packets += 1
        let epoch = self.epoch ?? sent
        self.epoch = epoch
        var deliveries = Deliveries()

        var replayedDelay: Int64 = 0
        if trace != nil {
            guard let delay = trace!.next() else {
                totals.lost += 1
                return deliveries
            }
            replayedDelay = delay
        }
        if loss?.losesNextPacket() == true {
            totals.lost += 1
            return deliveries
        }
        let copies = duplication?.duplicatesNextPacket() == true ? 2 : 1
        totals.duplicated += copies - 1

        for _ in 0..<copies {
            var time = sent
            if bottleneck != nil {
                guard let departure = bottleneck!.departure(arrival: time, size: size) else {
                    totals.queueDropped += 1
                    continue
                }
                time = departure
            }
            if delay != nil {
                time = delay!.delivery(packet: packet, arrival: time, elapsed: time &- epoch, extra: replayedDelay)
            }
            if let drift {
                time = drift.receiverTime(time, epoch: epoch)
            }
            deliveries.append(nanoseconds: time)
            totals.delivered += 1
            totals.delay.record(nanoseconds: time &- sent)
        }
        return deliveries
    }

    /// What the pipeline did so far, end to end.
    public var report: ImpairmentReport {
        var report = totals
        report.reordered = delay?.report.reordered ?? 0
        return report
    }
}
