#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Small text files (a secret, a config, an identity key, the pinned keys of people met),
/// read and written with errors a person understands. The relay's secret file and the
/// client's identity are both written here: privately (mode 0600 from the first byte) and
/// whole (a temporary file renamed or linked into place), so a reader never sees half a key.
public enum TextFile {
    /// Larger files are refused: none of Parley's is near it, and a wrong path should not
    /// read a disk image into memory.
    public static let maximumSize = 1 << 20

    /// Why a file could not be read or written; the message names the file and what failed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        /// The file does not exist (`open` said ENOENT): a caller may create it.
        public let isMissing: Bool

        public init(description: String, isMissing: Bool = false) {
            self.description = description
            self.isMissing = isMissing
        }
    }

    /// Reads `path` as UTF-8. `what` names it in errors ("secret file"); `hint` says what to do
    /// when it cannot be opened.
    public static func read(path: String, what: String, hint: String) throws(Failure) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let missing = errno == ENOENT
            let reason = String(cString: strerror(errno))
            throw Failure(description: "cannot read the \(what) \(path): \(reason)\(hint.isEmpty ? "" : "; \(hint)")", isMissing: missing)
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure(description: "cannot read the \(what) \(path): \(String(cString: strerror(errno)))", isMissing: false)
            }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= maximumSize else {
                throw Failure(description: "the \(what) \(path) is larger than 1 MiB; is it the right file?", isMissing: false)
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw Failure(description: "the \(what) \(path) is not UTF-8 text", isMissing: false)
        }
        return text
    }

    /// The permission bits of `path` that let other users in (group and others), or nil when
    /// it cannot be read or nobody else may read it.
    public static func openToOthers(path: String) -> UInt32? {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & 0o077 != 0 else { return nil }
        return UInt32(info.st_mode & 0o777)
    }

    /// Writes `text` to `path` with mode 0600. Without `replacing`, an existing file is an
    /// error (`exists` says what to tell the person then).
    public static func writePrivately(_ text: String, to path: String, replacing: Bool, exists: String) throws(Failure) {
        let bytes = Array(text.utf8)
        let temporary = path + ".tmp-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno))); check that the folder exists and is writable", isMissing: false)
        }
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor)
        close(descriptor)
        guard written == bytes.count, synced == 0 else {
            unlink(temporary)
            throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(errno)))", isMissing: false)
        }
        if replacing {
            guard rename(temporary, path) == 0 else {
                let reason = String(cString: strerror(errno))
                unlink(temporary)
                throw Failure(description: "cannot replace \(path): \(reason)", isMissing: false)
            }
        } else {
            // link(2) fails if the target exists, unlike rename: no window to clobber a file.
            let linked = link(temporary, path)
            let reason = String(cString: strerror(errno))
            let alreadyThere = errno == EEXIST
            unlink(temporary)
            guard linked == 0 else {
                throw Failure(description: alreadyThere ? exists : "cannot create \(path): \(reason)", isMissing: false)
            }
        }
    }

    /// Makes `path` and any missing folders above it, each readable by its owner only (0700).
    public static func makePrivateDirectory(_ path: String) throws(Failure) {
        var built = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            built += "/" + component
            if mkdir(built, 0o700) != 0, errno != EEXIST {
                throw Failure(description: "cannot create the folder \(built): \(String(cString: strerror(errno)))", isMissing: false)
            }
        }
    }
}
