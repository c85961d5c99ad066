import Synchronization

/// What the listeners of one member's stream report losing of it, for the relay's receiver
/// report to that member.
///
/// The relay terminates RTCP per leg, so a member's encoder hears only from the relay. The
/// relay's own reception covers the member's uplink; what the listeners lose on their
/// downlinks it learns from their report blocks. The report to the member carries the worse
/// of its leg and the listeners' *median* loss (the lower middle one), so the sender's
/// protection covers the path most listeners hear it through, while no single member can
/// drive the others' encoders: a forged 255/256 moves the median only when its sender is
/// most of the room's listeners (in a two-person call, the one listener whose own audio
/// the protection is for).
///
/// Written by each listener's loop when its RTCP arrives (about once a second), read by the
/// member's loop when its receiver report falls due: a small table behind a mutex, touched
/// by RTCP only, never by media.
final class ListenerLossBoard: Sendable {
    private struct Report {
        var listener: UInt64
        var fractionLost: UInt8
        var time: UInt64
    }

    private let reports = Mutex<[Report]>([])

    /// Reports older than this no longer count: listeners report about once a second.
    static let freshNanoseconds: UInt64 = 3_000_000_000
    /// Listeners remembered per stream (a room holds fewer; this bounds memory).
    static let capacity = 64

    /// `listener` (a session ID) reported losing `fractionLost`/256 of the stream at `now`.
    func record(listener: UInt64, fractionLost: UInt8, now: UInt64) {
        reports.withLock { reports in
            let report = Report(listener: listener, fractionLost: fractionLost, time: now)
            if let index = reports.firstIndex(where: { $0.listener == listener }) {
                reports[index] = report
            } else if reports.count < Self.capacity {
                reports.append(report)
            } else if let oldest = reports.indices.min(by: { reports[$0].time < reports[$1].time }) {
                reports[oldest] = report
            }
        }
    }

    /// The lower median, over the stream's `listeners`, of the fraction each reported losing
    /// in the last `freshNanoseconds` (out of 256). A listener with no fresh report counts as
    /// losing nothing, so reports from a few members cannot stand for the room.
    func medianLoss(listeners: Int, now: UInt64) -> UInt8 {
        reports.withLock { reports in
            reports.removeAll { now &- $0.time >= Self.freshNanoseconds }
            let count = max(listeners, reports.count)
            guard count > 0 else { return 0 }
            // The silent listeners' zeros sort first: the median is one of them, or a report.
            let silent = count - reports.count
            let middle = (count - 1) / 2
            guard middle >= silent else { return 0 }
            reports.sort { $0.fractionLost < $1.fractionLost }
            return reports[middle - silent].fractionLost
        }
    }
}
