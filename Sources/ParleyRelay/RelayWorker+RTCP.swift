import NIOCore

/// RTCP, terminated per leg: each member's reports and feedback are read by ``MemberRTCP``
/// against that member's stream, and the relay sends each member its own receiver reports.
extension RelayWorker {
    /// A member's RTCP: its sender reports and feedback are read here; only what the other
    /// members need goes on to them.
    func receiveRTCP(_ buffer: ByteBuffer, from session: Session, now: UInt64) {
        switch buffer.withUnsafeReadableBytes({ MemberRTCP.receive($0, from: session, now: now) }) {
        case let .dropped(reason):
            drop(reason)
        case let .accepted(nacks, forward):
            if nacks > 0 { drop(.nackNotServed, count: nacks) }
            guard let forward else { return }
            var copy = allocator.buffer(capacity: forward.count)
            copy.writeBytes(forward)
            _ = writeToOthers(copy, from: session, kind: .rtcp, now: now)
        }
    }

    /// The relay's own receiver report on the member's stream (none before the stream has a
    /// valid reception record); the caller decides when one is due.
    func sendReceiverReport(to session: Session, now: UInt64) {
        guard let report = MemberRTCP.receiverReport(for: session, relaySSRC: relaySSRC, now: now) else { return }
        send(report, to: session, kind: .rtcp)
    }
}
