#!/usr/bin/env bash
# Installs parley-relay as a hardened systemd service, or upgrades the one installed: the
# system user `parley`, /etc/parley (config, and a secret made only if there is none),
# the binary, the unit, UDP buffer sysctls and a firewall rule for the relay's port only;
# with --web-domain, the browser page behind Debian's Caddy, which gets and renews its
# certificate; then starts it, waits for /healthz and prints the first invite. Safe to run again: what is
# there already is kept (config, secret, keys), what changed is replaced, and the relay is
# restarted only if something changed.
set -euo pipefail

program=install.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$here/common.sh"

usage() {
    cat <<'EOF'
Usage: install.sh [options]

Installs or upgrades parley-relay on this Debian or Ubuntu machine (run as root).

  --binary FILE        the parley-relay to install (default: ./parley-relay beside this
                       script, else .build/deploy/parley-relay from Deploy/build-relay.sh)
  --port N             UDP port for clients (default 7800; kept from relay.conf on upgrade)
  --admin HOST:PORT    /metrics and /healthz, or 'off' (default 127.0.0.1:9800, local only)
  --public-host NAME   the host name or IP clients use, for the invite (default: hostname -f)
  --firewall KIND      nftables, ufw or none (default: whichever is active)
  --room NAME          room of the first invite (default lobby)
  --identity NAME      name in the first invite (default admin)
  --ttl DURATION       validity of the first invite (default 7d)
  --web-domain NAME    serve the browser page at https://NAME/join: installs Debian's Caddy,
                       which gets a certificate for NAME (its A or AAAA record must point
                       here; TCP 80 and 443 are opened) and renews it by itself; the relay's
                       web port stays on 127.0.0.1 behind it. 'off' removes the page again.
  --acme-email ADDR    with --web-domain: where the certificate authority writes if renewing
                       ever fails (optional)
  --cluster URL        join a cluster: etcd's client URL, e.g. https://10.0.0.2:2379, or
                       http:// on a private network (docs/CLUSTER.md); the relay registers
                       as PUBLIC-HOST:PORT
  --cluster-ca FILE    with an https:// cluster: the CA that signed etcd's certificate (PEM)
  --cluster-cert FILE  with an https:// cluster: this relay's client certificate (PEM)...
  --cluster-key FILE   ...and its private key (PEM)
  --cluster-user NAME  with an https:// cluster: the etcd user this relay logs in as...
  --cluster-password-file FILE
                       ...and a file holding its password; the files are copied into
                       /etc/parley/cluster/, readable by the relay's user only
  --region NAME        with --cluster: this relay's region, e.g. eu-west
  --token-secret-from FILE
                       with --cluster: take the token secret from another relay's secret
                       file, so one token works on every relay (this relay keeps its key)
  --root DIR           install into DIR instead of this system (tests, image builds);
                       nothing is started and no live firewall or sysctl is touched
  --no-systemd         do not install or start the unit (containers, other init systems)
  -h, --help           this text

Example, on a fresh VPS:
  sudo Deploy/install.sh --public-host relay.example.org
With the browser page (people join at https://relay.example.org/join#token=...):
  sudo Deploy/install.sh --web-domain relay.example.org
A second relay of a cluster, given the first one's secret file, its store over TLS:
  sudo Deploy/install.sh --public-host 198.51.100.8 --cluster https://10.0.0.2:2379 \
      --cluster-ca etcd-ca.pem --cluster-cert relay.pem --cluster-key relay.key \
      --cluster-user parley --cluster-password-file etcd-password \
      --region eu-west --token-secret-from first-relay.secret
EOF
}

binary=""
port=""
admin=""
public_host=""
firewall=auto
room=lobby
identity="admin"
ttl=7d
use_systemd=1
cluster=""
region=""
token_secret_from=""
# --cluster-ca, -cert, -key, -user, -password-file, by the name of their relay.conf key.
declare -A cluster_files=()
cluster_user=""
web_domain=""
acme_email=""

need_value() { [[ $# -ge 2 && -n "$2" ]] || usage_error "$1 needs a value"; }
while (($# > 0)); do
    case "$1" in
    --binary) need_value "$@"; binary=$2; shift 2 ;;
    --port) need_value "$@"; port=$2; shift 2 ;;
    --admin) need_value "$@"; admin=$2; shift 2 ;;
    --public-host) need_value "$@"; public_host=$2; shift 2 ;;
    --firewall) need_value "$@"; firewall=$2; shift 2 ;;
    --room) need_value "$@"; room=$2; shift 2 ;;
    --identity) need_value "$@"; identity=$2; shift 2 ;;
    --ttl) need_value "$@"; ttl=$2; shift 2 ;;
    --root) need_value "$@"; root=${2%/}; shift 2 ;;
    --cluster) need_value "$@"; cluster=$2; shift 2 ;;
    --cluster-ca | --cluster-cert | --cluster-key | --cluster-password-file)
        need_value "$@"; cluster_files[${1#--}]=$2; shift 2 ;;
    --cluster-user) need_value "$@"; cluster_user=$2; shift 2 ;;
    --region) need_value "$@"; region=$2; shift 2 ;;
    --token-secret-from) need_value "$@"; token_secret_from=$2; shift 2 ;;
    --web-domain) need_value "$@"; web_domain=$2; shift 2 ;;
    --acme-email) need_value "$@"; acme_email=$2; shift 2 ;;
    --no-systemd) use_systemd=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
    esac
done

# MARK: Checking what was asked, before anything changes

if [[ -n "$port" ]] && ! [[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65535 ]]; then
    usage_error "--port is '$port'; give a number from 1 to 65535, e.g. 7800"
fi
if [[ -n "$admin" && "$admin" != off ]] && ! [[ "$admin" =~ ^(\[[0-9a-fA-F:.]+\]|[0-9.]+|localhost):[0-9]+$ ]]; then
    usage_error "--admin is '$admin'; give HOST:PORT such as 127.0.0.1:9800 (keep it on localhost or a private address), or 'off'"
fi
case "$firewall" in
auto | nftables | ufw | none) ;;
*) usage_error "--firewall is '$firewall'; use nftables, ufw or none (or leave it out to detect)" ;;
esac
if [[ -n "$public_host" ]] && ! [[ "$public_host" =~ ^(\[?[0-9a-fA-F:]+\]?|[A-Za-z0-9.-]+)$ ]]; then
    usage_error "--public-host is '$public_host'; give the host name or IP address clients reach, without a port"
fi
cluster_pattern='^https?://[][A-Za-z0-9.:-]+/?$'
if [[ -n "$cluster" ]] && ! [[ "$cluster" =~ $cluster_pattern ]]; then
    usage_error "--cluster is '$cluster'; give etcd's client URL such as https://10.0.0.2:2379 (or http:// on a private network)"
fi
if [[ -z "$cluster" && ( ${#cluster_files[@]} -gt 0 || -n "$cluster_user" ) ]]; then
    usage_error "--cluster-ca, --cluster-cert, --cluster-key, --cluster-user and --cluster-password-file belong to a cluster member; add --cluster URL"
fi
if [[ "$cluster" == http://* && ( ${#cluster_files[@]} -gt 0 || -n "$cluster_user" ) ]]; then
    usage_error "--cluster-* files and users are for a store reached over TLS; give --cluster as https://… (a password never goes over plain http://)"
fi
if [[ -z "${cluster_files[cluster-cert]:-}" && -n "${cluster_files[cluster-key]:-}" ]] || [[ -n "${cluster_files[cluster-cert]:-}" && -z "${cluster_files[cluster-key]:-}" ]]; then
    usage_error "--cluster-cert and --cluster-key go together: the relay's client certificate and its private key"
fi
if [[ -z "$cluster_user" && -n "${cluster_files[cluster-password-file]:-}" ]] || [[ -n "$cluster_user" && -z "${cluster_files[cluster-password-file]:-}" ]]; then
    usage_error "--cluster-user and --cluster-password-file go together: an etcd user and a file holding its password"
fi
if [[ -n "$cluster_user" ]] && ! [[ "$cluster_user" =~ ^[[:graph:]]{1,128}$ ]]; then
    usage_error "--cluster-user is '$cluster_user'; give the etcd user's name, without spaces"
fi
for key in "${!cluster_files[@]}"; do
    [[ -r "${cluster_files[$key]}" && -f "${cluster_files[$key]}" ]] || usage_error "--$key ${cluster_files[$key]} cannot be read"
done
if [[ -n "$region" ]] && ! [[ "$region" =~ ^[A-Za-z0-9._-]{1,32}$ ]]; then
    usage_error "--region is '$region'; a region is 1 to 32 letters, digits, '.', '_' or '-', e.g. eu-west"
fi
if [[ -z "$cluster" && ( -n "$region" || -n "$token_secret_from" ) ]]; then
    usage_error "--region and --token-secret-from belong to a cluster member; add --cluster URL"
fi
if [[ -n "$cluster" && -z "$public_host" ]]; then
    usage_error "--cluster needs --public-host: this machine's public IP address, where other relays send clients"
fi
if [[ -n "$cluster" ]] && ! [[ "$public_host" =~ ^[0-9.]+$ || "$public_host" =~ ^\[?[0-9a-fA-F:]+\]?$ ]]; then
    usage_error "--public-host is '$public_host'; with --cluster give this machine's public IP address (clients are sent there and other relays open trunks to it, without looking a name up)"
fi
token_secret_line=""
if [[ -n "$token_secret_from" ]]; then
    [[ -r "$token_secret_from" ]] || usage_error "--token-secret-from $token_secret_from cannot be read"
    token_secret_line=$(grep -E '^[[:space:]]*token-secret[[:space:]]*=' "$token_secret_from" | head -n 1)
    [[ -n "$token_secret_line" ]] || usage_error "--token-secret-from $token_secret_from has no token-secret line; give another relay's /etc/parley/relay.secret"
fi
# An address as --public-host may give it, with IPv6's brackets or without.
is_address() { [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || "$1" =~ ^\[?[0-9a-fA-F:]*:[0-9a-fA-F:.]*\]?$ ]]; }
if [[ -n "$web_domain" && "$web_domain" != off ]]; then
    web_domain=${web_domain,,}
    if is_address "$web_domain"; then
        usage_error "--web-domain is '$web_domain', an address; certificates are issued to DNS names: give a name whose A (or AAAA) record points at this machine, e.g. relay.example.org"
    fi
    domain_pattern='^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'
    if ! [[ "$web_domain" =~ $domain_pattern && ${#web_domain} -le 253 ]]; then
        usage_error "--web-domain is '$web_domain'; give the DNS name people open the page at, e.g. relay.example.org (letters, digits, '-' and dots, without https:// or a port)"
    fi
fi
if [[ -n "$acme_email" ]]; then
    [[ -n "$web_domain" && "$web_domain" != off ]] || usage_error "--acme-email belongs to --web-domain: it is where the certificate authority writes about the page's certificate"
    [[ "$acme_email" =~ ^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$ ]] || usage_error "--acme-email is '$acme_email'; give an e-mail address such as you@example.org"
fi
if [[ -n "$root" ]]; then
    [[ -d "$root" ]] || usage_error "--root $root is not a folder; create it first"
    root=$(cd "$root" && pwd)
    [[ "$root" != / ]] || root=""
fi

if [[ -z "$binary" ]]; then
    for candidate in "$here/parley-relay" "$here/../.build/deploy/parley-relay"; do
        if [[ -f "$candidate" ]]; then binary=$candidate; break; fi
    done
    [[ -n "$binary" ]] || usage_error "no parley-relay binary found; build one with Deploy/build-relay.sh, or pass --binary FILE"
fi
[[ -f "$binary" ]] || usage_error "--binary $binary does not exist"
require_privileges

# The address browsers send their audio to. The relay names it in its SDP answer: the address
# its UDP socket is bound to, since behind a proxy on this machine it cannot see which one the
# page came in at. So with the page on, the relay listens on the address the domain points at.
web_address=""
if [[ -n "$web_domain" && "$web_domain" != off ]]; then
    [[ -n "$public_host" ]] || public_host=$web_domain
    resolved=""
    if is_live || ! is_address "$public_host"; then
        resolved=$(getent ahostsv4 "$web_domain" 2>/dev/null | awk 'NR == 1 { print $1 }' || true)
        [[ -n "$resolved" ]] || resolved=$(getent ahosts "$web_domain" 2>/dev/null | awk 'NR == 1 { print $1 }' || true)
    fi
    if is_address "$public_host"; then
        web_address=${public_host#[}
        web_address=${web_address%]}
        if [[ -n "$resolved" && "$resolved" != "$web_address" ]]; then
            warn "$web_domain resolves to $resolved, not $web_address; the certificate cannot be issued until its record points here"
        fi
    elif [[ -n "$resolved" ]]; then
        web_address=$resolved
    else
        die "$web_domain does not resolve to an address yet: point its A record at this machine's public IP address, wait until 'getent hosts $web_domain' shows it, and run this again (or give --public-host with this machine's public IP address)"
    fi
    if is_live && command -v ip >/dev/null && ! ip -o addr show | awk '{ sub(/\/.*/, "", $4); print $4 }' | grep -qixF "$web_address"; then
        die "$web_address ($web_domain) is not an address of this machine: browsers send their audio straight to the relay's UDP port there, so the relay must listen on it. Point $web_domain at this machine's public address (ip -brief addr shows them); a machine behind a provider's 1:1 NAT (no public address on its interface) cannot serve the page yet"
    fi
    [[ "$web_address" != *:* ]] || web_address="[$web_address]"
fi
if ((use_systemd)) && is_live && ! systemd_present; then
    die "systemd is not running here; run with --no-systemd and start the relay yourself (/usr/local/bin/parley-relay serve --config /etc/parley/relay.conf)"
fi

# A binary that cannot run here (another architecture, a newer glibc) is refused before the
# running relay is touched.
if ! new_version=$("$binary" --version 2>&1); then
    die "$binary does not run on this machine: $new_version; build it on a system with the same or an older glibc (Deploy/build-relay.sh prints what it needs)"
fi

installed_binary=$(binary_path)
upgrading=0
old_version=""
if [[ -x "$installed_binary" ]]; then
    upgrading=1
    old_version=$("$installed_binary" --version 2>/dev/null || echo unknown)
fi
if ((upgrading)); then
    say "upgrading parley-relay $old_version to $new_version${root:+ in $root}"
else
    say "installing parley-relay $new_version${root:+ into $root}"
fi

# Something changed that the running relay must pick up.
changed=0
# For a failed upgrade: what to put back.
backup=$(mktemp -d)
trap 'rm -rf "$backup"' EXIT

# MARK: The service user

if ((EUID == 0)); then
    mkdir -p "$(dirname "$(sysusers_path)")"
    install -m 644 "$here/parley-relay.sysusers" "$(sysusers_path)"
    if [[ -z "$(service_ids)" ]]; then
        if command -v systemd-sysusers >/dev/null; then
            # With a basename, sysusers reads just this file from the root's sysusers.d.
            systemd-sysusers ${root:+--root="$root"} parley-relay.conf >/dev/null
        else
            # The same user, for systems without systemd's tools.
            useradd ${root:+--prefix "$root"} --system --user-group --no-create-home \
                --home-dir /nonexistent --shell /usr/sbin/nologin --comment "Parley voice relay" "$service_user"
        fi
        [[ -n "$(service_ids)" ]] || die "could not create the system user $service_user; check $root/etc/passwd"
        say "created the system user $service_user (no login shell, no home)"
    fi
fi
ids=$(service_ids)

# MARK: /etc/parley: config and secret

conf_dir=$(config_dir)
config=$(config_path)
secret=$(secret_path)
mkdir -p "$conf_dir"
chmod 750 "$conf_dir"

# Sets `key = value` in relay.conf, replacing the line if the key is there.
set_config() {
    local key=$1 value=$2 current
    current=$(awk -F= -v key="$key" '{ k = $1; gsub(/[ \t]/, "", k) } k == key { v = $2; gsub(/^[ \t]+|[ \t]+$/, "", v); print v; exit }' "$config")
    [[ "$current" == "$value" ]] && return 0
    if [[ -n "$current" ]]; then
        local rest
        rest=$(awk -F= -v key="$key" '{ k = $1; gsub(/[ \t]/, "", k) } k != key' "$config")
        printf '%s\n%s = %s\n' "$rest" "$key" "$value" >"$config"
        say "relay.conf: $key changed from $current to $value"
    else
        printf '%s = %s\n' "$key" "$value" >>"$config"
    fi
    changed=1
}
config_value() {
    awk -F= -v key="$1" '{ k = $1; gsub(/[ \t]/, "", k) } k == key { v = $2; gsub(/^[ \t]+|[ \t]+$/, "", v); print v; exit }' "$config"
}

if [[ ! -f "$config" ]]; then
    cat >"$config" <<EOF
# parley-relay configuration, written by Deploy/install.sh. An upgrade keeps this file.
# Every setting of \`parley-relay serve --help\` can go here as \`name = value\`
# (max-rooms, max-members-per-room, idle-timeout, log-level, ...).
# After a change: systemctl restart parley-relay
listen = ${web_address:-0.0.0.0}:${port:-7800}
# /metrics and /healthz. They name rooms and people: keep this on localhost (put a
# reverse proxy with a password in front, see Deploy/README.md) or a private address.
admin = ${admin:-127.0.0.1:9800}
secret-file = /etc/parley/relay.secret
EOF
    say "wrote $config"
    changed=1
else
    # An upgrade keeps the file; flags given now replace just their own lines.
    if [[ -n "$port" ]]; then
        listen_host=$(config_value listen)
        listen_host=${listen_host%:*}
        set_config listen "${listen_host:-0.0.0.0}:$port"
    fi
    [[ -z "$admin" ]] || set_config admin "$admin"
fi
chmod 640 "$config"

listen=$(config_value listen)
listen=${listen:-0.0.0.0:7800}
port=${listen##*:}
if [[ -n "$cluster" ]]; then
    cluster_host=$public_host
    case "$cluster_host" in *:*) [[ "$cluster_host" == \[* ]] || cluster_host="[$cluster_host]" ;; esac
    set_config cluster "$cluster"
    set_config public-address "$cluster_host:$port"
    [[ -z "$region" ]] || set_config region "$region"
    [[ -z "$cluster_user" ]] || set_config cluster-user "$cluster_user"
fi
# The store's CA, the relay's certificate, key and password: copied where the relay's
# sandbox reads (/etc/parley), owned by root and readable by the relay's group only; the
# key and the password by the relay's user only.
if ((${#cluster_files[@]} > 0)); then
    mkdir -p "$conf_dir/cluster"
    chmod 750 "$conf_dir/cluster"
    [[ -z "$ids" ]] || ((EUID != 0)) || chown "root:${ids#*:}" "$conf_dir/cluster"
    declare -A cluster_names=([cluster-ca]=ca.pem [cluster-cert]=client.pem [cluster-key]=client.key [cluster-password-file]=password)
    for key in "${!cluster_files[@]}"; do
        name=${cluster_names[$key]}
        target="$conf_dir/cluster/$name"
        if ! cmp -s "${cluster_files[$key]}" "$target" 2>/dev/null; then
            cp "${cluster_files[$key]}" "$target"
            say "copied ${cluster_files[$key]} to /etc/parley/cluster/$name"
            changed=1
        fi
        case "$key" in
        cluster-key | cluster-password-file)
            chmod 600 "$target"
            [[ -z "$ids" ]] || ((EUID != 0)) || chown "$ids" "$target" ;;
        *)
            chmod 640 "$target"
            [[ -z "$ids" ]] || ((EUID != 0)) || chown "root:${ids#*:}" "$target" ;;
        esac
        set_config "$key" "/etc/parley/cluster/$name"
    done
fi
admin=$(config_value admin)
admin=${admin:-127.0.0.1:9800}

# The web port: on loopback behind Caddy (the port kept if relay.conf has a loopback one), and
# the UDP socket on the address browsers reach, which the relay puts in its answers.
default_web_listen=127.0.0.1:8780
if [[ "$web_domain" == off ]]; then
    set_config web off
elif [[ -n "$web_domain" ]]; then
    web_listen=$(config_value web)
    [[ "$web_listen" =~ ^(127\.[0-9.]+|\[::1\]|localhost):[0-9]+$ ]] || web_listen=$default_web_listen
    set_config web "$web_listen"
    set_config listen "$web_address:$port"
fi
web_listen=$(config_value web)

if [[ -f "$secret" ]]; then
    say "kept the secret in $secret (invites already sent keep working)"
else
    "$binary" keygen --out "$secret" >/dev/null
    say "made a new secret in $secret"
fi
if [[ -n "$token_secret_line" ]] && ! grep -qxF "$token_secret_line" "$secret"; then
    # The cluster's shared token secret replaces this relay's own; its key stays.
    others=$(grep -vE '^[[:space:]]*token-secret[[:space:]]*=' "$secret")
    printf '%s\n%s\n' "$others" "$token_secret_line" >"$secret"
    say "took the cluster's token secret from $token_secret_from (tokens minted on any relay of the cluster work here)"
    changed=1
fi
chmod 600 "$secret"
if [[ -n "$ids" ]] && ((EUID == 0)); then
    chown "root:${ids#*:}" "$conf_dir" "$config"
    chown "$ids" "$secret"
fi
# The new binary must accept the secret as it is (a newer format, a damaged file) before it
# replaces the running relay: mint a throwaway token with it.
if ! problem=$("$binary" token --secret-file "$secret" --room install-check --identity install.sh --ttl 1m --relay 127.0.0.1:1 2>&1 >/dev/null); then
    die "the new parley-relay cannot use $secret: $problem; nothing was replaced"
fi

# MARK: Binary, unit, sysctls

install_file() {  # mode source target: replaces target if it differs; returns 1 if unchanged
    local mode=$1 source=$2 target=$3
    if [[ -f "$target" ]] && cmp -s "$source" "$target"; then return 1; fi
    [[ ! -f "$target" ]] || cp -p "$target" "$backup/$(basename "$target")"
    mkdir -p "$(dirname "$target")"
    # Copy beside, then rename: the running relay's file is never half-written.
    install -m "$mode" "$source" "$target.new"
    mv -f "$target.new" "$target"
}

if install_file 755 "$binary" "$installed_binary"; then
    say "installed $installed_binary ($(du -h "$installed_binary" | cut -f1))"
    changed=1
fi

install_file 755 "$here/uninstall.sh" "$(lib_dir)/uninstall.sh" || true
install_file 644 "$here/common.sh" "$(lib_dir)/common.sh" || true

if ((use_systemd)); then
    if install_file 644 "$here/parley-relay.service" "$(unit_path)"; then
        say "installed $(unit_path)"
        changed=1
    fi
    # Ports below 1024 need one capability, granted in a drop-in that follows the port.
    low_port_dropin="$(dropin_dir)/low-port.conf"
    if ((port < 1024)); then
        mkdir -p "$(dropin_dir)"
        # Not named low-port.conf: install_file keeps the replaced file under that name.
        printf '# Written by Deploy/install.sh: UDP %s is below 1024.\n[Service]\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n' "$port" >"$backup/new-low-port.conf"
        install_file 644 "$backup/new-low-port.conf" "$low_port_dropin" && changed=1
    elif [[ -f "$low_port_dropin" ]]; then
        rm -f "$low_port_dropin"
        rmdir --ignore-fail-on-non-empty "$(dropin_dir)"
        changed=1
    fi
fi

if install_file 644 "$here/parley-relay.sysctl" "$(sysctl_path)"; then
    say "installed $(sysctl_path)"
fi
if is_live; then
    # Raise the live limits now, never lower them (another service may want more).
    while read -r key _ value; do
        [[ "$key" =~ ^net\. ]] || continue
        # Written to /proc/sys directly: procps' sysctl exits 0 even when the kernel refuses.
        file=/proc/sys/${key//.//}
        current=$(cat "$file" 2>/dev/null || echo 0)
        ((current < value)) || continue
        { printf '%s\n' "$value" >"$file"; } 2>/dev/null || true
        if (($(cat "$file" 2>/dev/null || echo 0) < value)); then
            warn "cannot raise $key to $value here (a container?); it applies at the next boot, and the relay logs the socket buffer it got"
        fi
    done <"$(sysctl_path)"
fi

# MARK: Firewall

# The page's domain: given now, or kept from the site file of an earlier run.
if [[ -z "$web_domain" ]]; then
    web_domain=$(caddy_site_domain)
elif [[ "$web_domain" == off ]]; then
    web_domain=""
    if caddy_site_remove; then
        say "removed the page's site from Caddy (relay.conf: web = off); Caddy itself stays"
        caddy_reload
    fi
fi
https_ports=()
[[ -z "$web_domain" ]] || https_ports=(80 443)

[[ "$firewall" != auto ]] || firewall=$(detect_firewall)
# 80 for the certificate authority's challenge (and the redirect to https), 443 for the page.
firewall_open "$firewall" "$port" ${https_ports[@]+"${https_ports[@]}"}

# MARK: HTTPS for the page

# The site Caddy serves. No `log` directive: Caddy then keeps no access log, which matters
# because the page's requests carry its call's secret id in their path.
caddy_site() {
    cat <<EOF
# Written by Parley's Deploy/install.sh: HTTPS for the relay's browser page. Caddy gets the
# certificate for $web_domain itself (from Let's Encrypt, else ZeroSSL, proving the name over
# port 80 or 443) and renews it well before it expires. /etc/caddy/Caddyfile imports this
# file; Deploy/uninstall.sh (or install.sh --web-domain off) removes both.
$web_domain {
EOF
    [[ -z "$acme_email" ]] || printf '\ttls %s\n' "$acme_email"
    cat <<EOF
	# The page holds an invite's token: once a browser has been here, never over plain http.
	header Strict-Transport-Security "max-age=31536000"
	reverse_proxy $web_listen {
		transport http {
			# Shorter than the 5 s the relay keeps an idle connection open, so Caddy never
			# sends a request down a connection the relay is closing.
			keepalive 3s
		}
	}
}
EOF
}

# Installs Caddy if it is missing (remembering that it did), writes the site and imports it,
# has Caddy check the whole configuration, and starts or reloads it. Anything Caddy refuses
# is put back as it was.
configure_caddy() {
    local site main
    site=$(caddy_site_path)
    main=$(caddy_main_path)
    if is_live && ! command -v caddy >/dev/null; then
        command -v apt-get >/dev/null || die "--web-domain needs Caddy, and this system has no apt-get to install it: install Caddy (https://caddyserver.com/docs/install), then run this again"
        say "installing Caddy (Debian's caddy package) for the page's HTTPS"
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends caddy >/dev/null 2>&1; then
            apt-get update -qq >/dev/null 2>&1 || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends caddy >/dev/null ||
                die "could not install the caddy package (Debian 12 and Ubuntu 24.04 have it; Ubuntu 22.04 does not): install Caddy from https://caddyserver.com/docs/install, then run this again; the relay itself is installed and running"
        fi
        mkdir -p "$(lib_dir)"
        if [[ -f "$main" ]]; then cp "$main" "$(caddy_installed_mark)"; else : >"$(caddy_installed_mark)"; fi
    fi
    [[ -z "$acme_email" && -f "$site" ]] && acme_email=$(awk '$1 == "tls" { print $2; exit }' "$site")
    caddy_site >"$backup/parley-relay.caddy"
    local caddy_changed=0
    if ! cmp -s "$backup/parley-relay.caddy" "$site"; then
        [[ ! -f "$site" ]] || cp -p "$site" "$backup/site-before.caddy"
        mkdir -p "$(dirname "$site")"
        install -m 644 "$backup/parley-relay.caddy" "$site"
        caddy_changed=1
    fi
    if ! grep -qsF "$caddy_import_line" "$main"; then
        [[ ! -f "$main" ]] || cp -p "$main" "$backup/Caddyfile-before"
        printf '%s\n' "$caddy_import_line" >>"$main"
        caddy_changed=1
    fi
    # Caddy reads the whole Caddyfile as it will at its next reload (under --root, with the
    # imports found in the root), keeping nothing of the check.
    if ((caddy_changed)) && command -v caddy >/dev/null; then
        local problem checked=$main
        if ! is_live; then
            checked="$backup/Caddyfile-as-installed"
            sed "s|^import /etc/caddy/|import $root/etc/caddy/|" "$main" >"$checked"
        fi
        if ! problem=$(HOME=$backup XDG_DATA_HOME=$backup XDG_CONFIG_HOME=$backup caddy validate --adapter caddyfile --config "$checked" 2>&1); then
            if [[ -f "$backup/site-before.caddy" ]]; then cp -p "$backup/site-before.caddy" "$site"; else rm -f "$site"; fi
            if [[ -f "$backup/Caddyfile-before" ]]; then cp -p "$backup/Caddyfile-before" "$main"; fi
            die "Caddy refused its configuration with the page's site, so Caddy's files were put back as they were: $(printf '%s\n' "$problem" | grep -iE 'error|ambiguous' | tail -n 1). If your Caddyfile serves $web_domain already, add 'reverse_proxy $web_listen' to that site and run this again without --web-domain"
        fi
    fi
    if ((caddy_changed)); then
        say "Caddy: serves https://$web_domain/ from the relay's web port $web_listen ($site)"
    fi
    if is_live && ((use_systemd)) && systemd_present; then
        if ! systemctl is-active --quiet caddy; then
            systemctl enable --now --quiet caddy
            say "started Caddy"
        elif ((caddy_changed)); then
            systemctl reload caddy
            say "Caddy reloaded its configuration"
        fi
    elif is_live; then
        say "start Caddy yourself so it serves the page: caddy run --config $main"
    fi
}

# The page over HTTPS with a certificate this machine trusts, as a browser would fetch it.
page_answers() {
    local code
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "https://$web_domain/join" 2>"$backup/curl-error") || true
    [[ "$code" == 200 ]]
}

# MARK: Start, check, invite

# The address /healthz answers on, from here.
health_address() {
    [[ "$admin" != off ]] || return 1
    local host=${admin%:*}
    case "$host" in 0.0.0.0 | "" | "*") host=127.0.0.1 ;; "[::]") host=::1 ;; esac
    host=${host#[}
    printf '%s %s\n' "${host%]}" "${admin##*:}"
}

healthy() {  # one GET /healthz over bash's /dev/tcp: no curl needed
    local host port answer
    read -r host port < <(health_address) || return 1
    # The braces keep the 2>/dev/null to this connect; on a bare `exec` it would silence
    # the rest of the script.
    { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 1
    printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    IFS= read -r -t 2 answer <&3 || true
    exec 3<&- 3>&-
    [[ "$answer" == *" 200 "* ]]
}

wait_healthy() {
    local attempt
    for attempt in $(seq 1 50); do
        healthy && return 0
        # A unit that stopped will not become healthy.
        systemctl is-failed --quiet parley-relay 2>/dev/null && return 1
        sleep 0.2
        : "$attempt"
    done
    return 1
}

rollback() {
    warn "the relay did not come up healthy; putting the previous version back"
    [[ ! -f "$backup/parley-relay" ]] || install -m 755 "$backup/parley-relay" "$installed_binary"
    [[ ! -f "$backup/$unit_name" ]] || install -m 644 "$backup/$unit_name" "$(unit_path)"
    systemctl daemon-reload
    systemctl restart parley-relay || true
}

if ((use_systemd)) && is_live; then
    systemctl daemon-reload
    systemctl enable --quiet parley-relay
    if ((changed)) || ! systemctl is-active --quiet parley-relay; then
        # A restart sends SIGTERM: members are told goodbye and rejoin the new relay by themselves.
        systemctl restart parley-relay
        say "$( ((upgrading)) && echo restarted || echo started) parley-relay; waiting for /healthz"
    else
        say "nothing changed; parley-relay keeps running"
    fi
    if [[ "$admin" == off ]]; then
        sleep 1
        systemctl is-active --quiet parley-relay || die "parley-relay did not stay up; see: journalctl -u parley-relay -n 50"
        say "parley-relay is running (admin is off, so /healthz was not checked)"
    elif wait_healthy; then
        say "healthy: http://$admin/healthz answers ok"
    else
        ((upgrading && changed)) && rollback
        die "parley-relay did not answer /healthz within 10 s; see: journalctl -u parley-relay -n 50"
    fi
elif ((use_systemd)); then
    say "unit installed in $root; nothing started (--root)"
else
    say "no unit installed (--no-systemd); start the relay as the unit would: $installed_binary serve --config /etc/parley/relay.conf"
fi

if [[ -n "$web_domain" ]]; then
    configure_caddy
    if is_live && command -v curl >/dev/null && ((use_systemd)) && systemd_present; then
        say "waiting for the certificate for $web_domain (up to a minute)"
        for attempt in $(seq 1 20); do
            page_answers && break
            sleep 3
            : "$attempt"
        done
        if page_answers; then
            say "https://$web_domain/join answers, with a trusted certificate"
        else
            warn "https://$web_domain/join does not answer with a trusted certificate yet ($(tail -n 1 "$backup/curl-error")); Caddy keeps trying. See why: journalctl -u caddy -n 50 --no-pager | grep -iE 'error|challenge'; Deploy/README.md, 'When the certificate does not come'"
        fi
    fi
fi

if [[ -z "$public_host" ]]; then
    public_host=$(hostname -f 2>/dev/null || hostname)
    say "no --public-host given; the invite names $public_host (pass --public-host as clients reach this machine)"
fi
case "$public_host" in *:*) [[ "$public_host" == \[* ]] || public_host="[$public_host]" ;; esac

echo
echo "$( ((upgrading)) && echo "An invite" || echo "First invite") (room $room, for $identity, valid $ttl):"
invite=$("$binary" token --secret-file "$secret" --room "$room" --identity "$identity" --ttl "$ttl" --relay "$public_host:$port")
printf '%s\n' "$invite"
if [[ -n "$web_domain" ]]; then
    echo "In a browser, the same invite: https://$web_domain/join#token=$(printf '%s\n' "$invite" | head -n 1)"
fi
echo
echo "More invites:  sudo parley-relay token --room ROOM --identity NAME --ttl 7d --relay $public_host:$port"
if [[ -n "$web_domain" ]]; then
    echo "For a browser: https://$web_domain/join#token=TOKEN, TOKEN being the first line that prints"
fi
echo "Logs:          journalctl -u parley-relay -f      Metrics: curl http://$admin/metrics"
echo "Remove:        sudo /usr/local/lib/parley-relay/uninstall.sh   (keeps /etc/parley unless --purge)"
