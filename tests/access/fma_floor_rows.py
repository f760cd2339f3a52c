#!/usr/bin/env python3
"""A small CPU access run: every attention row with flops carries its FMA floor (fma_floor_s = flops / the
fp32 FMA peak measured in the run, fma_peak_gflops, fma_peak_isa; where the QK runs as vdpbf16ps, its half of
the attention's flops counts half: fma_floor_basis says which) in both modes; the read control has none. And a
hot row whose working set is under 4x the LLC names no ceiling (a memory read does not bound it) and says why;
the compute control (the dense loop in cache) runs hot only, names no ceiling, and carries its FMA floor.
Every attention row whose loop has a far prefetch (cpu_attn=avx2 or avx512) says it was timed in the row's own
mode (cold: caches flushed) and took it on exactly when more than 3% faster.
Usage: fma_floor_rows.py BENCH_ACCESS OUT_DIR"""
import csv
import math
import re
import shutil
import subprocess
import sys

bench, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
subprocess.run([bench, "--backend", "cpu", "--out", out, "--parts", "attention", "--contexts", "1K", "--keep", "1/2",
                "--block-sizes", "32", "--layouts", "HND", "--select", "per_head", "--scatter", "uniform",
                "--budget", "0.02", "--min-samples", "2"], check=True, stdout=subprocess.DEVNULL)
rows = [r for r in csv.DictReader(open(f"{out}/cases.csv")) if r["study"] == "access"]
fails = []
seen = set()
for r in rows:
    name = f"{r['case']} {r['mode']}"
    in_cache = r["mode"] == "hot" and float(r["working_set_vs_llc"]) < 4
    if r["arm"] == "compute":  # the dense row's loop in cache: hot only, no memory ceiling, the window said
        if r["mode"] != "hot" or r["ceiling"] or "every list folded into its first " not in r["note"]:
            fails.append(f"{name}: compute control mode {r['mode']}, ceiling {r['ceiling']!r}, note {r['note']!r}")
    elif in_cache and (r["ceiling"] or "hot reads (partly) from cache: no pct_of_ceiling" not in r["note"]):
        fails.append(f"{name}: in cache (working_set_vs_llc {r['working_set_vs_llc']}) but ceiling {r['ceiling']!r}")
    if not in_cache and r["arm"] != "compute" and r["ceiling"] != "stream:op=read:gbps":
        fails.append(f"{name}: ceiling {r['ceiling']!r}")
    if r["arm"] == "read":
        if r.get("fma_floor_s"):
            fails.append(f"{name}: a read control has an FMA floor")
        continue
    seen.add((r["arm"], r["mode"]))
    far = re.search(r"; far_prefetch=(on|off) \(calibrated (cold, caches flushed|hot), best of 3: on ([0-9.e+-]+) ms, "
                    r"off ([0-9.e+-]+) ms, on only when 3% faster\)", r["note"])
    if "cpu_attn=portable" in r["note"]:
        if "far_prefetch" in r["note"]:
            fails.append(f"{name}: the portable loop has no far prefetch: {r['note']!r}")
    elif not far:
        fails.append(f"{name}: no far prefetch calibration in the note: {r['note']!r}")
    elif far.group(2).split(",")[0] != r["mode"]:
        fails.append(f"{name}: far prefetch timed {far.group(2)!r}")
    elif abs(float(far.group(3)) / float(far.group(4)) - 0.97) > 0.01 and \
            (far.group(1) == "on") != (float(far.group(3)) < 0.97 * float(far.group(4))):  # 3 digits printed
        fails.append(f"{name}: far prefetch {far.group(1)} from on {far.group(3)} ms, off {far.group(4)} ms")
    flops = float(r["flops"])
    peak, floor = float(r.get("fma_peak_gflops") or "nan"), float(r.get("fma_floor_s") or "nan")
    if not (peak > 0 and floor > 0):
        fails.append(f"{name}: fma_peak_gflops {r.get('fma_peak_gflops')!r}, fma_floor_s {r.get('fma_floor_s')!r}")
        continue
    basis = r.get("fma_floor_basis", "")
    if basis == "fp32 fma":
        if not math.isclose(floor, flops / (peak * 1e9), rel_tol=1e-3):
            fails.append(f"{name}: fma_floor_s {floor} is not flops {flops} / {peak} GFLOP/s")
    elif basis.startswith("qk vdpbf16ps"):
        # Every row here routes nothing or little: its QK is half of flops at most, so 0.75..1 of flops / peak.
        if not (0.75 * flops / (peak * 1e9) * (1 - 1e-3) <= floor < flops / (peak * 1e9)):
            fails.append(f"{name}: fma_floor_s {floor} with {basis!r}: not within 0.75..1 of flops / peak")
        if "bf16" not in r.get("dtype", "bf16"):
            fails.append(f"{name}: {basis!r} on dtype {r.get('dtype')}")
    else:
        fails.append(f"{name}: fma_floor_basis {basis!r}")
    if "fp32 fma" not in r.get("fma_peak_isa", "") and "generic" not in r.get("fma_peak_isa", ""):
        fails.append(f"{name}: fma_peak_isa {r.get('fma_peak_isa')!r}")
for want in [("dense", "cold"), ("dense", "hot"), ("block", "cold"), ("token", "cold"), ("compute", "hot")]:
    if want not in seen:
        fails.append(f"no {want[0]} row in mode {want[1]} (rows: {sorted(seen)})")
print("\n".join(fails) if fails else f"{len(rows)} rows checked")
sys.exit(1 if fails else 0)
