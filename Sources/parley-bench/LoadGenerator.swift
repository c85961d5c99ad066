import ParleyBasics
import ParleySecurity
import ParleyRelay
import ParleyWire

#if canImport(Glibc)
import Glibc
#endif

/// Every member's traffic through one UDP socket. Member i is the address 127.1.x.y on the
/// socket's port: IP_PKTINFO picks the source address of each datagram sent and tells the
/// destination of each datagram received. So sending and receiving are batched
/// (sendmmsg/recvmmsg) however many members there are, and the load generator on its one
/// CPU costs far less than the forwarder it measures.
final class LoadGenerator {
    struct Member {
        let address: sockaddr_in
        let room: Int
        let ssrc: UInt32
        var sequence: UInt16 = 0
        var sentInWindow = 0
    }

    var members: [Member] = []
    let roomsCount: Int
    let membersPerRoom: Int
    let payload: Int
    let socket: MultiAddressSocket
    /// Each member's session with an encrypted relay (from its own handshake, as a real
    /// client's); empty on a plaintext one.
    var sessions: [SecureSession?] = []
    /// Each member's receiving half of its session, which opens what the relay sends it.
    var receivers: [SecureSession.Receiver?] = []
    var encrypted: Bool { !sessions.isEmpty }

    init(rooms: Int, members: Int, payload: Int, forwarder: any ForwarderUnderTest) throws {
        roomsCount = rooms
        membersPerRoom = members
        self.payload = max(payload, 24)
        socket = try MultiAddressSocket(destination: loopbackAddress(port: forwarder.port))
        for room in 0..<rooms {
            for index in 0..<members {
                let number = self.members.count
                self.members.append(Member(address: memberAddress(number, port: socket.port), room: room, ssrc: UInt32(room * 100 + index + 1)))
            }
        }
        try forwarder.prepare(members: self.members, socket: socket)
        switch forwarder.entry {
        case let .table(setRooms):
            setRooms((0..<rooms).map { room in self.members.filter { $0.room == room }.map(\.address) })
        case let .join(security, token):
            let joined = try CrowdJoin(socket: socket, relayPort: forwarder.port, security: security, token: token).join(self.members)
            if case .secure = security {
                sessions = joined.map(\.session)
                receivers = joined.map(\.receiver)
            }
        }
    }

    /// Sends every member's packets at 50/s for `seconds` after a warm-up, and measures.
    func run(seconds: Double, forwarder: any ForwarderUnderTest) throws -> TrialResult {
        let talkers = members.count
        let interval = 1.0 / RelayBenchmark.packetsPerSecondPerTalker
        let start = monotonic()
        let windowStart = start + 0.5
        let windowEnd = windowStart + seconds
        let stopReceiving = windowEnd + 0.3
        var packet = [UInt8](repeating: 0, count: 12 + payload)
        var sealedPacket = [UInt8](repeating: 0, count: SecureSession.sealedSize(plaintextCount: 12 + payload))
        var opened = [UInt8](repeating: 0, count: 2048)
        var latencies: [Int64] = []
        latencies.reserveCapacity(Int(Double(talkers) * 50 * seconds) * (membersPerRoom - 1) + 1024)
        var received = 0
        var strays = 0
        var cpuAtStart = 0.0, cpuAtEnd = 0.0
        var generatorCPUAtStart = 0.0, generatorCPUAtEnd = 0.0
        var dropsAtStart = (forwarder: 0, generator: 0)
        var sentTotal = 0
        var measuring = false, stoppedMeasuring = false
        // Talker i sends at start + (k + i/N) × 20 ms: spread evenly, as independent people would.
        var cursor = 0
        var round = 0
        func due(_ index: Int, _ round: Int) -> Double { start + interval * (Double(round) + Double(index) / Double(talkers)) }
        while true {
            let now = monotonic()
            if now >= stopReceiving { break }
            if !measuring && now >= windowStart {
                measuring = true
                cpuAtStart = forwarder.cpuSeconds()
                generatorCPUAtStart = processCPUSeconds(path: "/proc/thread-self/stat")
                dropsAtStart = (KernelSocketDrops.count(port: Int(forwarder.port)) ?? 0, KernelSocketDrops.count(port: Int(socket.port)) ?? 0)
            }
            if measuring && !stoppedMeasuring && now >= windowEnd {
                stoppedMeasuring = true
                cpuAtEnd = forwarder.cpuSeconds()
                generatorCPUAtEnd = processCPUSeconds(path: "/proc/thread-self/stat")
            }
            if now < windowEnd {
                // The send time in each packet is on CLOCK_REALTIME, the clock of the kernel's
                // receive timestamps that the latency is measured against.
                let stamp = realtimeNanoseconds()
                let sealNow = MonotonicClock.now()
                while socket.queued < MultiAddressSocket.batch {
                    let dueTime = due(cursor, round)
                    guard dueTime <= now else { break }
                    let inWindow = dueTime >= windowStart && dueTime < windowEnd
                    members[cursor].sequence &+= 1
                    fill(&packet, member: members[cursor], stamp: stamp, inWindow: inWindow)
                    if let session = sessions.isEmpty ? nil : sessions[cursor] {
                        // A real client seals each packet once for the relay; so does the generator.
                        let count = packet.withUnsafeBytes { plain in
                            sealedPacket.withUnsafeMutableBytes { (try? session.seal(plain, into: $0, nowNanoseconds: sealNow)) ?? 0 }
                        }
                        socket.queue(Array(sealedPacket.prefix(count)), from: members[cursor].address)
                    } else {
                        socket.queue(packet, from: members[cursor].address)
                    }
                    if inWindow { members[cursor].sentInWindow += 1; sentTotal += 1 }
                    cursor += 1
                    if cursor == talkers { cursor = 0; round += 1 }
                }
                socket.flush()
            }
            // Nothing to send for a while: wait in poll rather than spin (the machine is shared).
            if now < windowEnd, due(cursor, round) - monotonic() > 0.0005 {
                var poller = pollfd(fd: socket.descriptor, events: Int16(POLLIN), revents: 0)
                _ = poll(&poller, 1, 0 < due(cursor, round) - monotonic() - 0.0012 ? 1 : 0)
            } else if now >= windowEnd {
                var poller = pollfd(fd: socket.descriptor, events: Int16(POLLIN), revents: 0)
                _ = poll(&poller, 1, 1)
            }
            socket.receive { destination, sealedBytes in
                // Encrypted: open with the receiving member's session (what its client would do).
                var bytes = sealedBytes
                if encrypted {
                    guard sealedBytes.first == SecureMessageType.sealed.rawValue, let index = memberIndex(destination), index < members.count,
                          let session = sessions[index], receivers[index] != nil else { return }
                    guard let count = try? opened.withUnsafeMutableBytes({ try receivers[index]!.open(sealedBytes, into: $0) }) else { strays += 1; return }
                    bytes = opened.withUnsafeBytes { UnsafeRawBufferPointer(rebasing: $0[0..<count]) }
                    if bytes.first == ControlMessage.magic {
                        // Rosters are reliable; the relay's receiver reports need nothing.
                        if let message = try? ControlMessage(parsing: Array(bytes)), message.isReliable,
                           let ack = try? ControlMessage(body: .ack(.init(sequence: message.sequence))).serialized() {
                            let count = ack.withUnsafeBytes { plain in sealedPacket.withUnsafeMutableBytes { (try? session.seal(plain, into: $0, nowNanoseconds: MonotonicClock.now())) ?? 0 } }
                            socket.queue(Array(sealedPacket.prefix(count)), from: members[index].address)
                        }
                        return
                    }
                }
                guard bytes.count >= 21, bytes[bytes.startIndex] >> 6 == 2 else {
                    // Control (rosters) and the relay's receiver reports: ack what is reliable.
                    if bytes.count >= 8, bytes.first == ControlMessage.magic, bytes[bytes.startIndex + 3] & 1 != 0,
                       let index = memberIndex(destination), index < members.count,
                       let message = try? ControlMessage(parsing: Array(bytes)) {
                        socket.queue(try! ControlMessage(body: .ack(.init(sequence: message.sequence))).serialized(), from: members[index].address)
                    }
                    return
                }
                guard bytes[bytes.startIndex + 1] & 0x7F == RTPHeader.opusPayloadType, bytes[bytes.startIndex + 20] == 1 else { return }
                guard let index = memberIndex(destination), index < members.count else { strays += 1; return }
                let arrival = Int64(socket.lastArrivalNanoseconds)
                var sentAt: UInt64 = 0
                for offset in 12..<20 { sentAt = sentAt << 8 | UInt64(bytes[bytes.startIndex + offset]) }
                let ssrc = UInt32(bytes[bytes.startIndex + 8]) << 24 | UInt32(bytes[bytes.startIndex + 9]) << 16
                    | UInt32(bytes[bytes.startIndex + 10]) << 8 | UInt32(bytes[bytes.startIndex + 11])
                guard Int(ssrc - 1) / 100 == members[index].room else { strays += 1; return }
                received += 1
                latencies.append(arrival - Int64(sentAt))
            }
            socket.flush()
        }
        // Read after the copies sent in the window have had their 0.3 s to arrive.
        let dropsAtEnd = (forwarder: KernelSocketDrops.count(port: Int(forwarder.port)) ?? 0, generator: KernelSocketDrops.count(port: Int(socket.port)) ?? 0)
        let expected = members.reduce(0) { $0 + $1.sentInWindow * (membersPerRoom - 1) }
        if received > expected { strays += received - expected }
        latencies.sort()
        func quantile(_ q: Double) -> Double {
            guard !latencies.isEmpty else { return .nan }
            return Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * q))]) / 1000
        }
        return TrialResult(
            rooms: roomsCount, members: membersPerRoom,
            offeredPacketsPerSecond: Double(sentTotal) / seconds,
            forwardedPacketsPerSecond: Double(min(received, expected)) / seconds,
            expectedPacketsPerSecond: Double(expected) / seconds,
            loss: expected == 0 ? 0 : max(0, Double(expected - min(received, expected)) / Double(expected)),
            duplicates: strays,
            latencyP50Microseconds: quantile(0.5), latencyP99Microseconds: quantile(0.99), latencyP999Microseconds: quantile(0.999),
            forwarderCPUPercent: (cpuAtEnd - cpuAtStart) / seconds * 100,
            generatorCPUPercent: (generatorCPUAtEnd - generatorCPUAtStart) / seconds * 100,
            forwarderSocketDrops: dropsAtEnd.forwarder - dropsAtStart.forwarder,
            generatorSocketDrops: dropsAtEnd.generator - dropsAtStart.generator)
    }

    /// 0.5 s at 50 packets/s per talker; 5 s at `factor` × 50; then 3 s at half of what the
    /// forwarder delivered while overloaded (its sustainable rate, measured, not assumed).
    /// Returns how soon after the load fell every stream was whole again.
    func runOverload(factor: Int) -> OverloadResult {
        let talkers = members.count
        let copies = membersPerRoom - 1
        var packet = [UInt8](repeating: 0, count: 12 + payload)
        var overloadSent = 0, overloadReceived = 0
        var calmInterval = 0.02, calmCount = 0
        var calmStart = 0.0
        var received: [Bool] = []  // [(receiver × P + sender slot) × calmCount + k]
        var calmSentAt: [Double] = []  // [talker × calmCount + k]

        func phase(_ from: Double, _ to: Double, interval: Double, flag: UInt8) {
            var cursor = 0, round = 0
            while true {
                let now = monotonic()
                if now >= to { break }
                let stamp = MonotonicClock.now()
                while socket.queued < MultiAddressSocket.batch {
                    let due = from + interval * (Double(round) + Double(cursor) / Double(talkers))
                    guard due <= now, due < to else { break }
                    members[cursor].sequence &+= 1
                    fill(&packet, member: members[cursor], stamp: stamp, inWindow: false)
                    packet[20] = flag
                    if flag == 2 {
                        packet[21] = UInt8(truncatingIfNeeded: round >> 8)
                        packet[22] = UInt8(truncatingIfNeeded: round)
                        if round < calmCount { calmSentAt[cursor * calmCount + round] = monotonic() }
                    }
                    if flag == 3 { overloadSent += 1 }
                    socket.queue(packet, from: members[cursor].address)
                    cursor += 1
                    if cursor == talkers { cursor = 0; round += 1 }
                }
                socket.flush()
                socket.receive { destination, bytes in
                    guard bytes.count >= 23, bytes[bytes.startIndex] >> 6 == 2,
                          let receiver = memberIndex(destination), receiver < members.count else { return }
                    let ssrc = UInt32(bytes[bytes.startIndex + 8]) << 24 | UInt32(bytes[bytes.startIndex + 9]) << 16
                        | UInt32(bytes[bytes.startIndex + 10]) << 8 | UInt32(bytes[bytes.startIndex + 11])
                    let slot = Int(ssrc - 1) % 100
                    switch bytes[bytes.startIndex + 20] {
                    case 3: overloadReceived += 1
                    case 2:
                        let k = Int(bytes[bytes.startIndex + 21]) << 8 | Int(bytes[bytes.startIndex + 22])
                        if k < calmCount { received[(receiver * membersPerRoom + slot) * calmCount + k] = true }
                    default: break
                    }
                }
                socket.flush()
            }
        }
        let start = monotonic()
        phase(start, start + 0.5, interval: 1.0 / 50, flag: 0)
        phase(start + 0.5, start + 5.5, interval: 1.0 / (50 * Double(factor)), flag: 3)
        // Half of what got through while overloaded, spread over the talkers.
        let delivered = Double(overloadReceived) / 5
        let calmPerTalker = max(1, delivered / 2 / Double(talkers * copies))
        calmInterval = 1 / calmPerTalker
        calmCount = Int(3 * calmPerTalker) + 1
        received = [Bool](repeating: false, count: talkers * membersPerRoom * calmCount)
        calmSentAt = [Double](repeating: 0, count: talkers * calmCount)
        calmStart = monotonic()
        phase(calmStart, calmStart + 3, interval: calmInterval, flag: 2)
        phase(calmStart + 3, calmStart + 3.5, interval: 1000, flag: 0)  // receive the tail

        var recovery = 0.0, losingLate = 0, streams = 0
        for receiver in 0..<talkers {
            let room = members[receiver].room
            for slot in 0..<membersPerRoom {
                let sender = room * membersPerRoom + slot
                guard sender != receiver else { continue }
                streams += 1
                let base = (receiver * membersPerRoom + slot) * calmCount
                guard let lastMissing = (0..<calmCount).last(where: { !received[base + $0] && calmSentAt[sender * calmCount + $0] > 0 }) else { continue }
                let sentAt = calmSentAt[sender * calmCount + lastMissing]
                recovery = max(recovery, sentAt + calmInterval - calmStart)
                if sentAt - calmStart >= 1 { losingLate += 1 }
            }
        }
        return OverloadResult(
            rooms: roomsCount, members: membersPerRoom,
            capacityPacketsPerSecond: Double(talkers) * 50 * Double(copies),
            overloadOfferedPacketsPerSecond: Double(overloadSent) / 5 * Double(copies),
            overloadDeliveredPacketsPerSecond: delivered,
            calmOfferedPacketsPerSecond: Double(talkers) * calmPerTalker * Double(copies),
            recoveryMilliseconds: recovery * 1000, streams: streams, streamsLosingAfterOneSecond: losingLate)
    }

    /// RTP header, then the send time (8 bytes), then a flag saying whether it counts.
    private func fill(_ packet: inout [UInt8], member: Member, stamp: UInt64, inWindow: Bool) {
        packet.withUnsafeMutableBytes { raw in
            raw[0] = 0x80
            raw[1] = RTPHeader.opusPayloadType
            raw.storeBytes(of: member.sequence.bigEndian, toByteOffset: 2, as: UInt16.self)
            raw.storeBytes(of: (UInt32(member.sequence) &* 960).bigEndian, toByteOffset: 4, as: UInt32.self)
            raw.storeBytes(of: member.ssrc.bigEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: stamp.bigEndian, toByteOffset: 12, as: UInt64.self)
            raw[20] = inWindow ? 1 : 0
        }
    }
}
