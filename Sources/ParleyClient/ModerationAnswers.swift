import Foundation
import ParleyWire

/// The relay's answers to a moderator's requests, handed from the network loop to whoever
/// asked (a key, `parley ctl`) and waits. An answer may come before its asker starts
/// waiting, so answers are kept until taken; every request gets exactly one (the link
/// answers for the relay when it gives up), so none is left behind.
final class ModerationAnswers: @unchecked Sendable {
    // @unchecked: `answers` is read and written only with `condition` locked.
    private let condition = NSCondition()
    private var answers: [UInt32: ControlMessage.ModerationReply] = [:]

    func deliver(_ reply: ControlMessage.ModerationReply, for sequence: UInt32) {
        condition.lock()
        answers[sequence] = reply
        condition.broadcast()
        condition.unlock()
    }

    /// The answer to `sequence`, waiting up to `seconds` for it.
    func wait(for sequence: UInt32, seconds: Double) -> ControlMessage.ModerationReply? {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while answers[sequence] == nil {
            if !condition.wait(until: deadline) { break }
        }
        return answers.removeValue(forKey: sequence)
    }
}
