import CParleyAEAD
import Crypto
import ParleyWire

/// One SFrame key (RFC 9605 §4.4): the AES-128-GCM key and salt a base key gives for one KID,
/// under the cipher suite `AES_128_GCM_SHA256_128` (0x0004), and the frames it seals and opens.
///
/// ```
/// sframe_secret = HKDF-Extract("", base_key)                                   (SHA-256)
/// sframe_key    = HKDF-Expand(sframe_secret, "SFrame 1.0 Secret key "  ‖ KID ‖ suite, 16)
/// sframe_salt   = HKDF-Expand(sframe_secret, "SFrame 1.0 Secret salt " ‖ KID ‖ suite, 12)
/// nonce         = sframe_salt XOR CTR (big-endian, 12 bytes)
/// frame         = header(KID, CTR) ‖ AES-GCM(sframe_key, nonce, aad: header ‖ metadata, plaintext)
/// ```
///
/// Why this suite: a browser runs AES-GCM in one WebCrypto call (the CTR+HMAC suites need two
/// primitives and a truncated tag), BoringSSL runs it in hardware, and its 16-byte tag leaves
/// a relay, which sees every frame and could try forgeries at line rate, no useful odds.
/// It costs 16 bytes of tag and a 1–4 byte header per frame (SECURITY.md has the figures).
///
/// The AES context is made once per key; sealing and opening work in the caller's buffers
/// and allocate nothing, so a frame costs the cipher alone. Safe to use from several threads
/// at once: sealing and opening only read the key schedule.
public final class SFrameKey: @unchecked Sendable {
    /// RFC 9605's `AES_128_GCM_SHA256_128`.
    public static let cipherSuite: UInt16 = 0x0004
    public static let tagSize = 16
    static let keySize = 16
    static let saltSize = 12

    public let keyID: UInt64
    private let context: OpaquePointer
    /// The 12-byte salt, in the first 12 bytes of 16.
    private var salt: (UInt64, UInt64) = (0, 0)

    /// Derives the key for `keyID` from `baseKey` (any length; Parley's are 16 bytes).
    public init(baseKey: [UInt8], keyID: UInt64) {
        self.keyID = keyID
        let secret = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: baseKey), salt: [UInt8]())
        let key = HKDF<SHA256>.expand(pseudoRandomKey: secret, info: Self.label("SFrame 1.0 Secret key ", keyID), outputByteCount: Self.keySize)
        let salt = HKDF<SHA256>.expand(pseudoRandomKey: secret, info: Self.label("SFrame 1.0 Secret salt ", keyID), outputByteCount: Self.saltSize)
        let made = key.withUnsafeBytes { parley_aead_key_new_aes128gcm($0.bindMemory(to: UInt8.self).baseAddress!) }
        // BoringSSL fails only when malloc does.
        guard let made else { fatalError("out of memory making an AES-128-GCM context") }
        context = made
        withUnsafeMutableBytes(of: &self.salt) { raw in salt.withUnsafeBytes { raw.copyMemory(from: $0) } }
    }

    deinit { parley_aead_key_free(context) }

    /// The label: the text, then the KID (8 bytes) and the cipher suite (2 bytes), big-endian.
    private static func label(_ text: String, _ keyID: UInt64) -> [UInt8] {
        var label = Array(text.utf8)
        for shift in stride(from: 56, through: 0, by: -8) { label.append(UInt8(truncatingIfNeeded: keyID >> UInt64(shift))) }
        label.append(UInt8(cipherSuite >> 8))
        label.append(UInt8(truncatingIfNeeded: cipherSuite))
        return label
    }

    /// The bytes a frame grows by: its header and the tag.
    public static func overhead(keyID: UInt64, counter: UInt64) -> Int {
        SFrameHeader(keyID: keyID, counter: counter).serializedSize + tagSize
    }

    /// Seals `plaintext` as one SFrame ciphertext (header, ciphertext, tag) at the start of
    /// `output`, authenticating `metadata` too; returns its size, or nil if `output` is too
    /// small. `output` must not overlap `plaintext`.
    public func seal(_ plaintext: UnsafeRawBufferPointer, counter: UInt64, metadata: UnsafeRawBufferPointer,
                     into output: UnsafeMutableRawBufferPointer) -> Int? {
        let header = SFrameHeader(keyID: keyID, counter: counter)
        let headerSize = header.serializedSize
        guard output.count >= headerSize + plaintext.count + Self.tagSize else { return nil }
        var writer = ByteWriter(output)
        guard (try? header.write(to: &writer)) != nil else { return nil }
        let sealedAt = output.baseAddress! + headerSize
        var written = 0
        let sealed = withAssociatedData(header: UnsafeRawBufferPointer(rebasing: output[0..<headerSize]), metadata: metadata) { aad in
            withNonce(counter) { nonce in
                parley_aead_seal(context, sealedAt.assumingMemoryBound(to: UInt8.self), &written, output.count - headerSize,
                                 nonce, bytes(plaintext), plaintext.count, bytes(aad), aad.count)
            }
        }
        return sealed == 1 ? headerSize + written : nil
    }

    /// Opens an SFrame ciphertext whose header (``SFrameHeader``, `headerSize` bytes) names
    /// this key: writes the plaintext into `output` and returns its size, or nil if the frame
    /// does not authenticate with `metadata`. `output` must not overlap `frame`.
    public func open(_ frame: UnsafeRawBufferPointer, headerSize: Int, counter: UInt64, metadata: UnsafeRawBufferPointer,
                     into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard headerSize >= 1, frame.count >= headerSize + Self.tagSize, output.count >= frame.count - headerSize - Self.tagSize else {
            return nil
        }
        let sealed = UnsafeRawBufferPointer(rebasing: frame[headerSize...])
        var written = 0
        let opened = withAssociatedData(header: UnsafeRawBufferPointer(rebasing: frame[0..<headerSize]), metadata: metadata) { aad in
            withNonce(counter) { nonce in
                parley_aead_open(context, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, output.count,
                                 nonce, bytes(sealed), sealed.count, bytes(aad), aad.count)
            }
        }
        return opened == 1 ? written : nil
    }

    /// The nonce for `counter`: the salt, its last eight bytes XORed with the counter (big-endian).
    private func withNonce<Result>(_ counter: UInt64, _ body: (UnsafePointer<UInt8>) -> Result) -> Result {
        var nonce = salt
        return withUnsafeMutableBytes(of: &nonce) { raw in
            let low = raw.loadUnaligned(fromByteOffset: 4, as: UInt64.self)
            raw.storeBytes(of: low ^ counter.bigEndian, toByteOffset: 4, as: UInt64.self)
            return body(UnsafeRawPointer(raw.baseAddress!).assumingMemoryBound(to: UInt8.self))
        }
    }

    /// The associated data, header then metadata, on the stack (at most 17 + 64 bytes).
    private func withAssociatedData<Result>(header: UnsafeRawBufferPointer, metadata: UnsafeRawBufferPointer,
                                            _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let count = header.count + metadata.count
        return withUnsafeTemporaryAllocation(byteCount: max(count, 1), alignment: 1) { buffer in
            UnsafeMutableRawBufferPointer(rebasing: buffer[0..<header.count]).copyMemory(from: header)
            UnsafeMutableRawBufferPointer(rebasing: buffer[header.count..<count]).copyMemory(from: metadata)
            return body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }
}

/// A pointer to a buffer's bytes; BoringSSL accepts NULL for an empty buffer.
private func bytes(_ buffer: UnsafeRawBufferPointer) -> UnsafePointer<UInt8>? {
    buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
}
