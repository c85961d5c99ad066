import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Bottleneck link with a bounded queue")
    struct BottleneckLinkTests {
        @Test func aFlowUnderTheRatePassesWithOnlyItsSendingTime() {
            // Voice: 120-byte payloads every 20 ms = 59.2 kbit/s with headers, under 64 kbit/s.
            var link = BottleneckLink(bitsPerSecond: 64_000, queueLimit: .milliseconds(200))
            let sendTime = link.transmissionTime(size: 120)
            #expect(sendTime == 18_500_000)  // 148 bytes × 8 / 64 kbit/s
            for packet in 0..<1000 {
                let arrival = Int64(packet) * 20_000_000
                #expect(link.departure(arrival: arrival, size: 120) == arrival + sendTime)
            }
            #expect(link.report.tailDropped == 0)
        }

        @Test func aFlowOverTheRateIsCutToTheRateAndTheQueueStaysBounded() {
            // 200 packets/s of 472 bytes (500 on the wire) = 800 kbit/s into 400 kbit/s: half must go.
            var link = BottleneckLink(bitsPerSecond: 400_000, queueLimit: .milliseconds(100))
            var departures: [Int64] = []
            var longestWait: Int64 = 0
            for packet in 0..<10_000 {
                let arrival = Int64(packet) * 5_000_000
                if let departure = link.departure(arrival: arrival, size: 472) {
                    departures.append(departure)
                    longestWait = max(longestWait, departure - arrival)
                }
            }
            let seconds = Double(departures.last! - departures.first!) / 1e9
            let throughput = Double((departures.count - 1) * 500 * 8) / seconds
            print("800 kbit/s offered to 400 kbit/s: \(departures.count) of 10000 passed, throughput \(throughput) bit/s, longest wait \(milliseconds(longestWait)) ms")
            #expect(relativeError(throughput, 400_000) < 0.01)
            #expect(relativeError(Double(link.report.tailDropped), 5_000) < 0.01)
            // Nobody waits longer than the queue limit plus their own sending time (10 ms).
            #expect(longestWait <= 110_000_000)
            #expect(zip(departures, departures.dropFirst()).allSatisfy { $1 - $0 >= 10_000_000 })
        }

        @Test func theFirstPacketMayArriveAtAnyTime() {
            // The proxy passes the monotonic clock's reading: hours, in nanoseconds.
            var link = BottleneckLink(bitsPerSecond: 64_000, queueLimit: .milliseconds(200))
            let uptime: Int64 = 7_200_000_000_000
            #expect(link.departure(arrival: uptime, size: 120) == uptime + 18_500_000)
            var early = BottleneckLink(bitsPerSecond: 64_000, queueLimit: .milliseconds(200))
            #expect(early.departure(arrival: -5_000_000, size: 120) == 13_500_000)
        }

        @Test func anIdleLinkAcceptsAPacketLongerThanTheQueue() {
            // 1500 bytes at 64 kbit/s take 187.5 ms, more than the 50 ms queue; alone, it still goes.
            var link = BottleneckLink(bitsPerSecond: 64_000, queueLimit: .milliseconds(50))
            #expect(link.departure(arrival: 0, size: 1472) == 187_500_000)
            #expect(link.departure(arrival: 1_000_000, size: 100) == nil)
            #expect(link.departure(arrival: 200_000_000, size: 100) != nil)
        }

        @Test func theQueueingDelayReportShowsTheBacklog() {
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.rate = 64_000
                    $0.queue = .milliseconds(500)
                }, seed: 1)
            // A burst of 20 packets at once: each waits for those ahead of it.
            for _ in 0..<20 { _ = pipeline.process(sentAtNanoseconds: 0, size: 132) }
            let report = pipeline.bottleneck!.report
            print("burst of 20 × 160 bytes at 64 kbit/s: queueing \(report.queueing.minimum) to \(report.queueing.maximum), \(report.tailDropped) dropped")
            // 160 bytes take 20 ms; 500 ms of queue holds 25 of them, so all 20 pass.
            #expect(report.tailDropped == 0)
            #expect(report.queueing.minimum == .milliseconds(20))
            #expect(report.queueing.maximum == .milliseconds(400))
        }
    }
}
