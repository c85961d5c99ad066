/// Why a call could not start or ended badly, worded for the person at the keyboard, with
/// the exit code scripts rely on (`parley --help` lists them).
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

    /// 0 ok, 1 unexpected, 2 usage, 3 unreachable, 4 relay key or handshake, 5 token refused,
    /// 6 room full or too many rooms, 7 other refusal, 8 replaced, 9 audio device missing or
    /// busy, 10 bad input WAV, 11 cannot write an output file, 12 removed by a moderator (or
    /// still banned from the room), 13 the room was closed, 14 end-to-end encryption could not
    /// be set up (the identity file, or a room that should be end-to-end encrypted and is not).
    public var exitCode: Int32 {
        switch self {
        case let .link(failure): return failure.exitCode
        case .relayUnreachable: return 3
        case .device: return 9
        case .badInputFile: return 10
        case .cannotWriteOutput: return 11
        case .usage: return 2
        case .identity: return 14
        case .unexpected: return 1
        }
    }
}
