import Foundation
import Synchronization

/// The servers these tests start (etcd, relays) are child processes, and a child outlives the
/// test runner unless it is stopped: a fixture's `stop()` that hands its waiting to another
/// thread may still be waiting when the runner exits, and a test that traps stops nothing.
/// Each one started is recorded here, and whichever still runs when the runner exits is killed.
enum ChildProcesses {
    private final class Recorded: @unchecked Sendable {
        // @unchecked: Process is a class Foundation locks inside; only `isRunning` and the
        // identifier are read, both safe from any thread.
        let process: Process
        init(_ process: Process) { self.process = process }
    }

    private static let recorded = Mutex<[Recorded]>([])
    private static let killedAtExit: Void = { atexit { ChildProcesses.killTheRunning() } }()

    /// Records `process`, just started.
    static func started(_ process: Process) {
        _ = killedAtExit
        recorded.withLock { list in
            list.removeAll { !$0.process.isRunning }
            list.append(Recorded(process))
        }
    }

    /// Only a process still running is still this runner's child, so its identifier was not reused.
    private static func killTheRunning() {
        for entry in recorded.withLock({ $0 }) where entry.process.isRunning {
            kill(entry.process.processIdentifier, SIGKILL)
        }
    }
}
