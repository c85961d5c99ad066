// swift-tools-version:6.1
//
// libFuzzer targets for Parley's parsers and the client's receive path. A separate package because a libFuzzer
// executable has no `main` of its own (libFuzzer provides it), so it cannot build
// with the rest. See docs/FUZZING.md.

import PackageDescription

let package = Package(
    name: "parley-fuzz",
    dependencies: [.package(name: "parley", path: "..")],
    targets: [
        .executableTarget(
            name: "parley-wire-fuzz",
            dependencies: [.product(name: "ParleyWire", package: "parley")]
        ),
        // What a browser's datagrams reach at the relay's port: STUN answered by the ICE-lite
        // responder, DTLS into OpenSSL, SRTP and SRTCP into libsrtp2.
        .executableTarget(
            name: "parley-webrtc-fuzz",
            dependencies: [.product(name: "ParleyWebRTC", package: "parley"), .product(name: "ParleyWire", package: "parley")]
        ),
        // The client's receive path from a joined peer, played by the same script player
        // (`JoinedPeer`) as the property tests.
        .executableTarget(
            name: "parley-client-fuzz",
            dependencies: [
                .product(name: "ParleyClient", package: "parley"),
                .product(name: "ParleyClientTestSupport", package: "parley"),
            ]
        ),
    ]
)
