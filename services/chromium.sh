#!/usr/bin/env bash
# Install Debian's headless browser for the console's browser tests (tests/integration/test_console_browser.py):
# the packages chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver). Browser
# builds downloaded at install time (playwright install, selenium-manager) are not reachable from
# our machines and CI, so the browser comes from apt like MariaDB does (services/mariadb/server.sh).
# Idempotent: does nothing when both binaries are there.
set -euo pipefail
SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
as_root() { "${SUDO[@]}" "$@"; }

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi
echo "installing chromium and chromium-driver from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
# Another apt run (a parallel set-up) holds the lock for a while: wait for it instead of failing.
as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
as_root apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
/usr/bin/chromium --version
/usr/bin/chromedriver --version
