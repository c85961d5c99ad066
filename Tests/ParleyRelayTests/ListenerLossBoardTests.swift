@testable import ParleyRelay
import Testing

@Suite("What listeners lose of a stream, for its sender")
struct ListenerLossBoardTests {
    let second: UInt64 = 1_000_000_000

    @Test func theLowerMedianOfTheListenersCountsAndSilentListenersLoseNothing() {
        let board = ListenerLossBoard()
        #expect(board.medianLoss(listeners: 3, now: second) == 0)
        board.record(listener: 1, fractionLost: 200, now: second)
        #expect(board.medianLoss(listeners: 3, now: second) == 0, "one of three is not the room")
        board.record(listener: 2, fractionLost: 40, now: second)
        #expect(board.medianLoss(listeners: 3, now: second) == 40)
        #expect(board.medianLoss(listeners: 2, now: second) == 40, "of two, the lower")
        #expect(board.medianLoss(listeners: 1, now: second) == 40, "more reports than listeners: the reports count")
        board.record(listener: 2, fractionLost: 10, now: 2 * second)
        #expect(board.medianLoss(listeners: 2, now: 2 * second) == 10, "a listener's newer report replaces its older")
    }

    @Test func reportsGoStaleAndTheTableStaysBounded() {
        let board = ListenerLossBoard()
        board.record(listener: 1, fractionLost: 99, now: second)
        #expect(board.medianLoss(listeners: 1, now: second + ListenerLossBoard.freshNanoseconds - 1) == 99)
        #expect(board.medianLoss(listeners: 1, now: second + ListenerLossBoard.freshNanoseconds) == 0)
        for listener in 0..<UInt64(1_000) { board.record(listener: listener, fractionLost: 255, now: 5 * second &+ listener) }
        #expect(board.medianLoss(listeners: 0, now: 6 * second) == 255)
        // Clocks that wrap or run backwards do not trap.
        board.record(listener: 7, fractionLost: 1, now: .max)
        _ = board.medianLoss(listeners: -1, now: 0)
    }
}
