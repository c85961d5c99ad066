/// Datagrams the kernel dropped because a relay socket's receive buffer was full: the part
/// of an overload the relay itself never sees. Linux counts them per socket in the last
/// column of /proc/net/udp and /proc/net/udp6; the relay's sockets are those bound to its
/// port (SO_REUSEPORT gives it one per event loop). Public for the benchmarks, which tell a
/// forwarder's drops from their own generator's the same way.
public enum KernelSocketDrops {
    /// The sum over every UDP socket bound to `port`, or nil where /proc is not there.
    public static func count(port: Int) -> Int? {
        var total: Int?
        for path in ["/proc/net/udp", "/proc/net/udp6"] {
            guard let text = try? FileText.read(path: path, what: "kernel socket table", hint: "") else { continue }
            total = (total ?? 0) + sum(table: text, port: port)
        }
        return total
    }

    /// Parses the table's lines: `sl local_address rem_address … drops`, where the local
    /// address ends in `:PORT` in hexadecimal.
    static func sum(table: String, port: Int) -> Int {
        var drops = 0
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 13, let colon = fields[1].lastIndex(of: ":"),
                  Int(fields[1][fields[1].index(after: colon)...], radix: 16) == port,
                  let count = Int(fields[fields.count - 1]) else { continue }
            drops += count
        }
        return drops
    }
}
