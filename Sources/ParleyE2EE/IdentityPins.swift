import ParleyBasics
import ParleyWire

/// Trust on first use: the identity key each person had in each room the first time this
/// client met them there. A key seen again is recognised; a different key for the same name
/// is shown loudly and refused (no media key is sealed to it, nothing it sends plays) until
/// the person accepts it (`parley ctl trust NAME`), having checked the safety number.
///
/// The file (`~/.config/parley/known-keys`, mode 0600) has a line per room and name:
///
/// ```
/// room <TAB> name <TAB> key (base64url) <TAB> first seen (seconds since 1970)
/// ```
///
/// Room names and identities cannot hold a tab or a line break (``ParleyNames``), so the
/// lines need no escaping; a line that does not read is kept as it is and ignored.
public struct IdentityPins: Sendable {
    public enum Verdict: Sendable, Equatable {
        /// Never met under this name in this room: pinned now.
        case firstSeen
        /// The key pinned before, first seen at this time (seconds since 1970).
        case known(since: Int64)
        /// A different key than the one pinned: someone else, a new device, or a relay
        /// standing in between. Refused until accepted.
        case changed(pinned: [UInt8])
        /// A name no pin can be kept for (it breaks the naming rules).
        case unpinnable
    }

    private struct Pin: Sendable {
        var key: [UInt8]
        var firstSeen: Int64
    }

    private var pins: [String: Pin] = [:]
    private var unreadable: [String] = []
    /// Changed since read or last written.
    public private(set) var isDirty = false

    public init() {}

    public init(parsing text: String) {
        for line in text.split(whereSeparator: \.isNewline) where !line.isEmpty && !line.hasPrefix("#") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 4, let key = Base64URL.decode(fields[2]), key.count == ControlMessage.identityKeySize,
                  let seen = Int64(fields[3]) else {
                unreadable.append(String(line))
                continue
            }
            pins[Self.slot(room: String(fields[0]), identity: String(fields[1]))] = Pin(key: key, firstSeen: seen)
        }
    }

    private static func slot(room: String, identity: String) -> String { room + "\t" + identity }

    /// What `key` is for `identity` in `room`; a first sight pins it.
    public mutating func check(room: String, identity: String, key: [UInt8], now: Int64) -> Verdict {
        guard ParleyNames.problem(withRoom: room) == nil, ParleyNames.problem(withIdentity: identity) == nil else { return .unpinnable }
        let slot = Self.slot(room: room, identity: identity)
        guard let pin = pins[slot] else {
            pins[slot] = Pin(key: key, firstSeen: now)
            isDirty = true
            return .firstSeen
        }
        return pin.key == key ? .known(since: pin.firstSeen) : .changed(pinned: pin.key)
    }

    /// The person accepted `key` for `identity` in `room` (after checking the safety number).
    public mutating func accept(room: String, identity: String, key: [UInt8], now: Int64) {
        guard ParleyNames.problem(withRoom: room) == nil, ParleyNames.problem(withIdentity: identity) == nil else { return }
        pins[Self.slot(room: room, identity: identity)] = Pin(key: key, firstSeen: now)
        isDirty = true
    }

    public var text: String {
        var text = "# Identity keys of the people met in end-to-end encrypted Parley rooms, pinned on first sight.\n"
        text += "# room\tname\tkey\tfirst seen (seconds since 1970). Remove a line to forget a key.\n"
        for (slot, pin) in pins.sorted(by: { $0.key < $1.key }) {
            text += "\(slot)\t\(Base64URL.encode(pin.key))\t\(pin.firstSeen)\n"
        }
        for line in unreadable { text += line + "\n" }
        return text
    }

    /// Reads the pins at `path` (none yet if it does not exist).
    public static func load(path: String) throws(TextFile.Failure) -> IdentityPins {
        do throws(TextFile.Failure) {
            return IdentityPins(parsing: try TextFile.read(path: path, what: "known-keys file", hint: ""))
        } catch where error.isMissing {
            return IdentityPins()
        }
    }

    /// Writes the pins to `path` (mode 0600, whole) if they changed.
    public mutating func save(path: String) throws(TextFile.Failure) {
        guard isDirty else { return }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            try TextFile.makePrivateDirectory(String(path[..<slash]))
        }
        try TextFile.writePrivately(text, to: path, replacing: true, exists: "")
        isDirty = false
    }
}
