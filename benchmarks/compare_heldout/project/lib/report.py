"""Stock report for shelfctl: totals per shelf row and the low-stock list."""

import json
import sys
from collections import defaultdict
from pathlib import Path

LOW_LIMIT = 5


def load(path):
    rows = Path(path).read_text().splitlines()[1:]
    return [(name, shelf, int(qty)) for name, shelf, qty in (r.split("\t") for r in rows)]


def summary(items):
    per_row = defaultdict(int)
    for _, shelf, qty in items:
        per_row[shelf[0]] += qty
    low = sorted(name for name, _, qty in items if qty < LOW_LIMIT)
    return {
        "bins": len(items),
        "total": sum(q for _, _, q in items),
        "per_row": dict(sorted(per_row.items())),
        "low": low,
    }


def main(argv):
    path = argv[1] if len(argv) > 1 else "data/inventory.tsv"
    result = summary(load(path))
    if "--json" in argv:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['bins']} bins, {result['total']} items")
        for row, qty in result["per_row"].items():
            print(f"  row {row}: {qty}")
        print("low stock: " + ", ".join(result["low"]))


if __name__ == "__main__":
    main(sys.argv)
