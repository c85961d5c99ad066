import NIOCore

/// Who receives a room's media, frozen at one roster version.
///
/// The forwarding path reads this and nothing shared: each session holds the snapshot of
/// its room, and a membership change builds a new one and hands it to every member's event
/// loop (`RelayLoop.execute`), where it replaces the old. So no lock and no atomic is touched
/// per packet, and a loop never sees a half-updated list.
final class RoomSnapshot: Sendable {
    struct Receiver: Sendable {
        let sessionID: UInt64
        let destination: DatagramAddress
        let protector: PacketProtector
        /// The member's SSRC, and where its listeners' loss reports about that stream go.
        let ssrc: UInt32
        let listenerLoss: ListenerLossBoard
    }

    let version: UInt32
    let receivers: [Receiver]
    /// Sessions a moderator server-muted: their media is dropped, not forwarded.
    let serverMuted: Set<UInt64>

    /// Room versions count up and may wrap: `a` is newer when it is less than half the range ahead.
    static func isNewer(_ a: UInt32, than b: UInt32) -> Bool { Int32(bitPattern: a &- b) > 0 }

    init(version: UInt32, receivers: [Receiver], serverMuted: Set<UInt64> = []) {
        self.version = version
        self.receivers = receivers
        self.serverMuted = serverMuted
    }

    static let empty = RoomSnapshot(version: 0, receivers: [])
}
