import Foundation

/// The control socket's answer to one request, one line of JSON:
/// `{"ok":true,"message":"muted"}`, `{"ok":false,"error":"nobody called 'bob' is in the call"}`,
/// or for `status` the call's figures under `"status"` (the keys of `--stats-json`).
public struct CallControlReply: Codable, Equatable, Sendable {
    public var ok: Bool
    /// What changed, in words (`muted`, `bob at 50%`, `leaving`).
    public var message: String?
    /// Why nothing changed, and what to send instead.
    public var error: String?
    public var status: CallStatistics?

    public init(ok: Bool, message: String? = nil, error: String? = nil, status: CallStatistics? = nil) {
        self.ok = ok
        self.message = message
        self.error = error
        self.status = status
    }

    public static func done(_ message: String) -> Self { Self(ok: true, message: message) }
    public static func refused(_ error: String) -> Self { Self(ok: false, error: error) }

    /// The reply's line, newline included.
    public func line() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var data = (try? encoder.encode(self)) ?? Data(#"{"ok":false,"error":"the reply could not be written"}"#.utf8)
        data.append(0x0A)
        return data
    }

    public init(line: Data) throws {
        self = try JSONDecoder().decode(Self.self, from: line)
    }
}
