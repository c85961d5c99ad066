import Foundation
import ParleyAudio
import ParleyBasics
@testable import ParleyClient
import ParleyE2EE
import ParleyEvaluation
import ParleyWire
import Synchronization
import Testing

/// End-to-end encrypted rooms, as the relay sees them and as the members hear them. The
/// relay runs `--insecure` here, so a tap in front of it sees exactly what the relay itself
/// reads: the hop encryption is another layer, and the room stays end-to-end encrypted
/// without it.
@Suite("End-to-end encrypted rooms", .serialized)
struct EndToEndCallTests {
    /// Acceptance 1 and 3: everything the relay forwarded, decoded as Opus the way a relay
    /// operator would try, sounds like nothing the talkers said (no closer to their speech
    /// than noise is), while the members hear each other as well as in the same room without
    /// end-to-end encryption (the same call, measured the same way, in the same run); and no
    /// media key any member held appears anywhere in what the relay received or sent.
    @Test func theRelayHearsNothingWhileTheMembersHearEachOtherAsWellAsWithout() async throws {
        let conversation = try Conversation.standard.get()
        let plain = try await Self.tappedCall(conversation, endToEnd: false)
        let sealed = try await Self.tappedCall(conversation, endToEnd: true)

        // What the relay may learn is when each talker talks (packet timing and DTX, and the
        // audio level it reads: SECURITY.md, traffic analysis), not what they say. So the
        // sealed stream, decoded as Opus, is held to random noise played exactly where its
        // frames were: noise that knows the talker's timing and nothing else.
        var noise = SplitMix64(seed: 0x4E01_5E)
        for talker in Conversation.talkers {
            let track = conversation.tracks[talker]!
            let timing = sealed.tapTiming[talker] ?? []
            let timedNoise = track.indices.map { index in
                let sample = Float.random(in: -0.1...0.1, using: &noise)
                return index < timing.count && timing[index] ? sample : 0
            }
            let noiseScore = SpeechComparison.compare(sent: track, received: timedNoise, offset: 0).envelopeCorrelation
            let plainTap = plain.tapScores[talker] ?? 0
            let sealedTap = sealed.tapScores[talker] ?? 1
            print(String(format: "%@ as the relay decodes it: %.3f in a plain room, %.3f end-to-end encrypted; noise at its frames' times scores %.3f",
                         talker, plainTap, sealedTap, noiseScore))
            #expect(plainTap >= 0.8, "the tap must hear a plain room, or it proves nothing (\(talker): \(plainTap))")
            #expect(sealedTap <= max(noiseScore, 0) + 0.1, "the relay heard \(talker) through end-to-end encryption: \(sealedTap)")
        }

        let plainMean = plain.receptions.map(\.comparison.envelopeCorrelation).reduce(0, +) / Double(plain.receptions.count)
        let sealedMean = sealed.receptions.map(\.comparison.envelopeCorrelation).reduce(0, +) / Double(sealed.receptions.count)
        print(String(format: "members' envelope correlation: %.3f plain, %.3f end-to-end encrypted", plainMean, sealedMean))
        for reception in plain.receptions { print("plain: \(reception)") }
        for reception in sealed.receptions {
            print("end-to-end encrypted: \(reception)")
            #expect(reception.comparison.envelopeCorrelation >= 0.85, "\(reception)")
            #expect(reception.comparison.dropouts == 0, "\(reception)")
        }
        #expect(sealedMean >= plainMean - 0.02, "end-to-end encryption cost the listeners \(plainMean - sealedMean) of envelope correlation")

        // Not one media key's bytes anywhere in the relay's traffic, either way.
        #expect(sealed.keys.count >= 3, "every member held keys")
        for key in sealed.keys {
            for datagram in sealed.datagrams where Self.contains(datagram, key.baseKey) {
                Issue.record("the relay saw media key \(key.id) in a \(datagram.count)-byte datagram")
            }
        }
    }

    struct TappedCall {
        var receptions: [Reception]
        /// What the relay could make of each talker's frames: envelope correlation with their track.
        var tapScores: [String: Double]
        /// Per sample of each talker's track: whether the relay forwarded a frame for it.
        var tapTiming: [String: [Bool]]
        var datagrams: [[UInt8]]
        /// Every media key the members held at the end.
        var keys: [MediaKey]
    }

    static func tappedCall(_ conversation: Conversation, endToEnd: Bool) async throws -> TappedCall {
        let room = try await CallRoom(room: endToEnd ? "sealed" : "plain", insecure: true, endToEnd: endToEnd, tap: true)
        defer { Task { await room.close() } }
        let sessions = Mutex<[String: CallSession]>([:])
        let outcome = try await CallSlots.shared.withSlot {
            try await room.run(conversation, onSessions: { made in sessions.withLock { $0 = made } })
        }
        for (talker, result) in outcome.results {
            if case let .failure(error) = result { Issue.record("\(talker)'s call failed: \(error)") }
        }
        let receptions = try await Reception.all(in: room, outcome: outcome, conversation: conversation)
        let captured = room.tap?.captured ?? []
        var scores: [String: Double] = [:]
        var timing: [String: [Bool]] = [:]
        for talker in Conversation.talkers {
            guard let listener = Conversation.talkers.first(where: { $0 != talker }),
                  let ssrc = outcome.statistics[listener]?.speakers.first(where: { $0.identity == talker })?.ssrc,
                  let captureStart = outcome.statistics[talker]?.captureStartedAtNanoseconds else { continue }
            let heard = try relaysDecoding(of: ssrc, in: captured, from: captureStart, length: conversation.length)
            scores[talker] = SpeechComparison.compare(sent: conversation.tracks[talker]!, received: heard.audio, offset: 0).envelopeCorrelation
            timing[talker] = heard.framed
        }
        let keys = sessions.withLock { $0.values.flatMap { $0.connection.receiver.endToEnd?.heldKeys ?? [] } }
        return TappedCall(receptions: receptions, tapScores: scores, tapTiming: timing, datagrams: captured.map(\.bytes), keys: keys)
    }

    /// The stream `ssrc` as the relay could play it: every frame it forwarded (the primary of a
    /// RED packet), decoded as Opus where it decodes and silence where not, at the time it
    /// passed the relay, on the talker's capture timeline; and which samples a frame covered.
    static func relaysDecoding(of ssrc: UInt32, in captured: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])], from start: UInt64,
                               length: Int) throws -> (audio: [Float], framed: [Bool]) {
        let decoder = try OpusDecoder()
        var audio = [Float](repeating: 0, count: length)
        var framed = [Bool](repeating: false, count: length)
        var frame = [Float](repeating: 0, count: 5_760)
        var seen = Set<UInt16>()
        var first: (timestamp: UInt32, position: Int)?
        for datagram in captured where !datagram.toRelay {
            datagram.bytes.withUnsafeBytes { raw in
                guard PacketKind(raw) == .rtp, let packet = try? RTPPacketView(parsing: raw), packet.ssrc == ssrc,
                      seen.insert(packet.sequenceNumber).inserted else { return }
                var payload = packet.payload
                if packet.payloadType == RTPHeader.redPayloadType {
                    guard let red = try? REDPayloadView(parsing: payload) else { return }
                    payload = red.primary.data
                }
                let arrival = Int(Int64(bitPattern: datagram.nanoseconds &- start) * 48_000 / 1_000_000_000)
                if first == nil { first = (packet.timestamp, arrival) }
                let position = first!.position + Int(Int32(bitPattern: packet.timestamp &- first!.timestamp))
                let decoded = frame.withUnsafeMutableBufferPointer { (try? decoder.decode(payload, into: $0)) ?? 0 }
                for index in 0..<decoded where position + index >= 0 && position + index < length {
                    audio[position + index] = frame[index]
                    framed[position + index] = true
                }
            }
        }
        return (audio, framed)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count, let first = needle.first else { return false }
        var index = 0
        while index + needle.count <= haystack.count {
            if haystack[index] == first, Array(haystack[index..<index + needle.count]) == needle { return true }
            index += 1
        }
        return false
    }

    /// Acceptance 2: forward and backward secrecy, tried with the keys themselves. Ada talks
    /// for 16 s; bob is in the room from the start and leaves at 6 s, keeping every key he
    /// had; cy joins at 9 s. Bob's keys open none of ada's frames sent more than a second
    /// after he left (and nearly all before); cy's open none sent before he joined (and nearly
    /// all from a second after).
    @Test func aMemberWhoLeftOpensNothingSaidAfterAndANewcomerNothingSaidBefore() async throws {
        let conversation = try Conversation.standard.get()
        let room = try await CallRoom(room: "secrecy", insecure: true, endToEnd: true, tap: true)
        defer { Task { await room.close() } }
        // One voice all along: every turn of the conversation on ada's track.
        let monologue = (0..<conversation.length).map { index in Conversation.talkers.reduce(Float(0)) { $0 + conversation.tracks[$1]![index] } }
        let monologuePath = room.directory + "/monologue.wav"
        try WAVAudio(sampleRate: 48_000, samples: monologue).write(to: monologuePath)
        let silencePath = room.directory + "/silence.wav"
        try WAVAudio(sampleRate: 48_000, samples: [Float](repeating: 0, count: 48_000)).write(to: silencePath)

        let ada = try CallSession(room.configuration(for: "ada", input: .wav(path: monologuePath), durationSeconds: 16))
        var bobConfiguration = room.configuration(for: "bob", input: .wav(path: silencePath), durationSeconds: 6)
        bobConfiguration.output = .wav(path: room.directory + "/bob-heard.wav")
        let bob = try CallSession(bobConfiguration)
        let cy = try CallSession(room.configuration(for: "cy", input: .wav(path: silencePath), durationSeconds: 6))
        try await CallSlots.shared.withSlot {
            async let adaDone = runOnThread { ada.run() }
            async let bobDone = runOnThread { bob.run() }
            try await Task.sleep(for: .seconds(9))
            async let cyDone = runOnThread { cy.run() }
            _ = await (adaDone, bobDone, cyDone)
        }
        let captured = room.tap?.captured ?? []
        guard let adaSSRC = bob.statistics().speakers.first(where: { $0.identity == "ada" })?.ssrc else {
            Issue.record("bob never heard ada")
            return
        }
        // When bob's leave (the first: the others stay to the end) and cy's join passed the
        // relay, read as the relay reads them (plaintext control: the relay is --insecure).
        guard let left = Self.first(.leave, in: captured, where: { _ in true }),
              let joined = Self.first(.join, in: captured, where: { message in
                  if case let .join(join) = message.body { return join.ssrc == cy.configuration.ssrc }
                  return false
              }) else {
            Issue.record("the tap did not see bob leave or cy join")
            return
        }
        let bobKeys = try #require(bob.connection.receiver.endToEnd?.keys(forStream: adaSSRC))
        let cyKeys = try #require(cy.connection.receiver.endToEnd?.keys(forStream: adaSSRC))
        let frames = Self.framesOf(adaSSRC, in: captured)
        func opened(with keys: MemberKeys, _ range: ClosedRange<UInt64>) -> (opened: Int, of: Int) {
            let decryptor = StreamDecryptor(keys: keys, ssrc: adaSSRC)
            var count = 0
            var total = 0
            for frame in frames where range.contains(frame.nanoseconds) {
                total += 1
                let outcome = frame.bytes.withUnsafeBytes { raw -> IncomingFrames.Unwrapped in
                    guard let packet = try? RTPPacketView(parsing: raw) else { return .rejected }
                    return IncomingFrames.forEach(
                        payloadType: packet.payloadType, payload: packet.payload, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp,
                        open: { decryptor.open($0, timestamp: $1, now: frame.nanoseconds) }, { _ in })
                }
                if outcome == .accepted { count += 1 }
            }
            return (count, total)
        }
        let second: UInt64 = 1_000_000_000
        let bobBefore = opened(with: bobKeys, 0...left)
        let bobAfter = opened(with: bobKeys, (left + second)...UInt64.max)
        let cyBefore = opened(with: cyKeys, 0...joined)
        let cyAfter = opened(with: cyKeys, (joined + second)...UInt64.max)
        print("bob's keys open \(bobBefore.opened) of \(bobBefore.of) frames before he left, \(bobAfter.opened) of \(bobAfter.of) from 1 s after")
        print("cy's keys open \(cyBefore.opened) of \(cyBefore.of) frames before he joined, \(cyAfter.opened) of \(cyAfter.of) from 1 s after")
        #expect(bobAfter.of > 100 && bobAfter.opened == 0, "a member who left opened what was said after")
        #expect(cyBefore.of > 100 && cyBefore.opened == 0, "a newcomer opened what was said before")
        #expect(Double(bobBefore.opened) >= 0.9 * Double(bobBefore.of), "bob's keys must open what he heard, or the test proves nothing")
        #expect(Double(cyAfter.opened) >= 0.9 * Double(cyAfter.of), "cy's keys must open what he hears, or the test proves nothing")
    }

    /// Ada's RTP packets as the relay forwarded them (one copy of each, at the time it passed).
    static func framesOf(_ ssrc: UInt32, in captured: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])]) -> [(nanoseconds: UInt64, bytes: [UInt8])] {
        var seen = Set<UInt16>()
        return captured.compactMap { datagram in
            guard !datagram.toRelay else { return nil }
            return datagram.bytes.withUnsafeBytes { raw in
                guard PacketKind(raw) == .rtp, let packet = try? RTPPacketView(parsing: raw), packet.ssrc == ssrc,
                      seen.insert(packet.sequenceNumber).inserted else { return nil }
                return (datagram.nanoseconds, datagram.bytes)
            }
        }
    }

    /// When the first plaintext control message of `kind` that `matches` passed the tap, toward the relay.
    static func first(_ kind: ControlMessage.MessageType, in captured: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])],
                      where matches: (ControlMessage) -> Bool) -> UInt64? {
        captured.first { datagram in
            guard datagram.toRelay, let message = try? ControlMessage(parsing: datagram.bytes), message.body.type == kind else { return false }
            return matches(message)
        }?.nanoseconds
    }
}

extension EndToEndCallTests {
    /// Acceptance 3's second half: bob comes back with another identity key. Ada, who pinned
    /// his first key in an earlier call, is told loudly; until she accepts the new key she gives
    /// him no key and plays nothing of his, so neither hears the other; once she does
    /// (`parley ctl trust bob`), both do.
    @Test func aChangedKeyIsShownAndRefusedUntilAccepted() async throws {
        let conversation = try Conversation.standard.get()
        let room = try await CallRoom(room: "changed", endToEnd: true)
        defer { Task { await room.close() } }
        let monologue = (0..<conversation.length).map { index in Conversation.talkers.reduce(Float(0)) { $0 + conversation.tracks[$1]![index] } }
        let monologuePath = room.directory + "/monologue.wav"
        try WAVAudio(sampleRate: 48_000, samples: monologue).write(to: monologuePath)
        let adaPins = room.directory + "/ada-known-keys"

        @Sendable func configuration(_ talker: String, seconds: Double, pins: String) throws -> CallConfiguration {
            var configuration = room.configuration(for: talker, input: .wav(path: monologuePath), durationSeconds: seconds)
            configuration.endToEnd = EndToEndIdentity(identity: room.identity(of: talker), pins: try IdentityPins.load(path: pins), pinsPath: pins, required: true)
            return configuration
        }

        // The first meeting: each pins the other's key.
        let first = try await CallSlots.shared.withSlot {
            try await CallOutcome.run(["ada": try configuration("ada", seconds: 3, pins: adaPins),
                                       "bob": try configuration("bob", seconds: 3, pins: room.directory + "/bob-known-keys")])
        }
        for (talker, result) in first.results { if case let .failure(error) = result { Issue.record("\(talker): \(error)") } }
        #expect(try TextFile.read(path: adaPins, what: "pins", hint: "").contains("changed\tbob\t"), "ada pinned bob's first key")

        // Bob on a new device: a new identity key.
        room.identities.withLock { $0["bob"] = IdentityKey() }
        let notices = Mutex<[String]>([])
        let trustedAt = Mutex<UInt64?>(nil)
        let sessions = Mutex<[String: CallSession]>([:])
        let outcome = try await CallSlots.shared.withSlot {
            try await CallOutcome.run(
                ["ada": try configuration("ada", seconds: 10, pins: adaPins),
                 "bob": try configuration("bob", seconds: 10, pins: room.directory + "/bob-new-known-keys")],
                whileRunning: {
                    try await Task.sleep(for: .seconds(5))
                    guard let ada = sessions.withLock({ $0["ada"] }) else { return }
                    let refusedBefore = ada.statistics().endToEnd?.members.first { $0.identity == "bob" }?.key
                    #expect(refusedBefore == .changed, "ada's status shows bob's key as changed")
                    trustedAt.withLock { $0 = MonotonicClock.now() }
                    let reply = ada.perform(.trust(person: "bob"))
                    #expect(reply.ok, "\(reply.error ?? "")")
                },
                notice: { talker, message in if talker == "ada" { notices.withLock { $0.append(message) } } },
                onSessions: { made in sessions.withLock { $0 = made } })
        }
        #expect(notices.withLock { $0 }.contains { $0.contains("WARNING: bob's identity key is not the one you met") }, "\(notices.withLock { $0 })")
        let trusted = try #require(trustedAt.withLock { $0 })
        for (listener, talker) in [("ada", "bob"), ("bob", "ada")] {
            let recording = try room.received(by: listener, from: talker)
            let played = try #require(outcome.statistics[listener]?.playbackStartedAtNanoseconds)
            let trustSample = Int(Int64(bitPattern: trusted &- played) * 48_000 / 1_000_000_000)
            func level(_ range: Range<Int>) -> Float {
                let part = recording[max(0, min(range.lowerBound, recording.count))..<max(0, min(range.upperBound, recording.count))]
                return part.isEmpty ? 0 : (part.reduce(0) { $0 + $1 * $1 } / Float(part.count)).squareRoot()
            }
            let before = level(0..<trustSample)
            let after = level((trustSample + 48_000)..<(trustSample + 4 * 48_000))
            print(String(format: "%@ heard %@ at RMS %.4f before the key was accepted, %.4f after", listener, talker, before, after))
            #expect(before < 0.001, "\(listener) heard \(talker) before the changed key was accepted")
            #expect(after > 0.01, "\(listener) did not hear \(talker) once the key was accepted")
        }
    }
}
