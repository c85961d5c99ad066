import ParleyBasics
import Synchronization

/// The call's figures for the status line, `parley ctl status` and `--stats-json`.
extension CallSession {
    /// Figures for the status line, now.
    public func statistics() -> CallStatistics {
        if let final = lifecycle.withLock({ $0.finalStatistics }) { return final }
        return collectStatistics()
    }

    /// Gathers the figures now: the call's status and media gate, the network loop's speakers (asked
    /// on that loop), and the mix's levels and volumes.
    func collectStatistics() -> CallStatistics {
        let state = status.snapshot
        let media = gate.snapshot
        let connection = self.connection!
        let network = connection.submit { (connection.speakerSnapshots(), connection.lossDown()) }
        var speakers = network?.0 ?? lifecycle.withLock { $0.finalStatistics?.speakers } ?? []
        let now = MonotonicClock.now()
        let joinedAt = lifecycle.withLock { $0.joinedAt }
        let timeline = Double(Int64(bitPattern: now &- epoch)) / 1e9
        let levels = mix.levels(now: timeline)
        let volumes = mix.volumesSet
        for index in speakers.indices {
            let identity = speakers[index].identity
            speakers[index].volumePercent = volumes[identity] ?? 100
            speakers[index].levelDecibels = levels[identity]?.decibels
            speakers[index].speakingNow = levels[identity]?.speaking ?? false
        }
        let frames = speakers.map(\.audioFrames).reduce(0, +)
        let concealed = frames > 0 ? speakers.map { $0.concealedPercent * $0.audioFrames }.reduce(0, +) / frames : nil
        return CallStatistics(
            name: configuration.name ?? state.identity ?? "parley",
            identity: state.identity,
            room: configuration.room,
            phase: state.phase,
            elapsedSeconds: joinedAt.map { Double(now - $0) / 1e9 } ?? 0,
            members: state.members,
            speaking: mix.speaking(now: timeline),
            roundTripMilliseconds: state.roundTripNanoseconds.map { Double($0) / 1e6 },
            lossUpPercent: state.lossUp.map { $0 * 100 },
            lossUpTotalPercent: state.lossUpTotal.map { $0 * 100 },
            lossDownPercent: network?.1.map { $0 * 100 },
            jitterBufferDelayMilliseconds: speakers.filter(\.receiving).map(\.jitterBufferDelayMilliseconds).max(),
            concealedPercent: concealed,
            bitrate: state.currentBitrate,
            expectedLossPercent: media.encoder.expectedLossPercent,
            redundantFrames: media.encoder.redundancy.distances.count,
            missingDevices: state.missingDevices.sorted(),
            captureXruns: input.xruns,
            playbackXruns: output.xruns,
            rejoins: state.rejoins,
            packetsSent: gate.sent.packets.load(ordering: .relaxed),
            bytesSent: gate.sent.bytes.load(ordering: .relaxed),
            captureStartedAtNanoseconds: state.captureStartedAt,
            playbackStartedAtNanoseconds: state.playbackStartedAt,
            speakers: speakers,
            controls: media.controls,
            mutedMembers: state.memberStates.filter { $0.value.contains(.muted) }.keys.sorted(),
            deafenedMembers: state.memberStates.filter { $0.value.contains(.deafened) }.keys.sorted(),
            texts: state.texts,
            serverMuted: state.serverMuted,
            endToEnd: state.endToEnd)
    }
}
