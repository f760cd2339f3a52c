#!/usr/bin/env python3
"""The case list of a bench (--list json) against a golden file: the same case names with the same parameter
columns and values, whatever the order, and the same skipped reasons. Values that depend on the machine
(its LLC, its memory; on CPU lists, a gather's hot mode and whether oneDNN has a bf16 matmul) are left out, and est_seconds is not compared; the golden runs pass explicit sizes
(--pool-mib, --size) where a case name would depend on the LLC.

  list_golden.py BENCH GOLDEN [--update] -- ARGS...   (ARGS go to BENCH after --list json --backend cpu, or
  after --list json alone when they hold --plan-device: the GPU lists, planned for the H100 of the committed run)
"""
import json
import subprocess
import sys

MACHINE_DEPENDENT = {"llc_bytes", "working_set_vs_llc"}


def machine_dependent_flags(j):
    """The flags of a listed case that follow the CPU it is listed on, not the code: whether oneDNN has a bf16
    matmul here (from AVX-512 up; skipped on an AVX2-only host), and whether a gather's working set leaves a hot
    mode (it must fit the LLC). They are left out of the comparison for those cases."""
    params = j.get("params", {})
    if params.get("gemm_lib") == "onednn_bf16":
        return {"cold", "hot", "skipped"}
    if params.get("part") == "gather":
        return {"hot"}
    return set()


def normalized(lines, drop_machine_dependent):
    out = []
    for line in lines:
        if not line.strip():
            continue
        j = json.loads(line)
        params = {k: v for k, v in j.get("params", {}).items() if k not in MACHINE_DEPENDENT}
        # A bench line has "skipped" only when skipped (its reason); a golden line has it as true or false.
        skipped = j["skipped"] is True if isinstance(j.get("skipped"), bool) else "skipped" in j
        row = {"study": j["study"], "case": j["case"], "cold": j["cold"], "hot": j["hot"], "params": params,
               "skipped": skipped}
        if drop_machine_dependent:
            for flag in machine_dependent_flags(j):
                row.pop(flag, None)
        out.append(json.dumps(row, sort_keys=True))
    return sorted(out)


def main():
    argv = sys.argv[1:]
    if "--" not in argv or len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    sep = argv.index("--")
    head, args = argv[:sep], argv[sep + 1:]
    update = "--update" in head
    bench, golden = [a for a in head if a != "--update"][:2]
    # A planned run (--plan-device meta.json) takes its backend from the file.
    backend = [] if "--plan-device" in args else ["--backend", "cpu"]
    run = subprocess.run([bench, "--list", "json", *backend, *args], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"{bench} exited {run.returncode}: {run.stderr.strip()}", file=sys.stderr)
        return 1
    # CPU lists leave out what follows the CPU they are listed on; GPU lists are planned for a described device.
    drop = "--plan-device" not in args
    got = normalized(run.stdout.splitlines(), drop)
    if update:
        with open(golden, "w") as f:
            f.write("\n".join(normalized(run.stdout.splitlines(), False)) + "\n")
        print(f"wrote {len(got)} cases to {golden}")
        return 0
    with open(golden) as f:
        want = normalized(f.read().splitlines(), drop)
    if got == want:
        print(f"{len(got)} cases as in {golden}")
        return 0
    gs, ws = set(got), set(want)
    for l in sorted(ws - gs)[:20]:
        print("missing:", l)
    for l in sorted(gs - ws)[:20]:
        print("new:    ", l)
    if gs == ws:
        print("same cases, different multiplicity (duplicated case names?)")
    print(f"{len(ws - gs)} missing, {len(gs - ws)} new, against {golden}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
