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
# HTTPS for the browser page (install.sh --web-domain): Debian's Caddy, with one site file of
# ours imported from its Caddyfile, as the nftables rule is included from nftables.conf.
caddy_site_path() { printf '%s/etc/caddy/parley-relay.caddy' "$root"; }
caddy_main_path() { printf '%s/etc/caddy/Caddyfile' "$root"; }
readonly caddy_import_line='import /etc/caddy/parley-relay.caddy  # parley-relay: added by Deploy/install.sh'
# Left by install.sh when it installed the caddy package itself: the Caddyfile as the package
# made it, so uninstall.sh removes the package again only if nobody has added a site since.
caddy_installed_mark() { printf '%s/caddyfile-before-parley' "$(lib_dir)"; }

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

# Removes every rule this installer added, whatever ports it opened.
firewall_close() {
    local kind=$1
    case "$kind" in
    ufw)
        if is_live && command -v ufw >/dev/null; then
            local rule
            # `ufw status` lists "7800/udp  ALLOW  Anywhere  # parley-relay" (and 80/tcp, 443/tcp
            # for the page) once per address family.
            for rule in $(ufw status 2>/dev/null | awk -v tag="# $rule_comment" 'index($0, tag) { print $1 }' | sort -u); do
                ufw delete allow "$rule" >/dev/null && say "ufw: closed $rule"
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

# Opens UDP $2 and the TCP ports after it (80 and 443 for the browser page's HTTPS), and
# nothing else, replacing any rule this installer added before.
firewall_open() {
    local kind=$1 port=$2
    shift 2
    local tcp_ports=("$@") tcp_list="" tcp_words=""
    if (($# > 0)); then
        tcp_list=$(printf '%s, ' "$@")
        tcp_list=${tcp_list%, }
        tcp_words=" and TCP $tcp_list (HTTPS for the page)"
    fi
    case "$kind" in
    ufw)
        is_live || { warn "ufw cannot write into --root $root; open the ports there with: ufw allow $port/udp${tcp_list:+, and ufw allow PORT/tcp for $tcp_list}"; return 0; }
        firewall_close ufw
        ufw allow "$port/udp" comment "$rule_comment" >/dev/null
        local tcp_port
        for tcp_port in ${tcp_ports[@]+"${tcp_ports[@]}"}; do
            # A rule of the owner's own for the port (a web server already here) is left as it
            # is: tagging it ours would make uninstall.sh take it away.
            if ufw status 2>/dev/null | grep -v "# $rule_comment" | grep -qE "^$tcp_port(/tcp)? +ALLOW"; then
                say "ufw: TCP $tcp_port is allowed already by a rule of your own; left as it is"
                continue
            fi
            ufw allow "$tcp_port/tcp" comment "$rule_comment" >/dev/null
        done
        say "ufw: opened UDP $port$tcp_words (the admin port stays closed)"
        ;;
    nftables)
        firewall_close nftables
        local rules
        rules=$(nft_rule_path)
        mkdir -p "$(dirname "$rules")"
        # Declaring the chain first makes the insert safe when it does not exist (it becomes an
        # unhooked chain that matches nothing) instead of failing the whole firewall at boot.
        cat >"$rules" <<EOF
# Written by Parley's Deploy/install.sh: lets clients reach the relay's UDP port (and, with
# the browser page, Caddy's TCP 80 and 443), and nothing else. /etc/nftables.conf includes
# this file; Deploy/uninstall.sh removes both.
table inet filter {
	chain input {
	}
}
insert rule inet filter input udp dport $port accept comment "$rule_comment"
EOF
        [[ -z "$tcp_list" ]] || printf 'insert rule inet filter input tcp dport { %s } accept comment "%s"\n' "$tcp_list" "$rule_comment" >>"$rules"
        local main
        main=$(nft_main_path)
        if [[ -f "$main" ]]; then
            printf '%s\n' "$nft_include_line" >>"$main"
        else
            warn "no $main: add this line to your nftables configuration so the rule survives a reboot: ${nft_include_line%%  #*}"
        fi
        if is_live; then
            nft -f "$rules"
            say "nftables: opened UDP $port$tcp_words in inet filter input (the admin port stays closed)"
        else
            say "nftables: wrote the rules for UDP $port$tcp_words to $rules (not loaded: --root)"
        fi
        ;;
    none)
        say "firewall: none active, so nothing to open; UDP $port$tcp_words must also be allowed by your provider's firewall, if it has one"
        ;;
    esac
}

# MARK: HTTPS for the browser page

# The domain the page is served at, from the site file install.sh wrote, or nothing.
caddy_site_domain() {
    local site
    site=$(caddy_site_path)
    [[ -f "$site" ]] || return 0
    awk '/^[^#[:space:]][^[:space:]]* \{$/ { print $1; exit }' "$site"
}

# Has the running Caddy read its Caddyfile again (live systems whose Caddy runs).
caddy_reload() {
    is_live && systemd_present || return 0
    systemctl is-active --quiet caddy 2>/dev/null || return 0
    systemctl reload caddy || warn "Caddy did not reload; see: journalctl -u caddy -n 50"
}

# Removes the site file and the import line install.sh added (not Caddy itself).
caddy_site_remove() {
    local site main removed=1
    site=$(caddy_site_path)
    main=$(caddy_main_path)
    if [[ -f "$site" ]]; then rm -f "$site"; removed=0; fi
    if [[ -f "$main" ]] && grep -qF "$caddy_import_line" "$main"; then
        local kept
        kept=$(grep -vF "$caddy_import_line" "$main" || true)
        if [[ -z "$kept" ]]; then rm -f "$main"; else printf '%s\n' "$kept" >"$main"; fi
        removed=0
    fi
    return "$removed"
}
