// swift-tools-version:6.1
//
// Parley: a voice-chat audio relay for Linux.
//
// The graph below is the architecture (docs/ARCHITECTURE.md, "Modules"):
// the relay side (`ParleyRelay`, `parley-relay`) never reaches an audio library,
// and `Scripts/check-relay-deps` fails the test run if that ever changes.

import PackageDescription

// The modules a call runs through every 10 ms (audio, devices, the client's pipelines, the
// wire and frame encryption) and the tests' judge of what a listener heard are optimised in
// debug builds too. The call tests run several real-time calls at once on two cores with
// debug binaries; unoptimised, each member cost about four times the CPU of a release
// client, and a machine that fell behind was measured as network delay. Preconditions and
// overflow checks stay on (-O keeps them), so the tests still see any trap.
let optimizedEvenInDebug: [SwiftSetting] = [.unsafeFlags(["-O"], .when(configuration: .debug))]

let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
let nioHTTP1: Target.Dependency = .product(name: "NIOHTTP1", package: "swift-nio")
let nioWebSocket: Target.Dependency = .product(name: "NIOWebSocket", package: "swift-nio")
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let metrics: Target.Dependency = .product(name: "Metrics", package: "swift-metrics")
let prometheus: Target.Dependency = .product(name: "Prometheus", package: "swift-prometheus")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let atomics: Target.Dependency = .product(name: "Atomics", package: "swift-atomics")
let histogram: Target.Dependency = .product(name: "Histogram", package: "hdrhistogram-swift")
let httpClient: Target.Dependency = .product(name: "AsyncHTTPClient", package: "async-http-client")
let nioSSL: Target.Dependency = .product(name: "NIOSSL", package: "swift-nio-ssl")

let package = Package(
    name: "parley",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "parley", targets: ["parley"]),
        .executable(name: "parley-relay", targets: ["parley-relay"]),
        .executable(name: "parley-bench", targets: ["parley-bench"]),
        // For the fuzzing package in Fuzz/, which builds the parsers and the client's receive
        // path with libFuzzer.
        .library(name: "ParleyWire", targets: ["ParleyWire"]),
        .library(name: "ParleySecurity", targets: ["ParleySecurity"]),
        .library(name: "ParleyClient", targets: ["ParleyClient"]),
        .library(name: "ParleyWebRTC", targets: ["ParleyWebRTC"]),
        // The client fuzzer's driver (the receive path joined to an in-process relay), which
        // the property tests share.
        .library(name: "ParleyClientTestSupport", targets: ["ParleyClientTestSupport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-atomics.git", from: "1.3.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        // The cluster's store client: HTTP/1.1 to etcd's JSON gateway over TLS (BoringSSL).
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
    ],
    targets: [
        // MARK: C libraries, found through pkg-config; only client-side targets may depend on them.
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        .systemLibrary(name: "CSpeexDSP", pkgConfig: "speexdsp", providers: [.apt(["libspeexdsp-dev"])]),
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        // The relay's two: DTLS with browsers (OpenSSL, through the C layer CParleyDTLS) and SRTP
        // (libsrtp2). Neither is an audio library; `Scripts/check-relay-deps` allows these two.
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSRTP", pkgConfig: "libsrtp2", providers: [.apt(["libsrtp2-dev"])]),
        .target(name: "CParleyDTLS", dependencies: ["COpenSSL"]),

        // Linux calls Glibc's module hides: batched datagram I/O, epoll and eventfd for the
        // relay's loops and the benchmarks, naming and pinning threads.
        .target(name: "CParleyNet"),

        // MARK: The loop that owns a UDP socket (epoll, recvmmsg into a preallocated batch, a
        // task queue, a timer), shared by the relay's threads and a call's network loop: the
        // media sockets are read without SwiftNIO's per-datagram allocations.
        .target(name: "ParleyDatagrams", dependencies: ["CParleyNet", "ParleyBasics", nioCore, logging], swiftSettings: optimizedEvenInDebug),

        // MARK: The helpers every side needs (clocks, seeded random, base64url, durations and
        // whitespace as people write them), written once, with no dependencies.
        .target(name: "ParleyBasics"),

        // MARK: The wire: pure Swift, shared by every other target.
        .target(name: "ParleyWire", dependencies: ["ParleyBasics"], swiftSettings: optimizedEvenInDebug),

        // MARK: Secure transport: Noise NK handshake, sealed packets, replay window, address cookies.
        .target(name: "ParleySecurity", dependencies: ["ParleyWire", "ParleyBasics", "CParleyAEAD", crypto]),
        // The per-packet AEADs (ChaCha20-Poly1305 for the hop, AES-128-GCM for SFrame), straight
        // on the BoringSSL that swift-crypto builds in.
        .target(name: "CParleyAEAD"),

        // MARK: End-to-end encryption: SFrame, media keys and their rotation, identities, HPKE
        // key packages, safety numbers, pinned keys. Clients only: the relay never holds a key.
        .target(name: "ParleyE2EE", dependencies: ["ParleyWire", "ParleyBasics", "CParleyAEAD", crypto], swiftSettings: optimizedEvenInDebug),

        // MARK: Browsers' transport: ICE-lite answers, DTLS-SRTP keys, SRTP, the SDP answer.
        .target(name: "ParleyWebRTC", dependencies: ["ParleyWire", "ParleyBasics", "CParleyDTLS", "CSRTP", crypto]),

        // MARK: The relay: rooms, join and auth, forwarding, RTCP termination, limits, metrics.
        // It knows the cluster only as a `RoomPlacement`, and speaks no HTTP.
        .target(
            name: "ParleyRelay",
            dependencies: ["ParleyWire", "ParleyBasics", "ParleySecurity", "ParleyWebRTC", "ParleyDatagrams", "CParleyNet", nioCore, nioPosix, crypto, logging, metrics, prometheus, atomics]
        ),
        // The relay's admin port: /metrics, /healthz and the admin API over HTTP, and its client;
        // the web port: the browser page, its offer (HTTP) and its signalling (a WebSocket).
        .target(name: "ParleyAdmin", dependencies: ["ParleyRelay", "ParleyWire", "ParleyBasics", nioCore, nioPosix, nioHTTP1, nioWebSocket, logging]),
        // The cluster: etcd, the view of the relays and rooms, placement and the trunk plan; the
        // relay's `RoomPlacement`.
        .target(
            name: "ParleyCluster",
            dependencies: ["ParleyRelay", "ParleyWire", "ParleyBasics", httpClient, nioSSL, nioCore, nioPosix, nioHTTP1, logging, metrics, prometheus]
        ),

        // MARK: Network impairment models and the UDP impairment proxy.
        .target(name: "ParleyNetSim", dependencies: ["ParleyWire", "ParleyBasics", nioCore, nioPosix, logging, histogram]),

        // MARK: The client's audio: Opus, echo cancellation, jitter buffer, mixer, WAV.
        .target(name: "ParleyAudio", dependencies: ["ParleyWire", "COpus", "CSpeexDSP"], swiftSettings: optimizedEvenInDebug),
        // ALSA capture and playback, file devices, real-time pacing.
        .target(name: "ParleyDevices", dependencies: ["ParleyAudio", "ParleyBasics", "CALSA"], swiftSettings: optimizedEvenInDebug),

        // MARK: The call: the link to the relay, the send and receive pipelines, statistics.
        .target(
            name: "ParleyClient",
            dependencies: ["ParleyWire", "ParleyBasics", "ParleySecurity", "ParleyE2EE", "ParleyAudio", "ParleyDevices", "ParleyDatagrams", nioCore, nioPosix, logging],
            swiftSettings: optimizedEvenInDebug
        ),

        // MARK: Judging a call: what a listener got of a talker. For the benchmarks and tests, not shipped in the client.
        .target(name: "ParleyEvaluation", dependencies: ["ParleyAudio"], swiftSettings: optimizedEvenInDebug),

        // MARK: Command lines.
        .executableTarget(
            name: "parley",
            dependencies: ["ParleyWire", "ParleyBasics", "ParleyNetSim", "ParleyAudio", "ParleyDevices", "ParleyClient", "ParleySecurity", argumentParser, logging, nioCore]
        ),
        .executableTarget(
            name: "parley-relay",
            dependencies: ["ParleyWire", "ParleyBasics", "ParleyRelay", "ParleyAdmin", "ParleyCluster", argumentParser, logging]
        ),
        // Benchmarks kept in the repo; each reports against a baseline measured in the same run.
        .executableTarget(
            name: "parley-bench",
            dependencies: [
                "ParleyWire", "ParleyBasics", "ParleyRelay", "ParleyCluster", "ParleyNetSim", "ParleyAudio", "ParleyDevices", "ParleyClient", "ParleyE2EE", "ParleyEvaluation",
                "CParleyNet", "CParleyAllocationCounter",
                argumentParser, nioCore, nioPosix, logging,
            ]
        ),
        // Counts heap allocations per thread for the benchmarks that show a path allocates
        // nothing: linked into parley-bench only, where it stands in for libc's malloc.
        .target(name: "CParleyAllocationCounter"),

        // MARK: Helpers the tests share, each a target of its own (no file is linked into two
        // targets): clients over real UDP for the relay and call tests (and the hex decoding of
        // test vectors, which the wire, security and E2EE tests take from there too), and the
        // client's receive path driven by scripts for its property test and Fuzz/.
        .target(
            name: "ParleyRelayTestSupport",
            dependencies: ["ParleyBasics", "ParleyRelay", "ParleyAdmin", "ParleyClient", "ParleyWire", "ParleySecurity", "ParleyWebRTC", crypto, nioCore, logging],
            path: "Tests/ParleyRelayTestSupport"
        ),
        .target(
            name: "ParleyClientTestSupport",
            dependencies: ["ParleyClient", "ParleySecurity", "ParleyWire"],
            path: "Tests/ParleyClientTestSupport"
        ),

        // MARK: Tests, one target per module.
        .testTarget(name: "ParleyWireTests", dependencies: ["ParleyWire", "ParleyBasics", "ParleyRelayTestSupport"]),
        .testTarget(name: "CLibraryTests", dependencies: ["COpus", "CSpeexDSP", "CALSA"]),
        .testTarget(name: "ParleySecurityTests", dependencies: ["ParleyBasics", "ParleySecurity", "ParleyWire", "ParleyRelayTestSupport"]),
        .testTarget(name: "ParleyWebRTCTests", dependencies: ["ParleyBasics", "ParleyWebRTC", "ParleyWire"]),
        .testTarget(name: "ParleyE2EETests", dependencies: ["ParleyBasics", "ParleyE2EE", "ParleyWire", "ParleyRelayTestSupport"]),
        .testTarget(
            name: "ParleyRelayTests",
            dependencies: ["ParleyBasics", "ParleyRelay", "ParleyRelayTestSupport", "ParleyDatagrams", "ParleyWire", "ParleySecurity", "ParleyWebRTC", "ParleyClient", nioCore, nioPosix]
        ),
        .testTarget(name: "ParleyAdminTests", dependencies: ["ParleyAdmin", "ParleyRelay", "ParleyRelayTestSupport", "ParleyBasics", "ParleyWire", logging]),
        .testTarget(name: "ParleyNetSimTests", dependencies: ["ParleyBasics", "ParleyNetSim", "ParleyWire", nioCore, nioPosix]),
        .testTarget(name: "ParleyAudioTests", dependencies: ["ParleyBasics", "ParleyAudio", "ParleyWire"]),
        .testTarget(name: "ParleyClientTests", dependencies: ["ParleyBasics", "ParleyClient", "ParleyClientTestSupport", "ParleyWire", "ParleySecurity", "ParleyAudio", "ParleyE2EE"]),
        .testTarget(name: "ParleyEvaluationTests", dependencies: ["ParleyEvaluation", "ParleyAudio", "ParleyBasics"]),
        .testTarget(name: "ParleyDevicesTests", dependencies: ["ParleyBasics", "ParleyDevices", "ParleyAudio", "CALSA"]),
        // End to end: relay, impairment proxy and calls in one process, over real UDP on 127.0.0.1.
        .testTarget(
            name: "ParleyCallTests",
            dependencies: [
                "ParleyClient", "ParleyRelay", "ParleyAdmin", "ParleyRelayTestSupport", "ParleyNetSim", "ParleyAudio", "ParleyDevices", "ParleyEvaluation", "ParleyWire",
                "ParleyBasics", "ParleySecurity", "ParleyE2EE", nioCore, nioPosix, logging,
            ]
        ),
        // The cluster: its view, placement, plan and records as plain values; then a real etcd
        // (plain, and with TLS and authentication), relays on 127.0.0.1–3, clients sent where
        // their room lives.
        .testTarget(
            name: "ParleyClusterTests",
            dependencies: ["ParleyCluster", "ParleyRelay", "ParleyRelayTestSupport", "ParleyAdmin", "ParleyClient", "ParleyAudio", "ParleyWire", "ParleyBasics", "ParleySecurity", "ParleyWebRTC", nioCore, nioPosix, logging]
        ),
        // Deploy/: installs into a temporary root, runs a call through the installed relay.
        .testTarget(name: "DeployTests", dependencies: ["ParleyBasics", "ParleyClient", "ParleySecurity", "ParleyWire", "ParleyAudio"]),
    ]
)
