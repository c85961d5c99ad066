#!/usr/bin/env bash
# From a laptop: builds parley-relay here, copies it and the install scripts to a VPS over
# ssh, runs install.sh there with sudo, and prints the first invite. Run it again to upgrade.
set -euo pipefail

program=deploy.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
    cat <<'EOF'
Usage: deploy.sh [options] USER@HOST [-- install.sh options]

Builds parley-relay, copies it to HOST over ssh and installs (or upgrades) it there.

  --binary FILE      ship this parley-relay instead of building one
  --public-host NAME the name clients reach the relay by (default: HOST)
  --ssh-port N       ssh port of the VPS (default: ssh's own)
  --ssh-option OPT   passed to ssh as -o OPT, e.g. IdentityFile=~/.ssh/vps (repeatable)
  --bundle-only DIR  put what would be shipped into DIR and stop (to inspect it, or to
                     carry it over another way: run DIR/install.sh on the VPS)
  -h, --help         this text

Everything after -- goes to install.sh, e.g. -- --port 7900 --room standup --identity ada.

Example:
  Deploy/deploy.sh debian@relay.example.org
EOF
}

binary=""
public_host=""
bundle_only=""
target=""
ssh_options=()
install_options=()
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "$program: $1 needs a value" >&2; exit 2; }; }
while (($# > 0)); do
    case "$1" in
    --binary) need_value "$@"; binary=$2; shift 2 ;;
    --public-host) need_value "$@"; public_host=$2; shift 2 ;;
    --ssh-port) need_value "$@"; ssh_options+=(-p "$2"); shift 2 ;;
    --ssh-option) need_value "$@"; ssh_options+=(-o "$2"); shift 2 ;;
    --bundle-only) need_value "$@"; bundle_only=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; install_options=("$@"); break ;;
    -*) echo "$program: unknown option '$1'; see --help" >&2; exit 2 ;;
    *) [[ -z "$target" ]] || { echo "$program: one USER@HOST only (got '$target' and '$1')" >&2; exit 2; }; target=$1; shift ;;
    esac
done
if [[ -z "$target" && -z "$bundle_only" ]]; then
    echo "$program: say where to deploy, e.g. $program debian@relay.example.org" >&2
    exit 2
fi

if [[ -z "$binary" ]]; then
    "$here/build-relay.sh"
    binary="$here/../.build/deploy/parley-relay"
fi
[[ -f "$binary" ]] || { echo "$program: --binary $binary does not exist" >&2; exit 2; }

# The bundle: the binary and exactly what install.sh and uninstall.sh read beside them.
bundle_files=(install.sh uninstall.sh common.sh parley-relay.service parley-relay.sysctl parley-relay.sysusers)
make_bundle() {
    local into=$1
    mkdir -p "$into"
    for file in "${bundle_files[@]}"; do cp -p "$here/$file" "$into/"; done
    install -m 755 "$binary" "$into/parley-relay"
}

if [[ -n "$bundle_only" ]]; then
    make_bundle "$bundle_only"
    echo "$program: bundle in $bundle_only; on the VPS run: sudo $bundle_only/install.sh --public-host NAME"
    exit 0
fi

host=${target#*@}
public_host=${public_host:-$host}
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
make_bundle "$staging/bundle"

# One connection checks the machine and unpacks the bundle into a private folder there.
echo "$program: copying parley-relay and the install scripts to $target"
remote_dir=$(tar czf - -C "$staging/bundle" . | ssh "${ssh_options[@]}" "$target" '
    set -e
    [ "$(uname -m)" = "'"$(uname -m)"'" ] || { echo "the VPS is $(uname -m) but this binary is '"$(uname -m)"'; build on a machine like the VPS and pass --binary" >&2; exit 1; }
    dir=$(mktemp -d /tmp/parley-relay-install.XXXXXX)
    tar xzf - -C "$dir"
    echo "$dir"')

# sudo may ask for a password, so the second connection gets a terminal.
sudo_command=sudo
[[ "${target%%@*}" != root ]] || sudo_command=""
quoted_options=$(printf ' %q' --public-host "$public_host" "${install_options[@]}")
echo "$program: installing on $target"
status=0
ssh -t "${ssh_options[@]}" "$target" "$sudo_command $remote_dir/install.sh$quoted_options; status=\$?; rm -rf $remote_dir; exit \$status" || status=$?
if ((status != 0)); then
    echo "$program: the install on $target failed (exit $status); its messages are above. Logs: ssh $target journalctl -u parley-relay -n 50" >&2
    exit "$status"
fi
echo "$program: done. Upgrade later by running this again; remove with: ssh -t $target sudo /usr/local/lib/parley-relay/uninstall.sh"
