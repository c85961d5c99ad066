import Foundation
import ParleyAudio
import Testing

/// The delay target: it follows the jitter, ignores a lone spike, and covers spikes that
/// recur until they stop.
@Suite("Delay manager")
struct DelayManagerTests {
    /// Feeds packets sent every 20 ms from `from` to `to` seconds, each delayed by
    /// `delay(sendTime)` (a queue: none overtakes the one before); returns the target
    /// after each packet, with its arrival time.
    static func run(
        _ manager: inout DelayManager, from: Double, to: Double, delay: (Double) -> Double
    ) -> [(time: Double, target: Double)] {
        var targets = [(time: Double, target: Double)]()
        var previous = -Double.infinity
        var sent = from
        while sent < to {
            let arrival = max(previous, sent + 0.030 + delay(sent))
            previous = arrival
            manager.record(arrival: arrival, mediaSeconds: sent)
            targets.append((arrival, manager.targetSeconds))
            sent += 0.020
        }
        return targets
    }

    /// Jitter of 0–5 ms, as on a quiet path.
    static func quiet(_ sent: Double) -> Double { unitNoise(Int(sent * 50), seed: 5) * 0.005 }

    @Test func aLoneSpikeLeavesTheTargetWhereItWas() {
        var manager = DelayManager()
        let before = Self.run(&manager, from: 0, to: 10, delay: Self.quiet).last!.target
        // 300 ms more for the packets sent in 300 ms; those behind queue up.
        let during = Self.run(&manager, from: 10, to: 20) { sent in
            Self.quiet(sent) + (sent >= 12 && sent < 12.3 ? 0.300 : 0)
        }
        let highest = during.map(\.target).max()!
        print("target before a lone 300 ms spike \(before * 1_000) ms, highest after it \(highest * 1_000) ms")
        #expect(highest <= before + 0.005)
    }

    @Test func spikesThatRecurAreCoveredFromTheSecondOnAndForgottenWhenTheyStop() {
        var manager = DelayManager()
        let base = Self.run(&manager, from: 0, to: 5, delay: Self.quiet).last!.target
        // A 200 ms spike lasting 300 ms every 5 s, from 5 s to 30 s.
        let spiky = Self.run(&manager, from: 5, to: 30) { sent in
            Self.quiet(sent) + (sent >= 5 && sent.truncatingRemainder(dividingBy: 5) < 0.3 ? 0.200 : 0)
        }
        let afterFirst = spiky.filter { $0.time > 5.6 && $0.time < 9.9 }.map(\.target).max()!
        let afterSecond = spiky.filter { $0.time > 10.6 && $0.time < 14.9 }.map(\.target).min()!
        let quietAgain = Self.run(&manager, from: 30, to: 60, delay: Self.quiet)
        let forgotten = quietAgain.first { $0.target <= base + 0.005 }?.time ?? .infinity
        print("target: quiet \(base * 1_000) ms; after the first spike at most \(afterFirst * 1_000) ms; after the second at least \(afterSecond * 1_000) ms; back down \(forgotten - 30) s after they stopped")
        #expect(afterFirst <= base + 0.005, "one spike is not a pattern")
        #expect(afterSecond >= 0.200, "the second spike within 12 s makes a pattern to cover")
        #expect(forgotten - 30 <= 12, "a pattern 5 s apart is forgotten within twice that after it stops")
    }

    /// The same stall met on both hops of a relayed call (the talker's uplink, then the
    /// listener's downlink, 0.6 s apart) is one event: it does not make a pattern.
    @Test func oneStallMetOnTwoHopsIsNotAPattern() {
        var manager = DelayManager()
        let before = Self.run(&manager, from: 0, to: 10, delay: Self.quiet).last!.target
        let during = Self.run(&manager, from: 10, to: 16) { sent in
            Self.quiet(sent) + ((sent >= 12 && sent < 12.15) || (sent >= 12.6 && sent < 12.75) ? 0.250 : 0)
        }
        let highest = during.map(\.target).max()!
        print("target before a stall met on two hops \(before * 1_000) ms, highest after it \(highest * 1_000) ms")
        // The backlogs' last packets, under the spike level, nudge the jitter quantile; the
        // 250 ms the stall held is not covered.
        #expect(highest <= before + 0.020)
    }

    /// A listener who has not spoken yet sends DTX packets, a few a second: a stall met
    /// before 25 of them came is still a spike, not the path's jitter.
    @Test func aStallInAStreamOfDTXPacketsIsASpikeNotJitter() {
        var manager = DelayManager()
        var highest = 0.0
        var previous = -Double.infinity
        for index in 0..<30 {
            // One DTX packet every 400 ms; the ones sent from 6 s to 6.15 s are held 250 ms.
            let sent = Double(index) * 0.4
            let arrival = max(previous, sent + 0.030 + Self.quiet(sent) + (sent >= 6 && sent < 6.15 ? 0.250 : 0))
            previous = arrival
            manager.record(arrival: arrival, mediaSeconds: sent)
            if sent > 6 { highest = max(highest, manager.targetSeconds) }
        }
        print("DTX stream: highest target after a 250 ms stall at 6 s \(highest * 1_000) ms")
        #expect(highest <= 0.050)
    }

    /// Room for repairs (a frame for FEC, three for redundant copies) comes on top of the
    /// jitter, but not on top of the room kept for recurring spikes: between spikes the
    /// packets that carry the repairs come long before they are needed. Nor on top of the
    /// margin: the packet carrying a repair is late by the same jitter as the frame's own.
    @Test func roomForRepairsIsNotAddedOnTopOfRoomForSpikes() {
        var manager = DelayManager()
        _ = Self.run(&manager, from: 0, to: 5, delay: Self.quiet)
        let repair = 0.060
        let quietTarget = manager.target(adding: 0)
        let margin = manager.configuration.marginSeconds
        #expect(abs(manager.target(adding: repair) - (quietTarget + repair - margin)) < 1e-9, "on a quiet path the repairs' room is added, less the margin")
        #expect(quietTarget - margin + repair >= manager.jitterSeconds + repair, "the repair's packet is covered to the jitter quantile")
        _ = Self.run(&manager, from: 5, to: 16) { sent in
            Self.quiet(sent) + (sent >= 5 && sent.truncatingRemainder(dividingBy: 5) < 0.3 ? 0.250 : 0)
        }
        let spikeTarget = manager.target(adding: 0)
        print("target with recurring 250 ms spikes \(spikeTarget * 1_000) ms, with 60 ms of repair room \(manager.target(adding: repair) * 1_000) ms")
        #expect(spikeTarget >= 0.250)
        #expect(manager.target(adding: repair) == spikeTarget)
    }

    /// Stalls that recur higher than the cover (two hops' stalls at once, 450 ms) are
    /// covered up to it: the words between them play at 250 ms, not 450, and what a stall
    /// holds above the cover is played out faster afterwards.
    @Test func recurringStallsAreCoveredOnlyUpToTheCover() {
        var manager = DelayManager()
        _ = Self.run(&manager, from: 0, to: 5, delay: Self.quiet)
        let spiky = Self.run(&manager, from: 5, to: 30) { sent in
            Self.quiet(sent) + (sent >= 5 && sent.truncatingRemainder(dividingBy: 5) < 0.15 ? 0.450 : 0)
        }
        let covered = spiky.filter { $0.time > 11 && $0.time < 30 }.map(\.target)
        print("recurring 450 ms stalls: target \(covered.min()! * 1_000)–\(covered.max()! * 1_000) ms")
        #expect(covered.min()! >= 0.250, "recurring stalls are covered")
        #expect(covered.max()! <= 0.250 + manager.configuration.marginSeconds + 1e-9, "up to the cover, not their height")
    }

    /// A path whose delay grows for good (a route change) is not a spike: within a second
    /// or two the target covers it.
    @Test func aLastingRiseInJitterIsFollowedNotIgnored() {
        var manager = DelayManager()
        _ = Self.run(&manager, from: 0, to: 5, delay: Self.quiet)
        let wide = Self.run(&manager, from: 5, to: 15) { sent in unitNoise(Int(sent * 50), seed: 9) * 0.150 }
        let covered = wide.first { $0.target >= 0.8 * 0.145 }?.time ?? .infinity
        print("jitter 0–5 ms → 0–150 ms at 5 s: target reaches 80 % of the new 97th percentile after \(covered - 5) s")
        #expect(covered - 5 <= 2)
    }

    /// The target is clamped, and the margin is kept on a jitter-free path.
    @Test func theTargetStaysWithinItsBounds() {
        var configuration = DelayManager.Configuration()
        configuration.maximumSeconds = 0.100
        var manager = DelayManager(configuration)
        let calm = Self.run(&manager, from: 0, to: 3) { _ in 0 }.last!.target
        let wild = Self.run(&manager, from: 3, to: 10) { sent in unitNoise(Int(sent * 50), seed: 2) * 0.500 }.last!.target
        #expect(calm >= configuration.marginSeconds && calm <= configuration.marginSeconds + 0.002)
        #expect(wild == 0.100)
        #expect(manager.target(adding: 0.020) == 0.100)
    }
}
