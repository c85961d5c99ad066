#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reading a small text file (secret, config) with errors a person understands.
public enum FileText {
    static let maximumSize = 1 << 20

    public static func read(path: String, what: String, hint: String) throws(ConfigurationError) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw ConfigurationError("cannot read the \(what) \(path): \(reason); \(hint)")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw ConfigurationError("cannot read the \(what) \(path): \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= maximumSize else { throw ConfigurationError("the \(what) \(path) is larger than 1 MiB; is it the right file?") }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError("the \(what) \(path) is not UTF-8 text")
        }
        return text
    }
}
