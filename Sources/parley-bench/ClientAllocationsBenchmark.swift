import ArgumentParser
import CParleyAllocationCounter
import Logging
import ParleyAudio
import ParleyBasics
import ParleyClient
import ParleyE2EE
import ParleyRelay
import ParleySecurity
import ParleyWire

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// `parley-bench client-allocations`: how many heap allocations a client makes per packet it
/// sends (on its capture thread) and per packet it receives (on its network loop), with the
/// hop to the relay in the clear (`--insecure`), sealed, and sealed with the room end-to-end
/// encrypted. Two real `CallSession`s in this process talk through a relay in this process,
/// over loopback UDP, with WAV files for microphones and speakers: ada talks, then falls
/// silent; bob listens. ``CParleyAllocationCounter`` — this executable's malloc — counts per
/// thread, and each session's threads are told apart by when they appeared.
///
/// Everything a thread does in a window counts: the capture thread reads the input, encodes,
/// seals and sends each frame; the loop reads each datagram (the `recvmmsg` batch included),
/// opens it and files its frames, and also runs its timers (RTCP, keepalives, the end-to-end
/// key schedule), which cost the same whether or not media flows. So the receive side is
/// also given as the difference between the window where ada talks and the one where she is
/// silent (DTX: a packet every 400 ms), per packet of difference: what one more packet costs.
///
/// Beside the calls, the receive path alone: a `CallReceiver` joined to a relay played in
/// this process (its real handshake and session) is handed sealed RTP packets, Opus frames
/// from libopus, on this thread, with no socket: what the client's own code allocates per
/// packet, without the socket's read.
struct ClientAllocationsBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-allocations",
        abstract: "Heap allocations per packet sent and received by a client, plaintext, sealed and end-to-end encrypted.",
        discussion: """
          swift build -c release --product parley-bench
          .build/release/parley-bench client-allocations --json
        """
    )

    @Option(help: "Seconds of each window (talking, then silent).")
    var seconds: Double = 5
    @Flag(help: "Print the results as JSON on stdout.")
    var json = false

    struct ReceivePath: Codable {
        var transport: String
        var packets: Int
        var allocations: UInt64
        var allocationsPerPacket: Double
        /// The playback thread's two 10 ms reads per packet, on the same thread between packets.
        var playbackAllocationsPerPacket: Double

        var line: String {
            String(format: "receive path alone, %@: %d packets, %llu allocations, %.4f per packet (playback's reads: %.4f per packet)",
                   transport, packets, allocations, allocationsPerPacket, playbackAllocationsPerPacket)
        }
    }

    struct Results: Codable {
        var calls: [Result]
        var receivePath: [ReceivePath]
    }

    struct Result: Codable {
        var transport: String
        /// ada's capture thread while she talks: its allocations, the packets it sent, the frames it encoded.
        var captureAllocations: UInt64
        var packetsSent: Int
        var captureAllocationsPerPacketSent: Double
        /// bob's network loop while ada talks, and while she is silent.
        var loopAllocationsTalking: UInt64
        var packetsReceivedTalking: Int
        var loopAllocationsSilent: UInt64
        var packetsReceivedSilent: Int
        var loopAllocationsPerPacketReceived: Double
        /// (talking − silent allocations) / (talking − silent packets).
        var loopAllocationsPerExtraPacket: Double

        var line: String {
            String(format: "%@: sent %d packets, capture thread %.3f allocations per packet; received %d packets (%d while silent), loop %.3f per packet, %.3f per extra packet (%llu − %llu allocations)",
                   transport, packetsSent, captureAllocationsPerPacketSent, packetsReceivedTalking, packetsReceivedSilent,
                   loopAllocationsPerPacketReceived, loopAllocationsPerExtraPacket, loopAllocationsTalking, loopAllocationsSilent)
        }
    }

    func validate() throws {
        guard seconds >= 1, seconds <= 600 else { throw ValidationError("--seconds takes 1 to 600") }
    }

    func run() throws {
        parley_allocations_start()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("parley-client-allocations-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // ada's microphone: a second to settle, a window of voice-like sound; then the call
        // goes on in silence (a WAV input that ends is followed by silence, paced like a device).
        let voice = directory + "/voice.wav"
        try Self.writeVoice(path: voice, seconds: 1 + seconds)
        let quiet = directory + "/quiet.wav"
        try Self.writeSilence(path: quiet)

        var results = Results(calls: [], receivePath: [])
        for sealed in [false, true] {
            let result = try Self.measureReceivePath(sealed: sealed)
            log(result.line)
            results.receivePath.append(result)
        }
        for transport in ["plaintext", "sealed", "end-to-end encrypted"] {
            let result = try measure(transport: transport, voice: voice, quiet: quiet, directory: directory)
            log(result.line)
            results.calls.append(result)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(results), as: UTF8.self))
        }
    }

    private func measure(transport: String, voice: String, quiet: String, directory: String) throws -> Result {
        let insecure = transport == "plaintext"
        let endToEnd = transport == "end-to-end encrypted"
        let secret = TokenSecret.random()
        let relayKey = insecure ? nil : RelayKey()
        var relayConfiguration = RelayConfiguration()
        relayConfiguration.listen = HostAndPort(host: "127.0.0.1", port: 0)
        relayConfiguration.threads = 1
        relayConfiguration.insecure = insecure
        var logger = Logger(label: "parley-bench-relay")
        logger.logLevel = .error
        let relay = try Relay.start(configuration: relayConfiguration, secret: secret, relayKey: relayKey, logger: logger)
        defer { relay.shutdown() }
        guard let port = relay.localAddress.port else { throw ValidationError("the relay bound no port") }

        let room = "allocations-\(UInt32.random(in: 0...UInt32.max))"
        func configuration(_ name: String, input: String) -> CallConfiguration {
            let now = Int64(Date().timeIntervalSince1970)
            let token = AccessToken(identity: name, room: room, issuedAt: now, expiresAt: now + 3_600, endToEndEncrypted: endToEnd)
                .signed(with: secret)
            var configuration = CallConfiguration(
                relayHost: "127.0.0.1", relayPort: port, room: room, token: token,
                security: relayKey.map { .secure(relayKey: $0.publicKey) } ?? .insecure)
            configuration.name = name
            if endToEnd { configuration.endToEnd = EndToEndIdentity(identity: IdentityKey(), required: true) }
            configuration.input = .wav(path: input)
            configuration.output = .wav(path: directory + "/\(name)-heard.wav")
            configuration.durationSeconds = 3 + 2 * seconds
            return configuration
        }

        // bob first: his threads are the ones that appear while he joins.
        let (bob, bobThreads) = try Self.join(configuration("bob", input: quiet))
        let (ada, adaThreads) = try Self.join(configuration("ada", input: voice))
        defer {
            ada.stop()
            bob.stop()
            _ = ada.wait()
            _ = bob.wait()
        }
        guard let captureStarted = ada.statistics().captureStartedAtNanoseconds else { throw ValidationError("ada's capture never started") }

        // Talking: from a second into ada's voice for `seconds`.
        Self.sleep(until: captureStarted + 1_000_000_000)
        let sentBefore = ada.statistics().packetsSent
        let receivedBefore = Self.received(by: bob, from: "ada")
        let captureBefore = parley_allocations_of_thread(adaThreads.capture)
        let loopBefore = parley_allocations_of_thread(bobThreads.loop)
        Self.sleep(until: captureStarted + UInt64((1 + seconds) * 1e9))
        let captureAllocations = parley_allocations_of_thread(adaThreads.capture) &- captureBefore
        let loopTalking = parley_allocations_of_thread(bobThreads.loop) &- loopBefore
        let packetsSent = ada.statistics().packetsSent - sentBefore
        let receivedTalking = Self.received(by: bob, from: "ada") - receivedBefore

        // Silent: a second after the voice ends (the encoder has gone to DTX), for as long.
        Self.sleep(until: captureStarted + UInt64((2 + seconds) * 1e9))
        let silentReceivedBefore = Self.received(by: bob, from: "ada")
        let silentLoopBefore = parley_allocations_of_thread(bobThreads.loop)
        Self.sleep(until: captureStarted + UInt64((2 + 2 * seconds) * 1e9))
        let loopSilent = parley_allocations_of_thread(bobThreads.loop) &- silentLoopBefore
        let receivedSilent = Self.received(by: bob, from: "ada") - silentReceivedBefore

        let extraPackets = receivedTalking - receivedSilent
        return Result(
            transport: transport, captureAllocations: captureAllocations, packetsSent: packetsSent,
            captureAllocationsPerPacketSent: Double(captureAllocations) / Double(max(packetsSent, 1)),
            loopAllocationsTalking: loopTalking, packetsReceivedTalking: receivedTalking,
            loopAllocationsSilent: loopSilent, packetsReceivedSilent: receivedSilent,
            loopAllocationsPerPacketReceived: Double(loopTalking) / Double(max(receivedTalking, 1)),
            loopAllocationsPerExtraPacket: (Double(loopTalking) - Double(loopSilent)) / Double(max(extraPackets, 1)))
    }

    /// The receive path alone: 2,000 packets (40 s of a talker) into a joined `CallReceiver`,
    /// sealed by the relay's session or in the clear, counted on this thread after 200 to warm up.
    private static func measureReceivePath(sealed: Bool) throws -> ReceivePath {
        let ownSSRC: UInt32 = 0x0A0A_0A0A, peerSSRC: UInt32 = 0x0B0B_0B0B
        let start: UInt64 = 1_000_000_000
        let key = RelayKey()
        var configuration = CallConfiguration(relayHost: "127.0.0.1", relayPort: 7800, room: "bench", token: "token",
                                              security: sealed ? .secure(relayKey: key.publicKey) : .insecure)
        configuration.ssrc = ownSSRC
        let mix = PlaybackMix(recordingDirectory: nil)
        let receiver = CallReceiver(configuration: configuration, mix: mix, epoch: start, wallClockNanoseconds: 1_700_000_000_000_000_000)
        let joined = ControlMessage(body: .joined(.init(
            cookie: 7, ssrc: ownSSRC, identity: "bench", room: "bench", canPublish: true,
            keepaliveIntervalMilliseconds: 5_000, idleTimeoutMilliseconds: 30_000)))
        var relaySession: SecureSession?
        var sequence: UInt32 = 100
        func deliver(_ plaintext: [UInt8], now: UInt64) {
            guard let relaySession else {
                _ = plaintext.withUnsafeBytes { receiver.receive($0, now: now) }
                return
            }
            var bytes = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: plaintext.count))
            guard let count = try? plaintext.withUnsafeBytes({ raw in try bytes.withUnsafeMutableBytes { try relaySession.seal(raw, into: $0, nowNanoseconds: now) } }) else { return }
            _ = bytes.withUnsafeBytes { receiver.receive(UnsafeRawBufferPointer(rebasing: $0[0..<count]), now: now) }
        }
        func control(_ body: ControlMessage.Body, reliable: Bool) throws {
            sequence &+= 1
            deliver(try ControlMessage(sequence: sequence, isReliable: reliable, body: body).serialized(), now: start)
        }
        let hello = receiver.start(now: start).first
        if sealed {
            let relay = RelayHandshake(key: key)
            let address = Array("127.0.0.1:40000".utf8)
            guard let hello, let cookie = hello.withUnsafeBytes({ relay.cookieReply(toHello: $0, address: address, unixSeconds: 1_000) }),
                  let initBytes = cookie.withUnsafeBytes({ receiver.receive($0, now: start) }).first else {
                throw ValidationError("the receive path's handshake did not start")
            }
            var accepted = try initBytes.withUnsafeBytes { try relay.acceptInit($0, address: address, unixSeconds: 1_000, replayCache: HandshakeReplayCache()) }
            let (response, session) = try accepted.respond(relayIndex: 9, payload: try joined.serialized(), nowNanoseconds: start)
            _ = response.withUnsafeBytes { receiver.receive($0, now: start) }
            relaySession = session
        } else {
            sequence &+= 1
            deliver(try ControlMessage(sequence: sequence, isReliable: true, body: joined.body).serialized(), now: start)
        }
        try control(.roster(.init(version: 1, members: [
            .init(ssrc: ownSSRC, identity: "bench", canPublish: true),
            .init(ssrc: peerSSRC, identity: "peer", canPublish: true),
        ])), reliable: true)
        guard receiver.link.phase == .active else { throw ValidationError("the receive path did not join: \(receiver.link.phase)") }

        // Real Opus frames of a voice-like tone, each in its RTP packet, made before counting.
        let encoder = try OpusEncoder()
        var packets: [[UInt8]] = []
        var frame = [Float](repeating: 0, count: 960)
        for index in 0..<2_200 {
            for sample in frame.indices {
                let time = Double(index * 960 + sample) / 48_000
                frame[sample] = Float(0.2 * sin(2 * Double.pi * 180 * time) * (0.6 + 0.4 * sin(2 * Double.pi * 4 * time)))
            }
            let payload = try encoder.encode(frame)
            let header = RTPHeader(payloadType: RTPHeader.opusPayloadType, sequenceNumber: UInt16(truncatingIfNeeded: index),
                                   timestamp: UInt32(truncatingIfNeeded: index * 960), ssrc: peerSSRC)
            packets.append(try header.serialized(payload: payload))
        }
        // Sealed by the relay before counting too: only the client's work is counted.
        var datagrams: [[UInt8]] = []
        for index in packets.indices {
            let packet = packets[index]
            let now = start + UInt64(index) * 20_000_000
            guard let relaySession else { datagrams.append(packet); continue }
            var bytes = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: packet.count))
            let count = try packet.withUnsafeBytes { raw in try bytes.withUnsafeMutableBytes { try relaySession.seal(raw, into: $0, nowNanoseconds: now) } }
            datagrams.append(Array(bytes.prefix(count)))
        }
        var period = [Float](repeating: 0, count: 480)
        func play(_ index: Int) {
            // The playback thread's part, as it would pull: two 10 ms periods per packet.
            let now = Double(index) * 0.02 - 0.1
            period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: now) }
            period.withUnsafeMutableBufferPointer { mix.mix(into: $0, now: now + 0.01) }
        }
        // Only the calls into the receiver are counted, each on its own: the loop around
        // them is the benchmark's (in a debug build its generic iteration allocates).
        let warmUp = 200
        var allocations: UInt64 = 0
        var playing: UInt64 = 0
        for index in datagrams.indices {
            let now = start + UInt64(index) * 20_000_000
            let beforeReceiving = parley_allocations_of_current_thread()
            _ = datagrams[index].withUnsafeBytes { receiver.receive($0, now: now) }
            let received = parley_allocations_of_current_thread()
            // The playback thread's part, counted apart.
            play(index)
            if index >= warmUp {
                allocations &+= received &- beforeReceiving
                playing &+= parley_allocations_of_current_thread() &- received
            }
        }
        let counted = datagrams.count - warmUp
        return ReceivePath(transport: sealed ? "sealed" : "plaintext", packets: counted, allocations: allocations,
                           allocationsPerPacket: Double(allocations) / Double(counted),
                           playbackAllocationsPerPacket: Double(playing) / Double(counted))
    }

    /// Starts a call and waits until it has joined and its audio threads run; returns it with
    /// its capture thread and its network loop (the threads that appeared meanwhile).
    private static func join(_ configuration: CallConfiguration) throws -> (CallSession, (capture: Int32, loop: Int32)) {
        let before = Set(TrunkedRelays.threadNames().keys)
        let name = configuration.name ?? "a client"
        let session = try CallSession(configuration) { log("\(name): \($0)") }
        try session.start()
        let deadline = MonotonicClock.now() + 30_000_000_000
        while MonotonicClock.now() < deadline {
            let appeared = TrunkedRelays.threadNames().filter { !before.contains($0.key) }
            if let capture = appeared.first(where: { $0.value == "parley capture" })?.key,
               let loop = appeared.first(where: { $0.value == "parley network" })?.key {
                return (session, (capture, loop))
            }
            usleep(20_000)
        }
        let phase = session.statistics().phase
        let threads = TrunkedRelays.threadNames().filter { !before.contains($0.key) }.values.sorted()
        session.stop()
        _ = session.wait()
        throw ValidationError("\(name)'s capture thread and network loop were not seen within 30 s (the call: \(phase); its threads: \(threads))")
    }

    private static func received(by listener: CallSession, from talker: String) -> Int {
        listener.statistics().speakers.filter { $0.identity == talker }.map(\.packetsReceived).reduce(0, +)
    }

    private static func sleep(until deadline: UInt64) {
        let now = MonotonicClock.now()
        if deadline > now { usleep(useconds_t((deadline - now) / 1_000)) }
    }

    /// A voice-like sound: harmonics of a gliding 140 Hz fundamental, swelling at 4 Hz like syllables.
    private static func writeVoice(path: String, seconds: Double) throws {
        let rate = Double(AudioClock.sampleRate)
        let writer = try WAVFileWriter(path: path)
        var samples = [Float](repeating: 0, count: Int(seconds * rate))
        var phase = 0.0
        for index in samples.indices {
            let time = Double(index) / rate
            phase += 2 * Double.pi * (140 + 20 * sin(2 * Double.pi * 0.7 * time)) / rate
            let envelope = 0.55 + 0.45 * sin(2 * Double.pi * 4 * time)
            var value = 0.0
            for harmonic in 1...6 { value += sin(phase * Double(harmonic)) / Double(harmonic) }
            samples[index] = Float(0.2 * envelope * value)
        }
        try writer.append(samples)
        try writer.close()
    }

    private static func writeSilence(path: String) throws {
        let writer = try WAVFileWriter(path: path)
        try writer.appendSilence(AudioClock.sampleRate / 10)
        try writer.close()
    }
}
