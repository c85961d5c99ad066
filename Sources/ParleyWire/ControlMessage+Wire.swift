extension ControlMessage {
    public init(parsing bytes: UnsafeRawBufferPointer) throws(WireError) {
        var reader = ByteReader(bytes, element: .controlMessage)
        guard try reader.readUInt8() == Self.magic else {
            throw .malformed(.controlMessage, reason: "first byte is not the control magic 0x50")
        }
        guard try reader.readUInt8() == Self.version else {
            throw .malformed(.controlMessage, reason: "unsupported control protocol version")
        }
        let rawType = try reader.readUInt8()
        let flags = try reader.readUInt8()
        self.sequence = try reader.readUInt32()
        self.isReliable = flags & 0x01 != 0
        guard let type = MessageType(rawValue: rawType) else {
            throw .malformed(.controlMessage, reason: "unknown control message type")
        }
        switch type {
        case .join:
            let ssrc = try reader.readUInt32()
            let room = try reader.readString8()
            let token = try reader.readString16()
            let software = try reader.readString8()
            // Then the capabilities and the identity key (zero padding from older clients: no
            // capabilities, no key); the rest is padding.
            let capabilities = Capabilities(rawValue: reader.isAtEnd ? 0 : try reader.readUInt8())
            let identityKey = reader.isAtEnd ? [] : try Self.readIdentityKey(&reader)
            body = .join(Join(ssrc: ssrc, room: room, token: token, software: software, capabilities: capabilities, identityKey: identityKey))
        case .joined:
            let cookie = try reader.readUInt64()
            let ssrc = try reader.readUInt32()
            let identity = try reader.readString8()
            let room = try reader.readString8()
            let permissions = try reader.readUInt8()
            let keepalive = try reader.readUInt32()
            let idle = try reader.readUInt32()
            // Relays of a cluster list others after the fields every relay sends.
            let relays = reader.isAtEnd ? [] : try ClusterRelay.readList(&reader)
            body = .joined(Joined(
                cookie: cookie, ssrc: ssrc, identity: identity, room: room,
                canPublish: permissions & 0x01 != 0, isEndToEndEncrypted: permissions & 0x02 != 0,
                keepaliveIntervalMilliseconds: keepalive, idleTimeoutMilliseconds: idle, clusterRelays: relays
            ))
        case .ready:
            body = .ready(Ready(cookie: try reader.readUInt64()))
        case .roster:
            let version = try reader.readUInt32()
            let pageIndex = try reader.readUInt8()
            let pageCount = try reader.readUInt8()
            guard pageIndex < pageCount else {
                throw .malformed(.controlMessage, reason: "roster page index is not below the page count")
            }
            let count = Int(try reader.readUInt8())
            var members: [Roster.Member] = []
            members.reserveCapacity(count)
            for _ in 0..<count {
                let ssrc = try reader.readUInt32()
                let flags = try reader.readUInt8()
                let identity = try reader.readString8()
                members.append(Roster.Member(
                    ssrc: ssrc, identity: identity, canPublish: flags & 0x01 != 0, capabilities: Capabilities(rawValue: flags >> 1),
                    isServerMuted: flags & Roster.Member.serverMutedFlag != 0))
            }
            try Self.readRosterStates(&reader, into: &members)
            try Self.readRosterKeys(&reader, into: &members)
            body = .roster(Roster(version: version, pageIndex: pageIndex, pageCount: pageCount, members: members))
        case .leave:
            body = .leave(Leave())
        case .ping:
            body = .ping(Ping(timestamp: try reader.readUInt64()))
        case .pong:
            body = .pong(Pong(timestamp: try reader.readUInt64()))
        case .ack:
            body = .ack(Ack(sequence: try reader.readUInt32()))
        case .error:
            let code = ErrorCode(wireValue: try reader.readUInt16())
            let message = try reader.readString8()
            // The echo is optional and last (relays before it sent none).
            var echo: [UInt8] = []
            if !reader.isAtEnd {
                let count = Int(try reader.readUInt8())
                guard count <= ErrorReply.maximumEchoSize else {
                    throw .malformed(.controlMessage, reason: "error echo longer than \(ErrorReply.maximumEchoSize) bytes")
                }
                echo = Array(try reader.readBytes(count))
            }
            body = .error(ErrorReply(code: code, message: message, echo: echo))
        case .goodbye:
            let reason = GoodbyeReason(wireValue: try reader.readUInt8())
            body = .goodbye(Goodbye(reason: reason, message: try reader.readString8()))
        case .moderate:
            body = .moderate(try ModerationRequest(reading: &reader))
        case .moderationReply:
            body = .moderationReply(try ModerationReply(reading: &reader))
        case .redirect:
            let room = try reader.readString8()
            let relay = try ClusterRelay(reading: &reader)
            body = .redirect(Redirect(room: room, relay: relay, others: try ClusterRelay.readList(&reader)))
        case .memberState:
            body = .memberState(try Self.readMemberStateUpdate(&reader))
        case .text:
            body = .text(try Self.readText(&reader))
        case .mediaKeys:
            body = .mediaKeys(try MediaKeys(reading: &reader))
        }
    }

    public init(parsing bytes: [UInt8]) throws(WireError) {
        var result: Result<ControlMessage, WireError>!
        bytes.withUnsafeBytes { raw in
            do throws(WireError) { result = .success(try ControlMessage(parsing: raw)) } catch { result = .failure(error) }
        }
        self = try result.get()
    }

    /// Bytes the message takes, joins included with their padding.
    public var serializedSize: Int {
        let bodySize: Int
        switch body {
        case let .join(join):
            let natural = 4 + 1 + join.room.utf8.count + 2 + join.token.utf8.count + 1 + join.software.utf8.count + 1
                + 1 + join.identityKey.count
            return max(Self.minimumJoinSize, Self.headerSize + natural)
        case let .joined(joined):
            bodySize = 8 + 4 + 1 + joined.identity.utf8.count + 1 + joined.room.utf8.count + 1 + 4 + 4
                + (joined.clusterRelays.isEmpty ? 0 : ClusterRelay.listSize(joined.clusterRelays))
        case .ready, .ping, .pong:
            bodySize = 8
        case let .roster(roster):
            bodySize = 4 + 1 + 1 + 1 + roster.members.reduce(0) { $0 + $1.serializedSize }
        case .leave:
            bodySize = 0
        case .ack:
            bodySize = 4
        case let .error(error):
            bodySize = 2 + 1 + error.message.utf8.count + (error.echo.isEmpty ? 0 : 1 + error.echo.count)
        case let .goodbye(goodbye):
            bodySize = 1 + 1 + goodbye.message.utf8.count
        case let .moderate(request):
            bodySize = request.serializedSize
        case let .moderationReply(reply):
            bodySize = reply.serializedSize
        case let .redirect(redirect):
            bodySize = 1 + redirect.room.utf8.count + redirect.relay.serializedSize + ClusterRelay.listSize(redirect.others)
        case .memberState:
            bodySize = 4 + 1
        case let .text(text):
            bodySize = Self.serializedSize(of: text)
        case let .mediaKeys(keys):
            bodySize = keys.serializedSize
        }
        return Self.headerSize + bodySize
    }

    public func write(to writer: inout ByteWriter) throws(WireError) {
        let start = writer.offset
        try writer.write(Self.magic)
        try writer.write(Self.version)
        try writer.write(body.type.rawValue)
        try writer.write(UInt8(isReliable ? 0x01 : 0x00))
        try writer.write(sequence)
        switch body {
        case let .join(join):
            try writer.write(join.ssrc)
            try writer.writeString8(join.room, element: .controlMessage)
            try writer.writeString16(join.token, element: .controlMessage)
            try writer.writeString8(join.software, element: .controlMessage)
            try writer.write(join.capabilities.rawValue)
            try Self.writeIdentityKey(join.identityKey, to: &writer)
            try writer.writeZeros(max(0, Self.minimumJoinSize - (writer.offset - start)))
        case let .joined(joined):
            try writer.write(joined.cookie)
            try writer.write(joined.ssrc)
            try writer.writeString8(joined.identity, element: .controlMessage)
            try writer.writeString8(joined.room, element: .controlMessage)
            try writer.write(UInt8(joined.canPublish ? 0x01 : 0x00) | (joined.isEndToEndEncrypted ? 0x02 : 0x00))
            try writer.write(joined.keepaliveIntervalMilliseconds)
            try writer.write(joined.idleTimeoutMilliseconds)
            if !joined.clusterRelays.isEmpty { try ClusterRelay.writeList(joined.clusterRelays, to: &writer) }
        case let .ready(ready):
            try writer.write(ready.cookie)
        case let .roster(roster):
            guard roster.pageIndex < roster.pageCount else {
                throw .malformed(.controlMessage, reason: "roster page index is not below the page count")
            }
            guard roster.members.count <= 255 else {
                throw .malformed(.controlMessage, reason: "more than 255 members in one roster page")
            }
            try writer.write(roster.version)
            try writer.write(roster.pageIndex)
            try writer.write(roster.pageCount)
            try writer.write(UInt8(roster.members.count))
            for member in roster.members {
                try writer.write(member.ssrc)
                try writer.write(UInt8(member.canPublish ? 0x01 : 0x00) | (member.capabilities.rawValue & Capabilities.rosterMask) << 1
                                 | (member.isServerMuted ? Roster.Member.serverMutedFlag : 0))
                try writer.writeString8(member.identity, element: .controlMessage)
            }
            try Self.writeRosterStates(roster.members, to: &writer)
            try Self.writeRosterKeys(roster.members, to: &writer)
        case .leave:
            break
        case let .ping(ping):
            try writer.write(ping.timestamp)
        case let .pong(pong):
            try writer.write(pong.timestamp)
        case let .ack(ack):
            try writer.write(ack.sequence)
        case let .error(error):
            try writer.write(error.code.rawValue)
            try writer.writeString8(error.message, element: .controlMessage)
            if !error.echo.isEmpty {
                guard error.echo.count <= ErrorReply.maximumEchoSize else {
                    throw .malformed(.controlMessage, reason: "error echo longer than \(ErrorReply.maximumEchoSize) bytes")
                }
                try writer.write(UInt8(error.echo.count))
                try writer.write(contentsOf: error.echo)
            }
        case let .goodbye(goodbye):
            try writer.write(goodbye.reason.rawValue)
            try writer.writeString8(goodbye.message, element: .controlMessage)
        case let .moderate(request):
            try request.write(to: &writer)
        case let .moderationReply(reply):
            try reply.write(to: &writer)
        case let .redirect(redirect):
            try writer.writeString8(redirect.room, element: .controlMessage)
            try redirect.relay.write(to: &writer)
            try ClusterRelay.writeList(redirect.others, to: &writer)
        case let .memberState(update):
            try Self.write(update, to: &writer)
        case let .text(text):
            try Self.write(text, to: &writer)
        case let .mediaKeys(keys):
            try keys.write(to: &writer)
        }
    }

    /// Writes the message into `buffer`; returns the number of bytes written.
    @discardableResult
    public func serialize(into buffer: UnsafeMutableRawBufferPointer) throws(WireError) -> Int {
        var writer = ByteWriter(buffer)
        try write(to: &writer)
        return writer.offset
    }

    public func serialized() throws(WireError) -> [UInt8] {
        try [UInt8](serializedSize: serializedSize) { (writer: inout ByteWriter) throws(WireError) in
            try write(to: &writer)
        }
    }
}
