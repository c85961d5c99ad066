#if canImport(Glibc)
import Glibc
#endif

func percent(_ value: Double) -> String {
    let hundredths = Int((value * 10_000).rounded())
    return "\(hundredths / 100).\(String(repeating: "0", count: hundredths % 100 < 10 ? 1 : 0))\(hundredths % 100) %"
}

func log(_ text: String) {
    var line = Array((text + "\n").utf8)
    while !line.isEmpty {
        let written = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        guard written > 0 else { return }
        line.removeFirst(written)
    }
}
