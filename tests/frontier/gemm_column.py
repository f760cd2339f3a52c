#!/usr/bin/env python3
"""A small CPU frontier run: every recompute row's `gemm` column names the product that ran (the plan says
onednn_bf16_fp32out; where this oneDNN has no bf16 matmul the OpenBLAS fallback runs and the column must say
openblas_fp32), in both modes, agreeing with the GEMM kernel its note names; and every OpenBLAS gemm_ceiling row
says how near the hardware it is: its rate over the fp32 FMA peak measured in the same process.
Usage: gemm_column.py BENCH_FRONTIER OUT_DIR"""
import csv
import shutil
import subprocess
import sys

bench, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
subprocess.run([bench, "--backend", "cpu", "--out", out, "--arms", "x,xq,mla", "--tokens", "16", "--pages", "1",
                "--xdtypes", "int8", "--models", "Llama-3.1-8B,DeepSeek-V3", "--budget", "0.02", "--min-samples", "2"],
               check=True, stdout=subprocess.DEVNULL)
rows = [r for r in csv.DictReader(open(f"{out}/cases.csv")) if r["arm"] in ("x", "xq", "mla_latent", "mla_up")]
fails = []
for r in rows:
    name = f"{r['case']} {r['mode']}"
    ran_openblas = "(ISA openblas_fp32)" in r["note"]
    if "GEMM kernel" not in r["note"]:
        fails.append(f"{name}: the note names no GEMM kernel: {r['note']!r}")
    want = "openblas_fp32" if ran_openblas else "onednn_bf16_fp32out"
    if r["gemm"] != want:
        fails.append(f"{name}: gemm {r['gemm']!r}, the note says {want} ran")
seen = {(r["arm"], r["mode"]) for r in rows}
for arm in ("x", "xq", "mla_latent", "mla_up"):
    for mode in ("cold", "hot"):
        if (arm, mode) not in seen:
            fails.append(f"no {arm} row in mode {mode}")
import re
ceilings = [r for r in csv.DictReader(open(f"{out}/cases.csv"))
            if r["arm"] == "gemm_ceiling" and r["gemm_lib"] != "onednn_bf16" and int(r["samples"] or 0) > 0]
if not ceilings:
    fails.append("no OpenBLAS gemm_ceiling row")
for r in ceilings:
    m = re.search(r"fp32 FMA peak of this CPU in the same process ([0-9.]+) GFLOP/s \(.+, (\d+) threads\): "
                  r"this row at ([0-9.]+) of it", r["note"])
    if not m:
        fails.append(f"{r['case']} {r['mode']}: no FMA peak in the note: {r['note']!r}")
        continue
    peak, share = float(m.group(1)), float(m.group(3))
    measured = float(r["tflops"]) * 1e3 / peak
    # The note's share is from this mode's median, as the tflops column is: they agree to the note's 2 digits.
    if not (peak > 0 and share > 0 and abs(share - measured) <= 0.011):
        fails.append(f"{r['case']} {r['mode']}: peak {peak} GFLOP/s, share {share}, tflops says {measured:.3f}")
print("\n".join(fails) if fails else f"{len(rows)} rows checked (gemm {sorted({r['gemm'] for r in rows})})")
sys.exit(1 if fails else 0)
