import AsyncHTTPClient
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A change under a watched prefix.
public enum EtcdChange: Sendable, Equatable {
    case put(EtcdEntry)
    case delete(key: String)
}

/// A watch on every key under a prefix, from a given revision (``EtcdClient/watch(prefix:fromRevision:onChanges:onEnd:)``):
/// etcd's `/v3/watch`, whose HTTP answer never ends and carries one JSON message a line,
/// each a batch of changes.
///
/// When the answer ends or etcd cancels the watch (compaction), `onEnd` says so once; the
/// owner reads the prefix afresh and watches again from there, so no change is lost between.
/// A watch the owner cancels ends without a word: the owner knows.
public final class EtcdWatch: Sendable {
    private let reader: Mutex<Task<Void, Never>?>
    /// Set by ``cancel()``, read by the reader when the answer ends.
    private final class Flag: Sendable {
        let isSet = Atomic<Bool>(false)
    }
    private let cancelled = Flag()

    init(body: HTTPClientResponse.Body, onChanges: @escaping @Sendable ([EtcdChange], Int64) -> Void, onEnd: @escaping @Sendable (any Error) -> Void) {
        reader = Mutex(nil)
        let cancelled = self.cancelled
        let task = Task {
            var lines = LineSplitter()
            var ending: any Error = EtcdError.connectionClosed
            do {
                read: for try await buffer in body {
                    for line in try lines.append(buffer.readableBytesView) {
                        if let end = Self.handle(line, onChanges: onChanges) {
                            ending = end
                            break read
                        }
                    }
                }
            } catch {
                // After its answer began, a watch that fails has lost its connection, however
                // the failure reads (a timeout, an answer cut off, a reset).
                ending = (error as? EtcdError) ?? EtcdError.connectionClosed
            }
            guard !cancelled.isSet.load(ordering: .relaxed) else { return }
            onEnd(ending)
        }
        reader.withLock { $0 = task }
    }

    /// Ends the watch (its connection closes); `onEnd` is not called.
    public func cancel() {
        cancelled.isSet.store(true, ordering: .relaxed)
        reader.withLock { $0 }?.cancel()
    }

    deinit { reader.withLock { $0 }?.cancel() }

    /// Hands one message's changes on; returns why the watch is over, if it is.
    private static func handle(_ bytes: [UInt8], onChanges: @Sendable ([EtcdChange], Int64) -> Void) -> (any Error)? {
        guard !bytes.isEmpty else { return nil }
        let message: EtcdMessages.Streamed<EtcdMessages.WatchResult>
        do {
            message = try JSONDecoder().decode(EtcdMessages.Streamed<EtcdMessages.WatchResult>.self, from: Data(bytes))
        } catch {
            return EtcdError.unreadable("a watch message: \(error)")
        }
        if let error = message.error {
            return EtcdError.refused(status: 200, code: error.code, message: error.message ?? "the watch failed")
        }
        guard let result = message.result else { return nil }
        if result.canceled == true || result.compact_revision.flatMap(Int64.init).map({ $0 > 0 }) == true {
            return EtcdError.refused(status: 200, code: nil, message: "etcd cancelled the watch: \(result.cancel_reason ?? "compacted")")
        }
        var changes: [EtcdChange] = []
        for event in result.events ?? [] {
            guard let kv = event.kv, let entry = try? EtcdEntry(kv) else { continue }
            changes.append(event.type == "DELETE" ? .delete(key: entry.key) : .put(entry))
        }
        let revision = result.header?.revision.flatMap(Int64.init) ?? 0
        if !changes.isEmpty || result.created == true { onChanges(changes, revision) }
        return nil
    }
}

/// Cuts a stream of bytes into lines ('\n'), however the chunks fall; a line longer than
/// any message etcd sends ends the watch.
struct LineSplitter {
    private var partial: [UInt8] = []

    mutating func append(_ bytes: some Sequence<UInt8>) throws(EtcdError) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                lines.append(partial)
                partial.removeAll(keepingCapacity: true)
            } else {
                partial.append(byte)
            }
        }
        guard partial.count <= EtcdClient.maximumResponseBytes else { throw .responseTooLarge }
        return lines
    }
}
