import Foundation
import ParleyWire
import Synchronization

/// Writes a `PacketTrace` as the call goes (`parley call --packet-trace`).
///
/// Two threads record into it, the capture thread (packets sent) and the network loop
/// (packets received), so a lock guards the buffer; lines are appended to the file about
/// every 64 KiB, so recording costs a packet a formatted line and no system call. A write
/// that fails stops the trace and is reported by `close()`; the call goes on.
public final class PacketTraceWriter: Sendable {
    public let path: String
    private let state: Mutex<State>

    private struct State {
        var handle: FileHandle?
        var pending = ""
        var failure: String?
    }

    private static let flushBytes = 1 << 16

    /// Creates (or truncates) the file and writes the header.
    public init(path: String) throws(CallError) {
        self.path = path
        guard FileManager.default.createFile(atPath: path, contents: Data((PacketTrace.header + "\n").utf8)),
              let handle = FileHandle(forWritingAtPath: path) else {
            throw .cannotWriteOutput("--packet-trace \(path): cannot create the file (check the folder exists and is writable)")
        }
        handle.seekToEndOfFile()
        state = Mutex(State(handle: handle))
    }

    /// Records one RTP packet. `frameStartSample`: for a sent packet, where its frame starts
    /// in the `--record-sent` recording.
    public func record(_ direction: PacketTrace.Direction, _ packet: RTPPacketView, nanoseconds: UInt64, frameStartSample: Int? = nil) {
        let entry = PacketTrace.Entry(
            direction: direction, ssrc: packet.ssrc, sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp,
            nanoseconds: nanoseconds, size: packet.bytes.count, frameStartSample: frameStartSample,
            payloadType: packet.payloadType, payload: Array(packet.bytes[packet.payloadRange]))
        let line = PacketTrace.line(entry) + "\n"
        state.withLock { state in
            guard state.handle != nil else { return }
            state.pending += line
            if state.pending.utf8.count >= Self.flushBytes { Self.flush(&state, path: path) }
        }
    }

    /// Writes what is pending and closes the file; throws if any write failed.
    public func close() throws(CallError) {
        let failure = state.withLock { state -> String? in
            Self.flush(&state, path: path)
            try? state.handle?.close()
            state.handle = nil
            return state.failure
        }
        if let failure { throw .cannotWriteOutput(failure) }
    }

    private static func flush(_ state: inout State, path: String) {
        guard let handle = state.handle, !state.pending.isEmpty else { return }
        do {
            try handle.write(contentsOf: Data(state.pending.utf8))
            state.pending = ""
        } catch {
            state.failure = "--packet-trace \(path): writing failed (\(error.localizedDescription)); the trace stops there"
            try? handle.close()
            state.handle = nil
            state.pending = ""
        }
    }
}
