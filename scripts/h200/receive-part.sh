#!/usr/bin/env bash
# On the device: keep a carried part outside the checkout (/tmp survives while the machine is warm).
set -euo pipefail
mkdir -p /tmp/parts
cp -v .whl/parts/* /tmp/parts/
ls -la /tmp/parts | tail -3
