import ParleyBasics

/// How `parley-relay serve` ends.
public enum ServeExitStatus: Int32, CommandExitStatus {
    case stopped = 0, cannotStart, badSetting

    public var meaning: String {
        switch self {
        case .stopped: return "stopped by SIGTERM or SIGINT, members told goodbye"
        case .cannotStart: return "the relay could not start (its port in use, say; the log says why)"
        case .badSetting: return "a bad flag, variable, config value or secret file (which, and how to fix)"
        }
    }
}

/// How `parley-relay token` ends.
public enum TokenExitStatus: Int32, CommandExitStatus {
    case printed = 0, unexpected, badSetting

    public var meaning: String {
        switch self {
        case .printed: return "the token and the invite were printed"
        case .unexpected: return "an unexpected failure"
        case .badSetting: return "a bad flag, or the secret file cannot be read (the message says which)"
        }
    }
}

/// How `parley-relay keygen` ends.
public enum KeygenExitStatus: Int32, CommandExitStatus {
    case written = 0, unexpected, cannotWrite

    public var meaning: String {
        switch self {
        case .written: return "the secret file was written"
        case .unexpected: return "an unexpected failure"
        case .cannotWrite: return "a bad flag, or the file exists (--force replaces it) or cannot be written"
        }
    }
}

/// How `parley-relay admin` ends.
public enum AdminExitStatus: Int32, CommandExitStatus {
    case done = 0, noRelay, badUsage, refusedToken, noSuchMember, refused

    public var meaning: String {
        switch self {
        case .done: return "done"
        case .noRelay: return "no relay answers at the admin address, or it answered wrongly"
        case .badUsage: return "a bad flag or value, or the secret file cannot be read"
        case .refusedToken: return "the admin token was refused, or the relay runs without the admin API"
        case .noSuchMember: return "no such room or member"
        case .refused: return "the relay refused the request for another reason (it says why)"
        }
    }
}
