import CParleyAEAD
import Crypto

/// ChaCha20-Poly1305 under one key, for sealing and opening packets in place.
///
/// The cipher is BoringSSL's (the copy swift-crypto links in), set up once per key, so a
/// packet costs the cipher and nothing else: `ChaChaPoly.seal`/`open` set the key up again
/// and allocate their results on every call, about ten times the cost of the cipher on a
/// voice packet. Results are identical to `ChaChaPoly`'s (tested). Safe to use from several
/// threads at once: sealing and opening only read the key schedule.
final class PacketCipher: @unchecked Sendable {
    private let context: OpaquePointer

    /// The 16-byte Poly1305 tag appended to every ciphertext.
    static let tagSize = 16

    init(_ key: SymmetricKey) {
        precondition(key.bitCount == 256, "ChaCha20-Poly1305 keys are 256 bits")
        let made = key.withUnsafeBytes { parley_aead_key_new($0.bindMemory(to: UInt8.self).baseAddress!) }
        // BoringSSL fails only when malloc does.
        guard let made else { fatalError("out of memory making a ChaCha20-Poly1305 context") }
        context = made
    }

    deinit { parley_aead_key_free(context) }

    /// Seals `plaintext` into `output` (ciphertext, then the tag; `plaintext.count + 16`
    /// bytes), authenticating `associatedData` too. `output` may start where `plaintext` does.
    func seal(_ plaintext: UnsafeRawBufferPointer, counter: UInt64, associatedData: UnsafeRawBufferPointer,
              into output: UnsafeMutableRawBufferPointer) -> Bool {
        guard output.count >= plaintext.count + Self.tagSize else { return false }
        var written = 0
        return Self.withNonce(counter) { nonce in
            parley_aead_seal(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, output.count,
                             nonce, bytes(plaintext), plaintext.count, bytes(associatedData), associatedData.count)
        } == 1 && written == plaintext.count + Self.tagSize
    }

    /// Opens `sealed` (ciphertext and tag) into `output` if it authenticates with
    /// `associatedData`; returns the plaintext's size, or nil.
    func open(_ sealed: UnsafeRawBufferPointer, counter: UInt64, associatedData: UnsafeRawBufferPointer,
              into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard sealed.count >= Self.tagSize, output.count >= sealed.count - Self.tagSize else { return nil }
        var written = 0
        let opened = Self.withNonce(counter) { nonce in
            parley_aead_open(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, output.count,
                             nonce, bytes(sealed), sealed.count, bytes(associatedData), associatedData.count)
        }
        return opened == 1 ? written : nil
    }

    /// The Noise nonce for `counter`: four zero bytes, then the counter little-endian.
    private static func withNonce<Result>(_ counter: UInt64, _ body: (UnsafePointer<UInt8>) -> Result) -> Result {
        var nonce: (UInt64, UInt64) = (0, 0)  // 16 bytes on the stack, the first 12 used
        return withUnsafeMutableBytes(of: &nonce) { raw in
            raw.storeBytes(of: counter.littleEndian, toByteOffset: 4, as: UInt64.self)
            return body(UnsafeRawPointer(raw.baseAddress!).assumingMemoryBound(to: UInt8.self))
        }
    }
}

/// A pointer to a buffer's bytes; BoringSSL accepts NULL for an empty buffer.
private func bytes(_ buffer: UnsafeRawBufferPointer) -> UnsafePointer<UInt8>? {
    buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
}
