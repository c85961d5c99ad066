import Foundation

/// A real PulseAudio server of the test's own (Debian's `pulseaudio`), reached through ALSA's
/// `pulse` plugin (`libasound2-plugins`): its speaker is a null sink, and its microphone
/// hears exactly what the speaker plays (the sink's monitor). Killing it is a sound device vanishing
/// under a running program, as a USB headset unplugged: ALSA's reads and writes fail with an
/// I/O error. Starting it again on the same socket brings the device back.
final class SoundServer: @unchecked Sendable {
    // @unchecked: `pid` is replaced only by `start`/`kill`, called from one test task.
    let directory: String
    private var pid: pid_t?

    init(directory: String) throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory + "/runtime", withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory + "/runtime")
    }

    var socket: String { directory + "/runtime/pulse/native" }

    /// The ALSA configuration that defines PCM `name` as this server's microphone or speaker
    /// (and on no other server, so the system's `default` device stays what it is for every
    /// other test).
    func alsaConfiguration(name: String, microphone: Bool) -> String {
        "pcm.\(name) { type pulse server \"unix:\(socket)\" device \"\(microphone ? "speaker.monitor" : "speaker")\" }"
    }

    static var isInstalled: Bool {
        let plugin = ["x86_64", "aarch64"].contains { FileManager.default.fileExists(atPath: "/usr/lib/\($0)-linux-gnu/alsa-lib/libasound_module_pcm_pulse.so") }
        return FileManager.default.isExecutableFile(atPath: "/usr/bin/pulseaudio") && plugin
    }

    /// Starts the server and waits (up to 5 s) until its socket is there. Spawned and reaped
    /// by hand (posix_spawn, waitpid on its pid), not with Foundation's Process, whose
    /// waitUntilExit was seen to hang in this test process.
    func start() throws {
        let arguments = [
            "/usr/bin/pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--log-target=stderr", "--log-level=error",
            "--load=module-null-sink sink_name=speaker rate=48000",
            "--load=module-native-protocol-unix auth-anonymous=1",
        ]
        let environment = ["XDG_RUNTIME_DIR=" + directory + "/runtime", "HOME=" + directory, "PATH=/usr/bin:/bin"]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, arguments[0], &actions, nil, argv, envp)
        guard result == 0 else { throw SoundServerError("could not start pulseaudio: \(String(cString: strerror(result)))") }
        pid = child
        let deadline = Date().addingTimeInterval(5)
        while !FileManager.default.fileExists(atPath: socket) && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        guard FileManager.default.fileExists(atPath: socket) else {
            kill()
            throw SoundServerError("the test's PulseAudio server did not open \(socket) within 5 s")
        }
    }

    /// SIGKILL: the device vanishes at once, as when it is unplugged.
    func kill() {
        guard let pid else { return }
        Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        self.pid = nil
        try? FileManager.default.removeItem(atPath: socket)
    }
}

struct SoundServerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
