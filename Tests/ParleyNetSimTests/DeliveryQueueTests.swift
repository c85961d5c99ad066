import Testing
@testable import ParleyNetSim

extension NetSimTests {
    @Suite("Delivery queue")
    struct DeliveryQueueTests {
        @Test func itemsComeOutInDeadlineOrderAndTiesInInsertionOrder() {
            var queue = DeliveryQueue<Int>()
            var random = SeededRandom(seed: 3)
            var inserted: [(deadline: Int64, item: Int)] = []
            for item in 0..<5_000 {
                let deadline = Int64(random.next() % 500)  // many ties
                queue.insert(item, at: deadline)
                inserted.append((deadline, item))
            }
            var out: [Int] = []
            while let item = queue.popDue(by: .max) { out.append(item) }
            let expected = inserted.enumerated().sorted { ($0.element.deadline, $0.offset) < ($1.element.deadline, $1.offset) }
            #expect(out == expected.map(\.element.item))
        }

        @Test func onlyDueItemsComeOut() {
            var queue = DeliveryQueue<String>()
            queue.insert("later", at: 200)
            queue.insert("soon", at: 100)
            #expect(queue.nextDeadline == 100)
            #expect(queue.popDue(by: 99) == nil)
            #expect(queue.popDue(by: 150) == "soon")
            #expect(queue.popDue(by: 150) == nil)
            #expect(queue.count == 1 && queue.nextDeadline == 200)
        }
    }
}
