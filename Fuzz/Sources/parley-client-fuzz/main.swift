import ParleyClient
import ParleyClientTestSupport

/// Plays each input as a script (see `JoinedPeer.run(script:)`) against a client's whole
/// receive path, joined to a relay played in-process: datagrams raw or sealed with the
/// session's keys, RTP from chosen SSRCs with chosen sequence and timestamp steps, time
/// passing while the playback mix pulls audio. Nothing may trap; every input starts from a
/// fresh session, so a crash replays from its input alone.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReceivePath(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let peer = try? JoinedPeer() else { fatalError("the in-process relay could not join the client") }
    peer.run(script: UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
