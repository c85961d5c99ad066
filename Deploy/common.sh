# Shared by install.sh and uninstall.sh (sourced, not run): where things go, messages, the
# service user, and the firewall rule. Every path is under $root, which is empty for the
# live system and a folder for `--root DIR` (tests, image builds).
# shellcheck shell=bash

# The script that sourced this, for messages.
program=${program:-parley}
readonly unit_name=parley-relay.service
readonly service_user=parley
# The rule's mark in nftables and ufw: how uninstall and a port change find it again.
readonly rule_comment=parley-relay
# Changes a live system only when no --root is given.
root=""

binary_path() { printf '%s/usr/local/bin/parley-relay' "$root"; }
config_dir() { printf '%s/etc/parley' "$root"; }
config_path() { printf '%s/etc/parley/relay.conf' "$root"; }
secret_path() { printf '%s/etc/parley/relay.secret' "$root"; }
# The uninstaller stays on the machine, so a VPS can be cleaned without the repository.
lib_dir() { printf '%s/usr/local/lib/parley-relay' "$root"; }
unit_path() { printf '%s/etc/systemd/system/%s' "$root" "$unit_name"; }
dropin_dir() { printf '%s/etc/systemd/system/%s.d' "$root" "$unit_name"; }
sysctl_path() { printf '%s/etc/sysctl.d/60-parley-relay.conf' "$root"; }
sysusers_path() { printf '%s/etc/sysusers.d/parley-relay.conf' "$root"; }
nft_rule_path() { printf '%s/etc/nftables.d/parley-relay.nft' "$root"; }
nft_main_path() { printf '%s/etc/nftables.conf' "$root"; }
# The include line names the rule file as the live system sees it, without $root.
readonly nft_include_line='include "/etc/nftables.d/parley-relay.nft"  # parley-relay: added by Deploy/install.sh'

say() { printf '%s: %s\n' "$program" "$*"; }
warn() { printf '%s: warning: %s\n' "$program" "$*" >&2; }
# Usage mistakes exit 2, like parley-relay itself; everything else 1.
die() { printf '%s: %s\n' "$program" "$*" >&2; exit 1; }
usage_error() { printf '%s: %s\n' "$program" "$*" >&2; printf "Run '%s --help' for the options.\n" "$program" >&2; exit 2; }

is_live() { [[ -z "$root" ]]; }

# Root is needed for the live system; a --root folder of one's own can be filled by anyone,
# only without setting owners.
require_privileges() {
    if ((EUID != 0)); then
        if is_live; then
            die "run this as root (sudo $program ...), or with --root DIR to fill a folder instead of this system"
        fi
        warn "not root: files under $root keep your own user as owner (the service user's ownership is not set)"
    fi
}

# The service user's numeric id from the passwd file under $root (so --root never asks the
# host's user database), or nothing.
service_ids() {
    local passwd="$root/etc/passwd"
    [[ -r "$passwd" ]] || return 0
    awk -F: -v user="$service_user" '$1 == user { print $3 ":" $4 }' "$passwd"
}

systemd_present() { command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; }

# MARK: Firewall

# Which firewall guards this system: ufw if it is active, nftables if it has the usual
# `inet filter input` chain, otherwise none (everything is open already; say so).
detect_firewall() {
    if ! is_live; then
        if [[ -f "$(nft_main_path)" ]]; then echo nftables; else echo none; fi
        return
    fi
    if command -v ufw >/dev/null && ufw status 2>/dev/null | grep -q '^Status: active'; then
        echo ufw
    elif command -v nft >/dev/null && nft list chain inet filter input >/dev/null 2>&1; then
        echo nftables
    else
        echo none
    fi
}

# Removes every rule this installer added, whatever port it opened.
firewall_close() {
    local kind=$1
    case "$kind" in
    ufw)
        if is_live && command -v ufw >/dev/null; then
            local port
            # `ufw status` lists "7800/udp  ALLOW  Anywhere  # parley-relay" once per address family.
            for port in $(ufw status 2>/dev/null | awk -v tag="# $rule_comment" 'index($0, tag) { split($1, a, "/"); print a[1] }' | sort -u); do
                ufw delete allow "$port/udp" >/dev/null && say "ufw: closed UDP $port"
            done
        fi
        ;;
    nftables)
        if is_live && command -v nft >/dev/null; then
            local handle
            for handle in $(nft -a list chain inet filter input 2>/dev/null | awk -v tag="comment \"$rule_comment\"" 'index($0, tag) { print $NF }'); do
                nft delete rule inet filter input handle "$handle"
            done
        fi
        rm -f "$(nft_rule_path)"
        local main
        main=$(nft_main_path)
        if [[ -f "$main" ]] && grep -qF "$nft_include_line" "$main"; then
            local kept
            kept=$(grep -vF "$nft_include_line" "$main")
            printf '%s\n' "$kept" >"$main"
        fi
        ;;
    esac
}

# Opens UDP $2 and nothing else, replacing any rule this installer added before.
firewall_open() {
    local kind=$1 port=$2
    case "$kind" in
    ufw)
        is_live || { warn "ufw cannot write into --root $root; open UDP $port there with: ufw allow $port/udp"; return 0; }
        firewall_close ufw
        ufw allow "$port/udp" comment "$rule_comment" >/dev/null
        say "ufw: opened UDP $port (the admin port stays closed)"
        ;;
    nftables)
        firewall_close nftables
        local rules
        rules=$(nft_rule_path)
        mkdir -p "$(dirname "$rules")"
        # Declaring the chain first makes the insert safe when it does not exist (it becomes an
        # unhooked chain that matches nothing) instead of failing the whole firewall at boot.
        cat >"$rules" <<EOF
# Written by Parley's Deploy/install.sh: lets clients reach the relay's UDP port, and
# nothing else. /etc/nftables.conf includes this file; Deploy/uninstall.sh removes both.
table inet filter {
	chain input {
	}
}
insert rule inet filter input udp dport $port accept comment "$rule_comment"
EOF
        local main
        main=$(nft_main_path)
        if [[ -f "$main" ]]; then
            printf '%s\n' "$nft_include_line" >>"$main"
        else
            warn "no $main: add this line to your nftables configuration so the rule survives a reboot: ${nft_include_line%%  #*}"
        fi
        if is_live; then
            nft -f "$rules"
            say "nftables: opened UDP $port in inet filter input (the admin port stays closed)"
        else
            say "nftables: wrote the rule for UDP $port to $rules (not loaded: --root)"
        fi
        ;;
    none)
        say "firewall: none active, so nothing to open; UDP $port must also be allowed by your provider's firewall, if it has one"
        ;;
    esac
}
