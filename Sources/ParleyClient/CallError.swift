/// Why a call could not start or ended badly, worded for the person at the keyboard, with
/// the exit status scripts rely on (``CallExitStatus``).
public enum CallError: Error, Sendable, CustomStringConvertible {
    /// The link to the relay failed for good (unreachable, key, token, room full, replaced).
    case link(LinkFailure)
    /// The relay's address cannot be resolved or reached at all.
    case relayUnreachable(String)
    /// A sound device is missing or busy.
    case device(String)
    /// An input WAV file cannot be used.
    case badInputFile(String)
    /// An output file (WAV or JSON) cannot be written.
    case cannotWriteOutput(String)
    /// A value that could not be used (a bad relay address, a bad key).
    case usage(String)
    /// The identity for end-to-end encryption cannot be read or made.
    case identity(String)
    /// Anything else: a bug or a system failure.
    case unexpected(String)

    public var description: String {
        switch self {
        case let .link(failure): return failure.description
        case let .relayUnreachable(message), let .device(message), let .badInputFile(message), let .cannotWriteOutput(message),
             let .usage(message), let .identity(message), let .unexpected(message):
            return message
        }
    }

    /// The status the process exits with (``CallExitStatus``, listed in `parley call --help`).
    public var exitStatus: CallExitStatus {
        switch self {
        case let .link(failure): return failure.exitStatus
        case .relayUnreachable: return .unreachable
        case .device: return .device
        case .badInputFile: return .inputFile
        case .cannotWriteOutput: return .outputFile
        case .usage: return .badUsage
        case .identity: return .endToEnd
        case .unexpected: return .unexpected
        }
    }

    public var exitCode: Int32 { exitStatus.rawValue }
}
