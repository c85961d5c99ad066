import ParleyBasics

/// Where `parley-relay serve`'s settings come from, in order: flags win over environment
/// variables (`PARLEY_RELAY_MAX_ROOMS`), which win over the config file (`max-rooms = 500`),
/// which wins over the defaults. Every part of the relay with settings of its own (the relay,
/// its admin port, its cluster) reads them from the same layers, under the same names, and
/// each error names the layer a bad value came from.
///
/// ```swift
/// let layers = ConfigurationLayers(flags: ["max-rooms": "500"], environment: environment, file: file)
/// try layers.checkKeys(known: RelayConfiguration.keys + ClusterSettings.keys)
/// var configuration = RelayConfiguration()
/// try layers.apply(RelayConfiguration.settings, to: &configuration)
/// ```
public struct ConfigurationLayers: Sendable {
    /// Only the flags given, by key (`--max-rooms 500` is `"max-rooms": "500"`).
    public var flags: [String: String]
    public var environment: [String: String]
    public var file: KeyValueFile?

    public static let environmentPrefix = "PARLEY_RELAY_"
    /// The variable that names the config file, which is not a setting.
    public static let configVariable = environmentPrefix + "CONFIG"

    public init(flags: [String: String], environment: [String: String], file: KeyValueFile?) {
        self.flags = flags
        self.environment = environment
        self.file = file
    }

    /// `max-rooms` → `PARLEY_RELAY_MAX_ROOMS`.
    public static func environmentName(_ key: String) -> String {
        environmentPrefix + String(key.uppercased().map { $0 == "-" ? "_" : $0 })
    }

    /// Refuses a key in the file, or a `PARLEY_RELAY_` variable, that no setting has: a typo
    /// must not be a setting silently left at its default.
    public func checkKeys(known keys: [String]) throws(ConfigurationError) {
        try file?.checkKeys(known: keys)
        for name in environment.keys.sorted() where name.hasPrefix(Self.environmentPrefix) && name != Self.configVariable {
            guard keys.contains(where: { Self.environmentName($0) == name }) else {
                throw ConfigurationError("unknown environment variable \(name); known: \(keys.map(Self.environmentName).joined(separator: ", "))")
            }
        }
    }

    /// Applies each of `settings` that some layer gives, the strongest layer's value.
    public func apply<Target>(_ settings: [Setting<Target>], to target: inout Target) throws(ConfigurationError) {
        for setting in settings {
            let value: String
            let source: String
            if let flag = flags[setting.key] {
                (value, source) = (flag, "--\(setting.key)")
            } else if let variable = environment[Self.environmentName(setting.key)] {
                (value, source) = (variable, Self.environmentName(setting.key))
            } else if let file, let entry = file[setting.key] {
                (value, source) = (entry.value, "\(file.source):\(entry.line): \(setting.key)")
            } else {
                continue
            }
            do {
                try setting.apply(&target, value.trimmingWhitespace)
            } catch {
                throw ConfigurationError("\(source) \(error.message)")
            }
        }
    }
}

/// One setting: its key (the flag is `--key`, the variable `PARLEY_RELAY_KEY`), what it is,
/// and how its text is applied to `Target`. `apply` throws the rest of a sentence that
/// begins with where the value came from ("is \"x\"; write a number from 1 to 256").
public struct Setting<Target>: Sendable {
    public let key: String
    public let help: String
    let apply: @Sendable (inout Target, String) throws(ConfigurationError) -> Void

    public init(key: String, help: String, apply: @escaping @Sendable (inout Target, String) throws(ConfigurationError) -> Void) {
        self.key = key
        self.help = help
        self.apply = apply
    }
}
