import Foundation
import ParleyAudio
import ParleyDevices

/// Opens the call's input and output as the configuration names them, turning each
/// failure into the `CallError` a person can act on: a missing sound card suggests WAV
/// files, a bad WAV says what is wrong with it, an unwritable output says where.
///
/// A sound card is opened as a `ReconnectingInput`/`ReconnectingOutput`: one unplugged
/// mid-call (a USB headset) does not end the call; `onChange` hears when it goes and when it
/// comes back.
enum CallDevices {
    static func openInput(
        _ input: CallConfiguration.Input, onChange: @escaping @Sendable (DeviceAvailability) -> Void = { _ in }
    ) throws(CallError) -> any AudioInput {
        switch input {
        case let .device(device):
            return device
        case let .wav(path):
            // Read once here for a precise error (a missing file, a bad header); the input
            // then resamples and downmixes it to 48 kHz mono.
            do {
                _ = try WAVAudio(contentsOf: path)
            } catch {
                throw .badInputFile("--input \(path): \(error)")
            }
            do {
                return try WAVFileInput(path: path, sampleRate: AudioClock.sampleRate, channels: 1, pacing: .realTime)
            } catch {
                throw .badInputFile("--input \(path): \(error)")
            }
        case let .alsa(device, text):
            do {
                var configuration = ALSADeviceConfiguration(name: device)
                configuration.configurationText = text
                return ReconnectingInput(
                    try ALSACapture(configuration), open: { () throws(DeviceError) in try ALSACapture(configuration) }, onChange: onChange)
            } catch {
                throw .device(explain(error, device: device, flag: "--input"))
            }
        }
    }

    static func openOutput(
        _ output: CallConfiguration.Output, onChange: @escaping @Sendable (DeviceAvailability) -> Void = { _ in }
    ) throws(CallError) -> any AudioOutput {
        switch output {
        case let .device(device):
            return device
        case let .wav(path):
            // The file is created now, so a path that cannot be written fails before the call.
            do {
                return try WAVFileOutput(path: path, sampleRate: AudioClock.sampleRate, channels: 1, pacing: .realTime)
            } catch {
                throw .cannotWriteOutput("--output \(path): \(error)")
            }
        case let .alsa(device, text):
            do {
                var configuration = ALSADeviceConfiguration(name: device)
                configuration.configurationText = text
                return ReconnectingOutput(
                    try ALSAPlayback(configuration), open: { () throws(DeviceError) in try ALSAPlayback(configuration) }, onChange: onChange)
            } catch {
                throw .device(explain(error, device: device, flag: "--output"))
            }
        }
    }

    /// ALSA's error, plus what to do about it.
    private static func explain(_ error: DeviceError, device: String, flag: String) -> String {
        let direction = flag == "--input" ? "capture" : "playback"
        if !hasSoundCard {
            return "\(flag) alsa:\(device): this machine has no sound card (/proc/asound/cards lists none), so ALSA "
                + "cannot open '\(device)' for \(direction); to call without one, use --input FILE.wav --output FILE.wav"
        }
        var message = "\(flag) alsa:\(device): \(error)"
        if "\(error)".localizedCaseInsensitiveContains("busy") {
            message += ". Another program is using the device; close it, or pick another with `parley devices`"
        }
        return message
    }

    static var hasSoundCard: Bool {
        guard let cards = try? String(contentsOfFile: "/proc/asound/cards", encoding: .utf8) else { return false }
        return !cards.contains("no soundcards") && !cards.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
    }
}
