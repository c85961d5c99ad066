import Foundation
import ParleyBasics
@testable import ParleyClient
import Synchronization
import Testing

/// The control socket as `parley ctl` and scripts meet it: a real Unix socket, one request a
/// line, one JSON answer a line; anything else gets a clear refusal and loses nothing.
@Suite("The control socket")
struct ControlSocketTests {
    /// A private folder of sockets, removed after the test.
    final class Folder {
        let paths: ControlSocketPath
        init() throws {
            let directory = "/tmp/parley-ctl-test-\(UUID().uuidString.prefix(8))"
            paths = ControlSocketPath(directory: directory)
            try paths.prepare()
        }
        deinit { try? FileManager.default.removeItem(atPath: paths.directory) }
    }

    final class SharedState: Sendable {
        let state = Mutex(ControlState())
        func withLock<T>(_ body: (inout ControlState) -> T) -> T { state.withLock { body(&$0) } }
    }

    /// A server whose actions set a `ControlState`, as a call's do.
    static func server(at path: String, state: SharedState = SharedState()) throws -> ControlServer {
        try ControlServer.start(path: path) { control in
            if case .volume(let person, _) = control, person != "bob" { return .refused("nobody called '\(person)' is in the call") }
            return .done(state.withLock { $0.apply(control) } ?? control.line)
        }
    }

    /// Sends raw bytes and returns what came back until the server hung up or `timeout`.
    /// - Parameter thenHangUp: close our side once sent, as a client that goes away does.
    static func raw(_ bytes: [UInt8], to path: String, thenHangUp: Bool = false) throws -> String {
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in for (index, byte) in path.utf8.enumerated() { buffer[index] = byte } }
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        try #require(connected == 0)
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if thenHangUp { shutdown(socket, Int32(SHUT_WR)) }
        var reply = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            reply += chunk[0..<count]
        }
        return String(decoding: reply, as: UTF8.self)
    }

    @Test func requestsChangeTheCallAndEachGetsAnAnswer() throws {
        let folder = try Folder()
        let state = SharedState()
        let server = try Self.server(at: folder.paths.socket(forCall: "standup"), state: state)
        defer { server.close() }
        let path = try folder.paths.resolve(call: nil)
        #expect(try ControlClient.send(.mute, to: path) == .done("muted"))
        #expect(state.withLock { !$0.transmits })
        #expect(try ControlClient.send(.pushToTalkPress, to: path).ok)
        #expect(try ControlClient.send(.volume(person: "carol", percent: 50), to: path) == .refused("nobody called 'carol' is in the call"))
        let mode = try FileManager.default.attributesOfItem(atPath: folder.paths.directory)[.posixPermissions] as? Int
        #expect(mode == 0o700, "only the owner can reach the call's controls")
    }

    @Test func anOverlongOrGarbledRequestIsRefusedInWordsAndTheSocketServesTheNextClient() throws {
        let folder = try Folder()
        let state = SharedState()
        let path = folder.paths.socket(forCall: "standup")
        let server = try Self.server(at: path, state: state)
        defer { server.close() }
        let long = try Self.raw([UInt8](repeating: 0x61, count: 100_000), to: path)
        #expect(long.contains("at most 512 bytes"), "\(long.prefix(200))")
        let garbled = try Self.raw([0xFF, 0xFE, 0x00, 0x0A], to: path)
        #expect(garbled.contains("UTF-8"), "\(garbled)")
        let unknown = try Self.raw(Array("shout\nmute\n".utf8), to: path)
        #expect(unknown.contains("'shout' is not a request") && unknown.contains("\"message\":\"muted\""), "each line answered in order: \(unknown)")
        #expect(try ControlClient.send(.unmute, to: path) == .done("live"))
    }

    @Test func randomAndTruncatedBytesFromManyClientsLeaveTheCallUntouchedAndItsSocketServing() throws {
        let folder = try Folder()
        let state = SharedState()
        let path = folder.paths.socket(forCall: "standup")
        let server = try Self.server(at: path, state: state)
        defer { server.close() }
        var random = SplitMix64(seed: 0x50C_4E7)
        let valid = Array("volume bob 50\n".utf8)
        for _ in 0..<60 {
            var bytes: [UInt8]
            switch Int.random(in: 0..<3, using: &random) {
            case 0: bytes = (0..<Int.random(in: 0...700, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            case 1: bytes = Array(valid.prefix(Int.random(in: 0..<valid.count, using: &random)))
            default:
                bytes = valid
                bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            let answer = try Self.raw(bytes, to: path, thenHangUp: true)
            for line in answer.split(separator: "\n") {
                #expect((try? CallControlReply(line: Data(line.utf8))) != nil, "every answer is the protocol's JSON: \(line.prefix(120))")
            }
        }
        #expect(state.withLock { $0 } == ControlState(), "no garbled request changed anything")
        #expect(try ControlClient.send(.mute, to: path) == .done("muted"), "and the socket still serves")
    }

    @Test func aSocketLeftByADeadCallIsReplacedButALiveCallsNameIsNotTaken() throws {
        let folder = try Folder()
        let path = folder.paths.socket(forCall: "standup")
        let stale = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in for (index, byte) in path.utf8.enumerated() { buffer[index] = byte } }
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(stale)  // bound, never listening: what a crashed call leaves
        let server = try Self.server(at: path)
        defer { server.close() }
        #expect(try ControlClient.send(.status, to: path).ok)
        #expect(throws: ControlSocketError.self) { try Self.server(at: path) }
    }

    /// `parley ctl` itself: with several calls and no --call it says which run and exits 3,
    /// which the help gives that case, not 1, which means no call answers.
    @Test func parleyCtlExitsThreeWhenItMustBeToldWhichCallAndOneWhenNoneAnswers() throws {
        let runtime = "/tmp/parley-ctl-runtime-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: runtime) }
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        let paths = ControlSocketPath(directory: runtime + "/parley")
        try paths.prepare()
        func ctl(_ arguments: [String]) throws -> (Int32, String) {
            try CallCommandLineTests.run(["ctl"] + arguments, environment: ["XDG_RUNTIME_DIR": runtime, "PATH": "/usr/bin:/bin"])
        }
        let first = try Self.server(at: paths.socket(forCall: "standup"))
        let second = try Self.server(at: paths.socket(forCall: "retro"))
        let (several, said) = try ctl(["mute"])
        #expect(several == CtlExitStatus.whichCall.rawValue && said.contains("say which with --call"), "exit \(several): \(said)")
        #expect(try ctl(["--call", "retro", "mute"]).0 == CtlExitStatus.done.rawValue)
        first.close()
        second.close()
        #expect(try ctl(["mute"]).0 == CtlExitStatus.noCall.rawValue)
    }

    @Test func withSeveralCallsRunningCtlMustBeToldWhichAndListsThem() throws {
        let folder = try Folder()
        let first = try Self.server(at: folder.paths.socket(forCall: "standup"))
        let second = try Self.server(at: folder.paths.socket(forCall: "retro"))
        defer { first.close(); second.close() }
        #expect(throws: ControlSocketError.whichCall("2 calls are running: retro, standup; say which with --call NAME")) {
            try folder.paths.resolve(call: nil)
        }
        #expect(try folder.paths.resolve(call: "retro") == folder.paths.socket(forCall: "retro"))
        #expect(throws: ControlSocketError.noCall("no call named 'review' is running; running: retro, standup")) {
            try folder.paths.resolve(call: "review")
        }
    }

    @Test func leaveIsAnsweredEvenThoughTheCallClosesItsSocketAtOnce() throws {
        let folder = try Folder()
        let path = folder.paths.socket(forCall: "standup")
        final class Box: @unchecked Sendable { var server: ControlServer? }
        let box = Box()
        let ended = DispatchSemaphore(value: 0)
        box.server = try ControlServer.start(path: path) { control in
            guard control == .leave else { return .done(control.line) }
            // As a call does: leaving ends it, and the end closes the control socket.
            Thread.detachNewThread {
                box.server?.close()
                ended.signal()
            }
            Thread.sleep(forTimeInterval: 0.05)
            return .done("leaving")
        }
        #expect(try ControlClient.send(.leave, to: path) == .done("leaving"))
        #expect(ended.wait(timeout: .now() + 5) == .success)
        #expect(!FileManager.default.fileExists(atPath: path), "the socket file is gone with the call")
    }
}
