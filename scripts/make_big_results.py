#!/usr/bin/env python3
"""Writes a results directory of N case rows (stream + access + idleness shapes, 5 samples each) by
repeating the rows of a real run with distinct case names: the load for measuring how `kvf report`
and `kvf gate` scale with rows (issue 12: linear, rows per second and memory stated).

usage: make_big_results.py BASE_DIR OUT_DIR N_ROWS [SAMPLES_PER_ROW]
"""
import csv
import os
import shutil
import sys

base, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
per = int(sys.argv[4]) if len(sys.argv) > 4 else 5
os.makedirs(out, exist_ok=True)
shutil.copy(os.path.join(base, "meta.json"), out)
with open(os.path.join(base, "cases.csv"), newline="") as f:
    rows = list(csv.reader(f))
header = rows[0]
body = [r for r in rows[1:] if r[header.index("samples")] not in ("", "0")]
ci, si = header.index("case"), header.index("samples")
with open(os.path.join(out, "cases.csv"), "w", newline="") as fc, \
        open(os.path.join(out, "samples.csv"), "w", newline="") as fs:
    wc, ws = csv.writer(fc, lineterminator="\n"), csv.writer(fs, lineterminator="\n")
    wc.writerow(header)
    ws.writerow(["study", "case", "mode", "sample", "seconds", "clock_mhz", "throttled"])
    for i in range(n):
        r = list(body[i % len(body)])
        r[ci] = f"{r[ci]}/copy{i // len(body)}"
        r[si] = str(per)
        wc.writerow(r)
        median = float(r[header.index("median_s")] or 1e-3)
        for k in range(per):
            ws.writerow([r[0], r[ci], r[header.index("mode")], k, median * (1 + 0.001 * k), "", 0])
