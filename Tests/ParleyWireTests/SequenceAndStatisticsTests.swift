import Testing
@testable import ParleyWire

@Suite("Sequence unwrapping and reception statistics (RFC 3550 A.1, A.3, A.8)")
struct SequenceAndStatisticsTests {
    @Test func sequenceNumbersKeepCountingAcrossTheWrap() {
        var unwrapper = SequenceNumberUnwrapper()
        let values = [65_534, 65_535, 0, 1, 2].map { unwrapper.unwrap(UInt16($0)) }
        #expect(values == [65_534, 65_535, 65_536, 65_537, 65_538])
    }

    @Test func aPacketReorderedBackAcrossTheWrapLandsBelow() {
        var unwrapper = SequenceNumberUnwrapper()
        #expect(unwrapper.unwrap(65_535) == 65_535)
        #expect(unwrapper.unwrap(1) == 65_537)
        #expect(unwrapper.unwrap(0) == 65_536)
        #expect(unwrapper.unwrap(65_534) == 65_534)
        #expect(unwrapper.highestExtended == 65_537)
    }

    @Test func aFirstPacketThatWasNotTheEarliestGivesNegativeValues() {
        var unwrapper = SequenceNumberUnwrapper()
        #expect(unwrapper.unwrap(0) == 0)
        #expect(unwrapper.unwrap(65_535) == -1)
    }

    @Test func timestampsUnwrapOver32Bits() {
        var unwrapper = RTPTimestampUnwrapper()
        #expect(unwrapper.unwrap(UInt32.max - 959) == Int64(UInt32.max) - 959)
        #expect(unwrapper.unwrap(0) == Int64(UInt32.max) + 1)
        #expect(unwrapper.unwrap(960) == Int64(UInt32.max) + 961)
    }

    /// Feeds packets 20 ms apart with sequence numbers starting at `first`, skipping `lost`.
    func receive(_ stats: inout RTPReceptionStatistics, first: UInt16, count: Int, lost: Set<Int> = [], jitterNanoseconds: (Int) -> UInt64 = { _ in 0 }) {
        for index in 0..<count where !lost.contains(index) {
            stats.record(
                sequence: first &+ UInt16(truncatingIfNeeded: index),
                rtpTimestamp: UInt32(truncatingIfNeeded: index * 960),
                arrivalNanoseconds: UInt64(index) * 20_000_000 + jitterNanoseconds(index)
            )
        }
    }

    @Test func lossFractionAndCumulativeLossFollowA3() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 65_000)
        // 1000 packets across the wrap, every 10th lost after probation.
        let lost = Set(stride(from: 10, to: 1000, by: 10))
        receive(&stats, first: 65_000, count: 1000, lost: lost)
        let block = stats.makeReportBlock(nowNanoseconds: 0)
        #expect(block.cumulativeLost == Int32(lost.count))
        // The first packet only proves the source (A.1 probation), so 999 are expected.
        #expect(stats.expected == 999)
        #expect(block.extendedHighestSequence == 65_536 + UInt32((65_000 + 999) % 65_536))
        #expect(abs(block.lossFraction - Double(lost.count) / 999) < 1.0 / 256)

        // The next interval has no loss: the fraction resets, the cumulative count does not.
        receive(&stats, first: UInt16(truncatingIfNeeded: 65_000 + 1000), count: 100)
        let next = stats.makeReportBlock(nowNanoseconds: 0)
        #expect(next.fractionLost == 0)
        #expect(next.cumulativeLost == Int32(lost.count))
    }

    @Test func duplicatesMakeCumulativeLossNegative() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        receive(&stats, first: 0, count: 10)
        stats.record(sequence: 5, rtpTimestamp: 5 * 960, arrivalNanoseconds: 300_000_000)
        #expect(stats.cumulativeLost == -1)
    }

    @Test func jitterConvergesToTheArrivalSpread() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        // Arrivals alternate between on time and 10 ms late: |D| is 10 ms for every pair.
        receive(&stats, first: 0, count: 500) { $0 % 2 == 0 ? 0 : 10_000_000 }
        #expect(abs(stats.jitterSeconds - 0.010) < 0.0005)
        #expect(abs(Int(stats.jitter) - 480) <= 24)
    }

    @Test func aRestartedSenderIsFollowedAfterTwoSequentialPackets() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 100)
        receive(&stats, first: 100, count: 10)
        #expect(stats.record(sequence: 40_000, rtpTimestamp: 0, arrivalNanoseconds: 0) == .badSequence)
        #expect(stats.record(sequence: 40_001, rtpTimestamp: 960, arrivalNanoseconds: 20_000_000) == .accepted)
        #expect(stats.extendedHighestSequence == 40_001)
        #expect(stats.cumulativeLost == 0)
    }

    @Test func aSenderThatWrapsItsSequence65536TimesIsStillCountedAndReported() {
        // Steps of 2,999 (just under A.1's dropout limit) wrap the sequence every 22 packets,
        // so this stream has gone round 2^16 times: a 32-bit extended sequence has wrapped.
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        var sequence: UInt16 = 0
        for index in 0..<1_435_000 {
            stats.record(sequence: sequence, rtpTimestamp: UInt32(truncatingIfNeeded: index * 960), arrivalNanoseconds: UInt64(index) * 20_000_000)
            sequence &+= index < 2 ? 1 : 2_999
        }
        #expect(stats.expected > UInt64(UInt32.max))
        #expect(stats.cumulativeLost > 4_000_000_000)
        let block = stats.makeReportBlock(nowNanoseconds: 0)
        #expect(block.fractionLost == 255)
        #expect(block.cumulativeLost == 0x7F_FFFF, "clamped to the 24-bit field")
    }

    @Test func aReportLongAfterTheLastSenderReportSaysTheLongestDelayItCan() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        receive(&stats, first: 0, count: 5)
        stats.recordSenderReport(NTPTimestamp(rawValue: 0x0000_1234_5678_0000), arrivalNanoseconds: 1_000_000_000)
        // A stream that stopped sending sender reports a hundred hours ago.
        let block = stats.makeReportBlock(nowNanoseconds: 360_000 * 1_000_000_000)
        #expect(block.delaySinceLastSenderReport == UInt32.max)
    }

    @Test func jitterStaysTheArrivalSpreadOnAClockThatHasRunForWeeks() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        // At 2^64 / 48,000 ns (106 hours of uptime) nanoseconds × clock rate wraps: this
        // stream runs across that moment.
        let start = UInt64.max / 48_000 - 5_000_000_000
        var highest = 0.0
        for index in 0..<500 {
            stats.record(sequence: UInt16(index), rtpTimestamp: UInt32(index * 960),
                         arrivalNanoseconds: start + UInt64(index) * 20_000_000 + (index % 2 == 0 ? 0 : 10_000_000))
            if index >= 200 { highest = max(highest, stats.jitterSeconds) }
        }
        #expect(abs(stats.jitterSeconds - 0.010) < 0.0005)
        #expect(highest < 0.011, "no spike as the clock passes 106 hours: \(highest) s")
    }

    @Test func delaySinceLastSenderReportIsInSixtyFourThousandthsOfASecond() {
        var stats = RTPReceptionStatistics(ssrc: 7, clockRate: 48_000, firstSequence: 0)
        receive(&stats, first: 0, count: 5)
        let ntp = NTPTimestamp(rawValue: 0x0000_1234_5678_0000)
        stats.recordSenderReport(ntp, arrivalNanoseconds: 1_000_000_000)
        let block = stats.makeReportBlock(nowNanoseconds: 1_500_000_000)
        #expect(block.lastSenderReport == 0x1234_5678)
        #expect(block.delaySinceLastSenderReport == 32_768)
    }
}
