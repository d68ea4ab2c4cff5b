#!/usr/bin/env bash
# Build a small git history for the shelfctl fixture (runs inside the sandbox in /workspace).
set -euo pipefail
git init -q -b main
git config user.name "Sam Okafor"
git config user.email "sam.okafor@example.org"
chmod 755 bin/shelfctl tests/run.sh
git add README.md bin etc data/inventory.tsv
git commit -q -m "shelfctl: list, count and low-stock commands"
git add lib tests
git commit -q -m "Add the stock report and checks"
git add data/suppliers.json
git commit -q -m "Track suppliers"
