#!/usr/bin/env bash
# On the device: keep a carried part outside the checkout (/tmp survives while the machine is warm).
set -euo pipefail
mkdir -p /tmp/parts
cp -v .whl/parts/* /tmp/parts/
sha256sum /tmp/parts/* | cut -c1-16
ls -la /tmp/parts | tail -3
