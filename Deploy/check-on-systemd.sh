#!/usr/bin/env bash
# Runs install.sh, an upgrade, a crash, and uninstall.sh under a real systemd: a throwaway
# Debian 12 made with debootstrap and booted with systemd-nspawn in a network namespace of
# its own (nftables live in it, the host's firewall untouched). What the CI test cannot do
# (no systemd runs as PID 1 there), this does on any Debian machine with root. Each check
# prints "ok" or "FAIL"; the exit status is 0 only if all passed.
#
# Needs root, debootstrap and systemd-container (apt-get install debootstrap
# systemd-container), and the first time a Debian mirror (about 150 MB, kept for next time).
set -euo pipefail

program="check-on-systemd.sh"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=/var/tmp/parley-systemd-check/debian-12
binary="$here/../.build/deploy/parley-relay"
mirror=http://deb.debian.org/debian

usage() {
    cat <<'EOF'
Usage: check-on-systemd.sh [--binary FILE] [--base DIR] [--mirror URL]

  --binary FILE  the parley-relay to install (default: .build/deploy/parley-relay)
  --base DIR     where the Debian root is kept between runs (default /var/tmp/parley-systemd-check/debian-12)
  --mirror URL   the Debian mirror for debootstrap (default http://deb.debian.org/debian)
EOF
}
while (($# > 0)); do
    case "$1" in
    --binary) binary=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$program: unknown option '$1'; see --help" >&2; exit 2 ;;
    esac
done
((EUID == 0)) || { echo "$program: run as root (it builds and boots a container)" >&2; exit 1; }
for tool in debootstrap systemd-nspawn; do
    command -v "$tool" >/dev/null || { echo "$program: $tool is missing; apt-get install debootstrap systemd-container" >&2; exit 1; }
done
[[ -f "$binary" ]] || { echo "$program: no $binary; run Deploy/build-relay.sh or pass --binary" >&2; exit 1; }

if [[ ! -x "$base/lib/systemd/systemd" ]]; then
    echo "$program: making a Debian 12 root in $base (once; a few minutes)"
    mkdir -p "$base"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,nftables,iproute2,procps bookworm "$base" "$mirror" >/dev/null
    ln -sf /lib/systemd/system/nftables.service "$base/etc/systemd/system/sysinit.target.wants/nftables.service"
fi
# The check runs as a boot-time service that powers the container off when done.
cat >"$base/etc/systemd/system/parley-check.service" <<'EOF'
[Unit]
Description=Parley deploy check
After=multi-user.target
ConditionPathExists=/check/run.sh
[Service]
Type=oneshot
ExecStart=/bin/bash /check/run.sh
ExecStopPost=/bin/systemctl poweroff --no-block
[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/parley-check.service "$base/etc/systemd/system/multi-user.target.wants/parley-check.service"

check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
"$here/deploy.sh" --binary "$binary" --bundle-only "$check/bundle" >/dev/null
cp "$binary" "$check/parley-relay-upgraded"
printf '\nupgrade check build\n' >>"$check/parley-relay-upgraded"  # runs the same, differs on disk

cat >"$check/run.sh" <<'EOF'
exec >/check/result.log 2>&1
failures=0
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
main_pid() { systemctl show -p MainPID --value parley-relay; }
status_of() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/$(main_pid)/status"; }
healthz() {
    { exec 3<>/dev/tcp/127.0.0.1/9800; } 2>/dev/null || return 1
    printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
    local line; IFS= read -r -t 2 line <&3; exec 3<&-
    [[ "$line" == *" 200 "* ]]
}

output=$(/check/bundle/install.sh --public-host relay.example.org --room lobby --identity ada 2>&1); status=$?
echo "$output"
expect "install.sh exits 0" test "$status" -eq 0
expect "install.sh prints the first invite" grep -q '^parley://relay.example.org:7800/lobby?token=' <<<"$output"
expect "the unit is active and enabled" bash -c 'systemctl is-active --quiet parley-relay && systemctl is-enabled --quiet parley-relay'
expect "the relay runs as parley" test "$(ps -o user= -p "$(main_pid)")" = parley
expect "with no capabilities" test "$(status_of CapEff)" = 0000000000000000
expect "with no new privileges" test "$(status_of NoNewPrivs)" = 1
expect "under a seccomp filter" test "$(status_of Seccomp)" = 2
expect "/healthz answers 200" healthz
expect "nftables has the relay's rule" bash -c 'nft list chain inet filter input | grep -q "udp dport 7800 accept"'
secret=$(sha256sum </etc/parley/relay.secret)
pid=$(main_pid)

output=$(/check/bundle/install.sh --public-host relay.example.org 2>&1); status=$?
expect "a second install.sh exits 0" test "$status" -eq 0
expect "and says nothing changed" grep -q "nothing changed" <<<"$output"
expect "and leaves the relay running untouched" test "$(main_pid)" = "$pid"

output=$(/check/bundle/install.sh --binary /check/parley-relay-upgraded --public-host relay.example.org 2>&1); status=$?
echo "$output"
expect "the upgrade exits 0" test "$status" -eq 0
expect "and waited for /healthz" grep -q "healthy:" <<<"$output"
expect "the relay was restarted" test "$(main_pid)" != "$pid"
expect "cleanly (SIGTERM, goodbye, exit 0)" bash -c 'journalctl -u parley-relay | grep -q "telling members goodbye" && test "$(systemctl show -p NRestarts --value parley-relay)" = 0'
expect "the secret is unchanged" test "$(sha256sum </etc/parley/relay.secret)" = "$secret"
expect "the new binary is installed" cmp -s /check/parley-relay-upgraded /usr/local/bin/parley-relay

pid=$(main_pid)
kill -SEGV "$pid"
sleep 4
expect "a crash is restarted (Restart=on-failure)" bash -c "test \"\$(systemctl show -p NRestarts --value parley-relay)\" = 1 && systemctl is-active --quiet parley-relay"
expect "and is healthy again" healthz

output=$(/usr/local/lib/parley-relay/uninstall.sh 2>&1); status=$?
echo "$output"
expect "uninstall.sh exits 0" test "$status" -eq 0
expect "the unit is gone" bash -c '! systemctl cat parley-relay >/dev/null 2>&1'
expect "the binary is gone" test ! -e /usr/local/bin/parley-relay
expect "the user is gone" bash -c '! getent passwd parley'
expect "the firewall rule is gone" bash -c '! nft list chain inet filter input | grep -q parley-relay'
expect "/etc/parley is kept" test -f /etc/parley/relay.secret
/check/bundle/uninstall.sh --purge >/dev/null 2>&1
expect "--purge removes /etc/parley" test ! -e /etc/parley
journalctl -u parley-relay --no-pager | tail -8
echo "failures: $failures"
EOF

echo "$program: booting the Debian root under systemd-nspawn with the bundle mounted"
timeout 300 systemd-nspawn --quiet --directory="$base" --ephemeral --boot --private-network --register=no --keep-unit \
    --bind="$check:/check" >"$check/console.log" 2>&1 || true
if [[ ! -f "$check/result.log" ]]; then
    echo "$program: the container produced no result; its console:" >&2
    tail -30 "$check/console.log" >&2
    exit 1
fi
cat "$check/result.log"
grep -q '^failures: 0$' "$check/result.log"
