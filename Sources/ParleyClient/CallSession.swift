import Foundation
import NIOCore
import ParleyAudio
import ParleyBasics
import ParleyDevices
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
public final class CallSession: @unchecked Sendable {
    // @unchecked: the capture pipeline (encoder, processor, packetizer) is used only by the
    // capture thread once started; `lifecycle` and the Mutex/Atomic members guard the rest.
    public let configuration: CallConfiguration
    private let input: any AudioInput
    private let output: any AudioOutput
    private let raw: WAVFileWriter?
    private let sent: WAVFileWriter?
    private let trace: PacketTraceWriter?
    private let shared: CallShared
    private let mix: PlaybackMix
    private let tap = EchoReferenceTap()
    private let epoch = MonotonicClock.now()
    private let capture: CapturePipeline
    private let playback: PlaybackPipeline
    private var connection: RelayConnection!
    private let stopAudio = StopFlag()
    private let wake = DispatchSemaphore(value: 0)
    private let audioDone = DispatchGroup()
    private let lifecycle = Mutex(Lifecycle())
    private let notice: @Sendable (String) -> Void
    private let onText: @Sendable (RoomText) -> Void
    private let controlServer = Mutex<ControlServer?>(nil)
    private let moderationAnswers = ModerationAnswers()

    private struct Lifecycle {
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
        let shared = CallShared(initialSetting: adaptation.setting)
        self.shared = shared
        input = try CallDevices.openInput(configuration.input) { change in
            Self.report(change, device: "microphone", flag: "--input", shared: shared, notice: notice)
        }
        output = try CallDevices.openOutput(configuration.output) { change in
            Self.report(change, device: "speaker", flag: "--output", shared: shared, notice: notice)
        }
        guard input.sampleRate == AudioClock.sampleRate, input.channels == 1, output.sampleRate == AudioClock.sampleRate, output.channels == 1 else {
            throw .device("the devices must run at 48 kHz mono; the input runs at \(input.sampleRate) Hz × \(input.channels), the output at \(output.sampleRate) Hz × \(output.channels) (a plughw: device converts)")
        }

        mix = PlaybackMix(recordingDirectory: configuration.recordReceivedDirectory)

        let encoder: VoiceEncoder
        do {
            var encoderConfiguration = OpusEncoder.Configuration()
            encoderConfiguration.dtx = true
            encoder = try VoiceEncoder(encoder: OpusEncoder(encoderConfiguration), setting: adaptation.setting)
        } catch {
            throw .unexpected("the Opus encoder could not be set up: \(error)")
        }
        var processor: OutgoingProcessor?
        if configuration.cancelsEcho || configuration.denoise {
            var processing = OutgoingProcessor.Configuration()
            processing.echoCanceller.cancelEcho = configuration.cancelsEcho
            processing.echoCanceller.denoise = configuration.denoise
            do {
                processor = try OutgoingProcessor(processing)
            } catch {
                throw .unexpected("the echo canceller could not be set up: \(error)")
            }
        }
        // The send closure needs the connection, made just below.
        let box = ConnectionBox()
        capture = CapturePipeline(
            input: input, processor: processor, encoder: encoder, ssrc: configuration.ssrc, raw: raw, sent: sent, trace: trace, tap: tap,
            silenceAfterInput: configuration.durationSeconds != nil,
            shared: shared, send: { box.connection?.sendMedia($0) ?? false })
        playback = PlaybackPipeline(output: output, mix: mix, tap: tap, shared: shared, epoch: epoch)
        connection = RelayConnection(
            configuration: configuration, shared: shared, mix: mix, epoch: epoch, adaptation: adaptation, trace: trace,
            onEvent: { [weak self] event in self?.handle(event) })
        box.connection = connection
    }

    /// A sound device went away or came back: say so, and keep it in the status.
    private static func report(
        _ change: DeviceAvailability, device: String, flag: String, shared: CallShared, notice: @Sendable (String) -> Void
    ) {
        switch change {
        case let .lost(reason):
            shared.update { $0.missingDevices.insert(device) }
            notice("the \(device) (\(flag)) stopped working (\(reason)); the call goes on, and Parley picks it up again when it is back (`parley devices` lists what is there)")
        case .back:
            shared.update { $0.missingDevices.remove(device) }
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

    /// Opens the control socket. Without it the call still works (the keys do too), so a
    /// failure is a notice, not an end.
    private func startControls() {
        guard let path = configuration.controlSocketPath else { return }
        do {
            try ControlSocketPath(directory: (path as NSString).deletingLastPathComponent).prepare()
            let server = try ControlServer.start(path: path) { [weak self] control in
                self?.perform(control) ?? .refused("the call has ended")
            }
            controlServer.withLock { $0 = server }
        } catch {
            notice("no control socket, so `parley ctl` cannot reach this call: \(error)")
        }
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
                if shared.snapshot.inputEnded, state.inputEndedAt == nil { state.inputEndedAt = now }
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

    /// Does what a key or `parley ctl` asks, at once, from any thread; the reply says what
    /// changed (`muted`, `bob at 50%`) or why nothing did, and for `.status` carries the figures.
    public func perform(_ control: CallControl) -> CallControlReply {
        switch control {
        case .mute, .unmute, .deafen, .undeafen, .pushToTalkMode, .pushToTalkPress, .pushToTalkRelease:
            let (summary, controls) = shared.update { state in (state.controls.apply(control) ?? "", state.controls) }
            mix.setDeafened(controls.deafened)
            connection.setMemberState(controls.memberState)
            return .done(summary)
        case let .say(text):
            switch connection.say(text) {
            case .success:
                keep(RoomText(sender: shared.snapshot.identity ?? "you", text: text, atSeconds: secondsIntoCall(), outgoing: true))
                return .done("sent to the room")
            case let .failure(refusal):
                return .refused(refusal.description)
            }
        case let .volume(person, percent):
            let state = shared.snapshot
            let heard = Set(mix.levels(now: 0).keys)
            guard state.members.contains(person) || heard.contains(person) else {
                return .refused(CallControlError.unknownPerson(person, members: state.members.filter { $0 != state.identity }).description)
            }
            mix.setVolume(identity: person, percent: percent)
            return .done("\(person) at \(percent)%")
        case .leave:
            stop()
            return .done("leaving")
        case .status:
            return CallControlReply(ok: true, message: shared.snapshot.controls.summary, status: statistics())
        case let .moderate(request):
            guard let sequence = connection.moderate(request) else {
                return .refused("the call is not in the room right now (joining or reconnecting), or \(PendingModeration.maximumOutstanding) requests still wait for the relay; try again in a moment")
            }
            // The link answers every request within its give-up time; this wait only guards against a stuck loop.
            guard let reply = moderationAnswers.wait(for: sequence, seconds: Double(PendingModeration.giveUpNanoseconds) / 1e9 + 2) else {
                return .refused("no answer from the call's network loop")
            }
            return reply.outcome == .done ? .done(reply.message) : .refused(reply.message)
        }
    }

    /// Muted, deafened, push-to-talk, now.
    public var controls: ControlState { shared.snapshot.controls }

    /// Figures for the status line, now.
    public func statistics() -> CallStatistics {
        if let final = lifecycle.withLock({ $0.finalStatistics }) { return final }
        return collectStatistics()
    }

    // MARK: Internals

    private func handle(_ event: LinkEvent) {
        switch event {
        case let .joined(identity, room, canPublish, rejoin):
            let first = lifecycle.withLock { state -> Bool in
                guard state.joinedAt == nil else { return false }
                state.joinedAt = MonotonicClock.now()
                return true
            }
            if first {
                notice("joined room \(room) as \(identity)\(canPublish ? "" : " (listen only: your token does not allow speaking)")")
                startAudio()
            } else if rejoin {
                notice("rejoined room \(room); audio resumes")
            }
        case let .reconnecting(reason):
            notice("reconnecting: \(reason)…")
        case let .redirected(relay):
            notice("the room lives on the relay at \(relay); joining there")
        case let .failed(failure):
            lifecycle.withLock { if $0.failure == nil { $0.failure = .link(failure) } }
            wake.signal()
        case .left:
            lifecycle.withLock { $0.left = true }
            wake.signal()
        case let .text(sender, text):
            let message = RoomText(sender: sender, text: text, atSeconds: secondsIntoCall(), outgoing: false)
            keep(message)
            onText(message)
        case let .textRefused(text, reason):
            notice("the relay refused your message \"\(text.logSafe(limit: 40))\": \(reason.logSafe(limit: 200))")
        case let .moderationAnswered(sequence, reply):
            moderationAnswers.deliver(reply, for: sequence)
        case let .roster(members):
            let muted = lifecycle.withLock { state -> Bool? in
                guard let identity = shared.snapshot.identity else { return nil }
                let now = members.contains { $0.identity == identity && $0.isServerMuted }
                defer { state.serverMuted = now }
                return now == state.serverMuted ? nil : now
            }
            if let muted {
                notice(muted ? "muted by the room's moderator: nobody hears you until they unmute you"
                             : "the room's moderator unmuted you: the others hear you again")
            }
        case .roundTrip:
            break
        }
    }

    /// Keeps a text in the call's record (the status and `--stats-json`), the newest ``RoomText/kept``.
    private func keep(_ message: RoomText) {
        shared.update { state in
            state.texts.append(message)
            if state.texts.count > RoomText.kept { state.texts.removeFirst(state.texts.count - RoomText.kept) }
        }
    }

    private func secondsIntoCall() -> Double {
        lifecycle.withLock { $0.joinedAt }.map { Double(MonotonicClock.now() &- $0) / 1e9 } ?? 0
    }

    private func startAudio() {
        let proceed = lifecycle.withLock { state -> Bool in
            guard !state.audioStarted else { return false }
            state.audioStarted = true
            return true
        }
        guard proceed else { return }
        audioDone.enter()
        let captureThread = Thread { [self] in
            ThreadPriority.favourCurrentThread()
            do throws(CallError) { try capture.run(stop: stopAudio) } catch { fail(error) }
            audioDone.leave()
        }
        captureThread.name = "parley capture"
        audioDone.enter()
        let playbackThread = Thread { [self] in
            ThreadPriority.favourCurrentThread()
            do throws(CallError) { try playback.run(stop: stopAudio) } catch { fail(error) }
            audioDone.leave()
        }
        playbackThread.name = "parley playback"
        playbackThread.start()
        captureThread.start()
    }

    private func fail(_ error: CallError) {
        lifecycle.withLock { if $0.failure == nil { $0.failure = error } }
        wake.signal()
    }

    /// Leaves, stops the threads, closes the files; then the figures.
    private func finish() -> Result<CallStatistics, CallError> {
        shared.update { if $0.phase != .ended { $0.phase = .leaving } }
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
        shared.update { $0.phase = .ended }
        let statistics = collectStatistics()
        lifecycle.withLock { $0.finalStatistics = statistics }
        connection.close()
        if let failure = lifecycle.withLock({ $0.failure }) { return .failure(failure) }
        if !problems.isEmpty { return .failure(.cannotWriteOutput(problems.joined(separator: "; "))) }
        return .success(statistics)
    }

    private func collectStatistics() -> CallStatistics {
        let state = shared.snapshot
        let connection = self.connection!
        let network = connection.submit { (connection.speakerSnapshots(), connection.lossDown()) }
        var speakers = network?.0 ?? lifecycle.withLock { $0.finalStatistics?.speakers } ?? []
        let now = MonotonicClock.now()
        let joinedAt = lifecycle.withLock { $0.joinedAt }
        let timeline = Double(Int64(bitPattern: now &- epoch)) / 1e9
        let levels = mix.levels(now: timeline)
        let volumes = mix.volumesSet
        for index in speakers.indices {
            let identity = speakers[index].identity
            speakers[index].volumePercent = volumes[identity] ?? 100
            speakers[index].levelDecibels = levels[identity]?.decibels
            speakers[index].speakingNow = levels[identity]?.speaking ?? false
        }
        let frames = speakers.map(\.audioFrames).reduce(0, +)
        let concealed = frames > 0 ? speakers.map { $0.concealedPercent * $0.audioFrames }.reduce(0, +) / frames : nil
        return CallStatistics(
            name: configuration.name ?? state.identity ?? "parley",
            identity: state.identity,
            room: configuration.room,
            phase: state.phase,
            elapsedSeconds: joinedAt.map { Double(now - $0) / 1e9 } ?? 0,
            members: state.members,
            speaking: mix.speaking(now: timeline),
            roundTripMilliseconds: state.roundTripNanoseconds.map { Double($0) / 1e6 },
            lossUpPercent: state.lossUp.map { $0 * 100 },
            lossUpTotalPercent: state.lossUpTotal.map { $0 * 100 },
            lossDownPercent: network?.1.map { $0 * 100 },
            jitterBufferDelayMilliseconds: speakers.filter(\.receiving).map(\.jitterBufferDelayMilliseconds).max(),
            concealedPercent: concealed,
            bitrate: state.currentBitrate,
            expectedLossPercent: state.encoder.expectedLossPercent,
            redundantFrames: state.encoder.redundancy.distances.count,
            missingDevices: state.missingDevices.sorted(),
            captureXruns: input.xruns,
            playbackXruns: output.xruns,
            rejoins: state.rejoins,
            packetsSent: state.packetsSent,
            bytesSent: state.bytesSent,
            captureStartedAtNanoseconds: state.captureStartedAt,
            playbackStartedAtNanoseconds: state.playbackStartedAt,
            speakers: speakers,
            controls: state.controls,
            mutedMembers: state.memberStates.filter { $0.value.contains(.muted) }.keys.sorted(),
            deafenedMembers: state.memberStates.filter { $0.value.contains(.deafened) }.keys.sorted(),
            texts: state.texts,
            serverMuted: state.serverMuted)
    }
}

/// Lets the capture pipeline's send closure reach the connection made after it.
private final class ConnectionBox: @unchecked Sendable {
    // @unchecked: written once during `CallSession.init`, before any thread reads it.
    var connection: RelayConnection?
}
