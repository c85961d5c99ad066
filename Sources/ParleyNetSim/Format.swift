import Foundation
import NIOCore

/// How numbers appear in messages and reports: short, in the units people use.
enum Format {
    /// 0.05 → "5%", 0.005 → "0.5%".
    static func percent(_ fraction: Double) -> String {
        number(fraction * 100) + "%"
    }

    /// A share with one decimal, for reports: 0.10017 → "10.0%".
    static func share(_ part: Int, of whole: Int) -> String {
        String(format: "%.1f%%", whole == 0 ? 0 : Double(part) * 100 / Double(whole))
    }

    /// Up to three significant decimals, without trailing zeros: 3 → "3", 2.5 → "2.5".
    static func number(_ value: Double) -> String {
        if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
        var text = String(format: "%.3f", value)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// 0.3 s → "300 ms", 1 s → "1 s", 250 µs → "0.25 ms".
    static func duration(_ duration: Duration) -> String {
        let milliseconds = duration.inMilliseconds
        if abs(milliseconds) >= 1000 { return number(milliseconds / 1000) + " s" }
        return number(milliseconds) + " ms"
    }

    /// A duration in milliseconds with one decimal, for tables: "30.1".
    static func milliseconds(_ duration: Duration) -> String {
        String(format: "%.1f", duration.inMilliseconds)
    }

    /// 64000 → "64 kbit/s", 1500000 → "1.5 Mbit/s".
    static func bitRate(_ bitsPerSecond: Int) -> String {
        if bitsPerSecond >= 1_000_000 { return number(Double(bitsPerSecond) / 1e6) + " Mbit/s" }
        if bitsPerSecond >= 1_000 { return number(Double(bitsPerSecond) / 1e3) + " kbit/s" }
        return "\(bitsPerSecond) bit/s"
    }

    /// "127.0.0.1:5000", "[::1]:5000": how people write addresses, not SocketAddress's debug form.
    static func address(_ address: SocketAddress?) -> String {
        guard let address else { return "?" }
        guard let ip = address.ipAddress, let port = address.port else { return "\(address)" }
        return address.protocol == .inet6 ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }
}
