import NIOCore
import ParleyDatagrams

/// Who receives a room's media, frozen at one roster version.
///
/// The forwarding path reads this and nothing shared: each leg holds the snapshot of its
/// room, and a membership change builds a new one and hands it to the loop of every leg in
/// the room (`DatagramLoop.execute`), where it replaces the old. So no lock and no atomic is
/// touched per packet, and a loop never sees a half-updated list.
///
/// A room that spans relays has one receiver per trunk besides its members: a member's packet
/// is written to each trunk once, and a packet that came over a trunk goes to the members
/// here only (``Receiver/isTrunk``, ``Leg/forwardsToTrunks``), so the relays of a room form
/// a full mesh without loops.
final class RoomSnapshot: Sendable {
    struct Receiver: Sendable {
        let legID: UInt64
        let destination: DatagramAddress
        let transport: any LegTransport
        /// The member's SSRC, and where its listeners' loss reports about that stream go
        /// (unused for a trunk).
        let ssrc: UInt32
        let listenerLoss: ListenerLossBoard
        /// A trunk to another relay of the room, not a member.
        var isTrunk = false
    }

    /// A stream of a member on another relay: where the members here report losing it.
    struct RemoteStream: Sendable {
        let ssrc: UInt32
        let listenerLoss: ListenerLossBoard
    }

    let version: UInt32
    let receivers: [Receiver]
    let remoteStreams: [RemoteStream]
    /// Members here, with no trunk: who hears a stream that came over a trunk.
    let localMemberCount: Int
    /// Members on the other relays, behind the trunks.
    let remoteMemberCount: Int
    /// Members a moderator server-muted, by leg: their media is dropped, not forwarded.
    let serverMuted: Set<UInt64>

    /// Room versions count up and may wrap: `a` is newer when it is less than half the range ahead.
    static func isNewer(_ a: UInt32, than b: UInt32) -> Bool { Int32(bitPattern: a &- b) > 0 }

    init(version: UInt32, receivers: [Receiver], serverMuted: Set<UInt64> = [], remoteStreams: [RemoteStream] = [], remoteMemberCount: Int = 0) {
        self.version = version
        self.receivers = receivers
        self.serverMuted = serverMuted
        self.remoteStreams = remoteStreams
        self.localMemberCount = receivers.reduce(0) { $0 + ($1.isTrunk ? 0 : 1) }
        self.remoteMemberCount = remoteMemberCount
    }

    /// Everyone in the room who hears a member here: the other members here and every member
    /// behind a trunk.
    var listenersOfLocalMember: Int { max(localMemberCount - 1, 0) + remoteMemberCount }

    /// Where a report about stream `ssrc` from the leg `listener` goes: the board of a member
    /// here, or (`includingRemote`: the listener is a member) of a stream behind a trunk;
    /// nil for a listener's own stream or one it does not hear.
    func listenerLoss(of ssrc: UInt32, reportedBy listener: UInt64, includingRemote: Bool = true) -> ListenerLossBoard? {
        if let local = receivers.first(where: { !$0.isTrunk && $0.ssrc == ssrc }) {
            return local.legID == listener ? nil : local.listenerLoss
        }
        return includingRemote ? remoteStreams.first { $0.ssrc == ssrc }?.listenerLoss : nil
    }

    static let empty = RoomSnapshot(version: 0, receivers: [])
}
