/// An SDP session description (RFC 8866) as WebRTC offers and answers carry it (RFC 8829):
/// read from a browser's offer, written for the relay's answer.
///
/// ```
/// v=0
/// o=- 5507794408102901042 2 IN IP4 127.0.0.1      origin
/// s=-                                              session name
/// t=0 0                                            timing
/// a=group:BUNDLE 0                                 session attributes
/// m=audio 9 UDP/TLS/RTP/SAVPF 111 63 0             a media section: kind, port, protocol, formats
/// c=IN IP4 0.0.0.0
/// a=mid:0                                          its attributes
/// a=rtpmap:111 opus/48000/2
/// ```
///
/// Each line is `<type>=<value>`; only `v o s t c m a` are kept (the others, `b i u e p z k r`,
/// mean nothing to the relay and are skipped). The parser takes any bytes: text that is not
/// UTF-8, lines with control characters, a description longer than ``maximumSize`` or with
/// more than ``maximumMediaSections`` media sections, a first line other than `v=0`, or a
/// malformed `o=` or `m=` line is refused with a ``WireError``. Attribute values stay text
/// until a typed accessor (``MediaDescription/rtpMaps`` and the rest) reads them, and each
/// accessor skips a line it cannot read rather than trusting it.
public struct SessionDescription: Sendable, Hashable {
    public var origin: Origin
    public var name: String
    /// Attributes before the first media section (`a=group:BUNDLE 0`, `a=ice-lite`, …).
    public var attributes: [SDPAttribute]
    public var media: [MediaDescription]

    /// The longest description read: a browser's offer for a room of many is a few KiB.
    public static let maximumSize = 64 * 1024
    public static let maximumMediaSections = 256
    /// Attributes kept per section (a browser's offer has about 30 an audio section).
    public static let maximumAttributes = 256

    /// `o=<username> <sess-id> <sess-version> IN IP4 <address>`.
    public struct Origin: Sendable, Hashable {
        public var username: String
        public var sessionID: UInt64
        public var sessionVersion: UInt64
        public var address: String

        public init(username: String = "-", sessionID: UInt64, sessionVersion: UInt64, address: String = "127.0.0.1") {
            self.username = username
            self.sessionID = sessionID
            self.sessionVersion = sessionVersion
            self.address = address
        }
    }

    public init(origin: Origin, name: String = "-", attributes: [SDPAttribute] = [], media: [MediaDescription] = []) {
        self.origin = origin
        self.name = name
        self.attributes = attributes
        self.media = media
    }

    /// Reads a description from bytes, which must be UTF-8.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        guard bytes.count <= Self.maximumSize else { throw .malformed(.sessionDescription, reason: "longer than 64 KiB") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .malformed(.sessionDescription, reason: "not UTF-8") }
        try self.init(parsing: text)
    }

    public init(parsing text: String) throws(WireError) {
        guard text.utf8.count <= Self.maximumSize else { throw .malformed(.sessionDescription, reason: "longer than 64 KiB") }
        var lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).makeIterator()
        var origin: Origin?
        var name = "-"
        var attributes: [SDPAttribute] = []
        var media: [MediaDescription] = []
        var sawVersion = false
        while let raw = lines.next() {
            var line = Substring(raw)
            if line.last == "\r" { line = line.dropLast() }
            if line.isEmpty { continue }
            guard line.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
                throw .malformed(.sessionDescription, reason: "a line holds a control character")
            }
            let bytes = Array(line.utf8.prefix(2))
            guard bytes.count == 2, bytes[1] == UInt8(ascii: "="), (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[0]) else {
                throw .malformed(.sessionDescription, reason: "a line is not <letter>=<value>")
            }
            let value = String(line.dropFirst(2))
            if !sawVersion {
                guard bytes[0] == UInt8(ascii: "v"), value == "0" else { throw .malformed(.sessionDescription, reason: "does not start with v=0") }
                sawVersion = true
                continue
            }
            switch bytes[0] {
            case UInt8(ascii: "o"):
                origin = try Origin(parsing: value)
            case UInt8(ascii: "s"):
                name = value
            case UInt8(ascii: "m"):
                guard media.count < Self.maximumMediaSections else { throw .malformed(.sessionDescription, reason: "more than 256 media sections") }
                media.append(try MediaDescription(parsingMediaLine: value))
            case UInt8(ascii: "c"):
                if !media.isEmpty { media[media.count - 1].connection = value }
            case UInt8(ascii: "a"):
                let attribute = SDPAttribute(parsing: value)
                if media.isEmpty {
                    guard attributes.count < Self.maximumAttributes else { throw .malformed(.sessionDescription, reason: "too many attributes") }
                    attributes.append(attribute)
                } else {
                    guard media[media.count - 1].attributes.count < Self.maximumAttributes else {
                        throw .malformed(.sessionDescription, reason: "too many attributes in a media section")
                    }
                    media[media.count - 1].attributes.append(attribute)
                }
            default:
                continue
            }
        }
        guard sawVersion else { throw .malformed(.sessionDescription, reason: "empty") }
        guard let origin else { throw .malformed(.sessionDescription, reason: "no o= line") }
        self.origin = origin
        self.name = name
        self.attributes = attributes
        self.media = media
    }

    /// The description as SDP text, lines ended with CRLF.
    public var text: String {
        var lines = ["v=0", origin.text, "s=\(name)", "t=0 0"]
        lines += attributes.map { "a=\($0.text)" }
        for section in media {
            lines.append("m=\(section.kind) \(section.port) \(section.transport) \(section.formats.joined(separator: " "))")
            if let connection = section.connection { lines.append("c=\(connection)") }
            lines += section.attributes.map { "a=\($0.text)" }
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// The first session-level attribute named `name`.
    public func attribute(_ name: String) -> String? {
        attributes.first { $0.name == name }.map { $0.value ?? "" }
    }

    /// The mids of `a=group:BUNDLE`, in order.
    public var bundle: [String] {
        guard let group = attribute("group") else { return [] }
        let words = group.split(separator: " ").map(String.init)
        guard words.first == "BUNDLE" else { return [] }
        return Array(words.dropFirst())
    }
}

extension SessionDescription.Origin {
    init(parsing value: String) throws(WireError) {
        let fields = value.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count == 6, let id = UInt64(fields[1]), let version = UInt64(fields[2]), fields[3] == "IN" else {
            throw .malformed(.sessionDescription, reason: "o= line is not <user> <id> <version> IN <type> <address>")
        }
        self.init(username: String(fields[0]), sessionID: id, sessionVersion: version, address: String(fields[5]))
    }

    var text: String { "o=\(username) \(sessionID) \(sessionVersion) IN IP4 \(address)" }
}

/// An `a=` line: a name, and after the first colon a value (`a=rtcp-mux` has none).
public struct SDPAttribute: Sendable, Hashable {
    public var name: String
    public var value: String?

    public init(_ name: String, _ value: String? = nil) {
        self.name = name
        self.value = value
    }

    init(parsing text: String) {
        if let colon = text.firstIndex(of: ":") {
            name = String(text[..<colon])
            value = String(text[text.index(after: colon)...])
        } else {
            name = text
            value = nil
        }
    }

    var text: String { value.map { "\(name):\($0)" } ?? name }
}
