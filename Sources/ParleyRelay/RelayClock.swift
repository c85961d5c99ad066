import ParleyBasics

/// Nanoseconds of the monotonic clock (the process's one, ``MonotonicClock``).
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    MonotonicClock.now()
}

/// Seconds since 1970, for token times.
func unixSeconds() -> Int64 {
    WallClock.seconds()
}

/// Sleeps the calling thread for at least `nanoseconds`, resuming after signals.
func sleepNanoseconds(_ nanoseconds: UInt64) {
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 { request = remaining }
}
