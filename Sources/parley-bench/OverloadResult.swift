struct OverloadResult: Codable {
    var fanout = 0
    var rooms: Int
    var members: Int
    /// Copies per second the rooms ask for at 50 packets/s per talker.
    var capacityPacketsPerSecond: Double
    var overloadOfferedPacketsPerSecond: Double
    var overloadDeliveredPacketsPerSecond: Double
    var calmOfferedPacketsPerSecond: Double
    /// From the moment the load fell to half, how long until every stream had no loss.
    var recoveryMilliseconds: Double
    var streams: Int
    /// Streams that lost a packet sent 1 s or more after the load fell.
    var streamsLosingAfterOneSecond: Int

    var overloadFactorText: String {
        let tenths = Int((overloadOfferedPacketsPerSecond / max(overloadDeliveredPacketsPerSecond, 1) * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    var line: String {
        "fan-out \(fanout), \(rooms) rooms × \(members): overload offered \(Int(overloadOfferedPacketsPerSecond))/s for 5 s, delivered \(Int(overloadDeliveredPacketsPerSecond))/s (\(overloadFactorText)× what it sustains); then half of that, \(Int(calmOfferedPacketsPerSecond))/s: every one of \(streams) streams forwarded without loss from \(Int(recoveryMilliseconds)) ms after the load fell; streams losing after 1 s: \(streamsLosingAfterOneSecond)"
    }
}
