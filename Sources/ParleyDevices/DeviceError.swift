/// A device failure, worded for the person at the keyboard: what happened and what to try.
public struct DeviceError: Error, CustomStringConvertible, Equatable, Sendable {
    public let description: String

    public init(_ description: String) { self.description = description }

    static func alsa(_ what: String, device: String, code: Int32, hint: String? = nil) -> DeviceError {
        let message = "\(what) on ALSA device '\(device)' failed: \(ALSAErrorText.text(code))"
        return DeviceError(hint.map { "\(message). \($0)" } ?? message)
    }
}
