import ParleyBasics

/// Reading a small text file (secret, config) with errors a person understands
/// (``TextFile``, shared with the client), as the relay's ``ConfigurationError``.
public enum FileText {
    public static func read(path: String, what: String, hint: String) throws(ConfigurationError) -> String {
        do {
            return try TextFile.read(path: path, what: what, hint: hint)
        } catch {
            throw ConfigurationError(error.description)
        }
    }
}
