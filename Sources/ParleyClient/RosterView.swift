import Foundation

/// The live roster a terminal shows during a call, redrawn in place: a line for the call
/// (your state, round trip, loss, bitrate, xruns), a line for each other member (a level
/// meter, whether they speak or why they are silent, the volume you gave them, their loss,
/// the network's jitter, jitter-buffer delay and concealment), the room's last few text
/// messages, and the keys. Plain text from the figures; `CallTerminal` draws it.
///
/// Every line is made of whole fields, each with an importance: when the terminal is too
/// narrow for all of them, the least important go first, whole, and a figure is never cut
/// (only a name is shortened, with "…"). The members' fields are columns: one set of them
/// for every member, so the lines stay aligned.
public enum RosterView {
    /// Text messages shown under the members.
    public static let textLines = 4

    /// A part of a line, shown whole or not at all: only ``shortens`` fields (a name) are
    /// cut, with "…", and only when even the most important fields would not fit otherwise.
    public struct Field: Sendable, Equatable {
        public var text: String
        /// Higher stays longer when the line is too narrow.
        public var importance: Int
        public var shortens: Bool

        public init(_ text: String, importance: Int, shortens: Bool = false) {
            self.text = text
            self.importance = importance
            self.shortens = shortens
        }
    }

    /// What a member's line shows besides the name, left to right. Their importance says
    /// which go first on a narrow terminal; a new column takes its place in this list and
    /// gives itself an importance against the others.
    public enum Column: CaseIterable, Sendable {
        case meter, activity, key, volume, loss, jitter, jitterBuffer, concealed

        /// The name is 100: who a member is, and whether they can be heard at all, stay longest.
        public var importance: Int {
            switch self {
            case .activity: return 90
            // End-to-end encrypted rooms: a changed key or a room seen otherwise must show.
            case .key: return 75
            case .loss: return 70
            case .meter: return 60
            case .volume: return 50
            case .concealed: return 40
            case .jitter: return 30
            case .jitterBuffer: return 20
            }
        }
    }

    /// The lines, each at most `width` columns of a terminal.
    /// - Parameters:
    ///   - typing: what is being typed (a request after `:`, a message after `/`), shown as
    ///     the last line after its `prompt`, with `bytesLeft` when given.
    public static func lines(_ statistics: CallStatistics, selected: String?, showHelp: Bool, typing: String? = nil, prompt: String = ":",
                             bytesLeft: Int? = nil, width: Int = 100) -> [String] {
        let width = max(20, width)
        var lines = [fit(headFields(statistics), separator: " · ", width: width)]
        let others = Self.others(statistics)
        if others.isEmpty { lines.append("  nobody else is here yet") }
        lines += memberLines(others, statistics: statistics, selected: selected, width: width)
        for message in (statistics.texts ?? []).suffix(textLines) { lines.append(cut("  " + message.line, to: width)) }
        if showHelp { lines += wrap(CallKey.helpLine, width: width) } else { lines.append("? keys · / message") }
        if let typing { lines.append(typingLine(typing, prompt: prompt, bytesLeft: bytesLeft, width: width)) }
        return lines
    }

    // MARK: The call's line

    static func headFields(_ statistics: CallStatistics) -> [Field] {
        let controls = statistics.controls ?? ControlState()
        var fields = [Field(statistics.name, importance: 100, shortens: true)]
        switch statistics.phase {
        case .joining: fields.append(Field("joining \(statistics.room)…", importance: 85))
        case .reconnecting: fields.append(Field("reconnecting…", importance: 85))
        case .leaving: fields.append(Field("leaving…", importance: 85))
        case .ended: fields.append(Field("ended", importance: 85))
        case .inCall: fields.append(Field("\(CallStatusLine.clock(statistics.elapsedSeconds)) in \(statistics.room)", importance: 80))
        }
        fields.append(Field("you: " + (statistics.isServerMuted ? "MUTED BY THE ROOM'S MODERATOR" : controls.summary.uppercased()), importance: 95))
        if let endToEnd = statistics.endToEnd {
            fields.append(Field("end-to-end encrypted (you: \(endToEnd.ownFingerprint))", importance: 88))
        }
        if !statistics.missingDevices.isEmpty {
            fields.append(Field("NO " + statistics.missingDevices.joined(separator: " OR ").uppercased() + ": waiting for it", importance: 96))
        }
        fields.append(Field("rtt " + (statistics.roundTripMilliseconds.map { "\(Int($0.rounded())) ms" } ?? "–"), importance: 60))
        fields.append(Field("loss up \(CallStatusLine.percent(statistics.lossUpPercent))", importance: 50))
        fields.append(Field("\(statistics.bitrate / 1_000) kb/s", importance: 40))
        fields.append(Field("xruns \(statistics.captureXruns + statistics.playbackXruns)", importance: 30))
        return fields
    }

    // MARK: The members

    /// What `identity`'s line shows in `column`; nil when there is nothing to show.
    static func cell(_ column: Column, of identity: String, _ speaker: CallStatistics.Speaker?, _ statistics: CallStatistics) -> String? {
        switch column {
        case .meter: return meter(speaker?.levelDecibels)
        case .activity: return activity(identity, speaker, statistics)
        case .volume:
            let volume = speaker?.volumePercent ?? 100
            return volume == 0 ? "muted here" : String(format: "vol %3d%%", volume)
        case .loss: return speaker.map { "loss \(CallStatusLine.format($0.lossPercent))%" }
        case .jitter: return speaker.map { "jitter \(Int($0.networkJitterMilliseconds.rounded())) ms" }
        case .jitterBuffer: return speaker.map { "jb \(Int($0.jitterBufferDelayMilliseconds.rounded())) ms" }
        case .concealed: return speaker.map { "concealed \(CallStatusLine.format($0.concealedPercent))%" }
        case .key: return keyState(of: identity, statistics)
        }
    }

    /// In an end-to-end encrypted room: the fingerprint of a member's identity key, or what is
    /// wrong with it; nil in a room without.
    static func keyState(of identity: String, _ statistics: CallStatistics) -> String? {
        guard let endToEnd = statistics.endToEnd, let member = endToEnd.members.first(where: { $0.identity == identity }) else { return nil }
        if member.seesAnotherRoom != nil { return "ANOTHER ROOM!" }
        switch member.key {
        case .changed: return "KEY CHANGED"
        case .none: return "NO E2EE"
        case .new, .known: return "key \(member.fingerprint ?? "?")" + (member.weHoldTheirs ? "" : " (waiting)")
        }
    }

    /// Whether a member speaks, or why they are silent: a moderator muted them for everyone,
    /// or they muted or deafened themselves (everyone's state reaches the others through the
    /// relay; push-to-talk not talking counts as muted).
    static func activity(_ identity: String, _ speaker: CallStatistics.Speaker?, _ statistics: CallStatistics) -> String {
        if statistics.serverMuted?.contains(identity) == true { return "MUTED BY MODERATOR" }
        if statistics.deafenedMembers?.contains(identity) == true { return "DEAFENED" }
        if statistics.mutedMembers?.contains(identity) == true { return "MUTED" }
        guard let speaker, speaker.receiving || speaker.speakingNow == true else { return "silent" }
        return speaker.speakingNow == true ? "speaking" : "quiet"
    }

    static func memberLines(_ others: [String], statistics: CallStatistics, selected: String?, width: Int) -> [String] {
        let rows = others.map { identity in
            let speaker = statistics.speakers.last { $0.identity == identity }
            return (identity: identity, cells: Column.allCases.map { cell($0, of: identity, speaker, statistics) ?? "" })
        }
        // Columns with nothing in them take no room; the rest go least important first.
        var shown = Column.allCases.indices.filter { index in rows.contains { !$0.cells[index].isEmpty } }
        let cellWidths = Column.allCases.indices.map { index in rows.map { displayWidth($0.cells[index]) }.max() ?? 0 }
        let nameWidth = min(16, rows.map { displayWidth($0.identity) }.max() ?? 0)
        func total(_ columns: [Int], name: Int) -> Int { 4 + name + columns.reduce(0) { $0 + 2 + cellWidths[$1] } }
        // Columns go, least important first, while the names fit whole; names are shortened
        // before the columns that say whether a member can be heard.
        for (limit, name) in [(keptBeforeNames, nameWidth), (Int.max, min(nameWidth, 4))] {
            while total(shown, name: name) > width,
                  let least = shown.filter({ Column.allCases[$0].importance < limit })
                      .min(by: { Column.allCases[$0].importance < Column.allCases[$1].importance }) {
                shown.removeAll { $0 == least }
            }
        }
        let name = max(1, min(nameWidth, width - total(shown, name: 0)))
        return rows.map { row in
            var line = "  " + (row.identity == selected ? "▸" : " ") + " " + pad(cut(row.identity, to: name), to: name)
            for index in shown { line += "  " + pad(row.cells[index], to: cellWidths[index]) }
            return line.replacing(#/ +$/#, with: "")
        }
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

    // MARK: Fitting

    /// Fields at least this important are kept, whole, before a name is shortened: whether
    /// you or a member can be heard at all matters more than the last letters of a name.
    static let keptBeforeNames = 90

    /// The fields in their order, the least important left out until the line fits `width`;
    /// a shortening field (a name) is cut with "…" only once nothing less important than
    /// ``keptBeforeNames`` is left to drop.
    static func fit(_ fields: [Field], separator: String, width: Int) -> String {
        var kept = fields
        func length(_ fields: [Field], shortened: Bool = false) -> Int {
            fields.reduce(0) { $0 + ($1.shortens && shortened ? min(displayWidth($1.text), 4) : displayWidth($1.text)) }
                + displayWidth(separator) * max(0, fields.count - 1)
        }
        func dropLeast(below limit: Int, shortened: Bool) {
            while length(kept, shortened: shortened) > width,
                  let least = kept.indices.filter({ !kept[$0].shortens && kept[$0].importance < limit })
                      .min(by: { kept[$0].importance < kept[$1].importance }) {
                kept.remove(at: least)
            }
        }
        dropLeast(below: keptBeforeNames, shortened: false)
        dropLeast(below: .max, shortened: true)
        let fixed = kept.filter { !$0.shortens }.reduce(0) { $0 + displayWidth($1.text) } + displayWidth(separator) * max(0, kept.count - 1)
        let shortening = kept.filter(\.shortens).count
        let room = shortening > 0 ? max(1, (width - fixed) / shortening) : 0
        return cut(kept.map { $0.shortens ? cut($0.text, to: room) : $0.text }.joined(separator: separator), to: width)
    }

    /// The help line broken between its items to fit `width`.
    static func wrap(_ line: String, width: Int) -> [String] {
        var lines: [String] = []
        var current = ""
        for item in line.components(separatedBy: " · ") {
            if current.isEmpty {
                current = item
            } else if displayWidth(current) + 3 + displayWidth(item) <= width {
                current += " · " + item
            } else {
                lines.append(current)
                current = item
            }
        }
        return (lines + [current]).map { cut($0, to: width) }
    }

    /// What is being typed, its end always in view: `/…the end of it (123 bytes left)`.
    static func typingLine(_ typing: String, prompt: String, bytesLeft: Int?, width: Int) -> String {
        let count = bytesLeft.map { " (\($0) \($0 == 1 ? "byte" : "bytes") left)" } ?? ""
        let room = width - displayWidth(prompt) - displayWidth(count)
        guard displayWidth(typing) > room else { return prompt + typing + count }
        var tail = ""
        for character in typing.reversed() {
            guard displayWidth(tail) + displayWidth(String(character)) < room else { break }
            tail.insert(character, at: tail.startIndex)
        }
        return prompt + "…" + tail + count
    }

    /// `text` in at most `columns` columns, ending in "…" when cut.
    static func cut(_ text: String, to columns: Int) -> String {
        guard displayWidth(text) > columns else { return text }
        guard columns > 1 else { return columns == 1 ? "…" : "" }
        var result = ""
        var used = 0
        for character in text {
            let size = displayWidth(String(character))
            guard used + size <= columns - 1 else { break }
            result.append(character)
            used += size
        }
        return result + "…"
    }

    static func pad(_ text: String, to columns: Int) -> String {
        text + String(repeating: " ", count: max(0, columns - displayWidth(text)))
    }

    /// The columns `text` takes on a terminal: East Asian wide characters and most emoji
    /// take two, combining marks and invisible formatting characters none.
    public static func displayWidth(_ text: String) -> Int {
        var width = 0
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .nonspacingMark, .enclosingMark, .format: continue
            default: break
            }
            switch scalar.value {
            case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
                 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6,
                 0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD:
                width += 2
            default:
                width += 1
            }
        }
        return width
    }
}
