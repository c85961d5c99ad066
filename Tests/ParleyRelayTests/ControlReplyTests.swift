@testable import ParleyRelay
import ParleyWire
import Testing

/// The relay's replies are never larger than what they answer.
@Suite("Replies within the size of the question")
struct ControlReplyTests {
    @Test func anErrorReplyShortensItsTextToFitAndKeepsTheEcho() throws {
        let echo = [UInt8](repeating: 0xAB, count: 16)
        let text = "not a member here: join again (the relay may have restarted)"
        for limit in [30, 40, 60, 200] {
            guard let bytes = ControlReply.error(.notJoined, text, echo: echo, limit: limit) else {
                #expect(limit < ControlMessage.headerSize + 3 + 1 + echo.count, "only a limit too small for the echo sends nothing")
                continue
            }
            #expect(bytes.count <= limit)
            let message = try ControlMessage(parsing: bytes)
            guard case let .error(reply) = message.body else { Issue.record("an error reply"); continue }
            #expect(reply.echo == echo)
            #expect(text.hasPrefix(reply.message))
        }
    }

    @Test func aReplyThatWouldNotFitIsNotSent() {
        #expect(ControlReply.message(.pong(.init(timestamp: 1)), sequence: 1, limit: 4) == nil)
        #expect(ControlReply.message(.pong(.init(timestamp: 1)), sequence: 1, limit: nil) != nil)
        #expect(ControlReply.error(.notJoined, "x", echo: [UInt8](repeating: 1, count: 16), limit: 12) == nil)
    }
}
