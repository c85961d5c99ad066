/// Why a WAV file could not be read or written, worded for the person who gave us the file.
public enum WAVError: Error, Equatable, Sendable, CustomStringConvertible {
    case cannotOpen(path: String, reason: String)
    case cannotWrite(path: String, reason: String)
    case notRIFFWAVE
    case truncated(what: String)
    case missingChunk(String)
    case unsupportedEncoding(formatTag: Int, bitsPerSample: Int)
    case unsupportedChannelCount(Int)
    case invalidHeader(String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            return "cannot open \(path): \(reason)"
        case .cannotWrite(let path, let reason):
            return "cannot write \(path): \(reason)"
        case .notRIFFWAVE:
            return "not a WAV file (it does not start with a RIFF/WAVE header)"
        case .truncated(let what):
            return "the WAV file is cut short in its \(what)"
        case .missingChunk(let name):
            return "the WAV file has no '\(name)' chunk"
        case .unsupportedEncoding(let tag, let bits):
            let kind = tag == 1 ? "\(bits)-bit integer PCM" : tag == 3 ? "\(bits)-bit float" : "format tag \(tag), \(bits) bits"
            return "the WAV file is \(kind); Parley reads 16-bit PCM or 32-bit float (convert with: sox IN.wav -b 16 -e signed-integer OUT.wav)"
        case .unsupportedChannelCount(let count):
            return "the WAV file has \(count) channels; Parley reads mono or stereo (mix down with: sox IN.wav -c 1 OUT.wav)"
        case .invalidHeader(let detail):
            return "the WAV header is inconsistent: \(detail)"
        }
    }
}
