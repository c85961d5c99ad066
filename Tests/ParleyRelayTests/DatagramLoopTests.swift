import Foundation
import Dispatch
import Logging
import NIOCore
import ParleyBasics
@testable import ParleyRelay
import ParleyDatagrams
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The loop that owns a socket (each relay thread's, and a call's network loop): tasks,
/// tick, deadlines, socket readiness, and stopping.
@Suite("The datagram loop")
struct DatagramLoopTests {
    /// Plain state that only one thread may touch at a time, as a worker's is.
    final class Confined: @unchecked Sendable {
        var values: [Int] = []
        var count = 0
        var ticks = 0
        var datagrams = 0
    }

    private static func startedLoop(_ state: Confined, tickMilliseconds: UInt64 = 50) throws -> (DatagramLoop, CInt, SocketAddress) {
        let descriptor = try RelaySocket.bound(to: try SocketAddress(ipAddress: "127.0.0.1", port: 0), bufferBytes: 256 << 10)
        let address = try RelaySocket.localAddress(of: descriptor)
        let loop = try DatagramLoop(name: "relay-loop-test", logger: Logger(label: "relay-loop-test"))
        try loop.start(socket: descriptor, tickNanoseconds: tickMilliseconds * 1_000_000, readable: {
            var buffer = [UInt8](repeating: 0, count: 2048)
            while recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT)) >= 0 { state.datagrams += 1 }
        }, tick: { state.ticks += 1 })
        return (loop, descriptor, address)
    }

    @Test func tasksRunInOrderOnTheLoopThreadAndSubmitReturnsTheirResult() throws {
        let state = Confined()
        let (loop, descriptor, _) = try Self.startedLoop(state)
        defer { loop.stop(); close(descriptor) }
        let offLoop = Mutex(0)
        for value in 0..<1_000 {
            loop.execute {
                if !loop.inLoop { offLoop.withLock { $0 += 1 } }
                state.values.append(value)
            }
        }
        let values = loop.submit { state.values }
        #expect(values == Array(0..<1_000))
        #expect(offLoop.withLock { $0 } == 0)
        #expect(!loop.inLoop)
    }

    @Test func theTickComesAboutEveryIntervalAndADatagramWakesTheLoop() throws {
        let state = Confined()
        let (loop, descriptor, address) = try Self.startedLoop(state, tickMilliseconds: 20)
        defer { loop.stop(); close(descriptor) }
        let sender = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(sender) }
        for _ in 0..<3 {
            _ = address.withSockAddr { pointer, length in sendto(sender, [1, 2, 3], 3, 0, pointer, socklen_t(length)) }
        }
        usleep(400_000)
        let (ticks, datagrams) = loop.submit { (state.ticks, state.datagrams) }
        // 400 ms at 20 ms: 20 ticks; a busy test machine may lose a few, never gain many.
        #expect((12...21).contains(ticks), "\(ticks) ticks in 400 ms")
        #expect(datagrams == 3)
    }

    /// A call's loop runs at the deadlines it sets (a retransmission, the next RTCP report),
    /// not on a fixed tick: the timer is asked before every wait, and a deadline set by a task
    /// is kept even though nothing else wakes the loop.
    @Test func theTimerRunsAtTheDeadlineItSetsAndATaskCanBringItForward() throws {
        let descriptor = try RelaySocket.bound(to: try SocketAddress(ipAddress: "127.0.0.1", port: 0), bufferBytes: 256 << 10)
        defer { close(descriptor) }
        final class Deadlines: @unchecked Sendable {
            var next: UInt64?
            var fired: [UInt64] = []
        }
        let state = Deadlines()
        let loop = try DatagramLoop(name: "deadline-test", logger: Logger(label: "deadline-test"))
        try loop.start(socket: descriptor, readable: {}) { now in
            if let due = state.next, now >= due {
                state.fired.append(now &- due)
                state.next = nil
            }
            return state.next
        }
        defer { loop.stop() }
        // Nothing due: the loop sleeps without waking (no deadline, no datagram).
        usleep(100_000)
        #expect(loop.submit { state.fired.isEmpty })
        let asked = MonotonicClock.now()
        loop.execute { state.next = asked &+ 50_000_000 }
        usleep(300_000)
        let fired = loop.submit { state.fired }
        #expect(fired.count == 1, "one deadline, one run: \(fired)")
        // Never early; late by at most the millisecond rounding and a busy machine's wake-up.
        #expect(fired.allSatisfy { $0 < 150_000_000 })
    }

    @Test func addressesCompareByHostAndPort() throws {
        let one = DatagramAddress(try SocketAddress(ipAddress: "127.0.0.1", port: 7000))
        #expect(one.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "127.0.0.1", port: 7000))))
        #expect(!one.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "127.0.0.1", port: 7001))))
        #expect(!one.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "127.0.0.2", port: 7000))))
        #expect(!one.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "::1", port: 7000))))
        let six = DatagramAddress(try SocketAddress(ipAddress: "::1", port: 7000))
        #expect(six.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "::1", port: 7000))))
        #expect(!six.isSameEndpoint(as: DatagramAddress(try SocketAddress(ipAddress: "::2", port: 7000))))
        #expect(!DatagramAddress(storage: sockaddr_in6(), length: 0).isSameEndpoint(as: DatagramAddress(storage: sockaddr_in6(), length: 0)))
    }

    @Test func afterStopTasksRunOnTheCallersThreadsOneAtATime() throws {
        let state = Confined()
        let (loop, descriptor, _) = try Self.startedLoop(state)
        defer { close(descriptor) }
        for _ in 0..<100 { loop.execute { state.count += 1 } }
        loop.stop()
        #expect(state.count == 100, "tasks queued before the stop all ran")
        // Four threads hand tasks to the stopped loop at once; each runs on its caller's
        // thread, serialised, so no increment is lost.
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<2_000 { loop.execute { state.count += 1 } }
        }
        #expect(state.count == 100 + 4 * 2_000)
        #expect(loop.submit { state.count } == 8_100, "submit after the stop answers instead of waiting forever")
        loop.stop()  // a second stop does nothing
    }

    @Test func aLoopStoppedWithoutStartingRunsWhatWasQueued() throws {
        let state = Confined()
        let loop = try DatagramLoop(name: "relay-loop-test", logger: Logger(label: "relay-loop-test"))
        loop.execute { state.count += 1 }
        loop.stop()
        #expect(state.count == 1)
        #expect(loop.submit { state.count + 1 } == 2)
    }

    /// A relay started and shut down in a process that goes on (tests, an embedding app) must
    /// give back every descriptor it opened: each loop's socket at stop, and its epoll set and
    /// wake-up eventfd when the loop is freed, which needs nothing to hold it after shutdown.
    @Test func aRelayShutDownAndReleasedFreesItsLoopsAndWithThemTheirDescriptors() throws {
        final class Weak: @unchecked Sendable { weak var loop: DatagramLoop? }
        var loops: [Weak] = []
        do {
            var configuration = RelayConfiguration()
            configuration.listen = HostAndPort(host: "127.0.0.1", port: 0)
            configuration.threads = 2
            configuration.insecure = true
            var logger = Logger(label: "relay-descriptor-test")
            logger.logLevel = .error
            let relay = try Relay.start(configuration: configuration, secret: .random(), relayKey: nil, logger: logger)
            loops = relay.workers.map { worker in
                let reference = Weak()
                reference.loop = worker.loop
                return reference
            }
            relay.shutdown()
        }
        // A loop's thread may still be on its way out for a moment after it stopped.
        for _ in 0..<40 where loops.contains(where: { $0.loop != nil }) { Thread.sleep(forTimeInterval: 0.05) }
        #expect(loops.count == 2 && loops.allSatisfy { $0.loop == nil }, "a stopped relay's loops stay in memory, each with its epoll set and eventfd open")
    }
}
