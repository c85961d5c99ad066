import ParleyBasics

/// How `parley call` ends, for scripts: every failure of a call maps to one of these
/// (``CallError/exitStatus``, ``LinkFailure/exitStatus``).
public enum CallExitStatus: Int32, CommandExitStatus {
    case ended = 0, unexpected, badUsage, unreachable, relayKey, tokenRefused, roomFull, refused, replaced
    case device, inputFile, outputFile, removed, roomClosed, endToEnd

    public var meaning: String {
        switch self {
        case .ended: return "the call ended normally (duration, input ran out, Ctrl-C, q)"
        case .unexpected: return "an unexpected failure"
        case .badUsage: return "a bad flag or value (the message says which and what is allowed)"
        case .unreachable: return "the relay is unreachable (nothing answered for 10 s, or no such name)"
        case .relayKey: return "the relay's key or handshake is wrong (stale invite, or someone between)"
        case .tokenRefused: return "the token was refused (expired, not yet valid, wrong room, listen-only)"
        case .roomFull: return "the room is full, or the relay has as many rooms as it allows"
        case .refused: return "the relay refused the join for another reason (the message says why)"
        case .replaced: return "you joined the same room from somewhere else"
        case .device: return "a sound device is missing or busy (with no sound card, use WAV files)"
        case .inputFile: return "an input WAV cannot be read or used"
        case .outputFile: return "an output file (WAV, JSON, recording) cannot be written"
        case .removed: return "removed by a moderator or the relay's operator, or not yet allowed back"
        case .roomClosed: return "a moderator or the relay's operator closed the room"
        case .endToEnd: return "no end-to-end encryption: the identity file, or the relay refused it"
        }
    }
}

/// How `parley ctl` ends.
public enum CtlExitStatus: Int32, CommandExitStatus {
    case done = 0, noCall, refused, whichCall

    public var meaning: String {
        switch self {
        case .done: return "done"
        case .noCall: return "no call answers (none runs, or it answered wrongly)"
        case .refused: return "the request was refused: a bad request, or the relay refused it"
        case .whichCall: return "several calls run, and --call does not say which"
        }
    }
}

/// How `parley process` ends (its numbers are those of `parley call` for the same failures).
public enum ProcessExitStatus: Int32, CommandExitStatus {
    case done = 0, unexpected = 1, badUsage = 2, inputFile = 10, outputFile = 11

    public var meaning: String {
        switch self {
        case .done: return "processed and written"
        case .unexpected: return "an unexpected failure"
        case .badUsage: return "a bad option"
        case .inputFile: return "an input cannot be read or used (the message says which and why)"
        case .outputFile: return "the output cannot be written"
        }
    }
}

/// How `parley devices` ends.
public enum DevicesExitStatus: Int32, CommandExitStatus {
    case done = 0, unexpected, badUsage

    public var meaning: String {
        switch self {
        case .done: return "listed (none found is said, not an error)"
        case .unexpected: return "an unexpected failure"
        case .badUsage: return "a bad option"
        }
    }
}

/// How `parley netsim` ends.
public enum NetsimExitStatus: Int32, CommandExitStatus {
    case stopped = 0, cannotRun, badUsage

    public var meaning: String {
        switch self {
        case .stopped: return "stopped by SIGINT or SIGTERM (the report is printed)"
        case .cannotRun: return "the proxy could not run (a port in use, say)"
        case .badUsage: return "a flag is wrong (one sentence says what and what is allowed)"
        }
    }
}
