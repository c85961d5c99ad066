import Testing
import ParleyNetSim

extension NetSimTests {
    @Suite("Trace replay")
    struct DelayTraceTests {
        @Test func aTraceIsReadLineByLineWithCommentsAndBlankLines() throws {
            let trace = try DelayTrace(
                parsing: """
                    # kitchen Wi-Fi
                    41.5
                    38   # steady

                    LOSS
                    120.25\r
                    0
                    """, source: "kitchen.txt")
            #expect(trace.entries == [.delay(.microseconds(41_500)), .delay(.milliseconds(38)), .loss, .delay(.microseconds(120_250)), .delay(.zero)])
            #expect(trace.lossRate == 0.2)
        }

        @Test func parseErrorsNameTheFileAndLine() {
            #expect(throws: DelayTraceError.notADelay(source: "t.txt", line: 3, text: "fast")) {
                try DelayTrace(parsing: "10\n# ok\nfast\n", source: "t.txt")
            }
            #expect(throws: DelayTraceError.negativeDelay(source: "t.txt", line: 2, text: "-4")) {
                try DelayTrace(parsing: "10\n-4", source: "t.txt")
            }
            #expect(throws: DelayTraceError.empty(source: "t.txt")) {
                try DelayTrace(parsing: "# nothing\n\n", source: "t.txt")
            }
            let message = DelayTraceError.notADelay(source: "t.txt", line: 3, text: "fast").description
            print(message)
            #expect(message == "t.txt line 3: 'fast' is neither a delay in milliseconds (like 42.5) nor the word 'loss'.")
        }

        @Test func anyBytesGiveATraceOrAnError() {
            var random = SeededRandom(seed: 0x7EACE)
            var parsed = 0
            for _ in 0..<10_000 {
                let length = Int(random.next() % 64)
                let alphabet = Array("0123456789.-+e#\n \tlossLOSSnaninf\r,x")
                let text = String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
                if let trace = try? DelayTrace(parsing: text) {
                    parsed += 1
                    #expect(!trace.entries.isEmpty)
                }
            }
            for _ in 0..<2_000 {
                let bytes = (0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                _ = try? DelayTrace(parsing: String(decoding: bytes, as: UTF8.self))
            }
            print("random traces: \(parsed) of 10000 parsed")
        }

        @Test func theReplayedPathIsWhatArrivesAndItLoops() throws {
            let trace = try DelayTrace(parsing: "10\nloss\n30\n5", source: "t")
            var pipeline = ImpairmentPipeline(
                impairment {
                    $0.trace = trace
                    $0.reorder = true
                }, seed: 1)
            let arrivals = run(&pipeline, count: 8, interval: .milliseconds(20)).sorted { $0.packet < $1.packet }
            #expect(arrivals.map(\.packet) == [0, 2, 3, 4, 6, 7])
            #expect(arrivals.map { milliseconds($0.delay) } == [10, 30, 5, 10, 30, 5])
            #expect(pipeline.report.lost == 2)
        }
    }
}
