#!/usr/bin/env bash
# Removes what Deploy/install.sh put on this machine: stops the relay, removes the unit, the
# binary, the sysctl file, the firewall rule and the system user. Keeps /etc/parley (config
# and secret, so a reinstall's invites match the old ones) unless --purge. Safe to run again.
set -euo pipefail

program=uninstall.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$here/common.sh"

usage() {
    cat <<'EOF'
Usage: uninstall.sh [options]

Removes parley-relay from this machine (run as root).

  --purge        also delete /etc/parley: the config and the secret (every invite ever
                 minted stops working, and a reinstall makes a new secret)
  --root DIR     remove from DIR instead of this system (what install.sh --root filled)
  --no-systemd   do not stop or remove the unit (installed with --no-systemd)
  -h, --help     this text
EOF
}

purge=0
use_systemd=1
while (($# > 0)); do
    case "$1" in
    --purge) purge=1; shift ;;
    --root) [[ $# -ge 2 && -n "$2" ]] || usage_error "--root needs a folder"; root=${2%/}; shift 2 ;;
    --no-systemd) use_systemd=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
    esac
done
if [[ -n "$root" ]]; then
    [[ -d "$root" ]] || usage_error "--root $root is not a folder"
    root=$(cd "$root" && pwd)
    [[ "$root" != / ]] || root=""
fi
require_privileges

removed() { say "removed $1"; }

if ((use_systemd)); then
    if is_live && systemd_present && systemctl cat "$unit_name" >/dev/null 2>&1; then
        # SIGTERM: members are told the relay is going away.
        systemctl disable --now --quiet "$unit_name" || warn "could not stop $unit_name; see: systemctl status parley-relay"
        say "stopped and disabled parley-relay"
    fi
    if [[ -f "$(unit_path)" ]]; then rm -f "$(unit_path)"; removed "$(unit_path)"; fi
    if [[ -d "$(dropin_dir)" ]]; then
        rm -f "$(dropin_dir)/low-port.conf"
        rmdir "$(dropin_dir)" 2>/dev/null || warn "kept $(dropin_dir): it holds drop-ins of your own"
    fi
    if is_live && systemd_present; then
        systemctl daemon-reload
        systemctl reset-failed "$unit_name" 2>/dev/null || true
    fi
fi

if [[ -f "$(binary_path)" ]]; then rm -f "$(binary_path)"; removed "$(binary_path)"; fi

# The page's HTTPS: the site and its import go; Caddy itself goes only if install.sh installed
# it and nobody has given it another site since (its Caddyfile is as the package made it).
web_domain=$(caddy_site_domain)
if caddy_site_remove; then
    removed "the page's site ${web_domain:+for $web_domain }from Caddy ($(caddy_site_path))"
    caddy_removed=0
    if is_live && [[ -f "$(caddy_installed_mark)" ]] && command -v apt-get >/dev/null; then
        if cmp -s "$(caddy_installed_mark)" "$(caddy_main_path)" || [[ ! -s "$(caddy_installed_mark)" && ! -f "$(caddy_main_path)" ]]; then
            # purge: its certificates and state in /var/lib/caddy go with it.
            if DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq caddy >/dev/null; then
                removed "Caddy (install.sh had installed it), with its certificates"
                caddy_removed=1
            else
                warn "could not remove the caddy package; remove it with: apt-get purge caddy"
            fi
        else
            say "kept Caddy: install.sh installed it, but its Caddyfile has changed since (other sites?)"
        fi
    fi
    ((caddy_removed)) || caddy_reload
fi

if [[ -d "$(lib_dir)" ]]; then rm -rf "$(lib_dir)"; removed "$(lib_dir)"; fi

if [[ -f "$(sysctl_path)" ]]; then
    rm -f "$(sysctl_path)"
    removed "$(sysctl_path) (the live socket buffer limits stay until the next boot)"
fi

# Both kinds: a rule may be left from an install whose firewall was detected differently.
had_nft_rule=0
if [[ -f "$(nft_rule_path)" ]] || grep -qsF "$nft_include_line" "$(nft_main_path)"; then had_nft_rule=1; fi
firewall_close ufw
firewall_close nftables
((had_nft_rule == 0)) || removed "the nftables rule for the relay's port"

rm -f "$(sysusers_path)"
if [[ -n "$(service_ids)" ]]; then
    if ((EUID == 0)); then
        userdel ${root:+--prefix "$root"} "$service_user"
        # userdel leaves the group when the root has no login.defs saying otherwise.
        if grep -q "^$service_user:" "$root/etc/group" 2>/dev/null; then
            groupdel ${root:+--prefix "$root"} "$service_user"
        fi
        removed "the system user $service_user"
    else
        warn "not root: the user $service_user stays in $root/etc/passwd"
    fi
fi

if ((purge)); then
    if [[ -d "$(config_dir)" ]]; then
        rm -rf "$(config_dir)"
        removed "$(config_dir) (config and secret: invites minted with it no longer work anywhere)"
    fi
elif [[ -d "$(config_dir)" ]]; then
    say "kept $(config_dir) (config and secret; a reinstall uses them, so old invites keep working). Delete it with: $program --purge"
fi
say "parley-relay is uninstalled"
