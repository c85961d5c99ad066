struct FanoutResult: Codable {
    var fanout: Int
    /// The relay run --insecure, against the baseline forwarder.
    var relay: ForwardingCapacity
    var baseline: ForwardingCapacity
    /// The relay encrypted (open once, seal per receiver), in the same run.
    var encrypted: ForwardingCapacity?
    var throughputRatio: Double
    var halfLoadP99RelayMicroseconds: Double
    var halfLoadP99BaselineMicroseconds: Double
    /// Encrypted over plaintext forwarded packets per second, one core each.
    var encryptedThroughputRatio: Double?
    var halfLoadP99EncryptedMicroseconds: Double?
    /// With `--searches N`: each pair's relay / baseline ratio, in the order searched; this
    /// result is the pair with the median ratio (the lower of the two middle ones for even N).
    var searchRatios: [Double]?

    init(fanout: Int, relay: ForwardingCapacity, baseline: ForwardingCapacity, encrypted: ForwardingCapacity? = nil) {
        self.fanout = fanout
        self.relay = relay
        self.baseline = baseline
        self.encrypted = encrypted
        throughputRatio = relay.maximum.forwardedPacketsPerSecond / baseline.maximum.forwardedPacketsPerSecond
        halfLoadP99RelayMicroseconds = relay.halfLoad.latencyP99Microseconds
        halfLoadP99BaselineMicroseconds = baseline.halfLoad.latencyP99Microseconds
        encryptedThroughputRatio = encrypted.map { $0.maximum.forwardedPacketsPerSecond / relay.maximum.forwardedPacketsPerSecond }
        halfLoadP99EncryptedMicroseconds = encrypted?.halfLoad.latencyP99Microseconds
    }

    var summary: String {
        var text = "fan-out \(fanout): relay \(Int(relay.maximum.forwardedPacketsPerSecond)) pps, baseline \(Int(baseline.maximum.forwardedPacketsPerSecond)) pps, ratio \(percent(throughputRatio)); half-load p99 relay \(Int(halfLoadP99RelayMicroseconds)) µs, baseline \(Int(halfLoadP99BaselineMicroseconds)) µs"
        if let encrypted, let ratio = encryptedThroughputRatio {
            text += "; encrypted \(Int(encrypted.maximum.forwardedPacketsPerSecond)) pps (\(percent(ratio)) of plaintext), half-load p99 \(Int(encrypted.halfLoad.latencyP99Microseconds)) µs"
        }
        return text
    }
}
