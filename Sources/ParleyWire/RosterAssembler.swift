/// Puts roster pages back together; a newer version replaces an unfinished older one. The
/// client assembles the relay's rosters with it, and a relay its trunk peer's.
public struct RosterAssembler: Sendable {
    private var version: UInt32?
    private var pages: [UInt8: [ControlMessage.Roster.Member]] = [:]
    private var completedVersion: UInt32?

    public init() {}

    /// Returns the whole roster once every page of the newest version is in.
    public mutating func add(_ page: ControlMessage.Roster) -> [ControlMessage.Roster.Member]? {
        if let completedVersion, !isNewer(page.version, than: completedVersion) { return nil }
        if version != page.version {
            if let version, !isNewer(page.version, than: version) { return nil }
            version = page.version
            pages = [:]
        }
        pages[page.pageIndex] = page.members
        guard pages.count == Int(page.pageCount) else { return nil }
        completedVersion = page.version
        return (0..<page.pageCount).flatMap { pages[$0] ?? [] }
    }

    private func isNewer(_ a: UInt32, than b: UInt32) -> Bool { Int32(bitPattern: a &- b) > 0 }
}
