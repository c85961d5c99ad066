import CoreMetrics
import Prometheus

/// What a member of a cluster shows on the relay's `/metrics`, in the relay's own registry
/// (``ParleyRelay/RelayMetrics/registry``), beside its forwarding figures.
public final class ClusterMetrics: Sendable {
    static let storeLatencyLabel = "parley_relay_cluster_store_request_seconds"

    /// 1 while the lease is renewed and the view current.
    let registered: CoreMetrics.Gauge
    let roomsHosted: CoreMetrics.Gauge
    let storeRequestLatency: CoreMetrics.Timer
    let storeErrors: CoreMetrics.Counter

    public init(registry: PrometheusCollectorRegistry) {
        var factory = PrometheusMetricsFactory(registry: registry)
        // A store on the same network answers in a millisecond or two; a second is its timeout.
        factory.durationHistogramBuckets[Self.storeLatencyLabel] = [
            .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
        ]
        registered = CoreMetrics.Gauge(label: "parley_relay_cluster_registered", factory: factory)
        roomsHosted = CoreMetrics.Gauge(label: "parley_relay_cluster_rooms_hosted", factory: factory)
        storeRequestLatency = CoreMetrics.Timer(label: Self.storeLatencyLabel, factory: factory)
        storeErrors = CoreMetrics.Counter(label: "parley_relay_cluster_store_errors_total", factory: factory)
    }
}
