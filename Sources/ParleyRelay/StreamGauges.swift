import CoreMetrics
import Prometheus

/// Loss and jitter of one member's streams, labelled by room and identity; destroyed when
/// the member leaves, so labels do not pile up as people come and go.
final class StreamGauges: Sendable {
    /// The member's stream as the relay receives it (our receive statistics).
    let upstreamLoss: CoreMetrics.Gauge
    let upstreamJitter: CoreMetrics.Gauge
    /// What the member reports receiving from the relay (its receiver reports).
    let downstreamLoss: CoreMetrics.Gauge
    let downstreamJitter: CoreMetrics.Gauge

    init(room: String, identity: String, factory: PrometheusMetricsFactory) {
        let dimensions = [("room", room), ("identity", identity)]
        upstreamLoss = CoreMetrics.Gauge(label: "parley_relay_upstream_loss_ratio", dimensions: dimensions, factory: factory)
        upstreamJitter = CoreMetrics.Gauge(label: "parley_relay_upstream_jitter_seconds", dimensions: dimensions, factory: factory)
        downstreamLoss = CoreMetrics.Gauge(label: "parley_relay_downstream_loss_ratio", dimensions: dimensions, factory: factory)
        downstreamJitter = CoreMetrics.Gauge(label: "parley_relay_downstream_jitter_seconds", dimensions: dimensions, factory: factory)
    }

    func destroy() {
        upstreamLoss.destroy()
        upstreamJitter.destroy()
        downstreamLoss.destroy()
        downstreamJitter.destroy()
    }
}
