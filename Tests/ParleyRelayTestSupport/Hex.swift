/// The bytes hex text spells, for test vectors: two digits a byte, upper or lower case, with
/// any whitespace between them ignored (so a vector can be written in groups, as RFCs print
/// them). Traps on an odd number of digits or a character that is not one: a mistake in the
/// test itself.
public func bytes(fromHex text: String) -> [UInt8] {
    let digits = text.filter { !$0.isWhitespace }
    precondition(digits.count % 2 == 0, "odd number of hex digits in \"\(text)\"")
    var bytes: [UInt8] = []
    bytes.reserveCapacity(digits.count / 2)
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        guard let byte = UInt8(digits[index..<next], radix: 16) else { preconditionFailure("\"\(digits[index..<next])\" is not a hex byte") }
        bytes.append(byte)
        index = next
    }
    return bytes
}
