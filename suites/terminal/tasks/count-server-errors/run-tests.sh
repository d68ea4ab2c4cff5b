#!/bin/bash
# Terminal-Bench's run-tests.sh installs pytest with uv from the network. The sandbox has no
# network, so pytest is unpacked from the wheels the image carries (see wheels.toml).
set -euo pipefail
site=$(mktemp -d)
for wheel in /opt/tb-wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$site"
done
PYTHONPATH="$site" python3 -m pytest "$TEST_DIR/test_outputs.py" -rA -p no:cacheprovider
