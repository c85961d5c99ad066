// swift-tools-version:6.1
//
// Parley: a voice-chat audio relay for Linux.
//
// The graph below is the architecture (see ../shared/DESIGN.md, "Modules"):
// the relay side (`ParleyRelay`, `parley-relay`) never reaches an audio library,
// and a test (`Scripts/check-relay-deps`) fails the build if that ever changes.

import PackageDescription

let package = Package(
    name: "parley",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "parley", targets: ["parley"]),
        .executable(name: "parley-relay", targets: ["parley-relay"]),
        // For the fuzzing package in Fuzz/, which builds the parsers with libFuzzer.
        .library(name: "ParleyWire", targets: ["ParleyWire"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    ],
    targets: [
        // MARK: C libraries, found through pkg-config; only client-side targets may depend on them.
        .systemLibrary(
            name: "COpus",
            pkgConfig: "opus",
            providers: [.apt(["libopus-dev"])]
        ),
        .systemLibrary(
            name: "CSpeexDSP",
            pkgConfig: "speexdsp",
            providers: [.apt(["libspeexdsp-dev"])]
        ),
        .systemLibrary(
            name: "CALSA",
            pkgConfig: "alsa",
            providers: [.apt(["libasound2-dev"])]
        ),

        // MARK: The wire: pure Swift, no dependencies, shared by every other target.
        .target(name: "ParleyWire"),

        // MARK: Command lines.
        .executableTarget(
            name: "parley",
            dependencies: [
                "ParleyWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "parley-relay",
            dependencies: [
                "ParleyWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // MARK: Tests.
        .testTarget(name: "ParleyWireTests", dependencies: ["ParleyWire"]),
        .testTarget(name: "CLibraryTests", dependencies: ["COpus", "CSpeexDSP", "CALSA"]),
    ]
)
