import CParleyNet
import Dispatch
import Logging
import ParleyBasics
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One thread that owns one UDP socket: an epoll loop over the socket and a wake-up
/// eventfd, a queue of tasks other threads hand it, and a timer. Each relay thread is one
/// (ticking at a fixed interval), and so is a call's network loop (at the deadlines its link
/// and RTCP set).
///
/// Why not a SwiftNIO event loop: SwiftNIO's datagram channel turns every datagram read into
/// a `SocketAddress` (a heap box, with its address printed to a string), an
/// `AddressedEnvelope` and a pipeline call, and every rescheduled timer into a task and a
/// promise on the heap: work a bare recvmmsg forwarder does not do for each packet, and the
/// only allocations left on a call's receive path. SwiftNIO offers no way to watch a socket
/// and read it oneself, so the sockets that carry media get this small loop; HTTP, the
/// control socket and the admin API stay on SwiftNIO.
public final class DatagramLoop: @unchecked Sendable {
    public let name: String
    private let logger: Logger
    private let epoll: CInt
    /// Closed only when the loop is freed: a thread that queued a task may still signal it
    /// after the loop has stopped, and a number closed earlier could by then name another file.
    private let wakeup: CInt
    private let shared = Mutex(Shared())
    /// Tasks handed over after the thread finished run on their callers' threads, one at a
    /// time under this lock, so the worker's state still has one user at a time.
    private let afterFinish = Mutex(())
    /// The loop thread's `pthread_t` while it runs (0 otherwise).
    private let threadIdentity = Atomic<UInt>(0)
    private var thread: pthread_t?

    private struct Shared {
        var tasks: [@Sendable () -> Void] = []
        var isStopping = false
        /// The thread ran its last task (or never started): tasks now run on their callers'
        /// threads, under ``afterFinish``.
        var hasFinished = false
    }

    private static let socketToken: UInt64 = 1
    private static let wakeupToken: UInt64 = 2

    public init(name: String, logger: Logger) throws(DatagramLoopError) {
        // Both descriptors are made before any property is set: a throw after that would run
        // deinit, which closes them.
        let epoll = parley_epoll_create()
        guard epoll >= 0 else { throw DatagramLoopError("cannot create an epoll set for the network loop \(name): \(String(cString: strerror(errno)))") }
        let wakeup = parley_eventfd()
        guard wakeup >= 0, parley_epoll_watch_input(epoll, wakeup, Self.wakeupToken) == 0 else {
            let reason = String(cString: strerror(errno))
            if wakeup >= 0 { close(wakeup) }
            close(epoll)
            throw DatagramLoopError("cannot create a wake-up eventfd for the network loop \(name): \(reason)")
        }
        self.name = name
        self.logger = logger
        self.epoll = epoll
        self.wakeup = wakeup
    }

    deinit {
        close(wakeup)
        close(epoll)
    }

    /// Whether the caller is the loop's own thread.
    public var inLoop: Bool {
        let identity = threadIdentity.load(ordering: .acquiring)
        return identity != 0 && identity == UInt(pthread_self())
    }

    /// Starts the thread: `readable` runs whenever `socket` has datagrams, `tick` about
    /// every `tickNanoseconds`, tasks from ``execute(_:)`` as they come.
    public func start(socket: CInt, tickNanoseconds: UInt64, readable: @escaping () -> Void, tick: @escaping () -> Void) throws(DatagramLoopError) {
        var nextTick = MonotonicClock.now() &+ tickNanoseconds
        try start(socket: socket, readable: readable) { now in
            if now >= nextTick {
                tick()
                let after = MonotonicClock.now()
                nextTick &+= tickNanoseconds
                // Late by more than a tick (the machine was busy): start counting from now.
                if nextTick <= after { nextTick = after &+ tickNanoseconds }
            }
            return nextTick
        }
    }

    /// Starts the thread: `readable` runs whenever `socket` has datagrams, tasks from
    /// ``execute(_:)`` as they come, and `timer` before every wait, given the time: it runs
    /// whatever is due and says when it next needs to run (nil: only when something arrives).
    public func start(socket: CInt, readable: @escaping () -> Void, timer: @escaping (_ now: UInt64) -> UInt64?) throws(DatagramLoopError) {
        guard parley_epoll_watch_input(epoll, socket, Self.socketToken) == 0 else {
            throw DatagramLoopError("the network loop \(name) cannot watch its socket: \(String(cString: strerror(errno)))")
        }
        let body = Unmanaged.passRetained(Body { [self] in
            run(readable: readable, timer: timer)
        })
        var handle = pthread_t()
        let result = pthread_create(&handle, nil, { argument in
            let body = Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue()
            body.run()
            return nil
        }, body.toOpaque())
        guard result == 0 else {
            body.release()
            throw DatagramLoopError("cannot start a thread for the network loop \(name): \(String(cString: strerror(result)))")
        }
        thread = handle
    }

    /// Runs `task` on the loop's thread, soon, without waiting for it. Once the loop has
    /// finished, runs it here and now instead (one such task at a time).
    public func execute(_ task: @escaping @Sendable () -> Void) {
        let (queued, wake) = shared.withLock { shared -> (Bool, Bool) in
            if shared.hasFinished { return (false, false) }
            shared.tasks.append(task)
            // Only the task that makes the queue non-empty needs to wake the loop: the loop
            // drains the eventfd before it takes the queue, so none is stranded.
            return (true, shared.tasks.count == 1)
        }
        if !queued {
            afterFinish.withLock { _ in task() }
        } else if wake {
            parley_eventfd_signal(wakeup)
        }
    }

    /// Runs `body` on the loop's thread and returns its result (directly, on the loop itself).
    public func submit<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        if inLoop { return body() }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        execute {
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }

    /// Stops the thread once it has run the tasks queued so far, and waits for it; from
    /// another thread than the loop's. Later calls do nothing.
    public func stop() {
        precondition(!inLoop, "DatagramLoop.stop() from its own thread would wait for itself")
        let thread = self.thread
        let firstCall = shared.withLock { shared -> Bool in
            guard !shared.isStopping else { return false }
            shared.isStopping = true
            // A loop that never started has nobody to run its queue: from now on tasks run
            // on their callers' threads.
            if thread == nil { shared.hasFinished = true }
            return true
        }
        guard firstCall else { return }
        if let thread {
            parley_eventfd_signal(wakeup)
            pthread_join(thread, nil)
            self.thread = nil
        }
        let stranded = shared.withLock { shared in
            defer { shared.tasks.removeAll() }
            return shared.tasks
        }
        for task in stranded { afterFinish.withLock { _ in task() } }
    }

    private func run(readable: () -> Void, timer: (UInt64) -> UInt64?) {
        threadIdentity.store(UInt(pthread_self()), ordering: .releasing)
        parley_name_current_thread(name)
        var tokens = [UInt64](repeating: 0, count: 4)
        var lastWaitErrorLog: UInt64 = 0
        while true {
            let deadline = timer(MonotonicClock.now())
            // Read again: the timer's work took time.
            let now = MonotonicClock.now()
            let timeout = deadline.map { $0 > now ? Int32(clamping: ($0 - now + 999_999) / 1_000_000) : 0 } ?? -1
            let count = tokens.withUnsafeMutableBufferPointer { parley_epoll_wait(epoll, $0.baseAddress, 4, timeout) }
            if count < 0, case let error = errno, error != EINTR {
                // Not expected on a valid epoll set; say so, and do not spin on it.
                if now &- lastWaitErrorLog > 10_000_000_000 {
                    lastWaitErrorLog = now
                    logger.error("a network loop cannot wait for its socket; its traffic may stall", metadata: [
                        "loop": "\(name)", "error": "\(String(cString: strerror(error)))",
                    ])
                }
                usleep(1_000)
            }
            var runTasks = false
            if count > 0 {
                for token in tokens[0..<Int(count)] {
                    if token == Self.socketToken { readable() } else { runTasks = true }
                }
            }
            guard runTasks else { continue }
            parley_eventfd_drain(wakeup)
            let (tasks, stopping) = shared.withLock { shared in
                defer { shared.tasks.removeAll(keepingCapacity: true) }
                return (shared.tasks, shared.isStopping)
            }
            for task in tasks { task() }
            if stopping { break }
        }
        // Tasks that raced with the stop run here, until the queue is found empty in the same
        // critical section that hands later tasks to their callers' threads: worker code
        // never runs on two threads at once.
        while true {
            let leftovers = shared.withLock { shared -> [@Sendable () -> Void] in
                if shared.tasks.isEmpty {
                    shared.hasFinished = true
                    return []
                }
                defer { shared.tasks.removeAll() }
                return shared.tasks
            }
            if leftovers.isEmpty { break }
            for task in leftovers { task() }
        }
        threadIdentity.store(0, ordering: .releasing)
    }

    private final class Body {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }
}

/// Why a loop could not be made or started (the system refused an epoll set, an eventfd or a
/// thread), said for a person.
public struct DatagramLoopError: Error, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) { self.description = description }
}
