import Foundation
import ParleyClient

/// The call on a terminal: keys read raw from standard input, and the roster redrawn in
/// place on standard error. Raw mode only when standard input is a terminal, and the
/// terminal's settings are put back on every way out: the call ending, an error exit, a
/// second Ctrl-C (Ctrl-C itself still raises SIGINT: only line editing and echo are off).
final class CallTerminal: @unchecked Sendable {
    // @unchecked: `lock` guards the drawing state, `keys` and `reader` (the reader thread
    // feeds it, the drawing shows what is being typed).
    private let session: CallSession
    private let lock = NSLock()
    private var linesShown = 0
    /// The figures last drawn, for redrawing under a notice: a notice may come from the
    /// network loop, which must not wait for fresh figures (they are read on that loop).
    private var lastStatistics: CallStatistics?
    private var showHelp = false
    private var keys = KeyboardControls()
    private var reader = CallKey.Reader()
    private var stopped = false
    private var readerDone = DispatchSemaphore(value: 0)
    private let readsKeys: Bool
    /// The terminal changed size since the last drawing: the lines on it may have been
    /// rewrapped to the new width, so moving up over them is no longer exact.
    private var resized = false
    private var resizes: (any DispatchSourceSignal)?

    /// Whether standard error is a terminal to draw on.
    static var canDraw: Bool { isatty(STDERR_FILENO) != 0 }

    init(session: CallSession) {
        self.session = session
        readsKeys = isatty(STDIN_FILENO) != 0
    }

    /// Enters raw mode (when standard input is a terminal), starts reading keys, and redraws
    /// whenever the terminal is resized (SIGWINCH).
    func start() {
        signal(SIGWINCH, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        source.setEventHandler { [self] in
            lock.withLock { resized = true }
            redraw()
        }
        source.resume()
        resizes = source
        guard readsKeys, TerminalMode.enterRaw() else { return }
        let thread = Thread { [self] in readKeys() }
        thread.name = "parley keys"
        thread.start()
    }

    /// Stops reading keys, erases the roster and gives the terminal back as it was.
    func finish() {
        resizes?.cancel()
        let reading = lock.withLock { () -> Bool in
            stopped = true
            erase()
            return readsKeys && TerminalMode.isRaw
        }
        if reading { _ = readerDone.wait(timeout: .now() + .seconds(1)) }
        TerminalMode.restore()
    }

    /// Redraws the roster from the call's figures now.
    func redraw() { draw(session.statistics()) }

    private func draw(_ statistics: CallStatistics?) {
        lock.withLock {
            guard !stopped, let statistics = statistics ?? lastStatistics else { return }
            lastStatistics = statistics
            let lines = RosterView.lines(
                statistics, selected: keys.selected ?? RosterView.others(statistics).first, showHelp: showHelp, typing: reader.typing,
                prompt: reader.prompt, bytesLeft: reader.bytesLeft, width: Self.width() - 1)
            var text: String
            if resized {
                // After a resize the terminal may have rewrapped what was drawn: start over
                // from the top of a cleared screen rather than leave parts of it behind.
                text = "\u{1B}[H\u{1B}[2J"
                resized = false
            } else {
                text = linesShown > 1 ? "\u{1B}[\(linesShown - 1)A" : ""
            }
            text += "\r" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\r\n") + "\u{1B}[J"
            linesShown = lines.count
            FileHandle.standardError.write(Data(text.utf8))
        }
    }

    /// A notice above the roster, which is drawn again below it. Safe on any thread.
    func printLine(_ line: String) {
        lock.withLock {
            erase()
            FileHandle.standardError.write(Data((line + "\r\n").utf8))
        }
        draw(nil)
    }

    /// Clears the roster from the screen; the cursor ends where it began. Under `lock`.
    private func erase() {
        guard linesShown > 0 else { return }
        let up = linesShown > 1 ? "\u{1B}[\(linesShown - 1)A" : ""
        FileHandle.standardError.write(Data((up + "\r\u{1B}[J").utf8))
        linesShown = 0
    }

    private func readKeys() {
        defer { readerDone.signal() }
        var buffer = [UInt8](repeating: 0, count: 64)
        while !lock.withLock({ stopped }) {
            var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 100) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
            guard count > 0 else { return }  // the terminal went away
            let keys = lock.withLock { reader.keys(from: buffer[0..<count]) }
            for key in keys { act(on: key) }
            if keys.isEmpty { draw(nil) }  // a request being typed shows as it grows
        }
    }

    private func act(on key: CallKey) {
        if key == .help { lock.withLock { showHelp.toggle() } }
        if case let .command(line) = key {
            // A typed request answers in words above the roster, as `parley ctl` would print them.
            let reply: CallControlReply
            do {
                reply = session.perform(try CallControl(parsing: line))
            } catch {
                reply = .refused(error.description)
            }
            if reply.status == nil { printLine(reply.ok ? "parley call: \(reply.message ?? line)" : "parley call: \(reply.error ?? "refused")") }
            redraw()
            return
        }
        if case let .message(text) = key {
            // A message sent shows in the roster's text lines; only a refusal needs words.
            let reply = session.perform(.say(text))
            if !reply.ok { printLine("parley call: message not sent: \(reply.error ?? "refused")") }
            redraw()
            return
        }
        let statistics = session.statistics()
        let others = RosterView.others(statistics)
        let volumes = Dictionary(statistics.speakers.map { ($0.identity, $0.volumePercent ?? 100) }, uniquingKeysWith: { $1 })
        let requests = lock.withLock {
            keys.requests(for: key, state: statistics.controls ?? ControlState(), others: others, volume: { volumes[$0] ?? 100 })
        }
        for request in requests {
            let reply = session.perform(request)
            if case .verify = request {
                // The safety number, above the roster, as `parley ctl verify` prints it.
                let words = reply.ok ? reply.message ?? "" : reply.error ?? "refused"
                for line in words.split(separator: "\n") { printLine("parley call: \(line)") }
            }
        }
        redraw()
    }

    static func width() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 100 }
        return Int(size.ws_col)
    }
}

/// The terminal's settings before raw mode, put back by `restore` or at exit.
enum TerminalMode {
    private nonisolated(unsafe) static var saved: termios?
    private static let lock = NSLock()

    static var isRaw: Bool { lock.withLock { saved != nil } }

    /// No echo, no line editing: each key arrives as pressed. Signals stay (Ctrl-C leaves).
    static func enterRaw() -> Bool {
        lock.withLock {
            var settings = termios()
            guard saved == nil, tcgetattr(STDIN_FILENO, &settings) == 0 else { return false }
            saved = settings
            settings.c_lflag &= ~tcflag_t(ICANON | ECHO)
            withUnsafeMutableBytes(of: &settings.c_cc) { cells in
                cells[Int(VMIN)] = 1
                cells[Int(VTIME)] = 0
            }
            guard tcsetattr(STDIN_FILENO, TCSANOW, &settings) == 0 else {
                saved = nil
                return false
            }
            // Every exit, also `exit()` from an error or a second Ctrl-C, gives the terminal back.
            atexit { TerminalMode.restore() }
            return true
        }
    }

    static func restore() {
        lock.withLock {
            guard var settings = saved else { return }
            tcsetattr(STDIN_FILENO, TCSANOW, &settings)
            saved = nil
        }
    }
}
