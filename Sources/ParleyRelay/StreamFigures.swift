/// Loss and jitter of one member's streams, kept in its leg from when it is active until it
/// leaves, and written into `/metrics` at each scrape with the room and identity as labels.
///
/// They are plain fields rather than swift-metrics gauges on purpose: the Prometheus
/// registry copies its whole table of label sets under its lock to add or remove one, and a
/// scrape holds that lock while it formats, so per-member gauges made every join and leave
/// cost the relay's loop time proportional to the members present (seconds of a loop when a
/// thousand left at once). The loop owns these; a scrape asks each loop for a copy.
struct StreamFigures: Equatable {
    /// The member's stream as the relay receives it (our receive statistics, RFC 3550 A.3/A.8).
    var upstreamLoss = 0.0
    var upstreamJitterSeconds = 0.0
    /// The worst stream the member reports receiving from the relay (its receiver reports).
    var downstreamLoss = 0.0
    var downstreamJitterSeconds = 0.0

    /// One member's figures as a scrape reads them.
    struct Sample {
        let room: String
        let identity: String
        let figures: StreamFigures
    }

    /// The four series, each with its samples, after the registry's own exposition: a `TYPE`
    /// line per metric, then one line per member, in room and identity order.
    static func exposition(of samples: [Sample], into buffer: inout [UInt8]) {
        let sorted = samples.sorted { ($0.room, $0.identity) < ($1.room, $1.identity) }
        let series: [(name: String, value: (StreamFigures) -> Double)] = [
            ("parley_relay_upstream_loss_ratio", \.upstreamLoss),
            ("parley_relay_upstream_jitter_seconds", \.upstreamJitterSeconds),
            ("parley_relay_downstream_loss_ratio", \.downstreamLoss),
            ("parley_relay_downstream_jitter_seconds", \.downstreamJitterSeconds),
        ]
        for (name, value) in series where !sorted.isEmpty {
            buffer.append(contentsOf: "# TYPE \(name) gauge\n".utf8)
            for sample in sorted {
                buffer.append(contentsOf: "\(name){room=\"\(labelValue(sample.room))\",identity=\"\(labelValue(sample.identity))\"} \(value(sample.figures))\n".utf8)
            }
        }
    }

    /// A label value as the text format wants it: backslash, quote and line feed escaped.
    /// Names are held to what `ParleyNames` allows where they enter; this keeps the
    /// exposition well formed whatever they hold.
    static func labelValue(_ text: String) -> String {
        var escaped = ""
        for character in text.unicodeScalars {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }
}
