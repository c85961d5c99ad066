import ParleyBasics
import Testing
@testable import ParleyE2EE
@testable import ParleyWire
import func ParleyRelayTestSupport.bytes

func headerBytes(_ header: SFrameHeader) throws -> [UInt8] {
    try [UInt8](serializedSize: header.serializedSize) { (writer: inout ByteWriter) throws(WireError) in try header.write(to: &writer) }
}

func seal(_ key: SFrameKey, _ plaintext: [UInt8], counter: UInt64, metadata: [UInt8]) -> [UInt8]? {
    var output = [UInt8](repeating: 0, count: plaintext.count + 64)
    let size = plaintext.withUnsafeBytes { plain in
        metadata.withUnsafeBytes { meta in output.withUnsafeMutableBytes { key.seal(plain, counter: counter, metadata: meta, into: $0) } }
    }
    return size.map { Array(output.prefix($0)) }
}

func open(_ key: SFrameKey, _ frame: [UInt8], metadata: [UInt8]) -> [UInt8]? {
    let header = frame.withUnsafeBytes { try? SFrameHeader(parsing: $0) }
    guard let header else { return nil }
    var output = [UInt8](repeating: 0, count: frame.count)
    let size = frame.withUnsafeBytes { sealed in
        metadata.withUnsafeBytes { meta in
            output.withUnsafeMutableBytes {
                key.open(sealed, headerSize: SFrameHeader.size(of: sealed)!, counter: header.counter, metadata: meta, into: $0)
            }
        }
    }
    return size.map { Array(output.prefix($0)) }
}

@Suite("SFrame (RFC 9605)")
struct SFrameTests {
    /// RFC 9605's header vectors, a sample across every width of KID and counter.
    @Test(arguments: [
        (UInt64(0), UInt64(0), "00"), (0, 1, "01"), (0, 255, "08ff"), (0, 256, "090100"), (0, 65536, "0a010000"),
        (1, 0, "10"), (1, 255, "18ff"), (255, 0, "80ff"), (255, 255, "88ffff"), (256, 256, "9901000100"),
        (65535, 1, "91ffff"), (65536, 0, "a0010000"), (16_777_216, 0, "b001000000"),
        (0, 18_446_744_073_709_551_615, "0fffffffffffffffff"), (0x123, 0x4567, "9901234567"),
    ])
    func headerMatchesTheRFCVectors(keyID: UInt64, counter: UInt64, encoded: String) throws {
        let header = SFrameHeader(keyID: keyID, counter: counter)
        #expect(try headerBytes(header) == bytes(fromHex: encoded))
        let parsed = try bytes(fromHex: encoded).withUnsafeBytes { raw throws(WireError) in try SFrameHeader(parsing: raw) }
        #expect(parsed == header)
        #expect(bytes(fromHex: encoded).withUnsafeBytes { SFrameHeader.size(of: $0) } == bytes(fromHex: encoded).count)
    }

    /// RFC 9605 Appendix C.5, cipher suite 0x0004: the key and salt derived from the base key,
    /// and the ciphertext, byte for byte.
    @Test func sealsAndOpensTheRFCVectorForAES128GCM() throws {
        let key = SFrameKey(baseKey: bytes(fromHex: "000102030405060708090a0b0c0d0e0f"), keyID: 0x123)
        let metadata = bytes(fromHex: "4945544620534672616d65205747")
        let plaintext = bytes(fromHex: "64726166742d696574662d736672616d652d656e63")
        let expected = bytes(fromHex: "9901234567b7412c2513a1b66dbb48841bbaf17f598751176ad847681a69c6d0b091c07018ce4adb34eb")
        #expect(seal(key, plaintext, counter: 0x4567, metadata: metadata) == expected)
        #expect(open(key, expected, metadata: metadata) == plaintext)
    }

    @Test func aFrameChangedAnywhereOrMovedDoesNotOpen() throws {
        let key = MediaKey.fresh(epoch: 3).frameKey()
        let metadata = FrameMetadata(ssrc: 7, timestamp: 960).withBytes { Array($0) }
        let frame = try #require(seal(key, Array(repeating: 0x5A, count: 80), counter: 41, metadata: metadata))
        #expect(open(key, frame, metadata: metadata) == Array(repeating: 0x5A, count: 80))
        for index in frame.indices {
            var tampered = frame
            tampered[index] ^= 0x01
            #expect(open(key, tampered, metadata: metadata) == nil, "byte \(index) changed and still opened")
        }
        // Another stream, another time: the tag covers both.
        #expect(open(key, frame, metadata: FrameMetadata(ssrc: 8, timestamp: 960).withBytes { Array($0) }) == nil)
        #expect(open(key, frame, metadata: FrameMetadata(ssrc: 7, timestamp: 1920).withBytes { Array($0) }) == nil)
        // Another key of the same sender.
        #expect(open(MediaKey.fresh(epoch: 3).frameKey(), frame, metadata: metadata) == nil)
    }

    @Test func theSealerCountsEachKeyFromZeroAndNeverRepeatsANonce() throws {
        let source = SendingKey(.withheld)
        var sealer = FrameSealer(source: source)
        var output = [UInt8](repeating: 0, count: 200)
        let frame: [UInt8] = [1, 2, 3]
        func sealOnce() -> SFrameHeader? {
            let outcome = frame.withUnsafeBytes { plain in
                output.withUnsafeMutableBytes { sealer.seal(plain, metadata: FrameMetadata(ssrc: 1, timestamp: 0), into: $0) }
            }
            guard case .sealed = outcome else { return nil }
            return output.withUnsafeBytes { try? SFrameHeader(parsing: $0) }
        }
        #expect(sealOnce() == nil, "no key yet in a room that must be encrypted: nothing leaves")
        let first = MediaKey.fresh(epoch: 0)
        source.use(.sealed(first.frameKey()))
        #expect(sealOnce() == SFrameHeader(keyID: 0, counter: 0))
        #expect(sealOnce() == SFrameHeader(keyID: 0, counter: 1))
        source.use(.sealed(first.frameKey()))  // the same key handed over again goes on counting
        #expect(sealOnce() == SFrameHeader(keyID: 0, counter: 2))
        source.use(.sealed(try #require(first.ratcheted()).frameKey()))
        #expect(sealOnce() == SFrameHeader(keyID: 1, counter: 0))
        source.use(.plain)
        let plain = frame.withUnsafeBytes { plain in
            output.withUnsafeMutableBytes { sealer.seal(plain, metadata: FrameMetadata(ssrc: 1, timestamp: 0), into: $0) }
        }
        #expect(plain == .plain)
    }

    @Test func headerParserSurvivesAnyBytes() {
        var random = SplitMix64(seed: 0x5F_5241_4D45)
        for length in 0..<40 {
            for _ in 0..<500 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
                bytes.withUnsafeBytes { raw in
                    if let header = try? SFrameHeader(parsing: raw), let size = SFrameHeader.size(of: raw) {
                        // A sender may spend more bytes than a value needs; the size read is the one written.
                        #expect(header.serializedSize <= size && size <= raw.count)
                    }
                }
            }
        }
    }
}
