#!/usr/bin/env bash
# PostgreSQL for the pool's store tests: Debian's server package. The tests start their own
# throwaway cluster (initdb in a temporary folder, Unix socket only, run as the 'postgres' user
# when root), so nothing is started here. Idempotent: an installed server is left as it is.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    # Install the server without starting Debian's own cluster service (no init system in CI).
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
if ! id postgres >/dev/null 2>&1; then
    $SUDO useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi
INITDB="$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)"
echo "postgresql: $("$INITDB" --version) (tests start their own cluster)"
