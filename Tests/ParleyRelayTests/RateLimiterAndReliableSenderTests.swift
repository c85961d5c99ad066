@testable import ParleyRelay
import Testing

@Suite("Rate limits and reliable control messages")
struct RateLimiterAndReliableSenderTests {
    @Test func aBucketAllowsItsBurstThenItsRate() {
        var limiter = TokenBucket(ratePerSecond: 50, burst: 10, nowNanoseconds: 0)
        var burst = 0
        for _ in 0..<20 where limiter.allow(nowNanoseconds: 0) { burst += 1 }
        #expect(burst == 10)
        // One second later: 50 more, no more than the burst saved.
        var allowed = 0
        for tick in 0...1000 where limiter.allow(nowNanoseconds: UInt64(tick) * 1_000_000) { allowed += 1 }
        #expect(allowed == 50)
        var saved = 0
        for _ in 0..<100 where limiter.allow(nowNanoseconds: 60_000_000_000) { saved += 1 }
        #expect(saved == 10)
    }

    @Test func strangersShareAFixedTableAndAGlobalCap() {
        var limiter = SourceRateLimiter(perSourcePerSecond: 2, globalPerSecond: 100, slotCount: 64, nowNanoseconds: 0)
        let one = PeerAddress(try! .init(ipAddress: "192.0.2.1", port: 4000))!
        var single = 0
        for _ in 0..<10 where limiter.allow(one.host, nowNanoseconds: 0) { single += 1 }
        #expect(single == 2)
        var total = 0
        for host in 1...5000 {
            let address = PeerAddress(try! .init(ipAddress: "198.51.\(host / 256).\(host % 256)", port: 4000))!
            if limiter.allow(address.host, nowNanoseconds: 0) { total += 1 }
        }
        #expect(total <= 25, "a flood from many sources got \(total) replies; the global burst is 25")
    }

    @Test func aSourceIsItsAddressOrItsIPv6SlashSixtyFourNeverItsPort() throws {
        var limiter = SourceRateLimiter(perSourcePerSecond: 3, globalPerSecond: 10_000, nowNanoseconds: 0)
        var fromPorts = 0
        for port in 1...400 where limiter.allow(PeerAddress(try .init(ipAddress: "192.0.2.9", port: port))!.host, nowNanoseconds: 0) {
            fromPorts += 1
        }
        #expect(fromPorts == 3, "400 ports of one host are one source")
        var fromOneSlash64 = 0
        for index in 1...400 {
            let address = PeerAddress(try .init(ipAddress: "2001:db8:1:2::\(String(index, radix: 16))", port: 5000))!
            if limiter.allow(address.host, nowNanoseconds: 0) { fromOneSlash64 += 1 }
        }
        #expect(fromOneSlash64 == 3, "the addresses of one /64 are one source")
        #expect(PeerAddress(try .init(ipAddress: "2001:db8:1:2::9", port: 1))!.host == PeerAddress(try .init(ipAddress: "2001:db8:1:2:ffff::1", port: 2))!.host)
        #expect(PeerAddress(try .init(ipAddress: "2001:db8:1:2::9", port: 1))!.host != PeerAddress(try .init(ipAddress: "2001:db8:1:3::9", port: 1))!.host)
        #expect(PeerAddress(try .init(ipAddress: "2001:db8:1:2::9", port: 1))!.host.description == "2001:db8:1:2:0:0:0:0/64")
        #expect(PeerAddress(try .init(ipAddress: "192.0.2.9", port: 1))!.host.description == "192.0.2.9")
    }

    @Test func aByteBudgetSpendsTheCostAndNeverOverflowsOnALongSilence() {
        var bytes = TokenBucket(ratePerSecond: 80_000, burst: 80_000, nowNanoseconds: 0)
        let first = bytes.allow(cost: 60_000, nowNanoseconds: 0)
        let overdrawn = bytes.allow(cost: 30_000, nowNanoseconds: 0)
        let refilled = bytes.allow(cost: 30_000, nowNanoseconds: 125_000_000)
        #expect(first && !overdrawn)
        #expect(refilled, "an eighth of a second refills 10,000")
        // A day of silence refills the burst and no more, with a rate that would overflow
        // nano-tokens if the whole day were counted.
        var fast = TokenBucket(ratePerSecond: 125_000_000, burst: 125_000_000, nowNanoseconds: 0)
        let all = fast.allow(cost: 125_000_000, nowNanoseconds: 86_400_000_000_000)
        let more = fast.allow(cost: 1, nowNanoseconds: 86_400_000_000_000)
        #expect(all && !more)
    }

    @Test func forgedSourcesAreNeverAnswered() {
        #expect(!PeerAddress(try! .init(ipAddress: "127.0.0.1", port: 0))!.canBeAnswered)
        #expect(!PeerAddress(try! .init(ipAddress: "255.255.255.255", port: 9))!.canBeAnswered)
        #expect(!PeerAddress(try! .init(ipAddress: "224.0.0.1", port: 9))!.canBeAnswered)
        #expect(!PeerAddress(try! .init(ipAddress: "0.0.0.0", port: 9))!.canBeAnswered)
        #expect(!PeerAddress(try! .init(ipAddress: "ff02::1", port: 9))!.canBeAnswered)
        #expect(PeerAddress(try! .init(ipAddress: "2001:db8::1", port: 9))!.canBeAnswered)
        #expect(PeerAddress(try! .init(ipAddress: "203.0.113.5", port: 7800))!.description == "203.0.113.5:7800")
    }

    @Test func kernelDropsAreSummedOverTheRelaysSockets() {
        let table = """
              sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
             147: 0100007F:1E78 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 433938 2 00000000ba6d7005 12
             148: 0100007F:1E78 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 433939 2 00000000ba6d7006 30
             857: 0100007F:9E2F 0100007F:A8FB 01 00000000:00000000 00:00000000 00000000     0        0 431973 2 00000000a38fc0fa 7
            """
        #expect(KernelSocketDrops.sum(table: table, port: 7800) == 42)
        #expect(KernelSocketDrops.sum(table: "garbage\n1 2 3", port: 7800) == 0)
    }

    @Test func reliableMessagesAreResentUntilAcknowledgedThenGivenUp() {
        var sender = ReliableSender()
        sender.enqueue(sequence: 1, kind: .goodbye, bytes: [1], nowNanoseconds: 0, attempts: 3)
        let sends = [100, 200, 400, 600].map { sender.due(nowNanoseconds: UInt64($0) * 1_000_000) }
        #expect(sends == [[], [[1]], [[1]], []], "sent at 0, 200 and 400 ms: three attempts in all")
        #expect(sender.isEmpty)
        sender.enqueue(sequence: 2, kind: .goodbye, bytes: [2], nowNanoseconds: 0)
        let acknowledged = sender.acknowledge(sequence: 2)
        #expect(acknowledged && sender.isEmpty)
    }

    @Test func aNewerRosterSupersedesAnUnacknowledgedOlderOne() {
        var sender = ReliableSender()
        sender.enqueue(sequence: 1, kind: .roster(version: 3), bytes: [3], nowNanoseconds: 0)
        sender.enqueue(sequence: 2, kind: .goodbye, bytes: [9], nowNanoseconds: 0)
        sender.enqueue(sequence: 3, kind: .roster(version: 4), bytes: [4], nowNanoseconds: 0)
        #expect(sender.outstanding.map(\.sequence) == [2, 3])
    }
}
