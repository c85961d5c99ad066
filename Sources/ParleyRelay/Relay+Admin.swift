import NIOCore
import ParleyWire
import Synchronization

/// What the admin API (`ParleyAdmin`) asks of a running relay: the rooms with each member's
/// figures (read on the member's own loop, since they live there), and moderation as the
/// relay's operator.
extension Relay {
    /// The name a member removed through the admin API is told.
    static let operatorName = "the relay's operator"

    /// Carries out a moderation request from the admin API, counted as the admin's.
    public func moderate(_ request: ControlMessage.ModerationRequest, in room: String) -> ControlMessage.ModerationReply {
        let reply = core.moderate(request, in: room, by: Self.operatorName, now: monotonicNanoseconds(), passOn: true)
        metrics.moderation(request.action, from: .admin, outcome: reply.outcome)
        if reply.outcome == .done {
            logger.notice("moderation by the admin API", metadata: [
                "action": "\(request.action.label)", "room": "\(room)", "target": "\(request.target.logSafe())",
            ])
        }
        return reply
    }

    /// Every room and member, with figures each loop reads from its own members' legs; the future
    /// completes on `loop`.
    public func roomsReport(on loop: any EventLoop) -> EventLoopFuture<AdminRoomsReport> {
        let listing = core.adminListing()
        let legs = listing.flatMap { $0.members.compactMap(\.leg) }
        let promise = loop.makePromise(of: [UInt64: Figures].self)
        let collected = Mutex<(figures: [UInt64: Figures], remaining: Int)>(([:], workers.count))
        for worker in workers {
            let mine = legs.filter { $0.workerIndex == worker.index }
            worker.loop.execute {
                let now = monotonicNanoseconds()
                let figures = mine.map { ($0.id, Figures(member: $0, now: now)) }
                let done = collected.withLock { state -> [UInt64: Figures]? in
                    for (id, figure) in figures { state.figures[id] = figure }
                    state.remaining -= 1
                    return state.remaining == 0 ? state.figures : nil
                }
                if let done { promise.succeed(done) }
            }
        }
        return promise.futureResult.map { figures in
            AdminRoomsReport(rooms: listing.map { room in
                AdminRoomsReport.Room(name: room.name, members: room.members.map { entry in
                    let figure = entry.leg.flatMap { figures[$0.id] }
                    return AdminRoomsReport.Member(
                        identity: entry.member.identity, ssrc: entry.member.ssrc, active: entry.member.isActive,
                        moderator: entry.leg?.isModerator ?? false, canPublish: entry.member.canPublish,
                        serverMuted: entry.serverMuted, joinedSecondsAgo: figure?.joinedSecondsAgo ?? 0,
                        packets: figure?.packets ?? 0, lossPercent: figure?.lossPercent ?? 0, bitsPerSecond: figure?.bitsPerSecond ?? 0)
                })
            })
        }
    }

    /// One member's figures, read on its loop.
    struct Figures: Sendable {
        var joinedSecondsAgo: Double
        var packets: UInt64
        var lossPercent: Double
        var bitsPerSecond: Int

        init(member: MemberLeg, now: UInt64) {
            let age = Double(now &- member.joinedNanoseconds) / 1e9
            joinedSecondsAgo = (age * 10).rounded() / 10
            let reception = member.stream.media.reception
            packets = reception?.received ?? 0
            let expected = reception?.expected ?? 0
            let lost = max(0, reception?.cumulativeLost ?? 0)
            lossPercent = expected > 0 ? (1_000 * Double(lost) / Double(expected)).rounded() / 10 : 0
            bitsPerSecond = age > 0 ? Int(Double(member.stream.media.bytesReceived) * 8 / age) : 0
        }
    }
}

extension RelayCore {
    struct ListedRoom {
        struct Entry {
            let member: Room.Member
            /// Its leg, whose figures its loop reads.
            let leg: MemberLeg?
            let serverMuted: Bool
        }

        let name: String
        let members: [Entry]
    }

    /// Every room and its members, sorted by name, as the admin API lists them.
    func adminListing() -> [ListedRoom] {
        rooms.withLock { rooms in
            rooms.directory.rooms.values.sorted { $0.name < $1.name }.map { room in
                ListedRoom(name: room.name, members: room.members.map {
                    ListedRoom.Entry(member: $0, leg: rooms.legs[$0.sessionID] as? MemberLeg, serverMuted: room.serverMuted.contains($0.identity))
                })
            }
        }
    }
}

/// `GET /admin/rooms`: every room and its members with their figures.
public struct AdminRoomsReport: Codable, Equatable, Sendable {
    public struct Room: Codable, Equatable, Sendable {
        public var name: String
        public var members: [Member]
    }

    public struct Member: Codable, Equatable, Sendable {
        public var identity: String
        public var ssrc: UInt32
        /// False while the member is still joining (has not proven its address).
        public var active: Bool
        public var moderator: Bool
        public var canPublish: Bool
        public var serverMuted: Bool
        /// Seconds since the member joined.
        public var joinedSecondsAgo: Double
        /// Media packets received from the member (forwarded, or dropped for the server-mute).
        public var packets: UInt64
        /// Of the member's packets, the share lost on the way to the relay, percent.
        public var lossPercent: Double
        /// The member's media bitrate received, averaged since it joined, bits per second.
        public var bitsPerSecond: Int
    }

    public var rooms: [Room]
}
