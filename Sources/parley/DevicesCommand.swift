import ArgumentParser
import ParleyClient
import ParleyDevices

/// `parley devices`: the ALSA PCMs this machine offers, for `--input` and `--output`.
struct DevicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List the sound devices (ALSA PCMs) Parley can capture from and play to.",
        discussion: """
            Each line gives the name to pass as a device, what it can do, and ALSA's \
            description. `default` follows the system's sound server; `plughw:` names \
            convert rate and format for you, `hw:` names do not.

            Example: parley devices --capture
            """ + "\n\n" + DevicesExitStatus.helpText)

    @Flag(help: "Only devices that can capture (microphones).")
    var capture = false

    @Flag(help: "Only devices that can play (speakers, headphones).")
    var playback = false

    @Flag(name: .shortAndLong, help: "Show ALSA's full descriptions.")
    var verbose = false

    func run() throws {
        let devices = ALSADeviceList.pcms().filter { device in
            (!capture || device.canCapture) && (!playback || device.canPlay)
        }
        guard !devices.isEmpty else {
            print("No ALSA devices found\(capture ? " that can capture" : playback ? " that can play" : ""). Is a sound card or sound server present? (`aplay -L` asks ALSA directly.)")
            return
        }
        let width = min(40, devices.map(\.name.count).max() ?? 0)
        for device in devices {
            let direction = device.canCapture && device.canPlay ? "capture+play" : device.canCapture ? "capture" : "play"
            let lines = device.description.split(separator: "\n").map(String.init)
            let name = device.name.padding(toLength: max(width, device.name.count), withPad: " ", startingAt: 0)
            let paddedDirection = direction.padding(toLength: 12, withPad: " ", startingAt: 0)
            print("\(name)  \(paddedDirection)  \(lines.first ?? "")")
            if verbose {
                for line in lines.dropFirst() { print(String(repeating: " ", count: width + 16) + line) }
            }
        }
    }
}
