import CALSA
import Foundation

/// The PCMs ALSA knows (`snd_device_name_hint`), for `parley devices`.
public enum ALSADeviceList {
    public struct Device: Sendable, Equatable {
        /// What to pass as the device name.
        public var name: String
        /// ALSA's description, possibly several lines.
        public var description: String
        public var canCapture: Bool
        public var canPlay: Bool
    }

    public static func pcms() -> [Device] {
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) == 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        var devices = [Device]()
        var cursor = hints
        while let hint = cursor.pointee {
            defer { cursor += 1 }
            guard let name = string(hint, "NAME"), name != "null" else { continue }
            let description = string(hint, "DESC") ?? ""
            // IOID is absent when the PCM does both directions.
            let direction = string(hint, "IOID")
            devices.append(
                Device(
                    name: name, description: description,
                    canCapture: direction == nil || direction == "Input",
                    canPlay: direction == nil || direction == "Output"))
        }
        return devices
    }

    private static func string(_ hint: UnsafeMutableRawPointer, _ id: String) -> String? {
        guard let value = snd_device_name_get_hint(hint, id) else { return nil }
        defer { free(value) }
        return String(cString: value)
    }
}
