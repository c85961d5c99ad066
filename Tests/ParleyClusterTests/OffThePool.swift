import Foundation
import Synchronization

// Swift Testing runs every test as a task on Swift's cooperative pool, which has one thread
// per core: two on a small machine. A test that blocks one of them (a `Thread.sleep` while
// etcd starts, a `waitUntilExit` for a call, a semaphore waiting for a task) takes that
// thread from every other test running beside it *and* from the in-process relays' cluster
// tasks, which then register, renew and watch seconds late; two such tests at once and
// nothing async runs at all. So the fixtures' blocking work goes through these: on a thread
// of its own, awaited.

/// Runs `body` on a thread of its own and awaits it, leaving the cooperative pool free.
func onThread<Result: Sendable>(_ body: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// ``onThread(_:)`` for work that throws.
func onThread<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// Runs async work from a plain thread and waits for it. Only ever from a thread of
/// ``onThread(_:)`` (or one the fixture made): from a task it would hold a pool thread while
/// the work it waits for needs one.
func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}

extension Process {
    /// Waits for the process to end without holding a thread of the pool.
    func exited() async {
        let process = SendableProcess(process: self)
        await onThread { process.process.waitUntilExit() }
    }
}

/// A `Process` handed to the thread that waits for it to end (Foundation's is not
/// `Sendable`; that thread only waits on it).
struct SendableProcess: @unchecked Sendable { let process: Process }
