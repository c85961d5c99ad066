// swift-tools-version:6.1
//
// libFuzzer targets for Parley's parsers. A separate package because a libFuzzer
// executable has no `main` of its own (libFuzzer provides it), so it cannot build
// with the rest. See "Fuzzing" in the top-level README.

import PackageDescription

let package = Package(
    name: "parley-fuzz",
    dependencies: [.package(name: "parley", path: "..")],
    targets: [
        .executableTarget(
            name: "parley-wire-fuzz",
            dependencies: [.product(name: "ParleyWire", package: "parley")]
        ),
    ]
)
