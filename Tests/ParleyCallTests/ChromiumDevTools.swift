import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Chromium, headless, driven as a person drives it: the page open, mouse clicks at where a
/// control is drawn, keys pressed and released, text typed, and what the page shows read back,
/// through the DevTools protocol over the pipe Chromium opens for it (`--remote-debugging-pipe`:
/// JSON messages ending in a NUL byte, commands on its fd 3, answers on its fd 4). No port, no
/// WebSocket, nothing to install beyond Chromium. Its microphone is a WAV file (looped), the
/// media permission granted, its log (where the page's console lines go) in a file.
final class ChromiumDevTools: @unchecked Sendable {
    // @unchecked: one test task drives it, one command at a time.
    let logPath: String
    private var pid: pid_t = 0
    private let commands: Int32
    private let answers: Int32
    private var received: [UInt8] = []
    private var nextID = 1
    private var session: String?

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init(chromium: String, url: String, speech: String, directory: String) throws {
        logPath = directory + "/chromium-devtools.log"
        var toChromium: [Int32] = [0, 0], fromChromium: [Int32] = [0, 0]
        guard pipe(&toChromium) == 0, pipe(&fromChromium) == 0 else { throw Failure(description: "no pipes for Chromium") }
        // Close-on-exec: only the copies made below reach Chromium.
        for descriptor in toChromium + fromChromium { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        let log = open(logPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let arguments = [
            chromium, "--headless=new", "--no-sandbox", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            "--use-file-for-fake-audio-capture=\(speech)", "--autoplay-policy=no-user-gesture-required", "--allow-loopback-in-peer-connection",
            "--enable-logging=stderr", "--v=0", "--no-first-run", "--disable-gpu", "--window-size=1000,1100", "--force-device-scale-factor=1",
            "--remote-debugging-pipe", "--user-data-dir=\(directory)/chromium-devtools-profile", url,
        ]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // dup2 clears close-on-exec on the copies: Chromium gets fds 3 and 4 and its log, nothing else.
        posix_spawn_file_actions_adddup2(&actions, toChromium[0], 3)
        posix_spawn_file_actions_adddup2(&actions, fromChromium[1], 4)
        posix_spawn_file_actions_adddup2(&actions, log, 1)
        posix_spawn_file_actions_adddup2(&actions, log, 2)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, chromium, &actions, nil, argv, environ)
        close(toChromium[0])
        close(fromChromium[1])
        close(log)
        commands = toChromium[1]
        answers = fromChromium[0]
        pid = child
        guard spawned == 0 else { throw Failure(description: "Chromium did not start: \(String(cString: strerror(spawned)))") }
    }

    /// Attaches to the page Chromium opened (it may take a few seconds to appear).
    func attach() throws {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let targets = try send("Target.getTargets", [:], toPage: false)["targetInfos"] as? [[String: Any]] ?? []
            if let page = targets.first(where: { $0["type"] as? String == "page" }), let id = page["targetId"] as? String {
                let attached = try send("Target.attachToTarget", ["targetId": id, "flatten": true], toPage: false)
                session = attached["sessionId"] as? String
                if session != nil { return }
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        throw Failure(description: "Chromium opened no page; its log:\n\(logTail())")
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value as JSON gives it.
    func evaluate(_ expression: String) throws -> Any? {
        let answer = try send("Runtime.evaluate", ["expression": expression, "returnByValue": true, "awaitPromise": true])
        if let exception = answer["exceptionDetails"] { throw Failure(description: "the page threw: \(exception)") }
        return (answer["result"] as? [String: Any])?["value"]
    }

    func text(of selector: String) throws -> String {
        try evaluate("(document.querySelector(\(Self.quoted(selector))) || {}).textContent || ''") as? String ?? ""
    }

    /// What the page shows in `selector` now, for a failure's message ("" if it cannot tell).
    func shown(_ selector: String) -> String { (try? text(of: selector)) ?? "" }

    func attribute(_ name: String, of selector: String) throws -> String? {
        try evaluate("(document.querySelector(\(Self.quoted(selector))) || { getAttribute() { return null; } }).getAttribute(\(Self.quoted(name)))") as? String
    }

    /// A left click in the middle of the element `selector` finds, where the page draws it.
    func click(_ selector: String) throws {
        let script = "(() => { const e = document.querySelector(\(Self.quoted(selector))); if (!e) return null; e.scrollIntoView({ block: 'center' }); "
            + "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        let point = (try evaluate(script) as? [Any] ?? []).compactMap(Self.number)
        guard point.count == 2 else { throw Failure(description: "nothing on the page matches \(selector)") }
        for type in ["mousePressed", "mouseReleased"] {
            _ = try send("Input.dispatchMouseEvent", ["type": type, "x": point[0], "y": point[1], "button": "left", "clickCount": 1])
        }
    }

    /// A key pressed (`down`), released (`up`), or both: `key` as the page's `event.key` sees it.
    func key(_ key: String, code: String, keyCode: Int, text: String? = nil, down: Bool = true, up: Bool = true) throws {
        var parameters: [String: Any] = ["key": key, "code": code, "windowsVirtualKeyCode": keyCode, "nativeVirtualKeyCode": keyCode]
        if down {
            parameters["type"] = text == nil ? "rawKeyDown" : "keyDown"
            if let text { parameters["text"] = text }
            _ = try send("Input.dispatchKeyEvent", parameters)
        }
        if up {
            parameters["type"] = "keyUp"
            parameters["text"] = nil
            _ = try send("Input.dispatchKeyEvent", parameters)
        }
    }

    /// Types `text` into whatever has the focus, as a keyboard's input method would.
    func type(_ text: String) throws {
        _ = try send("Input.insertText", ["text": text])
    }

    /// The page as drawn now, as PNG, down to the end of its content.
    func screenshot() throws -> Data {
        let bottom = Self.number(try evaluate("document.querySelector('main').getBoundingClientRect().bottom + 24")) ?? 800
        let width = Self.number(try evaluate("window.innerWidth")) ?? 1000
        let clip: [String: Any] = ["x": 0, "y": 0, "width": width, "height": bottom, "scale": 1]
        guard let data = try send("Page.captureScreenshot", ["format": "png", "clip": clip])["data"] as? String, let png = Data(base64Encoded: data) else {
            throw Failure(description: "Chromium sent no screenshot")
        }
        return png
    }

    /// Polls the page until `expression` is true, or `seconds` pass.
    func waitFor(_ expression: String, seconds: Double) throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            // Until the page has loaded, the expression may meet an empty document: not yet.
            if Self.truth(try? evaluate(expression)) { return true }
            Thread.sleep(forTimeInterval: 0.2)
        } while Date() < deadline
        return false
    }

    func logTail() -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(30).joined(separator: "\n")
    }

    func stop() {
        close(commands)
        close(answers)
        guard pid > 0 else { return }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        pid = 0
    }

    // MARK: The protocol

    /// Sends one command (to the attached page unless `toPage` is false) and returns its
    /// result, skipping the events Chromium sends meanwhile.
    private func send(_ method: String, _ parameters: [String: Any], toPage: Bool = true) throws -> [String: Any] {
        let id = nextID
        nextID += 1
        var message: [String: Any] = ["id": id, "method": method, "params": parameters]
        if toPage {
            guard let session else { throw Failure(description: "not attached to the page") }
            message["sessionId"] = session
        }
        var bytes = [UInt8](try JSONSerialization.data(withJSONObject: message))
        bytes.append(0)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(commands, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failure(description: "Chromium stopped reading its DevTools pipe; its log:\n\(logTail())") }
            written += count
        }
        let deadline = Date().addingTimeInterval(20)
        while true {
            if let end = received.firstIndex(of: 0) {
                let line = Data(received[..<end])
                received.removeSubrange(...end)
                guard let answer = try JSONSerialization.jsonObject(with: line) as? [String: Any], Self.number(answer["id"]).map(Int.init) == id else { continue }
                if let error = answer["error"] { throw Failure(description: "\(method) failed: \(error)") }
                return answer["result"] as? [String: Any] ?? [:]
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { throw Failure(description: "Chromium did not answer \(method) within 20 s") }
            var watch = pollfd(fd: answers, events: Int16(POLLIN), revents: 0)
            guard poll(&watch, 1, Int32(left * 1_000)) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = chunk.withUnsafeMutableBytes { read(answers, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failure(description: "Chromium closed its DevTools pipe; its log:\n\(logTail())") }
            received.append(contentsOf: chunk[..<count])
        }
    }

    /// A JSON number as Foundation hands it over (a Swift number, or an NSNumber on Linux).
    static func number(_ value: Any?) -> Double? {
        if let value = value as? Double { return value }
        if let value = value as? Int { return Double(value) }
        return (value as? NSNumber)?.doubleValue
    }

    static func truth(_ value: Any?) -> Bool {
        if let value = value as? Bool { return value }
        return (value as? NSNumber)?.boolValue ?? false
    }

    static func quoted(_ text: String) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
    }
}
