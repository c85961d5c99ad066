#!/usr/bin/env bash
# Builds the release parley-relay with the Swift standard library linked in, strips it, and
# checks that it needs nothing from the system but glibc, libstdc++ and libgcc, so it runs
# on any x86-64 or arm64 Debian 12 / Ubuntu 22.04 or newer without Swift installed.
# Prints where it is, its size, its `ldd` and the newest glibc symbol version it uses.
set -euo pipefail

program=build-relay.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out="$repo/.build/deploy/parley-relay"

usage() {
    cat <<'EOF'
Usage: build-relay.sh [--out FILE]

Builds a stripped, statically linked (Swift runtime) release parley-relay.
  --out FILE   where to put it (default: .build/deploy/parley-relay, which install.sh
               and deploy.sh find by themselves)
EOF
}
while (($# > 0)); do
    case "$1" in
    --out) [[ $# -ge 2 ]] || { echo "$program: --out needs a file" >&2; exit 2; }; out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$program: unknown option '$1'; see --help" >&2; exit 2 ;;
    esac
done

if ! command -v swift >/dev/null; then
    for candidate in /opt/swift/usr/bin /usr/share/swift/usr/bin; do
        [[ -x "$candidate/swift" ]] && PATH="$candidate:$PATH"
    done
fi
command -v swift >/dev/null || { echo "$program: no Swift toolchain; install Swift 6.1 or later (https://www.swift.org/install/linux/)" >&2; exit 1; }
command -v strip >/dev/null || { echo "$program: strip is missing; apt-get install binutils" >&2; exit 1; }

cd "$repo"
echo "$program: building parley-relay (release, static Swift standard library); the first build takes several minutes"
swift build -c release --product parley-relay --static-swift-stdlib
built="$(swift build -c release --show-bin-path)/parley-relay"

mkdir -p "$(dirname "$out")"
strip --strip-all -o "$out.tmp" "$built"
mv -f "$out.tmp" "$out"

# Only these may come from the system; anything else means a dependency crept in (an audio
# library, a dynamic Swift runtime) and the binary would not run on a bare VPS.
libraries=$(ldd "$out")
unexpected=$(awk '{ print $1 }' <<<"$libraries" | grep -Ev '^(linux-vdso|linux-gate)\.so|^/lib.*/ld-linux|^ld-linux|^lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so' || true)
if [[ -n "$unexpected" ]]; then
    echo "$program: $out links more than glibc, libstdc++ and libgcc:" >&2
    echo "$unexpected" >&2
    exit 1
fi

glibc=$(objdump -T "$out" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "$program: $out"
echo "  size: $(stat -c %s "$out") bytes ($(du -h "$out" | cut -f1)); unstripped $(du -h "$built" | cut -f1)"
echo "  needs ${glibc/_/ } or newer (Debian 12 has 2.36, Ubuntu 22.04 has 2.35) and:"
awk '{ print "  " $0 }' <<<"$libraries"
echo "Install it here with: sudo Deploy/install.sh --public-host YOUR.HOST   or ship it: Deploy/deploy.sh user@host"
