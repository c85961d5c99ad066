#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The client-to-mixer audio level of RFC 6464, carried in an RFC 8285 extension element.
///
/// ```
///  0                   1
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |  ID   | len=0 |V| level       |    (one-byte form; the element data is one byte)
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
///
/// `V` is the sender's voice-activity flag; `level` is the packet's audio level in
/// -dBov, 0 (loudest) to 127 (silence or quieter), where 0 dBov is the RMS of a
/// full-scale square wave. The relay reads it to show who speaks without decoding.
public struct AudioLevel: Sendable, Hashable {
    /// The extension ID Parley uses for the audio level; peers learn it from this constant
    /// rather than from SDP, since Parley has no SDP.
    public static let extensionID: UInt8 = 1

    public var voiceActivity: Bool
    /// Level in -dBov: 0 is full scale, 127 is silence.
    public var level: UInt8

    public init(voiceActivity: Bool, level: UInt8) {
        self.voiceActivity = voiceActivity
        self.level = min(level, 127)
    }

    /// The level of samples whose RMS is `rms`, relative to full scale (1.0).
    public init(rms: Float, voiceActivity: Bool) {
        self.voiceActivity = voiceActivity
        guard rms > 0, rms.isFinite else { self.level = 127; return }
        let dBov = 20 * log10f(rms)
        self.level = UInt8(max(0, min(127, (-dBov).rounded())))
    }

    /// The level in dBov (0 or below).
    public var dBov: Int { -Int(level) }

    public init(byte: UInt8) {
        self.voiceActivity = byte & 0x80 != 0
        self.level = byte & 0x7F
    }

    public var byte: UInt8 { (voiceActivity ? 0x80 : 0) | level }

    public var element: RTPHeaderExtensionElement {
        RTPHeaderExtensionElement(id: Self.extensionID, data: [byte])
    }

    /// Reads the level from an element's data; it must be exactly one byte.
    public init(elementData data: UnsafeRawBufferPointer) throws(WireError) {
        guard data.count == 1 else {
            throw .malformed(.audioLevel, reason: "audio level element must hold exactly one byte")
        }
        self.init(byte: data[0])
    }
}
