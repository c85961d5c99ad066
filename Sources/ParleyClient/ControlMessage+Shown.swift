import ParleyWire

/// Where every string a relay sends enters the client, and is made safe once.
///
/// A relay is trusted with the audio, not with the person's terminal: an invite names any
/// relay its sender likes, and a relay of a room passes on what the others of the room
/// announce. So ``RelayLink`` hands each control message through ``madeSafeToShow()`` before
/// it acts on it, and nothing after that point (its events and failures, the roster, the
/// status line and the screen, `parley ctl`'s answers, `--stats-json`) holds a string from
/// the network as it came: escape sequences, control characters, bidirectional and invisible
/// formatting characters are `\u{…}` text (``SafeText``).
///
/// A string field added to a message is made safe here too; a message added to
/// ``ControlMessage/Body`` does not compile until this switch says what becomes of it.
extension ControlMessage {
    func madeSafeToShow() -> ControlMessage {
        var message = self
        switch body {
        case var .joined(joined):
            joined.identity = SafeText.name(joined.identity)
            joined.room = SafeText.name(joined.room)
            joined.clusterRelays = joined.clusterRelays.map(\.madeSafeToShow)
            message.body = .joined(joined)
        case var .roster(roster):
            for index in roster.members.indices { roster.members[index].identity = SafeText.name(roster.members[index].identity) }
            message.body = .roster(roster)
        case var .error(error):
            error.message = SafeText.words(error.message)
            message.body = .error(error)
        case var .goodbye(goodbye):
            goodbye.message = SafeText.words(goodbye.message)
            message.body = .goodbye(goodbye)
        case var .moderationReply(reply):
            reply.message = SafeText.words(reply.message)
            message.body = .moderationReply(reply)
        case var .redirect(redirect):
            redirect.room = SafeText.name(redirect.room)
            redirect.relay = redirect.relay.madeSafeToShow
            redirect.others = redirect.others.map(\.madeSafeToShow)
            message.body = .redirect(redirect)
        case var .text(text):
            text.sender = SafeText.name(text.sender)
            text.text = SafeText.words(text.text, limit: Text.maximumBytes)
            message.body = .text(text)
        case var .join(join):
            // A client's own messages: a relay that sends one back is ignored, but not raw.
            join.room = SafeText.name(join.room)
            join.software = SafeText.words(join.software)
            message.body = .join(join)
        case var .moderate(request):
            request.target = SafeText.name(request.target)
            request.reason = SafeText.words(request.reason)
            request.moderator = SafeText.name(request.moderator)
            message.body = .moderate(request)
        case .ready, .leave, .ping, .pong, .ack, .memberState, .mediaKeys:
            break  // numbers only (and sealed keys, never shown)
        }
        return message
    }
}

extension ControlMessage.ClusterRelay {
    /// Its address, made safe to show (a valid one is unchanged, so the link still reaches it).
    var madeSafeToShow: Self { Self(address: SafeText.address(address), publicKey: publicKey) }
}
