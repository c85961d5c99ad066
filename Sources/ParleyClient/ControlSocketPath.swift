import Foundation

/// Where a call's control socket lives: `$XDG_RUNTIME_DIR/parley/NAME.sock` (the user's own
/// runtime directory, removed at logout), else `/tmp/parley-UID/NAME.sock`; one socket a
/// call, named by its `--name`. The folder is made private (0700): anyone who can reach the
/// socket can mute, deafen or end the call, so only its owner may.
public struct ControlSocketPath: Sendable, Equatable {
    public let directory: String

    /// The folder for this user, from the environment given.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment, userID: UInt32 = getuid()) {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            directory = runtime + "/parley"
        } else {
            directory = "/tmp/parley-\(userID)"
        }
    }

    public init(directory: String) { self.directory = directory }

    /// The socket of the call named `name`. Characters other than letters, digits, `.`, `-`
    /// and `_` become `_`, so any `--name` makes one file name in this folder.
    public func socket(forCall name: String) -> String { directory + "/" + Self.fileStem(name) + ".sock" }

    public static func fileStem(_ name: String) -> String {
        let stem = String(name.unicodeScalars.map { scalar -> Character in
            let allowed = scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "._-".unicodeScalars.contains(scalar))
            return allowed ? Character(scalar) : "_"
        })
        return stem.hasPrefix(".") ? "_" + stem.dropFirst() : stem
    }

    /// The names of the calls with a socket here (a call that crashed may leave one behind;
    /// `ControlClient` tells such a socket from a live one).
    public func calls() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return files.filter { $0.hasSuffix(".sock") }.map { String($0.dropLast(5)) }.sorted()
    }

    /// The socket `parley ctl` talks to: the call named `name`; without a name, the one
    /// call running, or an error that lists them when there are several.
    public func resolve(call name: String?) throws(ControlSocketError) -> String {
        if let name {
            let path = socket(forCall: name)
            guard FileManager.default.fileExists(atPath: path) else {
                let running = calls().filter { ControlClient.isAnswering(path: socket(forCall: $0)) }
                throw .noCall("no call named '\(name)' is running" + (running.isEmpty ? "" : "; running: " + running.joined(separator: ", ")))
            }
            return path
        }
        let running = calls().filter { ControlClient.isAnswering(path: socket(forCall: $0)) }
        switch running.count {
        case 0: throw .noCall("no call is running (no control socket answers in \(directory)); start one with `parley call`")
        case 1: return socket(forCall: running[0])
        default: throw .whichCall("\(running.count) calls are running: \(running.joined(separator: ", ")); say which with --call NAME")
        }
    }

    /// Makes the folder if need be, and checks that it is this user's and private.
    public func prepare() throws(ControlSocketError) {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw .cannotListen("cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        var status = stat()
        guard lstat(directory, &status) == 0 else { throw .cannotListen("cannot read \(directory): \(String(cString: strerror(errno)))") }
        guard status.st_mode & S_IFMT == S_IFDIR else { throw .cannotListen("\(directory) is not a folder; remove it, or set XDG_RUNTIME_DIR") }
        guard status.st_uid == getuid() else {
            throw .cannotListen("\(directory) belongs to another user, so others could reach the call's controls; remove it, or set XDG_RUNTIME_DIR")
        }
        if status.st_mode & 0o077 != 0, chmod(directory, 0o700) != 0 {
            throw .cannotListen("\(directory) is open to other users and cannot be made private: \(String(cString: strerror(errno)))")
        }
    }
}

public enum ControlSocketError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The call cannot offer its controls (the call itself goes on).
    case cannotListen(String)
    /// Another running call already has this name.
    case nameTaken(String)
    /// `parley ctl` cannot reach a call.
    case noCall(String)
    /// Several calls run and `parley ctl` was not told which.
    case whichCall(String)
    /// The call did not answer as the protocol says.
    case badReply(String)

    public var description: String {
        switch self {
        case let .cannotListen(reason), let .nameTaken(reason), let .noCall(reason), let .whichCall(reason), let .badReply(reason): reason
        }
    }
}
