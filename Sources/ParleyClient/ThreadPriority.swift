#if canImport(Glibc)
import Glibc
#endif

/// Asks the kernel to favour the calling thread: the audio threads and the network loop
/// must run every 10 ms even when the machine is busy, or the listener hears it.
///
/// This is a nice level (−11, what PulseAudio asks for when it cannot get real-time
/// scheduling), not SCHED_FIFO: a bug that spins can slow the machine but not lock it up.
/// Without the privilege (CAP_SYS_NICE, or an RLIMIT_NICE that allows it) the request is
/// refused and the thread runs as before; nothing else changes.
enum ThreadPriority {
    static let audioNiceLevel: Int32 = -11

    /// Returns whether the kernel agreed.
    @discardableResult
    static func favourCurrentThread() -> Bool {
        #if os(Linux)
        // On Linux the nice level belongs to each thread, and `who` 0 names the calling one.
        return setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, audioNiceLevel) == 0
        #else
        return false
        #endif
    }
}
