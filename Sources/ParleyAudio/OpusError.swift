import COpus

/// A libopus failure, with libopus's own explanation (`opus_strerror`) and what we were doing.
public struct OpusError: Error, CustomStringConvertible, Equatable, Sendable {
    public let code: Int32
    public let operation: String

    init(_ code: Int32, _ operation: String) {
        self.code = code
        self.operation = operation
    }

    public var description: String {
        "Opus \(operation) failed: \(String(cString: opus_strerror(code)))"
    }
}
