import Foundation
import Logging
import ParleyAdmin
import ParleyAudio
import ParleyBasics
@testable import ParleyClient
import ParleyE2EE
import ParleyEvaluation
import ParleyRelay
import ParleyRelayTestSupport
import ParleyWire
import Synchronization
import Testing

/// The browser page in end-to-end encrypted rooms, in Debian's headless Chromium: its HPKE and
/// SFrame on WebCrypto give RFC 9180's and RFC 9605's vectors and the very bytes the `parley`
/// client (`ParleyE2EE`) gives, both ways; and a page and a `parley call` in an `--e2ee` room
/// hear each other while a tap in front of the relay (run `--insecure`, so the tap sees what
/// the relay reads) hears neither and finds no media key.
@Suite(.serialized)
struct BrowserEndToEndTests {
    static let chromium = BrowserCallTests.chromium

    /// A page of the relay's, open in Chromium, its end-to-end library loaded (no call: no token).
    static func withLibrary(_ body: (ChromiumDevTools) throws -> Void) async throws {
        let room = try await CallRoom(room: "vectors", acceptsBrowsers: true)
        var logger = Logger(label: "parley-browser-e2ee-test-web")
        logger.logLevel = .error
        let web = try BrowserWebServer.start(serving: room.relay, at: HostAndPort(host: "127.0.0.1", port: 0), logger: logger)
        let conversation = try Conversation.standard.get()
        let page = try ChromiumDevTools(chromium: chromium!, url: "http://127.0.0.1:\(web.localAddress!.port!)/join",
                                        speech: conversation.path(of: "ada"), directory: room.directory)
        defer {
            page.stop()
            web.close()
        }
        try page.attach()
        guard try page.waitFor("typeof ParleyE2EE === 'object'", seconds: 20) else {
            Issue.record("the page did not load its end-to-end library; Chromium's log:\n\(page.logTail())")
            await room.close()
            return
        }
        try body(page)
        await room.close()
    }

    /// Runs `script` (the body of an async function returning an object) in the page; its JSON.
    static func run(_ page: ChromiumDevTools, _ script: String) throws -> [String: Any] {
        let text = try page.evaluate("(async () => { const E = ParleyE2EE, h = E.fromHex, x = E.hex; \(script) })().then(JSON.stringify)")
        guard let text = text as? String, let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw ChromiumDevTools.Failure(description: "the page's answer is not JSON: \(String(describing: text))")
        }
        return object
    }

    private static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(3)))
    func thePagesHPKEAndSFrameGiveTheRFCVectors() async throws {
        try await Self.withLibrary { page in
            // RFC 9180 A.1.3: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, auth mode;
            // the ephemeral key is the vector's, so every byte is fixed.
            let hpke = try Self.run(page, """
                const info = h("4f6465206f6e2061204772656369616e2055726e");
                const ephemeral = { privateKey: await E.importPrivate(h("ff4442ef24fbc3c1ff86375b0be1e77e88a0de1e79b30896d73411c5ff4c3518")),
                                    publicKey: await E.importPublic(h("23fb952571a14a25e3d678140cd0e5eb47a0961bb18afcf85896e5453c312e76")) };
                const sender = { privateKey: await E.importPrivate(h("dc4a146313cce60a278a5323d321f051c5707e9c45ba21a3479fecdf76fc69dd")),
                                 publicKey: h("8b0c70873dc5aecb7f9ee4e62406a397b350e57012be45cf53b7105ae731790b") };
                const recipient = { privateKey: await E.importPrivate(h("fdea67cf831f1ca98d8e27b1f6abeb5b7745e9d35348b80fa407ff6958f9137e")),
                                    publicKey: h("1632d5c2f71c2b38d0a8fcc359355200caa8b1ffdf28618080466c909cb69b2e") };
                const pt = h("4265617574792069732074727574682c20747275746820626561757479");
                const sealing = await E.setupAuthSender(recipient.publicKey, info, sender, ephemeral);
                const ct0 = await E.hpkeSeal(sealing, 0, h("436f756e742d30"), pt), ct1 = await E.hpkeSeal(sealing, 1, h("436f756e742d31"), pt);
                const opening = await E.setupAuthRecipient(sealing.enc, recipient, info, sender.publicKey);
                const opened = await E.hpkeOpen(opening, 1, h("436f756e742d31"), ct1);
                let forged = "opened";
                try { await E.hpkeOpen(await E.setupAuthRecipient(sealing.enc, recipient, info, recipient.publicKey), 0, h("436f756e742d30"), ct0); }
                catch (error) { forged = "refused"; }
                return { enc: x(sealing.enc), shared: x(sealing.sharedSecret), key: x(sealing.key), nonce: x(sealing.baseNonce),
                         ct0: x(ct0), ct1: x(ct1), opened: x(opened), forged: forged };
                """)
            #expect(hpke["enc"] as? String == "23fb952571a14a25e3d678140cd0e5eb47a0961bb18afcf85896e5453c312e76")
            #expect(hpke["shared"] as? String == "2d6db4cf719dc7293fcbf3fa64690708e44e2bebc81f84608677958c0d4448a7")
            #expect(hpke["key"] as? String == "b062cb2c4dd4bca0ad7c7a12bbc341e6")
            #expect(hpke["nonce"] as? String == "a1bc314c1942ade7051ffed0")
            #expect(hpke["ct0"] as? String == "5fd92cc9d46dbf8943e72a07e42f363ed5f721212cd90bcfd072bfd9f44e06b80fd17824947496e21b680c141b")
            #expect(hpke["ct1"] as? String == "d3736bb256c19bfa93d79e8f80b7971262cb7c887e35c26370cfed62254369a1b52e3d505b79dd699f002bc8ed")
            #expect(hpke["opened"] as? String == "4265617574792069732074727574682c20747275746820626561757479")
            #expect(hpke["forged"] as? String == "refused", "a package opened as if from another sender")

            // RFC 9605 C.5 (AES_128_GCM_SHA256_128) and its header vectors.
            let sframe = try Self.run(page, """
                const key = await E.sframeKey(h("000102030405060708090a0b0c0d0e0f"), 0x123);
                const metadata = h("4945544620534672616d65205747"), pt = h("64726166742d696574662d736672616d652d656e63");
                const sealed = await E.sframeSeal(key, 0x4567n, metadata, pt);
                const tampered = sealed.slice(); tampered[7] ^= 1;
                const headers = [[0, 0], [0, 255], [0, 256], [1, 0], [255, 255], [256, 256], [65535, 1], [65536, 0], [16777216, 0], [0x123, 0x4567]]
                  .map(([kid, ctr]) => x(E.sframeHeader(kid, BigInt(ctr))));
                return { sealed: x(sealed), opened: x(await E.sframeOpen(key, sealed, metadata) || []), tampered: await E.sframeOpen(key, tampered, metadata) === null,
                         headers: headers };
                """)
            #expect(sframe["sealed"] as? String == "9901234567b7412c2513a1b66dbb48841bbaf17f598751176ad847681a69c6d0b091c07018ce4adb34eb")
            #expect(sframe["opened"] as? String == "64726166742d696574662d736672616d652d656e63")
            #expect(sframe["tampered"] as? Bool == true, "a changed frame opened")
            #expect(sframe["headers"] as? [String] == ["00", "08ff", "090100", "10", "88ffff", "9901000100", "91ffff", "a0010000", "b001000000", "9901234567"])

            // What the relay (or a member through it) sends the page's parsers: random and
            // truncated bytes give null or a reading inside the bytes, never an exception.
            let hostile = try Self.run(page, """
                const problems = [];
                let seed = 27;
                const next = () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 16;
                const key = await E.sframeKey(h("000102030405060708090a0b0c0d0e0f"), 0);
                const good = E.buildRED([{ payloadType: 111, offset: 960, data: h("0102") }, { payloadType: 111, offset: 0, data: h("030405") }]);
                for (let round = 0; round < 3000; round++) {
                  const bytes = round % 3 === 0 ? good.slice(0, next() % (good.length + 1)) : Uint8Array.from({ length: next() % 90 }, () => next() & 255);
                  try {
                    const blocks = E.parseRED(bytes);
                    if (blocks && blocks.reduce((sum, block) => sum + block.data.length, 0) > bytes.length) problems.push("RED read past its bytes: " + x(bytes));
                    const header = E.parseSFrameHeader(bytes);
                    if (header && header.size > bytes.length) problems.push("an SFrame header longer than its bytes: " + x(bytes));
                    E.decodePackage(bytes);
                    if (await E.sframeOpen(key, bytes, E.frameMetadata(1, 2)) !== null) problems.push("random bytes opened: " + x(bytes));
                    E.fromBase64url(String.fromCharCode(...bytes));
                  } catch (error) {
                    problems.push(error.message + " on " + x(bytes));
                  }
                }
                return { problems: problems.slice(0, 5) };
                """)
            #expect((hostile["problems"] as? [String])?.isEmpty == true, "the page's parsers failed on hostile bytes: \(hostile["problems"] ?? "")")
        }
    }

    /// The worker's hold for frames that came before their sender's key, with time passed in:
    /// a frame is kept a second and no longer, the oldest first out; a stream keeps at most 50
    /// frames and 64 KiB however fast or big its frames come, all streams together at most
    /// 1 MiB; what is taken comes oldest first, and put back ahead of what came since.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(3)))
    func theHoldForFramesBeforeTheirKeyKeepsASecondAndIsBoundedForAHostileSender() async throws {
        try await Self.withLibrary { page in
            let result = try Self.run(page, """
                const limits = { frames: E.maximumHeldFrames, bytes: E.maximumHeldBytes, all: E.maximumHeldBytesInAll, ms: E.holdLimit };
                // A talker: a frame every 20 ms, held 0.5 s, then the key comes.
                const talker = new E.HeldFrames();
                for (let index = 0; index < 25; index++) talker.hold(7, index, 80, index * 20);
                const beforeKey = talker.count;
                const taken = talker.take(ssrc => ssrc === 7, 500).map(entry => entry.item);
                // One whose key takes 3 s: only the last second is still there, and then not even that.
                const late = new E.HeldFrames();
                for (let index = 0; index < 150; index++) late.hold(7, index, 80, index * 20);
                const lateKept = late.take(() => true, 2999).map(entry => entry.item);
                for (let index = 0; index < 10; index++) late.hold(7, index, 80, 3000);
                late.expire(4001);
                // A hostile sender: 2,000 frames of 1,400 bytes in no time, then frames larger than any datagram.
                const flood = new E.HeldFrames();
                let peakCount = 0, peakBytes = 0;
                for (let index = 0; index < 2000; index++) {
                  flood.hold(9, index, 1400, 0);
                  peakCount = Math.max(peakCount, flood.count); peakBytes = Math.max(peakBytes, flood.bytes);
                }
                const oversized = flood.hold(9, "big", 70000, 0);
                // Many hostile streams at once: all of them together stay under the bound.
                const many = new E.HeldFrames();
                for (let ssrc = 0; ssrc < 200; ssrc++) for (let index = 0; index < 60; index++) many.hold(ssrc, index, 1200, 0);
                // Taken, some without their key yet, put back: ahead of a frame held since.
                const back = new E.HeldFrames();
                for (let index = 0; index < 5; index++) back.hold(3, index, 10, index * 20);
                const first = back.take(() => true, 100);
                back.hold(3, "since", 10, 110);
                back.putBack(first.slice(2), 120);
                const order = back.take(() => true, 130).map(entry => String(entry.item));
                return { limits, beforeKey, taken, lateKept, lateAfter: late.count, lateGiven: late.given, peakCount, peakBytes, oversized,
                         floodNewest: flood.take(() => true, 0).map(entry => entry.item).pop(), manyBytes: many.bytes, order,
                         emptyBytes: back.bytes };
                """)
            let limits = result["limits"] as? [String: Int] ?? [:]
            #expect(limits == ["frames": 50, "bytes": 65_536, "all": 1_048_576, "ms": 1_000], "\(limits)")
            #expect(result["beforeKey"] as? Int == 25)
            #expect(result["taken"] as? [Int] == Array(0..<25), "the held frames came back out of order or incomplete: \(result["taken"] ?? "")")
            // Held at 2,000–2,980 ms, taken at 2,999: the 50 of the last second, oldest first.
            #expect(result["lateKept"] as? [Int] == Array(100..<150), "\(result["lateKept"] ?? "")")
            #expect(result["lateAfter"] as? Int == 0, "frames outlived their second")
            #expect(result["lateGiven"] as? Int == 110, "frames given up: \(result["lateGiven"] ?? "")")
            #expect((result["peakCount"] as? Int ?? .max) <= 50 && (result["peakBytes"] as? Int ?? .max) <= 65_536,
                    "a flood grew the hold to \(result["peakCount"] ?? "") frames, \(result["peakBytes"] ?? "") bytes")
            #expect(result["oversized"] as? Bool == false, "a frame larger than the whole budget was held")
            #expect(result["floodNewest"] as? Int == 1999, "a full hold kept old frames rather than the newest")
            #expect((result["manyBytes"] as? Int ?? .max) <= 1_048_576, "200 streams grew the hold to \(result["manyBytes"] ?? "") bytes")
            #expect(result["order"] as? [String] == ["2", "3", "4", "since"], "put back: \(result["order"] ?? "")")
            #expect(result["emptyBytes"] as? Int == 0)
        }
    }

    /// What the page makes, the `parley` client reads, and the other way: packages sealed to
    /// each other's identities, an SFrame frame, the ratchet, the room view, the fingerprint and
    /// the safety number, byte for byte.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(3)))
    func thePageAndTheParleyClientReadEachOthersKeysAndFrames() async throws {
        var random = SystemRandomNumberGenerator()
        let adaPrivate = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
        let ada = try IdentityKey(fileText: "parley identity v1\n\(Base64URL.encode(adaPrivate))\n", source: "test")
        let bob = IdentityKey()
        let baseKey = (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }
        let digest = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
        let fromBob = try SealedMediaKey.seal(
            MediaKeyPackage(keyID: 0x35, baseKey: baseKey, memberCount: 3, roomViewDigest: digest), to: ada.publicKeyBytes, recipient: "ada",
            from: bob, senderName: "bob", room: "Zoë's room")
        let frameKey = MediaKey(id: MediaKeyID(epoch: 2, generation: 1), baseKey: baseKey)
        var frame = [UInt8](repeating: 0, count: 200)
        let sealedSize = Array("an opus frame from bob".utf8).withUnsafeBytes { plain in
            FrameMetadata(ssrc: 0xDEAD_BEEF, timestamp: 4_000_000_000).withBytes { metadata in
                frame.withUnsafeMutableBytes { frameKey.frameKey().seal(plain, counter: 300, metadata: metadata, into: $0) }
            }
        }
        let sealedFrame = Array(frame.prefix(try #require(sealedSize)))
        let members = [("Zoë", ada.publicKeyBytes), ("ada", bob.publicKeyBytes), ("Émile", ada.publicKeyBytes), ("ada", ada.publicKeyBytes)]

        try await Self.withLibrary { page in
            let result = try Self.run(page, """
                const ada = { privateKey: await E.importPrivate(h("\(Self.hex(adaPrivate))")), publicKey: h("\(Self.hex(ada.publicKeyBytes))") };
                const bobKey = h("\(Self.hex(bob.publicKeyBytes))"), room = "Zoë's room";
                const toBob = await E.sealPackage({ keyID: 0x47, baseKey: h("\(Self.hex(baseKey))"), memberCount: 2, digest: h("\(Self.hex(digest))") },
                                                  bobKey, "bob", ada, "ada", room);
                const fromBob = await E.openPackage(h("\(Self.hex(fromBob))"), ada, "ada", bobKey, "bob", room);
                const asIfFromAda = await E.openPackage(h("\(Self.hex(fromBob))"), ada, "ada", ada.publicKey, "bob", room);
                const media = { epoch: 2, generation: 1, baseKey: h("\(Self.hex(baseKey))") };
                const key = await E.sframeKey(media.baseKey, E.keyIDOf(media));
                const frame = await E.sframeSeal(key, 301n, E.frameMetadata(0xDEADBEEF, 4000000000), E.utf8("an opus frame from ada"));
                const opened = await E.sframeOpen(key, h("\(Self.hex(sealedFrame))"), E.frameMetadata(0xDEADBEEF, 4000000000));
                const moved = await E.sframeOpen(key, h("\(Self.hex(sealedFrame))"), E.frameMetadata(0xDEADBEEF, 4000000960));
                const members = [\(members.map { "{ identity: \"\($0.0)\", identityKey: h(\"\(Self.hex($0.1))\") }" }.joined(separator: ", "))];
                return { toBob: x(toBob), fromBob: fromBob && { keyID: fromBob.keyID, baseKey: x(fromBob.baseKey), memberCount: fromBob.memberCount, digest: x(fromBob.digest) },
                         asIfFromAda: asIfFromAda, frame: x(frame), opened: opened && new TextDecoder().decode(opened), moved: moved,
                         ratchet: x((await E.ratchet({ epoch: 0, generation: 0, baseKey: media.baseKey })).baseKey),
                         view: x(await E.roomViewDigest(room, members)), fingerprint: await E.fingerprint(ada.publicKey),
                         safety: await E.safetyNumber(ada.publicKey, bobKey) };
                """)
            // The page's package, opened by the client.
            let toBob = try #require((result["toBob"] as? String).map(bytes(fromHex:)))
            let package = try SealedMediaKey.open(toBob, by: bob, recipientName: "bob", from: ada.publicKeyBytes, senderName: "ada", room: "Zoë's room")
            #expect(package == MediaKeyPackage(keyID: 0x47, baseKey: baseKey, memberCount: 2, roomViewDigest: digest))
            #expect(throws: SealedMediaKey.Failure.self, "the page's package opened for another room") {
                try SealedMediaKey.open(toBob, by: bob, recipientName: "bob", from: ada.publicKeyBytes, senderName: "ada", room: "another room")
            }
            // The client's package, opened by the page (and refused as if from another sender).
            let fromBobOpened = result["fromBob"] as? [String: Any]
            #expect(fromBobOpened?["keyID"] as? Int == 0x35 && fromBobOpened?["baseKey"] as? String == Self.hex(baseKey)
                    && fromBobOpened?["memberCount"] as? Int == 3 && fromBobOpened?["digest"] as? String == Self.hex(digest),
                    "the page did not open the client's package: \(String(describing: result["fromBob"]))")
            #expect(result["asIfFromAda"] is NSNull, "the page opened a package as if from a sender who did not seal it")
            // Frames both ways, bound to their SSRC and timestamp.
            #expect(result["opened"] as? String == "an opus frame from bob")
            #expect(result["moved"] is NSNull, "a frame moved to another timestamp opened")
            let pageFrame = try #require((result["frame"] as? String).map(bytes(fromHex:)))
            let header = try pageFrame.withUnsafeBytes { raw throws(WireError) in try SFrameHeader(parsing: raw) }
            #expect(header == SFrameHeader(keyID: 0x21, counter: 301))
            var output = [UInt8](repeating: 0, count: 200)
            let opened = pageFrame.withUnsafeBytes { sealed in
                FrameMetadata(ssrc: 0xDEAD_BEEF, timestamp: 4_000_000_000).withBytes { metadata in
                    output.withUnsafeMutableBytes {
                        frameKey.frameKey().open(sealed, headerSize: SFrameHeader.size(of: sealed)!, counter: 301, metadata: metadata, into: $0)
                    }
                }
            }
            #expect(opened.map { String(decoding: output.prefix($0), as: UTF8.self) } == "an opus frame from ada")
            // What people compare and what the keys derive.
            #expect(result["ratchet"] as? String == Self.hex(try #require(MediaKey(id: MediaKeyID(epoch: 0, generation: 0), baseKey: baseKey).ratcheted()).baseKey))
            #expect(result["view"] as? String == Self.hex(RoomView(room: "Zoë's room", members: members.map { RoomView.Member(identity: $0.0, identityKey: $0.1) }).digest))
            #expect(result["fingerprint"] as? String == Fingerprint.of(ada.publicKeyBytes))
            #expect(result["safety"] as? String == Fingerprint.safetyNumber(bob.publicKeyBytes, ada.publicKeyBytes))
        }
    }

    /// What packet sizes and timing alone give: each of `ssrc`'s frames that passed the tap
    /// (each block of a RED payload, its headers kept) with its bytes after the first replaced
    /// by random ones, decoded as Opus just as
    /// ``EndToEndCallTests/relaysDecoding(of:in:from:length:)`` decodes the real ones, at the
    /// same place. The first byte (the SFrame header's, which says only the key and the count)
    /// is kept, so the decoder reads each frame as the same kind and length.
    static func sizeAndTimingAlone(of ssrc: UInt32, in captured: [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])])
        -> [(toRelay: Bool, nanoseconds: UInt64, bytes: [UInt8])] {
        var random = SplitMix64(seed: 0x5123_D)
        return captured.map { datagram in
            var bytes = datagram.bytes
            bytes.withUnsafeMutableBytes { raw in
                guard !datagram.toRelay, PacketKind(UnsafeRawBufferPointer(raw)) == .rtp,
                      let packet = try? RTPPacketView(parsing: UnsafeRawBufferPointer(raw)), packet.ssrc == ssrc,
                      let base = raw.baseAddress else { return }
                // Each frame: a RED payload's blocks (its headers kept), or the payload.
                var frames: [UnsafeRawBufferPointer] = [packet.payload]
                if packet.payloadType == RTPHeader.redPayloadType, let red = try? REDPayloadView(parsing: packet.payload) {
                    frames = red.map(\.data) + [red.primary.data]
                }
                for frame in frames where frame.count > 1 {
                    let first = frame.baseAddress! - UnsafeRawPointer(base)
                    for index in (first + 1)..<(first + frame.count) { raw[index] = UInt8.random(in: 0...255, using: &random) }
                }
            }
            return (datagram.toRelay, datagram.nanoseconds, bytes)
        }
    }

    static func latestStats(in logPath: String) -> ChromiumPage.Stats? {
        guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n").reversed() {
            guard let start = line.range(of: "parley-stats ")?.upperBound, let end = line.range(of: "}", options: .backwards)?.upperBound,
                  start < end else { continue }
            if let stats = try? JSONDecoder().decode(ChromiumPage.Stats.self, from: Data(line[start..<end].utf8)) { return stats }
        }
        return nil
    }

    /// A page and a `parley call` in an `--e2ee` room: each hears the other (the client's
    /// recording of the page follows its speech; the page plays the client's voice, frames it
    /// opened in its worker), both show the same safety number for each other; and a tap in
    /// front of the relay (`--insecure`: it sees what the relay reads, the browser's frames as
    /// the relay forwards them once SRTP is off) decodes nothing like the page's speech and
    /// finds none of the media keys the two held.
    @Test(.enabled(if: chromium != nil, "Debian's chromium is not installed: run Scripts/bootstrap (CI does), or apt-get install chromium"),
          .timeLimit(.minutes(10)))
    func aPageAndAParleyClientHearEachOtherInAnEndToEndEncryptedRoomAndTheRelayHearsNeither() async throws {
        let conversation = try Conversation.standard.get()
        try await CallSlots.shared.withSlot(2) {
            let name = "browser-e2ee"
            let room = try await CallRoom(room: name, insecure: true, endToEnd: true, tap: true, acceptsBrowsers: true)
            var logger = Logger(label: "parley-browser-e2ee-test-web")
            logger.logLevel = .error
            let web = try BrowserWebServer.start(serving: room.relay, at: HostAndPort(host: "127.0.0.1", port: 0), logger: logger)
            defer { web.close() }
            let page = try ChromiumDevTools(
                chromium: Self.chromium!, url: "http://127.0.0.1:\(web.localAddress!.port!)/join#token=\(room.token("ada"))&stats=1",
                speech: conversation.path(of: "ada"), directory: room.directory)
            defer { page.stop() }
            try page.attach()
            let joined = try page.waitFor("document.getElementById('mute').disabled === false", seconds: 45)
            #expect(joined, "the page never connected; it says \(page.shown("#status")); Chromium's log:\n\(page.logTail())")
            guard joined else { return await room.close() }
            #expect(page.shown("#identity").contains("end-to-end encrypted"), "the page does not say the room is end-to-end encrypted: \(page.shown("#identity"))")

            let sessions = Mutex<[String: CallSession]>([:])
            let pageDuringCall = Mutex<String>("{}")
            let bobsSafetyNumber = Mutex<String?>(nil)
            let configuration = room.configuration(for: "bob", input: .wav(path: conversation.path(of: "bob")), durationSeconds: conversation.seconds + 2)
            let outcome = try await CallOutcome.run(["bob": configuration], whileRunning: {
                // Halfway through: what each side shows of the other.
                try await Task.sleep(for: .seconds(conversation.seconds / 2))
                let text = try page.evaluate("parleyEndToEnd().then(JSON.stringify)") as? String ?? "{}"
                pageDuringCall.withLock { $0 = text }
                let bobSafety = sessions.withLock { $0["bob"]?.statistics().endToEnd?.members.first { $0.identity == "ada" }?.safetyNumber }
                bobsSafetyNumber.withLock { $0 = bobSafety }
            }, onSessions: { made in sessions.withLock { $0 = made } })
            if case let .failure(error)? = outcome.results["bob"] { Issue.record("the parley client's call failed: \(error)") }
            try await Task.sleep(for: .seconds(1.5))
            // The page's last report (once a second, to the console), as BrowserCallTests reads it.
            let stats = Self.latestStats(in: page.logPath)
            let heard = try? room.received(by: "bob", from: "ada")
            let keys = sessions.withLock { $0.values.flatMap { $0.connection.receiver.endToEnd?.heldKeys ?? [] } }
            let captured = room.tap?.captured ?? []
            print("browser e2ee call: bob's speakers \(outcome.statistics["bob"]?.speakers.map { "\($0.identity): \($0.packetsReceived) packets, \($0.concealedFrames) concealed" } ?? [])")
            print("browser e2ee call: at the end the page says \(page.shown("#status")) / \(page.shown("#roster")); its end-to-end state \((try? page.evaluate("parleyEndToEnd().then(JSON.stringify)")) as? String ?? "none")")
            let bobStatus = outcome.statistics["bob"]?.endToEnd
            await room.close()

            // Bob heard the page: its frames opened with the key it sealed to him.
            let recording = try #require(heard, "the parley client recorded nothing of the browser member")
            let match = EnvelopeMatch.best(of: conversation.tracks["ada"]!, in: recording)
            #expect(match.correlation > 0.6, "bob's recording of the page does not follow its speech (envelope correlation \(match.correlation))")

            // The page heard bob: frames its worker opened, played with energy.
            let status = (try? JSONSerialization.jsonObject(with: Data(pageDuringCall.withLock { $0 }.utf8)) as? [String: Any]) ?? [:]
            let bobSafety = bobsSafetyNumber.withLock { $0 }
            let frames = status["frames"] as? [String: Any] ?? [:]
            if (frames["opened"] as? Int ?? 0) == 0 || heard == nil {
                print("browser e2ee call: bob's end-to-end status \(String(describing: bobStatus)); Chromium's log:\n\(page.logTail())")
            }
            let received = try #require(stats, "the page reported no statistics; Chromium's log:\n\(page.logTail())")
            let bobTalks = Double(conversation.turns.filter { $0.talker == "bob" }.map(\.range.count).reduce(0, +)) / 48_000
            print("browser e2ee call: bob's recording of the page follows its speech with envelope correlation \(match.correlation); "
                + "the page received \(received.packetsReceived) packets, played \(received.totalAudioEnergy) of energy, "
                + "concealed \(received.concealedSamples) of \(received.totalSamplesReceived) samples; its worker halfway: \(frames)")
            #expect(received.packetsReceived > Int(bobTalks * 50 * 0.9), "the page received \(received.packetsReceived) packets; bob talked \(bobTalks) s")
            #expect(received.totalAudioEnergy > 0.01 * conversation.seconds / 3 / 10,
                    "the page played \(received.totalAudioEnergy) of audio energy: silence where bob talked")
            #expect((frames["opened"] as? Int ?? 0) > Int(bobTalks / 2 * 50 * 0.8), "the page's worker opened \(frames["opened"] ?? 0) frames by halfway")
            #expect((frames["sealed"] as? Int ?? 0) > Int(conversation.seconds / 2 * 50 * 0.8), "the page's worker sealed \(frames["sealed"] ?? 0) frames by halfway")

            // The same safety number on both screens, and each holds the other's key.
            let pageMembers = status["members"] as? [[String: Any]] ?? []
            let bobOnPage = pageMembers.first { $0["identity"] as? String == "bob" }
            #expect(bobOnPage?["holdsTheirs"] as? Bool == true, "the page never opened bob's key: \(status)")
            let pageSafety = bobOnPage?["safetyNumber"] as? String
            #expect(pageSafety != nil && pageSafety == bobSafety,
                    "the page shows \(pageSafety ?? "no safety number") for bob, bob shows \(bobSafety ?? "none") for the page")
            #expect(bobStatus?.rejectedPackages == 0, "bob rejected the page's packages: \(String(describing: bobStatus))")

            // The relay's view: the page's frames as it forwarded them to bob decode as nothing
            // like the page's speech, and no media key either side held passed it.
            let adaSSRC = outcome.statistics["bob"]?.speakers.first { $0.identity == "ada" }?.ssrc
            let start = outcome.statistics["bob"]?.captureStartedAtNanoseconds
            if let adaSSRC, let start {
                let relayHeard = try EndToEndCallTests.relaysDecoding(of: adaSSRC, in: captured, from: start, length: recording.count)
                let forwarded = EndToEndCallTests.framesOf(adaSSRC, in: captured).count
                let score = EnvelopeMatch.best(of: conversation.tracks["ada"]!, in: relayHeard.audio).correlation
                // What the relay may learn is when the page talks and how big its frames are
                // (VBR Opus: SECURITY.md, traffic analysis), not what it says. So its decoding is
                // held to random bytes of the same sizes at the same times, decoded the same way.
                let alone = try EndToEndCallTests.relaysDecoding(
                    of: adaSSRC, in: Self.sizeAndTimingAlone(of: adaSSRC, in: captured), from: start, length: recording.count)
                let noiseScore = EnvelopeMatch.best(of: conversation.tracks["ada"]!, in: alone.audio).correlation
                print("browser e2ee call: the relay's decoding of the page's \(forwarded) frames follows its speech with envelope correlation "
                    + "\(score); random bytes of the same sizes at the same times score \(noiseScore)")
                #expect(forwarded > 0, "the tap saw none of the page's frames go to bob")
                #expect(score <= max(noiseScore, 0) + 0.1, "the relay could make out the page's speech (envelope correlation \(score))")
            } else {
                Issue.record("bob never heard a speaker named ada")
            }
            #expect(keys.count >= 2, "bob held \(keys.count) keys (his own and the page's)")
            for key in keys {
                for datagram in captured where EndToEndCallTests.contains(datagram.bytes, key.baseKey) {
                    Issue.record("the relay saw media key \(key.id) in a \(datagram.bytes.count)-byte datagram")
                }
            }
        }
    }
}
