#if canImport(Glibc)
import Glibc
#endif

/// Where the scripts under test and the relay built with the tests are.
enum Repository {
    /// The checkout this test file belongs to (Tests/DeployTests/Support/ is three below it).
    static let root: String = {
        var path = #filePath
        for _ in 0..<4 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
        return path
    }()

    static var deploy: String { root + "/Deploy" }

    /// The `parley-relay` that `swift build --build-tests` put beside the test bundle.
    static func builtRelay() throws -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { throw TestFailure("cannot find the test executable") }
        var path = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while !path.isEmpty {
            path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
            let candidate = path + "/parley-relay"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        throw TestFailure("parley-relay is not built; run `swift build --build-tests` first")
    }

    /// Runs a script from Deploy/ with bash, as a person would.
    static func runScript(_ name: String, _ arguments: [String], timeout: Double = 120) throws -> CommandResult {
        let result = try Command.run(["bash", deploy + "/" + name] + arguments, timeout: timeout)
        print("$ Deploy/\(name) \(arguments.joined(separator: " "))  → exit \(result.status)")
        return result
    }
}
