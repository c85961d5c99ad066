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

/// Sleeps the calling thread for at least `nanoseconds`.
func sleepNanoseconds(_ nanoseconds: UInt64) {
    MonotonicClock.sleep(until: MonotonicClock.now() &+ nanoseconds)
}
