import Synchronization

/// A value that some threads change now and then (on a join, a mute, a new key) and one
/// real-time thread reads for every packet: writers take a lock and move a version on, and
/// the reader keeps its own copy, which it refreshes — under the lock — only when the version
/// has moved. A packet costs the reader one atomic load and no lock.
///
/// The reader's copy is a snapshot: a change made while it sends a packet applies from the
/// next one, as it would if the change had come a moment later.
public final class VersionedValue<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    private let version = Atomic<UInt64>(1)

    public init(_ value: Value) { self.value = Mutex(value) }

    /// Changes the value; readers see the change at their next ``refresh(_:)``.
    @discardableResult
    public func update<Result>(_ body: (inout Value) -> Result) -> Result {
        value.withLock { value in
            let result = body(&value)
            version.wrappingAdd(1, ordering: .releasing)
            return result
        }
    }

    /// The value now (takes the lock).
    public var current: Value { value.withLock { $0 } }

    /// The reader's side: brings `copy` up to date when the value changed since it was taken.
    /// Returns whether it did. Without a change (nearly every call) it takes no lock.
    @discardableResult
    public func refresh(_ copy: inout Copy) -> Bool {
        guard version.load(ordering: .acquiring) != copy.version else { return false }
        (copy.value, copy.version) = value.withLock { ($0, version.load(ordering: .relaxed)) }
        return true
    }

    /// A reader's copy of the value and the version it was taken at.
    public struct Copy {
        public fileprivate(set) var value: Value
        fileprivate var version: UInt64

        /// A copy that the first ``VersionedValue/refresh(_:)`` replaces (`placeholder` until then).
        public init(placeholder: Value) {
            value = placeholder
            version = 0
        }
    }
}
