/// A command's exit statuses: the numbers a script sees, and what each means.
///
/// A command exits only with its own statuses and its `--help` lists them from here
/// (``helpText``), so what the help promises is what the code does; a test holds each
/// command's help to its list.
public protocol CommandExitStatus: CaseIterable, RawRepresentable, Sendable where RawValue == Int32 {
    /// What the status means, in a few words (the help gives each a line of its own).
    var meaning: String { get }
}

extension CommandExitStatus {
    /// "Exit status:", then a line per status (`   0  the call ended normally`), each within
    /// 80 columns so that no terminal wraps one.
    public static var helpText: String {
        "Exit status:\n" + allCases.map { status in
            let code = String(status.rawValue)
            return String(repeating: " ", count: max(0, 4 - code.count)) + code + "  " + status.meaning
        }.joined(separator: "\n")
    }
}
