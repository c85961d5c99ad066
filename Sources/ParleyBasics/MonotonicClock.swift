#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// CLOCK_MONOTONIC in nanoseconds: the one clock every thread reads, so that packet
/// arrivals (network loop) and playback reads (playback thread) are on the same timeline,
/// and deadlines are not moved when the wall clock is set.
/// Processes on one machine share it too, which lets the demo and the tests line up one
/// client's capture with another's playback (`captureStartedAt`, `playbackStartedAt`).
public enum MonotonicClock {
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Sleeps until the monotonic clock reads `deadline` (an absolute wait, so a series of
    /// them keeps its pace without drifting).
    public static func sleep(until deadline: UInt64) {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &time, nil) == EINTR {}
    }
}
