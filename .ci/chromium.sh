#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the report's browser test, if it is missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# A dpkg run cut short (a machine stopped mid-install) blocks apt until it is finished.
$SUDO dpkg --configure -a
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium
