#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// CLOCK_REALTIME: only for what must name a calendar time (a token's expiry, an NTP
/// timestamp in a sender report). Durations and deadlines use ``MonotonicClock``, which a
/// clock step cannot move.
public enum WallClock {
    /// Nanoseconds since 1970.
    public static func nanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Whole seconds since 1970.
    public static func seconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec)
    }
}
