import Testing

/// Every test that runs a relay over real sockets, one at a time: the overload and hostile
/// input tests load the machine on purpose, and the others assert that nothing is lost.
@Suite("The relay over real UDP", .serialized)
enum RelayOverUDP {}
