import Foundation

/// Sleeps a device thread until a frame's due time, measured from the first frame, so a
/// file device keeps the pace of a sound card without drifting: each wait targets an
/// absolute deadline (`clock_nanosleep` with `TIMER_ABSTIME`), not "one period from now".
struct RealTimePacer {
    private let sampleRate: Int
    private var start: timespec?
    private var frames = 0

    init(sampleRate: Int) { self.sampleRate = sampleRate }

    /// Waits until `count` more frames are due.
    mutating func advance(by count: Int) {
        if start == nil {
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            start = now
        }
        frames += count
        guard let start else { return }
        let offset = Int64(frames) * 1_000_000_000 / Int64(sampleRate)
        let nanoseconds = Int64(start.tv_nsec) + offset % 1_000_000_000
        var deadline = timespec(
            tv_sec: start.tv_sec + Int(offset / 1_000_000_000) + Int(nanoseconds / 1_000_000_000),
            tv_nsec: Int(nanoseconds % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
    }
}
