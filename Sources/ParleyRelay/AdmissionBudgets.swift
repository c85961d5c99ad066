/// What one event loop lets strangers and would-be members spend, each kind of request in a
/// budget of its own, so that a flood of one kind cannot use up another's, and each counted
/// per source (``SourceHost``: an IPv4 address or IPv6 /64, never a port, of which one host
/// has 65,535) and for the loop as a whole.
///
/// The order of a handshake's checks is what keeps strangers out of the shared budgets: the
/// address cookie (an HMAC, no state) is checked before ``joinAttempts`` is charged, so only
/// a source that receives at its address can spend it; the Diffie-Hellman comes after that,
/// and the replay cache is written only once the join's token has verified.
struct AdmissionBudgets {
    /// Cookie replies to hellos: no larger than the hello and one HMAC each.
    var cookieReplies: SourceRateLimiter
    /// Plaintext error replies (not joined, encryption required): never larger than what they answer.
    var errorReplies: SourceRateLimiter
    /// Handshake inits with a valid cookie (each costs two Diffie-Hellman operations if its
    /// join verifies, one if not) and plaintext joins (a token check).
    var joinAttempts: SourceRateLimiter
    /// Trunk inits with a valid cookie (one Diffie-Hellman for an untrusted key, two for a
    /// trusted one): a budget of their own, since one relay legitimately opens a trunk for
    /// each room it shares with another, hundreds at once after a restart.
    var trunkAttempts: SourceRateLimiter

    init(limits: RelayLimits, nowNanoseconds now: UInt64) {
        cookieReplies = SourceRateLimiter(
            perSourcePerSecond: limits.cookieRepliesPerSecondPerSource, perSourceBurst: 2 * limits.cookieRepliesPerSecondPerSource,
            globalPerSecond: limits.cookieRepliesPerSecond, nowNanoseconds: now)
        errorReplies = SourceRateLimiter(
            perSourcePerSecond: limits.errorRepliesPerSecondPerSource, globalPerSecond: limits.errorRepliesPerSecond, nowNanoseconds: now)
        joinAttempts = SourceRateLimiter(
            perSourcePerSecond: limits.joinAttemptsPerSecondPerSource, perSourceBurst: limits.joinAttemptBurstPerSource,
            globalPerSecond: limits.joinAttemptsPerSecond, nowNanoseconds: now)
        trunkAttempts = SourceRateLimiter(
            perSourcePerSecond: Self.trunkAttemptsPerSecondPerSource, perSourceBurst: 2 * Self.trunkAttemptsPerSecondPerSource,
            globalPerSecond: limits.joinAttemptsPerSecond, slotCount: 256, nowNanoseconds: now)
    }

    static let trunkAttemptsPerSecondPerSource = 500
}
