import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Nanoseconds of the monotonic clock.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    NIODeadline.now().uptimeNanoseconds
}

/// Seconds since 1970, for token times.
func unixSeconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec)
}

/// Sleeps the calling thread for at least `nanoseconds`, resuming after signals.
func sleepNanoseconds(_ nanoseconds: UInt64) {
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 { request = remaining }
}
