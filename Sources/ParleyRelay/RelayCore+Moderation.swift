import ParleyBasics
import ParleyWire

/// Who asked for a moderation: a member whose token carries the `mod` claim, or the
/// person running the relay, through the admin API.
enum ModerationSource: String, Sendable, Hashable, CaseIterable {
    /// A member here, the admin API here, or a moderator on another relay of the room (its
    /// request passed on over a trunk).
    case member, admin, trunk

    var label: String { rawValue }
}

/// Room control, under the core's one lock like every membership change: server-mute and
/// unmute, kick (a ban per room and identity in ``KickList``), close a room. A removed
/// member's leg is closed on its own loop (``LegLoop/deliverEnding(_:to:)``),
/// which tells it goodbye with the reason; the others get the new roster as after any leave.
///
/// In a room that spans relays the request also goes over the room's trunks, and each relay
/// carries it out on its own members: a member on another relay is muted or removed by its
/// relay (the room's roster says so, as after any change there), a kick's ban is kept by every
/// relay of the room, and closing the room closes it everywhere.
extension RelayCore {
    /// Carries out `request` in `room`, asked by `moderator` (the name the removed member is
    /// told). The request's fields are checked first (``ModerationCheck``).
    func moderate(_ request: ControlMessage.ModerationRequest, in room: String, by moderator: String, now: UInt64,
                  passOn: Bool) -> ControlMessage.ModerationReply {
        if let problem = ModerationCheck.problem(with: request) { return .init(outcome: .invalid, message: problem) }
        return rooms.withLock { rooms -> ControlMessage.ModerationReply in
            guard let current = rooms.directory[room] else {
                if !passOn, request.action == .kick {
                    // Another relay of the room kicked someone: they may not come in here either.
                    let seconds = request.effectiveBanSeconds
                    rooms.kicks.ban(request.target, from: room, seconds: seconds, by: moderator, reason: request.reason, now: now)
                }
                return .init(outcome: .noSuchMember, message: "there is no room \(room) on this relay (nobody is in it)")
            }
            // Handed to the trunks' loops under the lock, so every relay sees one order.
            var forwarded = request
            forwarded.moderator = moderator
            let passOnTo = passOn ? rooms.trunks(of: current) : []
            func passItOn() {
                for trunk in passOnTo { loop(trunk.workerIndex).deliverModeration(forwarded, to: trunk) }
            }
            let elsewhere = " (passed on to the relay of the room they are on, which carries it out)"
            switch request.action {
            case .serverMute, .serverUnmute:
                let muted = request.action == .serverMute
                let done = muted
                    ? "\(request.target) is muted for everyone in \(room) until unmuted"
                    : "\(request.target) may be heard again in \(room)"
                if rooms.directory.setServerMuted(request.target, muted, in: room) {
                    roomChanged(room, in: &rooms, now: now)
                    return .init(outcome: .done, message: done)
                }
                guard !passOnTo.isEmpty, current.remoteMember(identity: request.target) != nil else {
                    return Self.noSuchMember(request.target, in: current)
                }
                passItOn()
                return .init(outcome: .done, message: done + elsewhere)
            case .kick:
                let seconds = request.effectiveBanSeconds
                let banned = "they cannot rejoin for \(DurationWords.text(seconds: seconds))"
                guard let member = current.member(identity: request.target) else {
                    guard passOn else {
                        rooms.kicks.ban(request.target, from: room, seconds: seconds, by: moderator, reason: request.reason, now: now)
                        return .init(outcome: .noSuchMember, message: "\(request.target) is not on this relay; banned here too")
                    }
                    guard !passOnTo.isEmpty, let remote = current.remoteMember(identity: request.target) else {
                        return Self.noSuchMember(request.target, in: current)
                    }
                    rooms.kicks.ban(remote.identity, from: room, seconds: seconds, by: moderator, reason: request.reason, now: now)
                    passItOn()
                    return .init(outcome: .done, message: "\(remote.identity) removed from \(room)\(elsewhere); \(banned)")
                }
                rooms.kicks.ban(member.identity, from: room, seconds: seconds, by: moderator, reason: request.reason, now: now)
                let told = Self.kickText(by: moderator, room: room, reason: request.reason, seconds: seconds)
                removeForModeration(member, from: room, reason: .kicked, message: told, in: &rooms, now: now)
                if rooms.directory[room] == nil { rooms.rosterSchedule.roomClosed(room) }
                updateGauges(rooms)
                passItOn()  // the ban holds on every relay of the room
                return .init(outcome: .done, message: "\(member.identity) removed from \(room); \(banned)")
            case .closeRoom:
                passItOn()
                let trunks = rooms.trunks(of: current)
                let members = rooms.directory.close(room)
                let told = Self.closeText(by: moderator, room: room, reason: request.reason)
                for member in members {
                    if let leg = rooms.legs.removeValue(forKey: member.sessionID) {
                        loop(leg.workerIndex).deliverEnding(.removed(.roomClosed, message: told), to: leg)
                    }
                }
                // The room's trunks go with it (a new room of that name starts without them).
                for trunk in trunks {
                    rooms.legs[trunk.id] = nil
                    rooms.trunkStreams[trunk.id] = nil
                    loop(trunk.workerIndex).deliverEnding(.trunkClosing, to: trunk)
                }
                rooms.rosterSchedule.roomClosed(room)
                updateGauges(rooms)
                return .init(outcome: .done, message: "closed \(room); \(members.count) member\(members.count == 1 ? "" : "s") removed")
            case .unknown:
                return .init(outcome: .invalid, message: "this relay does not know that request; update the relay")
            }
        }
    }

    private func removeForModeration(_ member: Room.Member, from room: String, reason: RemovalReason, message: String, in rooms: inout Rooms, now: UInt64) {
        rooms.directory.remove(sessionID: member.sessionID, from: room)
        if member.isActive, rooms.directory[room] != nil { roomChanged(room, in: &rooms, now: now) }
        if let leg = rooms.legs.removeValue(forKey: member.sessionID) {
            loop(leg.workerIndex).deliverEnding(.removed(reason, message: message), to: leg)
        }
    }

    private static func noSuchMember(_ identity: String, in room: Room) -> ControlMessage.ModerationReply {
        let everyone = room.members.map(\.identity) + room.trunks.flatMap { $0.members.map(\.identity) }
        let names = everyone.sorted().prefix(10).joined(separator: ", ")
        return .init(outcome: .noSuchMember, message: "nobody called '\(identity.prefix(64))' is in \(room.name); in it: \(names)")
    }

    /// What a kicked member is told (a goodbye holds at most 255 bytes; the reason is bounded
    /// by ``ControlMessage/ModerationRequest/maximumReasonBytes``).
    static func kickText(by moderator: String, room: String, reason: String, seconds: UInt32) -> String {
        let why = reason.isEmpty ? "" : ": \(reason)"
        return "\(moderator) removed you from \(room)\(why). You can rejoin in \(DurationWords.text(seconds: seconds))."
    }

    static func closeText(by moderator: String, room: String, reason: String) -> String {
        let why = reason.isEmpty ? "" : ": \(reason)"
        return "\(moderator) closed \(room)\(why)."
    }
}

/// Whether a moderation request can be carried out as written, before any lock is taken.
public enum ModerationCheck {
    public static func problem(with request: ControlMessage.ModerationRequest) -> String? {
        switch request.action {
        case .serverMute, .serverUnmute, .kick:
            if request.target.isEmpty { return "name the member to \(request.action == .kick ? "kick" : "mute")" }
        case .closeRoom:
            break
        case .unknown:
            return "this relay does not know that request; update the relay"
        }
        if request.reason.utf8.count > ControlMessage.ModerationRequest.maximumReasonBytes {
            return "the reason is longer than \(ControlMessage.ModerationRequest.maximumReasonBytes) bytes; say it in fewer words"
        }
        if request.reason.firstScalarChangingHowItReads != nil {
            return "the reason may not contain control characters, line breaks, bidirectional controls or invisible formatting characters"
        }
        if request.banSeconds > KickList.maximumBanSeconds {
            return "a kick keeps someone out for at most \(DurationWords.text(seconds: KickList.maximumBanSeconds))"
        }
        return nil
    }
}

extension ControlMessage.ModerationRequest {
    /// The ban a kick asks for: its own length, or the default when it names none.
    var effectiveBanSeconds: UInt32 { banSeconds == 0 ? KickList.defaultBanSeconds : banSeconds }
}

extension KickList.Ban {
    /// The join refusal a banned member reads.
    func refusal(room: String, now: UInt64) -> String {
        let why = reason.isEmpty ? "" : ": \(reason)"
        return "\(by) removed you from \(room)\(why); you can rejoin in \(DurationWords.text(seconds: secondsLeft(now: now)))"
    }

    /// What is left of the ban, in whole seconds rounded up (0 once it ran out).
    func secondsLeft(now: UInt64) -> UInt32 {
        UInt32(clamping: until > now ? (until - now + 999_999_999) / 1_000_000_000 : 0)
    }
}

/// "45 s", "5 min", "2 h 30 min", "3 days": a duration as a person reads it.
public enum DurationWords {
    public static func text(seconds: UInt32) -> String {
        switch seconds {
        case ..<120: return "\(seconds) s"
        case ..<7_200:
            let minutes = (seconds + 30) / 60
            return "\(minutes) min"
        case ..<172_800:
            let (hours, minutes) = (seconds / 3_600, (seconds % 3_600) / 60)
            return minutes == 0 ? "\(hours) h" : "\(hours) h \(minutes) min"
        default:
            return "\(seconds / 86_400) days"
        }
    }
}
