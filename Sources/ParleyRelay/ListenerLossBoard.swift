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
/// A trunk to another relay reports for all the members behind it at once: its report
/// counts once for each of them (its `weight`), so a talker's encoder sees the room's median
/// listener whichever relay the listeners are on.
///
/// Written by each listener's loop when its RTCP arrives (about once a second), read by the
/// member's loop when its receiver report falls due: a small table behind a mutex, touched
/// by RTCP only, never by media.
final class ListenerLossBoard: Sendable {
    private struct Report {
        var listener: UInt64
        var fractionLost: UInt8
        var time: UInt64
        /// How many listeners the report speaks for: 1 for a member, the members behind a trunk.
        var weight: Int
    }

    private let reports = Mutex<[Report]>([])

    /// Reports older than this no longer count: listeners report about once a second.
    static let freshNanoseconds: UInt64 = 3_000_000_000
    /// Listeners remembered per stream (a room holds fewer; this bounds memory).
    static let capacity = 64

    /// `listener` (a session or trunk ID) reported losing `fractionLost`/256 of the stream at
    /// `now`, for `weight` listeners.
    func record(listener: UInt64, fractionLost: UInt8, now: UInt64, weight: Int = 1) {
        reports.withLock { reports in
            let report = Report(listener: listener, fractionLost: fractionLost, time: now, weight: max(weight, 1))
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
            let reported = reports.reduce(0) { $0 + $1.weight }
            let count = max(listeners, reported)
            guard count > 0 else { return 0 }
            // The silent listeners' zeros sort first: the median is one of them, or a report.
            let silent = count - reported
            let middle = (count - 1) / 2
            guard middle >= silent else { return 0 }
            reports.sort { $0.fractionLost < $1.fractionLost }
            var position = silent
            for report in reports {
                position += report.weight
                if position > middle { return report.fractionLost }
            }
            return reports.last?.fractionLost ?? 0
        }
    }
}
