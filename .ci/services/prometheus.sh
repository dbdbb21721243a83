#!/usr/bin/env bash
# Prometheus for the console's scrape test: Debian's server package. The test starts its own
# server (a temporary config and data folder, a loopback port, a bearer token) and stops it, so
# nothing is started here; Debian's own service is not started either (no init system in CI).
# Idempotent: an installed server is left as it is.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v prometheus >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        prometheus >/dev/null
fi
echo "prometheus: $(prometheus --version 2>&1 | head -n 1) (the test starts its own server)"
