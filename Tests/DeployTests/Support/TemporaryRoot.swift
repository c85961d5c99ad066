#if canImport(Glibc)
import Glibc
#endif

/// An empty folder standing in for a VPS's `/`, for `install.sh --root`. It is world-
/// traversable (as `/` is), so the relay can run in it as the service user.
final class TemporaryRoot {
    let path: String

    init() throws {
        var template = Array("/tmp/parley-deploy-root-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp failed: \(String(cString: strerror(errno)))") }
        path = String(cString: made)
        chmod(path, 0o755)
    }

    deinit { _ = try? Command.run(["rm", "-rf", path]) }

    /// `/etc/parley/relay.conf` → `<root>/etc/parley/relay.conf`.
    func at(_ livePath: String) -> String { path + livePath }

    /// One file as `install.sh` left it.
    struct Entry: Equatable, CustomStringConvertible {
        let mode: UInt32
        let owner: UInt32
        let group: UInt32
        /// The content for files, the target for links, nil for folders.
        let content: [UInt8]?

        var description: String { "mode \(String(mode & 0o7777, radix: 8)) owner \(owner):\(group) \(content.map { "\($0.count) bytes" } ?? "folder")" }
    }

    /// Every file and folder below the root, by its path as the live system would see it.
    func snapshot() -> [String: Entry] {
        var result: [String: Entry] = [:]
        func walk(_ relative: String) {
            let full = path + relative
            var info = stat()
            guard lstat(full, &info) == 0 else { return }
            let isFolder = info.st_mode & S_IFMT == S_IFDIR
            result[relative.isEmpty ? "/" : relative] = Entry(
                mode: info.st_mode, owner: info.st_uid, group: info.st_gid,
                content: isFolder ? nil : readBytes(full) ?? [])
            guard isFolder, let folder = opendir(full) else { return }
            defer { closedir(folder) }
            while let entry = readdir(folder) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name == "." || name == ".." { continue }
                walk(relative + "/" + name)
            }
        }
        walk("")
        return result
    }

    /// The files (not folders) below the root, as live paths.
    func files() -> Set<String> {
        Set(snapshot().filter { $0.value.content != nil }.keys)
    }

    /// The service user's line in the root's /etc/passwd, split into its fields.
    func passwdEntries(named user: String) -> [[String]] {
        readText(at("/etc/passwd")).split(separator: "\n")
            .map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) }
            .filter { $0.first == user }
    }
}
