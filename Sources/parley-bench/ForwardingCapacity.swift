struct ForwardingCapacity: Codable {
    var maximum: TrialResult
    var halfLoad: TrialResult
    var reachedTalkerLimit: Bool
}
