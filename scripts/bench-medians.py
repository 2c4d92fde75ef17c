#!/usr/bin/env python3
"""Print the median of every criterion benchmark under target/criterion as a Markdown table."""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
rows = []
for est in sorted(root.glob("**/new/estimates.json")):
    bench = json.loads((est.parent / "benchmark.json").read_text())
    median = json.loads(est.read_text())["median"]["point_estimate"]
    unit = "µs" if median >= 1000 else "ns"
    value = median / 1000 if median >= 1000 else median
    rows.append((bench["full_id"], f"{value:.2f} {unit}"))
if not rows:
    sys.exit(f"no criterion results under {root}")
print("| benchmark | median |\n|---|---|")
for name, value in rows:
    print(f"| `{name}` | {value} |")
