#!/usr/bin/env bash
# Checks for shelfctl; prints one line per check and exits 1 on any failure.
cd "$(dirname "$0")/.."
fail=0
check() { if eval "$2" >/dev/null 2>&1; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
check "list shows 10 bins"        '[ "$(bin/shelfctl list | wc -l)" -eq 10 ]'
check "count sums quantities"     'bin/shelfctl count | grep -q "^534 items"'
check "low lists 4 bins"          '[ "$(bin/shelfctl low | wc -l)" -eq 4 ]'
check "report json parses"        'python3 lib/report.py --json | python3 -m json.tool'
check "usage exits 2"             '! bin/shelfctl nope; [ $? -eq 0 ]'
exit $fail
