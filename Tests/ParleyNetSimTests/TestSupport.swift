import ParleyNetSim

/// A packet's journey through a pipeline in a test: which packet, sent when, arriving when.
struct Arrival: Equatable {
    let packet: Int
    let sent: Int64
    let arrived: Int64
    var delay: Int64 { arrived - sent }
}

/// Sends `count` packets of `size` bytes, one every `interval`, through `pipeline`, and
/// returns every copy that arrives, in order of arrival (ties in order of sending).
func run(
    _ pipeline: inout ImpairmentPipeline, count: Int, interval: Duration = .milliseconds(20), size: Int = 120
) -> [Arrival] {
    let step = interval.nanoseconds
    var arrivals: [Arrival] = []
    arrivals.reserveCapacity(count)
    for packet in 0..<count {
        let sent = Int64(packet) * step
        let deliveries = pipeline.process(sentAtNanoseconds: sent, size: size)
        for copy in deliveries.indices {
            arrivals.append(Arrival(packet: packet, sent: sent, arrived: deliveries.nanoseconds(at: copy)))
        }
    }
    return arrivals.enumerated().sorted { ($0.element.arrived, $0.offset) < ($1.element.arrived, $1.offset) }.map(\.element)
}

func impairment(_ configure: (inout Impairment) -> Void) -> Impairment {
    var impairment = Impairment()
    configure(&impairment)
    return impairment
}

/// Mean and population standard deviation of some numbers.
func meanAndDeviation(_ values: [Double]) -> (mean: Double, deviation: Double) {
    let mean = values.reduce(0, +) / Double(values.count)
    let variance = values.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(values.count)
    return (mean, variance.squareRoot())
}

/// Lengths of the runs of consecutive lost packets in a sequence of fates.
func lossRuns(_ lost: [Bool]) -> [Int] {
    var runs: [Int] = []
    var current = 0
    for isLost in lost {
        if isLost {
            current += 1
        } else if current > 0 {
            runs.append(current)
            current = 0
        }
    }
    if current > 0 { runs.append(current) }
    return runs
}

func milliseconds(_ nanoseconds: Int64) -> Double { Double(nanoseconds) / 1e6 }
func milliseconds(_ nanoseconds: Double) -> Double { nanoseconds / 1e6 }

/// A relative difference, as a fraction of `expected`.
func relativeError(_ measured: Double, _ expected: Double) -> Double { abs(measured - expected) / expected }
