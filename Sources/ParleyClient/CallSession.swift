import Foundation
import NIOCore
import ParleyAudio
import ParleyBasics
import ParleyDevices
import ParleyE2EE
import ParleyWire
import Synchronization

/// One call: owns everything it needs and closes it all when it ends.
///
/// ```
///  capture thread:  AudioInput ─▶ CapturePipeline ─▶ RelayConnection.sendMedia ─┐
///  network loop:    RelayConnection (RelayLink, RTCP, RemoteSpeaker per SSRC) ◀──┴─▶ relay
///  playback thread: PlaybackMix (Mixer over the jitter buffers) ─▶ AudioOutput ─▶ EchoReferenceTap
/// ```
///
/// `start()` connects and starts joining; the audio threads start with the first join, so
/// a WAV input is heard from its first sample. `wait()` returns when the call ends: its
/// duration is up, a WAV input without a duration ran out, `stop()` was called (Ctrl-C), or
/// the link failed for good. Ending leaves the room cleanly (the others see it at once),
/// stops the threads, closes the recordings and writes the output file.
///
/// This file holds the setup and the call's life (start, wait, finish); its other concerns
/// are files of their own: `CallSession+Controls.swift` (keys and `parley ctl`),
/// `CallSession+LinkEvents.swift` (what the link reports), `CallSession+Statistics.swift`
/// (the figures for the status line).
public final class CallSession: @unchecked Sendable {
    // @unchecked: the capture pipeline (encoder, processor, packetizer) is used only by the
    // capture thread once started; `lifecycle` and the Mutex/Atomic members guard the rest.
    public let configuration: CallConfiguration
    let input: any AudioInput
    let output: any AudioOutput
    private let raw: WAVFileWriter?
    private let sent: WAVFileWriter?
    private let trace: PacketTraceWriter?
    /// What the person sees of the call; what the capture thread reads per frame is `gate`.
    let status: CallStatus
    let gate: MediaGate
    let mix: PlaybackMix
    private let tap = EchoReferenceTap()
    let epoch = MonotonicClock.now()
    private let capture: CapturePipeline
    private let playback: PlaybackPipeline
    private(set) var connection: RelayConnection!
    private let stopAudio = StopFlag()
    let wake = DispatchSemaphore(value: 0)
    private let audioDone = DispatchGroup()
    let lifecycle = Mutex(Lifecycle())
    let notice: @Sendable (String) -> Void
    let onText: @Sendable (RoomText) -> Void
    let controlServer = Mutex<ControlServer?>(nil)
    let moderationAnswers = ModerationAnswers()

    struct Lifecycle {
        var joinedAt: UInt64?
        var audioStarted = false
        var stopRequested = false
        var left = false
        var failure: CallError?
        var inputEndedAt: UInt64?
        var finalStatistics: CallStatistics?
        /// Whether the last roster said a moderator muted us.
        var serverMuted = false
    }

    /// Opens the devices, files and codecs; nothing is sent yet. `notice` receives one-line
    /// messages for the person (joined, reconnecting, rejoined, left), `onText` each text
    /// message of the room as it arrives (made safe for a terminal), on any thread.
    public init(_ configuration: CallConfiguration, notice: @escaping @Sendable (String) -> Void = { _ in },
                onText: @escaping @Sendable (RoomText) -> Void = { _ in }) throws(CallError) {
        self.configuration = configuration
        self.notice = notice
        self.onText = onText
        if let directory = configuration.recordReceivedDirectory {
            var isDirectory: ObjCBool = false
            if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
                do {
                    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                } catch {
                    throw .cannotWriteOutput("--record-received \(directory): cannot create the folder (\(error.localizedDescription))")
                }
            } else if !isDirectory.boolValue {
                throw .cannotWriteOutput("--record-received \(directory): not a folder; give a folder for one WAV per speaker")
            }
        }
        do {
            raw = try configuration.recordRawPath.map { path throws(WAVError) in try WAVFileWriter(path: path) }
            sent = try configuration.recordSentPath.map { path throws(WAVError) in try WAVFileWriter(path: path) }
        } catch {
            throw .cannotWriteOutput("\(error)")
        }
        trace = try configuration.packetTracePath.map { path throws(CallError) in try PacketTraceWriter(path: path) }
        var adaptationConfiguration = EncoderAdaptation.Configuration()
        adaptationConfiguration.maximumBitrate = configuration.maximumBitrate
        let adaptation = EncoderAdaptation(adaptationConfiguration)
        let status = CallStatus(initialBitrate: adaptation.setting.bitrate)
        let gate = MediaGate(initialSetting: adaptation.setting)
        self.status = status
        self.gate = gate
        input = try CallDevices.openInput(configuration.input) { change in
            Self.report(change, device: "microphone", flag: "--input", status: status, notice: notice)
        }
        output = try CallDevices.openOutput(configuration.output) { change in
            Self.report(change, device: "speaker", flag: "--output", status: status, notice: notice)
        }
        guard input.sampleRate == AudioClock.sampleRate, input.channels == 1, output.sampleRate == AudioClock.sampleRate, output.channels == 1 else {
            throw .device("the devices must run at 48 kHz mono; the input runs at \(input.sampleRate) Hz × \(input.channels), the output at \(output.sampleRate) Hz × \(output.channels) (a plughw: device converts)")
        }

        mix = PlaybackMix(recordingDirectory: configuration.recordReceivedDirectory)

        // How frames leave: the network loop learns whether the room is end-to-end encrypted
        // and with which key; the encoder seals with what it says.
        let sendingKey = CallReceiver.sendingKey(for: configuration)
        let encoder: VoiceEncoder
        do {
            var encoderConfiguration = OpusEncoder.Configuration()
            encoderConfiguration.dtx = true
            encoder = try VoiceEncoder(
                encoder: OpusEncoder(encoderConfiguration), setting: adaptation.setting,
                sealer: configuration.endToEnd == nil ? nil : FrameSealer(source: sendingKey),
                keepsPlaintext: configuration.packetTracePath != nil)
        } catch {
            throw .unexpected("the Opus encoder could not be set up: \(error)")
        }
        var processor: OutgoingProcessor?
        if configuration.cancelsEcho || configuration.denoise {
            var processing = OutgoingProcessor.Configuration()
            processing.echoCanceller = .forUse(cancellingEcho: configuration.cancelsEcho)
            processing.echoCanceller.denoise = configuration.denoise
            do {
                processor = try OutgoingProcessor(processing)
            } catch {
                throw .unexpected("the echo canceller could not be set up: \(error)")
            }
        }
        // The send closure needs the connection, made just below.
        let box = SenderBox()
        capture = CapturePipeline(
            input: input, processor: processor, encoder: encoder, ssrc: configuration.ssrc, raw: raw, sent: sent, trace: trace, tap: tap,
            silenceAfterInput: configuration.durationSeconds != nil,
            gate: gate, status: status, send: { box.sender?.send($0) ?? false })
        playback = PlaybackPipeline(output: output, mix: mix, tap: tap, status: status, epoch: epoch)
        connection = try RelayConnection(
            configuration: configuration, gate: gate, status: status, mix: mix, epoch: epoch, adaptation: adaptation, sendingKey: sendingKey, trace: trace,
            onEvent: { [weak self] event in self?.handle(event) })
        box.sender = connection.makeMediaSender()
    }

    /// A sound device went away or came back: say so, and keep it in the status.
    private static func report(
        _ change: DeviceAvailability, device: String, flag: String, status: CallStatus, notice: @Sendable (String) -> Void
    ) {
        switch change {
        case let .lost(reason):
            status.update { _ = $0.missingDevices.insert(device) }
            notice("the \(device) (\(flag)) stopped working (\(reason)); the call goes on, and Parley picks it up again when it is back (`parley devices` lists what is there)")
        case .back:
            status.update { _ = $0.missingDevices.remove(device) }
            notice("the \(device) (\(flag)) is back")
        }
    }

    /// Resolves the relay, connects and starts joining. Returns at once.
    public func start() throws(CallError) {
        let address: SocketAddress
        do {
            address = try SocketAddress.makeAddressResolvingHost(configuration.relayHost, port: configuration.relayPort)
        } catch {
            throw .relayUnreachable("cannot find the relay host '\(configuration.relayHost)': check the name in the invite, or give an IP address")
        }
        do {
            try connection.start(relayAddress: address)
        } catch {
            throw .relayUnreachable("cannot open a socket to the relay at \(configuration.relay): \(error)")
        }
        startControls()
    }

    /// Starts the call and waits for it to end.
    public func run() -> Result<CallStatistics, CallError> {
        do {
            try start()
        } catch {
            connection.close()
            return .failure(error)
        }
        return wait()
    }

    /// Ends the call cleanly: leave the room, stop the audio. Safe from any thread, any
    /// number of times (a signal handler calls it).
    public func stop() {
        lifecycle.withLock { $0.stopRequested = true }
        wake.signal()
    }

    /// Blocks until the call has ended and everything is closed; returns the final figures
    /// or why it failed.
    public func wait() -> Result<CallStatistics, CallError> {
        while true {
            _ = wake.wait(timeout: .now() + .milliseconds(50))
            let now = MonotonicClock.now()
            let (stopping, failure, joinedAt) = lifecycle.withLock { state -> (Bool, CallError?, UInt64?) in
                if status.snapshot.inputEnded, state.inputEndedAt == nil { state.inputEndedAt = now }
                return (state.stopRequested, state.failure, state.joinedAt)
            }
            if stopping || failure != nil { break }
            if let joinedAt {
                let elapsed = Double(now - joinedAt) / 1e9
                if let duration = configuration.durationSeconds, elapsed >= duration { break }
                if configuration.durationSeconds == nil, let ended = lifecycle.withLock({ $0.inputEndedAt }), now - ended > 500_000_000 {
                    // A WAV input ran out and no duration was given: the call is over once
                    // the last packets are out.
                    break
                }
            }
        }
        return finish()
    }

    // MARK: Lifecycle

    /// Starts the capture and playback threads, once.
    func startAudio() {
        let proceed = lifecycle.withLock { state -> Bool in
            guard !state.audioStarted else { return false }
            state.audioStarted = true
            return true
        }
        guard proceed else { return }
        audioDone.enter()
        // Each thread names itself: Foundation passes a name set before `start()` to the
        // kernel only from the thread itself, and a thread otherwise keeps its creator's (the
        // network loop's) name in top, perf and /proc.
        let captureThread = Thread { [self] in
            Thread.current.name = "parley capture"
            ThreadPriority.favourCurrentThread()
            do throws(CallError) { try capture.run(stop: stopAudio) } catch { fail(error) }
            audioDone.leave()
        }
        audioDone.enter()
        let playbackThread = Thread { [self] in
            Thread.current.name = "parley playback"
            ThreadPriority.favourCurrentThread()
            do throws(CallError) { try playback.run(stop: stopAudio) } catch { fail(error) }
            audioDone.leave()
        }
        playbackThread.start()
        captureThread.start()
    }

    func fail(_ error: CallError) {
        lifecycle.withLock { if $0.failure == nil { $0.failure = error } }
        wake.signal()
    }

    /// Leaves, stops the threads, closes the files; then the figures.
    private func finish() -> Result<CallStatistics, CallError> {
        status.update { if $0.phase != .ended { $0.phase = .leaving } }
        controlServer.withLock { server in
            server?.close()
            server = nil
        }
        connection.leave()
        stopAudio.raise()
        if audioDone.wait(timeout: .now() + .seconds(3)) == .timedOut {
            fail(.unexpected("the audio threads did not stop within 3 s (a device blocked)"))
        }
        // The link waits up to its leave timeout for the relay's acknowledgement.
        let deadline = MonotonicClock.now() + 2_000_000_000
        while !lifecycle.withLock({ $0.left || $0.failure != nil }) && MonotonicClock.now() < deadline {
            _ = wake.wait(timeout: .now() + .milliseconds(20))
        }
        var problems: [String] = []
        for writer in [raw, sent].compactMap({ $0 }) {
            do { try writer.close() } catch { problems.append("\(error)") }
        }
        problems += mix.finishRecordings()
        do { try trace?.close() } catch { problems.append("\(error)") }
        do {
            try output.drain()
        } catch {
            problems.append("\(error)")
        }
        status.update { $0.phase = .ended }
        let statistics = collectStatistics()
        lifecycle.withLock { $0.finalStatistics = statistics }
        connection.close()
        if let failure = lifecycle.withLock({ $0.failure }) { return .failure(failure) }
        if !problems.isEmpty { return .failure(.cannotWriteOutput(problems.joined(separator: "; "))) }
        return .success(statistics)
    }
}

/// Lets the capture pipeline's send closure reach the sender the connection, made after it, makes.
private final class SenderBox: @unchecked Sendable {
    // @unchecked: written once during `CallSession.init`, before any thread reads it; only
    // the capture thread uses the sender.
    var sender: MediaSender?
}