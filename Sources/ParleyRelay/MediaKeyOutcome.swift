import CoreMetrics

/// What became of the sealed media keys members sent through the relay (end-to-end encrypted
/// rooms), counted in `parley_relay_media_keys_total` by result. The relay sees who sent keys
/// to whom and how many, never a key.
enum MediaKeyOutcome: CaseIterable, Hashable, Sendable {
    /// Handed to the recipient's loop, or to the trunk that brings it.
    case relayed
    /// Over the sender's budget (``Session/mediaKeysPerSecond``).
    case refusedRate
    /// Named no member of the room who takes part.
    case undeliverable
    /// Dropped because the recipient had too many unacknowledged already.
    case receiverQueueFull

    var label: String {
        switch self {
        case .relayed: return "relayed"
        case .refusedRate: return "refused_rate"
        case .undeliverable: return "undeliverable"
        case .receiverQueueFull: return "receiver_queue_full"
        }
    }

    static func counters(factory: some MetricsFactory) -> [MediaKeyOutcome: CoreMetrics.Counter] {
        Dictionary(uniqueKeysWithValues: allCases.map {
            ($0, CoreMetrics.Counter(label: "parley_relay_media_keys_total", dimensions: [("result", $0.label)], factory: factory))
        })
    }
}
