import Crypto
import Foundation
import Testing
@testable import ParleySecurity

/// The packet path seals and opens with BoringSSL's ChaCha20-Poly1305 directly; every
/// result must be exactly what swift-crypto's `ChaChaPoly` gives for the same key, Noise
/// nonce and associated data, or peers built either way could not talk.
@Suite("Packet cipher")
struct PacketCipherTests {
    @Test func sealsExactlyAsChaChaPolyDoesAndOpensWhatItSeals() throws {
        var rng = SystemRandomNumberGenerator()
        for round in 0..<2_000 {
            let key = SymmetricKey(size: .bits256)
            let cipher = PacketCipher(key)
            let plaintext = (0..<(round % 300)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let header = (0..<(round % 20)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let counter = round.isMultiple(of: 7) ? UInt64.max - 1 : UInt64.random(in: 0...UInt64(1) << 40, using: &rng)

            var sealed = [UInt8](repeating: 0, count: plaintext.count + PacketCipher.tagSize)
            let didSeal = plaintext.withUnsafeBytes { plain in
                header.withUnsafeBytes { ad in
                    sealed.withUnsafeMutableBytes { cipher.seal(plain, counter: counter, associatedData: ad, into: $0) }
                }
            }
            #expect(didSeal)
            let reference = try ChaChaPoly.seal(plaintext, using: key, nonce: Noise.nonce(counter), authenticating: header)
            #expect(sealed == [UInt8](reference.ciphertext) + [UInt8](reference.tag), "round \(round): differs from ChaChaPoly")

            var opened = [UInt8](repeating: 0, count: plaintext.count)
            let count = sealed.withUnsafeBytes { box in
                header.withUnsafeBytes { ad in
                    opened.withUnsafeMutableBytes { cipher.open(box, counter: counter, associatedData: ad, into: $0) }
                }
            }
            #expect(count == plaintext.count && opened == plaintext)
        }
    }

    @Test func refusesAnyChangedByteAWrongCounterOrAnotherKey() {
        let key = SymmetricKey(size: .bits256)
        let cipher = PacketCipher(key)
        let plaintext = [UInt8](repeating: 0x5A, count: 100)
        let header: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
        var sealed = [UInt8](repeating: 0, count: 116)
        _ = plaintext.withUnsafeBytes { plain in
            header.withUnsafeBytes { ad in sealed.withUnsafeMutableBytes { cipher.seal(plain, counter: 9, associatedData: ad, into: $0) } }
        }
        func opens(_ box: [UInt8], header: [UInt8], counter: UInt64 = 9, with cipher: PacketCipher) -> Bool {
            var out = [UInt8](repeating: 0, count: 116)
            return box.withUnsafeBytes { b in
                header.withUnsafeBytes { ad in out.withUnsafeMutableBytes { cipher.open(b, counter: counter, associatedData: ad, into: $0) } }
            } != nil
        }
        #expect(opens(sealed, header: header, with: cipher))
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x01
            #expect(!opens(tampered, header: header, with: cipher), "a flipped bit at \(index) was accepted")
        }
        for index in header.indices {
            var tampered = header
            tampered[index] ^= 0x80
            #expect(!opens(sealed, header: tampered, with: cipher), "a changed header byte \(index) was accepted")
        }
        #expect(!opens(sealed, header: header, counter: 10, with: cipher))
        #expect(!opens(sealed, header: header, with: PacketCipher(SymmetricKey(size: .bits256))))
        #expect(!opens(Array(sealed.prefix(15)), header: header, with: cipher))
    }
}
