/// Text from the network, made safe for a person to read: in a log line, on a terminal, in a
/// file a script prints. What could act on a terminal or make text read as something it is
/// not is shown as `\u{…}` instead: control characters (a newline forges a line; ESC, the C1
/// controls and BEL drive the terminal), line and paragraph separators, bidirectional
/// overrides and isolates (which reorder what a person reads), and invisible formatting
/// characters (a zero-width space makes `ad\u{200B}min` look like `admin`). A zero-width
/// joiner between two emoji only joins the picture (👩‍💻), so it stays.
///
/// The client makes every string a relay sends safe once, where it enters
/// (`ControlMessage.madeSafeToShow()` in ParleyClient, which uses ``SafeText``); the relay
/// logs what strangers send through ``StringProtocol/logSafe(limit:)``.
public enum SafeText {
    /// A name (an identity, a room): as it is when it is a valid one, escaped otherwise.
    public static func name(_ text: String) -> String { text.logSafe(limit: ParleyNames.maximumLength) }

    /// A relay's address as "HOST:PORT".
    public static func address(_ text: String) -> String { text.logSafe(limit: 255) }

    /// Words: a message, a reason, a relay's explanation; cut to `limit` characters.
    public static func words(_ text: String, limit: Int = 255) -> String { text.logSafe(limit: limit) }
}

extension StringProtocol {
    /// The text as it may appear in a log line or on a terminal (``SafeText``), cut to
    /// `limit` characters (Unicode scalars) with "…" when longer.
    public func logSafe(limit: Int = 64) -> String {
        var result = ""
        var previous: Unicode.Scalar?
        var iterator = unicodeScalars.makeIterator()
        var current = iterator.next()
        var count = 0
        while let scalar = current, count < limit {
            let next = iterator.next()
            if scalar.changesHowTextReads(after: previous, before: count + 1 < limit ? next : nil) {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
            previous = scalar
            current = next
            count += 1
        }
        if current != nil { result += "…" }
        return result
    }

    /// The first scalar that changes how the text reads (``SafeText``), if any.
    public var firstScalarChangingHowItReads: Unicode.Scalar? {
        var previous: Unicode.Scalar?
        var iterator = unicodeScalars.makeIterator()
        var current = iterator.next()
        while let scalar = current {
            let next = iterator.next()
            if scalar.changesHowTextReads(after: previous, before: next) { return scalar }
            previous = scalar
            current = next
        }
        return nil
    }
}

extension Unicode.Scalar {
    /// Control characters, line and paragraph separators, bidirectional controls and the other
    /// invisible formatting characters (Unicode category Cf): what makes text from someone
    /// else forge a line, drive a terminal, or read differently from what it is.
    public var changesHowTextReads: Bool {
        switch properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator, .format: return true
        default: return isBidirectionalControl
        }
    }

    /// ``changesHowTextReads`` in context: a zero-width joiner between two emoji (👩‍💻, ❤️‍🔥)
    /// joins a picture and can disguise no letter, so it does not count.
    public func changesHowTextReads(after previous: Unicode.Scalar?, before next: Unicode.Scalar?) -> Bool {
        guard changesHowTextReads else { return false }
        if value == 0x200D, let previous, let next, previous.partOfAnEmoji, next.partOfAnEmoji { return false }
        return true
    }

    /// An emoji (not the ASCII digits and signs that may start one) or the variation selector
    /// that asks for one.
    var partOfAnEmoji: Bool { value == 0xFE0F || (value >= 0x80 && properties.isEmoji) }

    /// The bidirectional formatting characters: U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069.
    public var isBidirectionalControl: Bool {
        switch value {
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// `U+200B`, as people write a code point.
    public var codePointText: String {
        let hex = String(value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
}
