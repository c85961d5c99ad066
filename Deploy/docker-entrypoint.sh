#!/usr/bin/env bash
# The container's entry point: makes the secret in the /etc/parley volume on first start
# (never replaces one), then runs parley-relay with the arguments given (`serve` by default).
# `healthcheck` answers Docker's HEALTHCHECK from /healthz without curl.
set -euo pipefail

secret=${PARLEY_RELAY_SECRET_FILE:-/etc/parley/relay.secret}

if [[ "${1:-}" == healthcheck ]]; then
    admin=${PARLEY_RELAY_ADMIN:-127.0.0.1:9800}
    exec 3<>"/dev/tcp/${admin%:*}/${admin##*:}"
    printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    IFS= read -r -t 2 status <&3
    [[ "$status" == *" 200 "* ]]
    exit
fi

if [[ "${1:-}" == serve && ! -f "$secret" ]]; then
    parley-relay keygen --out "$secret"
    echo "parley-relay-entrypoint: keep the volume holding $(dirname "$secret"): invites are signed with this secret" >&2
fi
exec parley-relay "$@"
