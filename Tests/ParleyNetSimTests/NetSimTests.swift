import Testing

/// Every suite of this module, one at a time. The statistical tests keep both cores busy
/// for seconds, and the proxy tests measure delays to the millisecond on real sockets:
/// run side by side, the first would be measured by the second. (Suites of other modules
/// still run alongside; the proxy tests measure what the machine adds and allow for it.)
@Suite(.serialized)
struct NetSimTests {}
