import Testing
import ParleyNetSim

extension NetSimTests {
    /// Every parser of written values survives any text: it returns a value or an error with a
    /// reason, never traps, and what it accepts is a value the models can use.
    @Suite("Flag syntax survives any text")
    struct FlagSyntaxPropertyTests {
        static let cases = 20_000

        /// Text that gets past the first checks: digits, units, signs and separators, with
        /// now and then a character from anywhere in Unicode.
        static func texts(seed: UInt64) -> [String] {
            var random = SeededRandom(seed: seed)
            let alphabet = Array("0123456789.-+e%/:[]=,msuµkbitgpMK ppmloss delay nan inf \u{0}\t")
            return (0..<cases).map { _ in
                String((0..<Int(random.next() % 16)).map { _ -> Character in
                    if random.next() % 20 == 0, let scalar = Unicode.Scalar(UInt32(random.next() % 0x2FFFF)) {
                        return Character(scalar)
                    }
                    return alphabet[Int(random.next() % UInt64(alphabet.count))]
                })
            }
        }

        @Test func valueParsersReturnAValueOrAReason() {
            var accepted = 0
            for text in Self.texts(seed: 0xF1A6) {
                if let value = try? ImpairmentValueSyntax.fraction(text) {
                    accepted += 1
                    #expect(value.isFinite && value <= 1 || value > 1 && text.hasSuffix("%"), "\(text) → \(value)")
                }
                if let value = try? ImpairmentValueSyntax.duration(text) {
                    accepted += 1
                    #expect(abs(value.inMilliseconds) < 1e12, "\(text) → \(value)")
                }
                if let value = try? ImpairmentValueSyntax.bitRate(text) {
                    accepted += 1
                    #expect(value > 0, "\(text) → \(value)")
                }
                if (try? ImpairmentValueSyntax.spike(text)) != nil { accepted += 1 }
                if let value = try? ImpairmentValueSyntax.partsPerMillion(text) {
                    accepted += 1
                    #expect(value.isFinite)
                }
                do {
                    _ = try ImpairmentValueSyntax.packets(text)
                } catch {
                    #expect(!error.reason.isEmpty)
                }
            }
            print("value parsers: \(accepted) acceptances over \(Self.cases) random texts")
        }

        @Test func listsAndAddressesReturnAValueOrAReason() {
            for text in Self.texts(seed: 0x1157) {
                do {
                    let options = try ImpairmentOptions(list: text, flag: "--up")
                    _ = try? ImpairmentOptions.resolve(scenario: nil, both: ImpairmentOptions(), up: options, down: ImpairmentOptions())
                } catch {
                    #expect(error.description.utf8.starts(with: "--up ".utf8))  // bytes: a combining mark may follow the space
                }
                do {
                    let endpoint = try ProxyRunner.Endpoint(parsing: text, flag: "--to")
                    #expect((1...65_535).contains(endpoint.port) && !endpoint.host.isEmpty)
                } catch {
                    #expect(error.description.utf8.starts(with: "--to ".utf8))
                }
            }
        }

        @Test func whateverTheFlagsSayAResolvedImpairmentIsValid() {
            // Whatever combination of settings is accepted builds a pipeline that runs.
            var random = SeededRandom(seed: 0xC0B1)
            let samples: [ImpairmentSetting: [String]] = [
                .loss: ["0", "5%", "50%", "100%", "1.5", "-1%"], .lossBurst: ["1", "3", "0.5", "40"],
                .delay: ["0", "40ms", "2s", "-3ms", "70s"], .jitter: ["0", "10ms", "1s"],
                .jitterDistribution: ["normal", "pareto", "x"], .reorder: ["yes", "no"],
                .spike: ["300ms/10s", "1s/1s", "0/0"], .spikeLength: ["1s", "20s"], .duplicate: ["0", "5%", "200%"],
                .rate: ["64kbit", "1kbit", "10bit"], .queue: ["0", "200ms"], .drift: ["300", "-300", "20000"],
            ]
            var valid = 0
            for _ in 0..<2_000 {
                var options = ImpairmentOptions()
                for (setting, values) in samples where random.next() % 3 == 0 {
                    options.set(setting, values[Int(random.next() % UInt64(values.count))])
                }
                guard let (up, _) = try? ImpairmentOptions.resolve(scenario: nil, both: options, up: .init(), down: .init()) else {
                    continue
                }
                valid += 1
                var pipeline = ImpairmentPipeline(up, seed: random.next())
                for packet in 0..<200 {
                    _ = pipeline.process(sentAt: .milliseconds(20 * packet), size: Int(random.next() % 1400))
                }
                #expect(pipeline.report.packets == 200)
            }
            print("\(valid) of 2000 random flag combinations were valid and ran")
            #expect(valid > 100)
        }
    }
}
