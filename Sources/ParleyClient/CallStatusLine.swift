import Foundation
import ParleyWire

/// The words people read about a call: the live status line and the summary on exit.
public enum CallStatusLine {
    /// `ada · 3 in room · speaking: bob · rtt 12 ms · loss up 0.0% down 4.8% · jb 62 ms ·
    /// concealed 1.2% · 28 kb/s · xruns 0`
    public static func line(_ statistics: CallStatistics) -> String {
        var parts = [statistics.name]
        switch statistics.phase {
        case .joining:
            parts.append("joining \(statistics.room)…")
            return parts.joined(separator: " · ")
        case .reconnecting:
            parts.append("reconnecting…")
        case .leaving:
            parts.append("leaving…")
        case .ended:
            parts.append("ended")
        case .inCall:
            parts.append(clock(statistics.elapsedSeconds))
        }
        if !statistics.missingDevices.isEmpty {
            parts.append("no " + statistics.missingDevices.joined(separator: " or ") + ": waiting for it")
        }
        parts.append("\(statistics.members.count) in room")
        if let endToEnd = statistics.endToEnd { parts += endToEndParts(endToEnd) }
        if statistics.isServerMuted { parts.append("MUTED BY THE ROOM'S MODERATOR") }
        parts.append(statistics.speaking.isEmpty ? "quiet" : "speaking: " + statistics.speaking.joined(separator: ", "))
        // Who a moderator muted, then what the others set for themselves; a deafened member is
        // muted too, and each is said once.
        let byModerator = (statistics.serverMuted ?? []).filter { $0 != statistics.identity }
        let deafened = (statistics.deafenedMembers ?? []).filter { $0 != statistics.identity && !byModerator.contains($0) }
        let muted = (statistics.mutedMembers ?? []).filter { $0 != statistics.identity && !deafened.contains($0) && !byModerator.contains($0) }
        if !byModerator.isEmpty { parts.append("muted by moderator: " + byModerator.joined(separator: ", ")) }
        if !muted.isEmpty { parts.append("muted: " + muted.joined(separator: ", ")) }
        if !deafened.isEmpty { parts.append("deafened: " + deafened.joined(separator: ", ")) }
        parts.append("rtt " + (statistics.roundTripMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–"))
        parts.append("loss up \(percent(statistics.lossUpPercent)) down \(percent(statistics.lossDownPercent))")
        parts.append("jb " + (statistics.jitterBufferDelayMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–"))
        parts.append("concealed \(percent(statistics.concealedPercent))")
        parts.append("\(statistics.bitrate / 1_000) kb/s" + (statistics.redundantFrames > 0 ? " +\(statistics.redundantFrames) copies" : ""))
        parts.append("xruns \(statistics.captureXruns + statistics.playbackXruns)")
        return parts.joined(separator: " · ")
    }

    /// `end-to-end encrypted`, then what needs the person's attention: a member whose key
    /// changed (refused until accepted), one whose keys describe another room.
    static func endToEndParts(_ status: EndToEndStatus) -> [String] {
        var parts = ["end-to-end encrypted"]
        let changed = status.members.filter { $0.key == .changed }.map { $0.identity.logSafe(limit: 64) }
        if !changed.isEmpty { parts.append("KEY CHANGED: " + changed.joined(separator: ", ") + " (parley ctl verify)") }
        let elsewhere = status.members.filter { $0.seesAnotherRoom != nil }.map { $0.identity.logSafe(limit: 64) }
        if !elsewhere.isEmpty { parts.append("ANOTHER ROOM: " + elsewhere.joined(separator: ", ") + " gave keys to members you cannot see") }
        return parts
    }

    /// Several lines: the call as a whole, then one line per speaker heard.
    public static func summary(_ statistics: CallStatistics) -> String {
        var lines: [String] = []
        lines.append("\(statistics.name): \(clock(statistics.elapsedSeconds)) in room \(statistics.room); sent \(statistics.packetsSent) packets "
            + "(\(statistics.bytesSent / 1_024) KiB), ended at \(statistics.bitrate / 1_000) kb/s, FEC for \(statistics.expectedLossPercent)% loss, "
            + "\(statistics.redundantFrames) earlier frames repeated; "
            + "loss up \(percent(statistics.lossUpTotalPercent)); rtt \(statistics.roundTripMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–"); "
            + "rejoins \(statistics.rejoins); xruns \(statistics.captureXruns) in, \(statistics.playbackXruns) out")
        if let endToEnd = statistics.endToEnd {
            let members = endToEnd.members.map { "\($0.identity.logSafe(limit: 64)) \($0.fingerprint ?? "no key")" }
            lines.append("  end-to-end encrypted; your fingerprint \(endToEnd.ownFingerprint)"
                + (members.isEmpty ? "" : "; " + members.joined(separator: ", ")))
        }
        if statistics.speakers.isEmpty {
            lines.append("  heard nobody")
        }
        for speaker in statistics.speakers {
            // What the network did (lost, late), then what became of the frames that were
            // missing when due, each with its count: a silent member's few frames make one
            // late packet a large share, and the count says it was one.
            func share(_ percent: Double, _ frames: Int) -> String { "\(format(percent))% (\(frames))" }
            lines.append("  from \(speaker.identity): \(speaker.packetsReceived) packets, lost \(format(speaker.lossPercent))% on the way, "
                + "\(speaker.latePackets) late; of \(Int(speaker.audioFrames.rounded())) frames due, FEC rebuilt \(share(speaker.fecRecoveredPercent, speaker.fecRecoveredFrames)), "
                + "redundant copies \(share(speaker.redundancyRecoveredPercent, speaker.redundancyRecoveredFrames)), "
                + "concealed \(share(speaker.concealedPercent, speaker.concealedFrames)); "
                + "jitter buffer \(speaker.meanJitterBufferDelayMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–") on average, underruns \(speaker.underruns)")
        }
        return lines.joined(separator: "\n")
    }

    static func percent(_ value: Double?) -> String { value.map { "\(format($0))%" } ?? "–" }

    static func format(_ value: Double) -> String { String(format: "%.1f", value) }

    static func clock(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.down))
        return total >= 3_600 ? String(format: "%d:%02d:%02d", total / 3_600, total / 60 % 60, total % 60) : String(format: "%d:%02d", total / 60, total % 60)
    }
}
