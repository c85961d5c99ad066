import Foundation

/// Prints a report as one line of JSON with its keys sorted: what the benchmark scripts
/// read (`--json`).
func printJSON<Report: Encodable>(_ report: Report) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    print(String(decoding: try encoder.encode(report), as: UTF8.self))
}
