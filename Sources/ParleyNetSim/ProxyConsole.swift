import Foundation
import Logging

/// Where `parley netsim` talks to a person: a live status line on standard error, and log
/// lines that do not tear it.
///
/// On a terminal the status line is redrawn in place (`\r`, then erase to the end of the
/// line), cut to the terminal's width so it never wraps; a log line first erases it, and
/// the next tick draws it again. Anywhere else (a file, a pipe, CI) every status is a
/// plain line, and the caller shows them less often.
public final class ProxyConsole: @unchecked Sendable {
    public let isTerminal: Bool
    private let lock = NSLock()
    private var statusShown = false

    public init(isTerminal: Bool = isatty(STDERR_FILENO) != 0) {
        self.isTerminal = isTerminal
    }

    public func showStatus(_ line: String) {
        lock.withLock {
            if isTerminal {
                write("\r" + String(line.prefix(max(20, Self.terminalWidth() - 1))) + "\u{1B}[K")
                statusShown = true
            } else {
                write(line + "\n")
            }
        }
    }

    public func printLine(_ line: String) {
        lock.withLock {
            clearStatus()
            write(line + "\n")
        }
    }

    /// Erases the status line, before the program prints its last words.
    public func finish() {
        lock.withLock { clearStatus() }
    }

    private func clearStatus() {
        if statusShown {
            write("\r\u{1B}[K")
            statusShown = false
        }
    }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    private static func terminalWidth() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 100 }
        return Int(size.ws_col)
    }
}

/// A swift-log handler that prints through a ``ProxyConsole``: `warning: …` and `error: …`
/// are prefixed, information is printed as it is.
public struct ProxyConsoleLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level
    private let console: ProxyConsole

    public init(console: ProxyConsole, level: Logger.Level) {
        self.console = console
        logLevel = level
    }

    public func log(event: LogEvent) {
        switch event.level {
        case .warning, .error, .critical:
            console.printLine("\(event.level): \(event.message)")
        default:
            console.printLine("\(event.message)")
        }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}
