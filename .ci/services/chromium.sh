#!/usr/bin/env bash
# Headless Chromium for the console tests: Debian's chromium and chromium-driver packages (the
# tests drive `chromium --headless` directly, no browser download). Idempotent: installs only what
# is missing. The tests find the binary on PATH or through XIRANG_CHROMIUM.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver fonts-dejavu-core >/dev/null
fi
chromium --version
