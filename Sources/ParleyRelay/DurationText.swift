/// Durations as people write them: "30s", "500ms", "2m", "24h", "7d", "1h30m".
public enum DurationText {
    public static func milliseconds(_ text: String) -> Int? {
        let text = text.trimmingSpaces.lowercased()
        guard !text.isEmpty else { return nil }
        if let seconds = Int(text) { return seconds.multipliedReportingOverflow(by: 1000).overflow ? nil : seconds * 1000 }
        var total = 0
        var digits = ""
        var unit = ""
        func commit() -> Bool {
            guard let value = Int(digits) else { return false }
            let factor: Int
            switch unit {
            case "ms": factor = 1
            case "s": factor = 1000
            case "m", "min": factor = 60_000
            case "h": factor = 3_600_000
            case "d": factor = 86_400_000
            default: return false
            }
            let (product, overflow) = value.multipliedReportingOverflow(by: factor)
            guard !overflow else { return false }
            total += product
            digits = ""
            unit = ""
            return true
        }
        for character in text {
            if character.isASCII && character.isNumber {
                if !unit.isEmpty { guard commit() else { return nil } }
                digits.append(character)
            } else if character.isLetter {
                guard !digits.isEmpty else { return nil }
                unit.append(character)
            } else {
                return nil
            }
        }
        guard commit() else { return nil }
        return total
    }
}
