import CoreMetrics
import Prometheus
import ParleyWire

/// The relay's metrics, through the swift-metrics API into its own Prometheus registry
/// (not the process-wide `MetricsSystem`, so that several relays in one test process keep
/// their figures apart). `AdminServer` serves ``registry`` at `/metrics`.
///
/// The per-packet path does not touch these objects: each event loop counts in a plain
/// ``WorkerStatistics`` and adds its counts here on a timer and before every scrape, so
/// cores never contend on a shared atomic.
public final class RelayMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry

    static let latencyLabel = "parley_relay_forwarding_latency_seconds"

    let packetsReceived: [CoreMetrics.Counter]  // by PacketKind.index
    let bytesReceived: CoreMetrics.Counter
    let packetsSent: [CoreMetrics.Counter]  // by SentKind
    let bytesSent: CoreMetrics.Counter
    let drops: [CoreMetrics.Counter]  // by DropReason
    let joinsAccepted: CoreMetrics.Counter
    let joinsRefused: [ControlMessage.ErrorCode: CoreMetrics.Counter]
    let rooms: CoreMetrics.Gauge
    let membersActive: CoreMetrics.Gauge
    let membersJoining: CoreMetrics.Gauge
    /// Open trunks to other relays (one per room and peer), and the members behind them.
    let trunks: CoreMetrics.Gauge
    let membersRemote: CoreMetrics.Gauge
    let removals: [RemovalReason: CoreMetrics.Counter]
    /// Text messages members sent, by what became of them.
    let texts: [TextOutcome: CoreMetrics.Counter]
    let mediaKeys: [MediaKeyOutcome: CoreMetrics.Counter]
    let forwardingLatency: CoreMetrics.Timer
    let socketReceiveBuffer: CoreMetrics.Gauge
    let socketSendBuffer: CoreMetrics.Gauge
    /// Set at each scrape from the kernel's count (see ``KernelSocketDrops``).
    let socketReceiveDrops: CoreMetrics.Gauge
    /// Moderation carried out and refused, by who asked (a member or the admin API).
    let moderationDone: [ModerationSource: [ControlMessage.ModerationAction: CoreMetrics.Counter]]
    let moderationRefused: [ModerationSource: [ControlMessage.ModerationOutcome: CoreMetrics.Counter]]
    /// Joins sent to the room's relay in a cluster (a ``RoomPlacement``'s redirect). The
    /// cluster's own figures (registration, the store's latency) are the placement's, in the
    /// same ``registry``.
    let clusterRedirects: CoreMetrics.Counter

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        var factory = PrometheusMetricsFactory(registry: registry)
        // From loopback to a busy VPS: forwarding takes microseconds, a stall milliseconds.
        factory.durationHistogramBuckets[Self.latencyLabel] = [
            .microseconds(10), .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250),
            .microseconds(500), .milliseconds(1), .microseconds(2500), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(100),
        ]
        packetsReceived = PacketKind.allCases.map {
            CoreMetrics.Counter(label: "parley_relay_packets_received_total", dimensions: [("kind", $0.label)], factory: factory)
        }
        bytesReceived = CoreMetrics.Counter(label: "parley_relay_bytes_received_total", factory: factory)
        packetsSent = SentKind.allCases.map {
            CoreMetrics.Counter(label: "parley_relay_packets_sent_total", dimensions: [("kind", $0.label)], factory: factory)
        }
        bytesSent = CoreMetrics.Counter(label: "parley_relay_bytes_sent_total", factory: factory)
        drops = DropReason.allCases.map {
            CoreMetrics.Counter(label: "parley_relay_packets_dropped_total", dimensions: [("reason", $0.label)], factory: factory)
        }
        joinsAccepted = CoreMetrics.Counter(label: "parley_relay_joins_total", dimensions: [("result", "accepted")], factory: factory)
        var refused: [ControlMessage.ErrorCode: CoreMetrics.Counter] = [:]
        for code in ControlMessage.ErrorCode.allCases where code != .unknown {
            refused[code] = CoreMetrics.Counter(label: "parley_relay_joins_total", dimensions: [("result", "\(code)".snakeCased)], factory: factory)
        }
        joinsRefused = refused
        rooms = CoreMetrics.Gauge(label: "parley_relay_rooms", factory: factory)
        membersActive = CoreMetrics.Gauge(label: "parley_relay_members", dimensions: [("state", "active")], factory: factory)
        membersJoining = CoreMetrics.Gauge(label: "parley_relay_members", dimensions: [("state", "joining")], factory: factory)
        trunks = CoreMetrics.Gauge(label: "parley_relay_trunks", factory: factory)
        membersRemote = CoreMetrics.Gauge(label: "parley_relay_members", dimensions: [("state", "remote")], factory: factory)
        var removals: [RemovalReason: CoreMetrics.Counter] = [:]
        for reason in RemovalReason.allCases {
            removals[reason] = CoreMetrics.Counter(label: "parley_relay_members_removed_total", dimensions: [("reason", reason.label)], factory: factory)
        }
        self.removals = removals
        texts = TextOutcome.counters(factory: factory)
        mediaKeys = MediaKeyOutcome.counters(factory: factory)
        forwardingLatency = CoreMetrics.Timer(label: Self.latencyLabel, factory: factory)
        socketReceiveBuffer = CoreMetrics.Gauge(label: "parley_relay_socket_receive_buffer_bytes", factory: factory)
        socketSendBuffer = CoreMetrics.Gauge(label: "parley_relay_socket_send_buffer_bytes", factory: factory)
        socketReceiveDrops = CoreMetrics.Gauge(label: "parley_relay_socket_receive_drops", factory: factory)
        var done: [ModerationSource: [ControlMessage.ModerationAction: CoreMetrics.Counter]] = [:]
        var refusedModeration: [ModerationSource: [ControlMessage.ModerationOutcome: CoreMetrics.Counter]] = [:]
        for source in ModerationSource.allCases {
            for action in ControlMessage.ModerationAction.allCases where action != .unknown {
                done[source, default: [:]][action] = CoreMetrics.Counter(
                    label: "parley_relay_moderation_total", dimensions: [("source", source.label), ("action", action.label)], factory: factory)
            }
            for outcome in ControlMessage.ModerationOutcome.allCases where outcome != .done && outcome != .unknown {
                refusedModeration[source, default: [:]][outcome] = CoreMetrics.Counter(
                    label: "parley_relay_moderation_refused_total", dimensions: [("source", source.label), ("reason", outcome.label)], factory: factory)
            }
        }
        moderationDone = done
        moderationRefused = refusedModeration
        clusterRedirects = CoreMetrics.Counter(label: "parley_relay_cluster_redirects_total", factory: factory)
    }

    /// Counts one moderation request by its outcome.
    func moderation(_ action: ControlMessage.ModerationAction, from source: ModerationSource, outcome: ControlMessage.ModerationOutcome) {
        if outcome == .done {
            moderationDone[source]?[action]?.increment()
        } else {
            moderationRefused[source]?[outcome]?.increment()
        }
    }

    func joinRefused(_ code: ControlMessage.ErrorCode) {
        joinsRefused[code]?.increment()
    }

    /// The Prometheus text exposition of every metric, with each member's stream figures
    /// (gathered from the loops that own them) after the registry's.
    func exposition(streams: [StreamFigures.Sample] = []) -> [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 << 10 + streams.count * 400)
        registry.emit(into: &buffer)
        StreamFigures.exposition(of: streams, into: &buffer)
        return buffer
    }
}

extension String {
    /// "tokenWrongRoom" → "token_wrong_room", for label values.
    var snakeCased: String {
        var result = ""
        for character in self {
            if character.isUppercase {
                result += "_" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }
}
