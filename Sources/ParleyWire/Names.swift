/// The rules for room names, identities and regions, shared by the relay, the token minter,
/// the cluster and the client so that a name one accepts the others accept too.
public enum ParleyNames {
    public static let maximumLength = 64

    /// Why `room` is not a valid room name, or nil when it is.
    /// Rooms are 1–64 characters of `A–Z a–z 0–9 . _ -`, so they need no escaping in a URL.
    public static func problem(withRoom room: String) -> String? {
        if room.isEmpty { return "the room name is empty" }
        if room.utf8.count > maximumLength { return "the room name is longer than \(maximumLength) characters" }
        let allowed = room.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == 0x2E || byte == 0x5F || byte == 0x2D
        }
        return allowed ? nil : "the room name \"\(room)\" may use only letters, digits, '.', '_' and '-'"
    }

    /// Why `region` (a token's `region` claim, a relay's `--region`) is not a valid region, or
    /// nil when it is. Regions follow the room-name rule, shorter: 1 to 32 letters, digits,
    /// '.', '_' and '-'. The text completes a sentence that begins with where it came from.
    public static func problem(withRegion region: String) -> String? {
        guard (1...32).contains(region.utf8.count), problem(withRoom: region) == nil else {
            return "is \"\(region)\"; a region is 1 to 32 letters, digits, '.', '_' or '-', e.g. eu-west"
        }
        return nil
    }

    /// Why `identity` is not a valid identity, or nil when it is.
    /// Identities are 1–64 bytes of UTF-8 text, not only spaces, without control characters,
    /// line breaks, or bidirectional overrides and isolates (U+202E would show "ada" as
    /// someone else's name in every roster and log line it appears in).
    public static func problem(withIdentity identity: String) -> String? {
        if identity.utf8.count > maximumLength { return "the name is longer than \(maximumLength) bytes" }
        if let scalar = identity.unicodeScalars.first(where: \.changesHowTextReads) {
            let hex = String(scalar.value, radix: 16, uppercase: true)
            let code = "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            return scalar.isBidirectionalControl
                ? "the name contains a bidirectional control character (\(code)), which changes how text around it reads"
                : "the name contains a control character or line break (\(code))"
        }
        if identity.unicodeScalars.allSatisfy({ $0.properties.isWhitespace }) { return "the name is empty" }
        return nil
    }
}

extension Unicode.Scalar {
    /// Control characters, line and paragraph separators, and bidirectional controls: what
    /// makes text from someone else forge a line, or read differently from what it is.
    public var changesHowTextReads: Bool {
        switch properties.generalCategory {
        case .control, .lineSeparator, .paragraphSeparator: return true
        default: return isBidirectionalControl
        }
    }

    /// The bidirectional formatting characters: U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069.
    public var isBidirectionalControl: Bool {
        switch value {
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }
}
