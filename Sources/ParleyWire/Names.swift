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
    /// line breaks, bidirectional overrides and isolates (U+202E would show "ada" as someone
    /// else's name in every roster and log line it appears in), or invisible formatting
    /// characters (a zero-width space makes `ad\u{200B}min` pass for `admin`; a zero-width
    /// joiner between two emoji, which only joins the picture, is allowed).
    public static func problem(withIdentity identity: String) -> String? {
        if identity.utf8.count > maximumLength { return "the name is longer than \(maximumLength) bytes" }
        if let scalar = identity.firstScalarChangingHowItReads {
            if scalar.isBidirectionalControl {
                return "the name contains a bidirectional control character (\(scalar.codePointText)), which changes how text around it reads"
            }
            if scalar.properties.generalCategory == .format {
                return "the name contains an invisible formatting character (\(scalar.codePointText)), with which it could pass for another name"
            }
            return "the name contains a control character or line break (\(scalar.codePointText))"
        }
        if identity.unicodeScalars.allSatisfy({ $0.properties.isWhitespace }) { return "the name is empty" }
        return nil
    }
}
