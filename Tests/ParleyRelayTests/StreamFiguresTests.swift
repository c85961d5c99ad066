@testable import ParleyRelay
import Testing

/// Each member's loss and jitter as `/metrics` shows them: written at the scrape from the
/// loops' copies, one series per member, well formed whatever the names hold.
struct StreamFiguresTests {
    @Test func eachMemberIsOneLinePerSeriesInRoomAndIdentityOrder() throws {
        var bob = StreamFigures()
        bob.upstreamLoss = 0.25
        bob.downstreamJitterSeconds = 0.012
        let samples = [
            StreamFigures.Sample(room: "standup", identity: "bob", figures: bob),
            StreamFigures.Sample(room: "standup", identity: "ada", figures: StreamFigures()),
        ]
        var buffer: [UInt8] = []
        StreamFigures.exposition(of: samples, into: &buffer)
        let text = String(decoding: buffer, as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 4 * 3, "a TYPE line and two members for each of the four series")
        #expect(lines.first == "# TYPE parley_relay_upstream_loss_ratio gauge")
        #expect(lines[1] == #"parley_relay_upstream_loss_ratio{room="standup",identity="ada"} 0.0"#)
        #expect(lines[2] == #"parley_relay_upstream_loss_ratio{room="standup",identity="bob"} 0.25"#)
        #expect(text.contains(#"parley_relay_downstream_jitter_seconds{room="standup",identity="bob"} 0.012"#))
    }

    @Test func noMembersWritesNothing() {
        var buffer: [UInt8] = []
        StreamFigures.exposition(of: [], into: &buffer)
        #expect(buffer.isEmpty, "no TYPE lines for series without samples")
    }

    /// Names are held to what a member may be called where they enter; the exposition does
    /// not count on it: a quote, backslash or line feed cannot end a label or a line.
    @Test func labelValuesAreEscapedAsTheTextFormatAsks() {
        #expect(StreamFigures.labelValue(#"a"b\c"# + "\nd") == #"a\"b\\c\nd"#)
        var buffer: [UInt8] = []
        StreamFigures.exposition(of: [StreamFigures.Sample(room: "r\"}", identity: "x\ny", figures: StreamFigures())], into: &buffer)
        let lines = String(decoding: buffer, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 8)
        #expect(lines[1] == #"parley_relay_upstream_loss_ratio{room="r\"}",identity="x\ny"} 0.0"#)
    }
}
