import Foundation

/// The live roster a terminal shows during a call, redrawn in place: a line for the call
/// (your state, round trip, bitrate, xruns), a line for each other member (a level meter,
/// whether they speak, whether they muted or deafened themselves, the volume you gave them,
/// their loss, jitter-buffer delay and concealment), the room's last few text messages, and
/// the keys. Plain text from the figures; `CallTerminal` draws it.
public enum RosterView {
    /// Text messages shown under the members.
    public static let textLines = 4

    /// The lines, each at most `width` characters.
    /// - Parameter typing: what is being typed (a request after `:`, a message after `/`),
    ///   shown as the last line after its `prompt`.
    public static func lines(_ statistics: CallStatistics, selected: String?, showHelp: Bool, typing: String? = nil, prompt: String = ":",
                             width: Int = 100) -> [String] {
        var lines: [String] = []
        let controls = statistics.controls ?? ControlState()
        var head = [statistics.name]
        switch statistics.phase {
        case .joining: head.append("joining \(statistics.room)…")
        case .reconnecting: head.append("reconnecting…")
        case .leaving: head.append("leaving…")
        case .ended: head.append("ended")
        case .inCall: head.append("\(CallStatusLine.clock(statistics.elapsedSeconds)) in \(statistics.room)")
        }
        head.append("you: " + (statistics.isServerMuted ? "MUTED BY THE ROOM'S MODERATOR" : controls.summary.uppercased()))
        if !statistics.missingDevices.isEmpty {
            head.append("NO " + statistics.missingDevices.joined(separator: " OR ").uppercased() + ": waiting for it")
        }
        head.append("rtt " + (statistics.roundTripMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–"))
        head.append("loss up \(CallStatusLine.percent(statistics.lossUpPercent))")
        head.append("\(statistics.bitrate / 1_000) kb/s")
        head.append("xruns \(statistics.captureXruns + statistics.playbackXruns)")
        lines.append(head.joined(separator: " · "))

        let others = Self.others(statistics)
        if others.isEmpty { lines.append("  nobody else is here yet") }
        let nameWidth = min(16, others.map(\.count).max() ?? 0)
        for identity in others {
            let speaker = statistics.speakers.last { $0.identity == identity }
            let marker = identity == selected ? "▸" : " "
            let name = identity.count > nameWidth ? String(identity.prefix(nameWidth - 1)) + "…" : identity.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
            var parts = ["\(marker) \(name)", meter(speaker?.levelDecibels)]
            let volume = speaker?.volumePercent ?? 100
            // A member who muted or deafened themselves sends nothing: what they set says more
            // than "silent", in the same column.
            if let state = stateTag(identity, statistics) {
                parts.append(state)
            } else if let speaker, speaker.receiving || speaker.speakingNow == true {
                parts.append(speaker.speakingNow == true ? "speaking" : "quiet   ")
            } else {
                parts.append("silent  ")
            }
            parts.append(volume == 0 ? "muted here" : String(format: "vol %3d%%", volume))
            if statistics.serverMuted?.contains(identity) == true { parts.append("muted by moderator") }
            if let speaker {
                parts.append("loss \(CallStatusLine.format(speaker.lossPercent))%")
                parts.append("jb \(Int(speaker.jitterBufferDelayMilliseconds.rounded())) ms")
                parts.append("concealed \(CallStatusLine.format(speaker.concealedPercent))%")
            }
            lines.append("  " + parts.joined(separator: "  "))
        }
        for message in (statistics.texts ?? []).suffix(textLines) { lines.append("  " + message.line) }
        let width = max(20, width)
        if showHelp { lines += wrap(CallKey.helpLine, width: width) } else { lines.append("? keys · / message") }
        if let typing { lines.append(prompt + typing) }
        return lines.map { String($0.prefix(width)) }
    }

    /// The help line broken between its items to fit `width`.
    static func wrap(_ line: String, width: Int) -> [String] {
        var lines: [String] = []
        var current = ""
        for item in line.components(separatedBy: " · ") {
            if current.isEmpty { current = item } else if current.count + 3 + item.count <= width { current += " · " + item } else {
                lines.append(current)
                current = item
            }
        }
        return lines + [current]
    }

    /// What a member set for themselves, as the relay tells the room: `MUTED` (push-to-talk
    /// and not talking included) or `DEAFENED`, as wide as the activity words it stands for.
    static func stateTag(_ identity: String, _ statistics: CallStatistics) -> String? {
        if statistics.deafenedMembers?.contains(identity) == true { return "DEAFENED" }
        if statistics.mutedMembers?.contains(identity) == true { return "MUTED   " }
        return nil
    }

    /// The other members in a stable order: the roster's, then anyone heard but not (yet) in it.
    public static func others(_ statistics: CallStatistics) -> [String] {
        var names = statistics.members.filter { $0 != statistics.identity }
        for speaker in statistics.speakers where !names.contains(speaker.identity) && speaker.receiving { names.append(speaker.identity) }
        return names
    }

    /// Ten cells from −60 dBFS (empty) to 0 (full).
    static func meter(_ decibels: Double?) -> String {
        guard let decibels else { return "[" + String(repeating: " ", count: 10) + "]" }
        let cells = max(0, min(10, Int(((decibels + 60) / 6).rounded())))
        return "[" + String(repeating: "■", count: cells) + String(repeating: " ", count: 10 - cells) + "]"
    }
}
