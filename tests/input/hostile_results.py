#!/usr/bin/env python3
"""Replays issue 12's crafted results directories against `kvf report` and `kvf gate`.

Each case is one small edit of a real quick run (results/baselines/AMD-EPYC/run-1), its stream and access studies
only: the others add no reader the cases reach, and the remote study's 1000-sample rows made each report 3x
slower (their bootstrap intervals), over 100 s of CI's sanitizer phase.
What must hold for every case: no command runs, no hang (a 60 s limit), no crash (no signal), and
either exit 2 with one line naming the file (and key or line), or a correct report (exit 0) with a
warning where the input was read around.

usage: hostile_results.py KVF BASE_DIR WORK_DIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys

KVF, BASE, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []
checks = 0


KEEP = ("stream", "access")


def trimmed_base():
    """BASE with the rows and meta.json entries of the studies in KEEP only, written once under WORK."""
    d = os.path.join(WORK, "_base")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(BASE, d, symlinks=True)
    for name in ("cases.csv", "samples.csv", "counters.csv"):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            continue
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if rows and "study" in rows[0]:
            col = rows[0].index("study")
            rows = rows[:1] + [r for r in rows[1:] if r[col] in KEEP]
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
    meta_path = os.path.join(d, "meta.json")
    meta = json.load(open(meta_path))
    meta["studies"] = {k: v for k, v in meta.get("studies", {}).items() if k in KEEP}
    json.dump(meta, open(meta_path, "w"), indent=2)
    return d


os.makedirs(WORK, exist_ok=True)
SOURCE = trimmed_base()


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(SOURCE, d, symlinks=True)
    return d


def run(args, timeout=60):
    try:
        p = subprocess.run([KVF] + args, capture_output=True, text=True, timeout=timeout, errors="replace")
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "hang", "", ""


def check(name, args, code, needle=None, one_line=True, marks=()):
    """Runs kvf ARGS; the exit code must be `code`; for code 2 stderr is one line holding `needle`."""
    global checks
    checks += 1
    rc, out, err = run(args)
    problems = []
    if rc == "hang":
        problems.append("hung (60 s)")
    elif rc < 0:
        problems.append(f"killed by signal {-rc}")
    elif rc != code:
        problems.append(f"exit {rc}, expected {code}")
    lines = [l for l in err.splitlines() if l.strip() and "warning:" not in l]
    if code == 2 and one_line and len(lines) != 1:
        problems.append(f"{len(lines)} error lines on stderr, expected 1")
    if needle and needle not in err:
        problems.append(f"stderr lacks {needle!r}")
    for m in marks:
        if os.path.exists(m):
            problems.append(f"command ran: {m} exists")
    if problems:
        failures.append(f"{name}: " + "; ".join(problems) + f"\n    kvf {' '.join(args)[:300]}\n    stderr: {err[-600:]}")
    return rc, out, err


def edit_meta(d, fn):
    p = os.path.join(d, "meta.json")
    with open(p) as f:
        m = json.load(f)
    fn(m)
    with open(p, "w") as f:
        json.dump(m, f)


def csv_rows(d, name="cases.csv"):
    with open(os.path.join(d, name), newline="") as f:
        return f.read()


def replace_device(d, payload, rows_to_edit=None):
    """The device cells of cases.csv (all, or the first `rows_to_edit`) become `payload` (RFC 4180 quoted)."""
    import csv
    import io
    p = os.path.join(d, "cases.csv")
    with open(p, newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("device")
    for r in rows[1:][:rows_to_edit]:
        r[col] = payload
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    with open(p, "w", newline="") as f:
        f.write(buf.getvalue())


def gp_strings_clean(name, d):
    """No backquote and no payload command in any written gnuplot script."""
    rep = os.path.join(d, "report")
    for f in os.listdir(rep) if os.path.isdir(rep) else []:
        if f.endswith(".gp"):
            text = open(os.path.join(rep, f), errors="replace").read()
            commands = [l.strip() for l in text.splitlines()]
            if "`" in text or any(c.startswith(("system", "!", "shell")) for c in commands):
                failures.append(f"{name}: {f} holds a backquote or a shell command")


os.makedirs(WORK, exist_ok=True)

# 1. Data never becomes code: a device name that gnuplot would expand or run.
payloads = {
    "backquote": lambda m: f"`touch {m}`",
    "newline_system": lambda m: f'x"\nsystem "touch {m}"\n#',
    "newline_bang": lambda m: f"x'\n!touch {m}\n#",
    "dollar": lambda m: f"$(touch {m})",
}
for pname, make in payloads.items():
    for where in ("meta", "cases"):
        for charts in ([], ["--no-charts"]):
            name = f"gnuplot_{pname}_{where}{'_nocharts' if charts else ''}"
            d = fresh(name)
            mark = os.path.join(WORK, name + ".pwned")
            if where == "meta":
                edit_meta(d, lambda m: m["device"].__setitem__("name", make(mark)))
            else:
                replace_device(d, make(mark))
            check(name, ["report", d] + charts, 0, marks=[mark])
            gp_strings_clean(name, d)
            if charts:  # the user runs the written .gp files as the report invites
                rep = os.path.join(d, "report")
                for f in sorted(os.listdir(rep)):
                    if f.endswith(".gp"):
                        subprocess.run(["gnuplot", f], cwd=rep, capture_output=True, timeout=60)
                if os.path.exists(mark):
                    failures.append(f"{name}: running the written .gp files ran the payload")

# HTML: the report escapes markup it did not write.
d = fresh("html_script")
edit_meta(d, lambda m: m["device"].__setitem__("name", "<script>alert(1)</script>"))
check("html_script", ["report", d, "--no-charts"], 0)
html = open(os.path.join(d, "report", "report.html"), errors="replace").read()
if "<script>alert(1)" in html:
    failures.append("html_script: raw <script> in report.html")

# 2. Unbounded reads and hangs: devices, FIFOs, symlinks out, huge fields.
for fname in ("cases.csv", "samples.csv", "meta.json", "counters.csv"):
    d = fresh(f"devzero_{fname}")
    os.remove(os.path.join(d, fname))
    os.symlink("/dev/zero", os.path.join(d, fname))
    check(f"devzero_report_{fname}", ["report", d, "--no-charts"], 2, fname)
    if fname != "counters.csv":
        check(f"devzero_gate_{fname}", ["gate", "--baseline", SOURCE, "--current", d], 2, fname)
    check(f"devzero_follow_{fname}", ["report", d, "--no-charts", "--follow-symlinks"], 2, "character device")
    d = fresh(f"fifo_{fname}")
    os.remove(os.path.join(d, fname))
    os.mkfifo(os.path.join(d, fname))
    check(f"fifo_report_{fname}", ["report", d, "--no-charts"], 2, "FIFO")
    if fname != "counters.csv":
        check(f"fifo_gate_{fname}", ["gate", "--baseline", d, "--current", SOURCE], 2, "FIFO")

d = fresh("symlink_out")
outside = os.path.join(WORK, "outside_samples.csv")
shutil.copy(os.path.join(SOURCE, "samples.csv"), outside)
os.remove(os.path.join(d, "samples.csv"))
os.symlink(outside, os.path.join(d, "samples.csv"))
check("symlink_out_report", ["report", d, "--no-charts"], 2, "--follow-symlinks")
check("symlink_out_gate", ["gate", "--baseline", SOURCE, "--current", d], 2, "--follow-symlinks")
check("symlink_out_allowed", ["report", d, "--no-charts", "--follow-symlinks"], 0)

d = fresh("huge_device_csv")
replace_device(d, "A" * (17 << 20), rows_to_edit=1)
check("huge_device_csv_report", ["report", d, "--no-charts"], 2, "--max-field-kib")
check("huge_device_csv_gate", ["gate", "--baseline", SOURCE, "--current", d], 2, "--max-field-kib")
d = fresh("huge_device_meta")
edit_meta(d, lambda m: m["device"].__setitem__("name", "A" * (17 << 20)))
check("huge_device_meta_report", ["report", d, "--no-charts"], 2, "--max-field-kib")
check("huge_device_meta_gate", ["gate", "--baseline", SOURCE, "--current", d], 2, "--max-field-kib")
check("limit_field_zero", ["report", d, "--no-charts", "--max-field-kib", "0"], 2, "--max-field-kib")

d = fresh("big_file")
with open(os.path.join(d, "samples.csv"), "a") as f:
    f.write("stream,read/loop/huge/128MiB,cold,0,0.001,,0\n" * 40000)
check("big_file_limit", ["report", d, "--no-charts", "--max-file-mib", "1"], 2, "--max-file-mib")

# 3. Crashes: deep JSON.
for tool in ("report", "gate"):
    d = fresh(f"deep_json_{tool}")
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write('{"device":' * 50000 + "1" + "}" * 50000)
    args = ["report", d, "--no-charts"] if tool == "report" else ["gate", "--baseline", SOURCE, "--current", d]
    check(f"deep_json_{tool}", args, 2, "nested more than")

# 4. Undefined behaviour: numbers out of range for integers.
d = fresh("llc_1e30")
edit_meta(d, lambda m: m["device"].__setitem__("llc_bytes", 1e30))
check("llc_1e30_report", ["report", d, "--no-charts"], 2, "device.llc_bytes")


def set_cell(d, column, value, row=1, name="cases.csv"):
    import csv
    import io
    p = os.path.join(d, name)
    with open(p, newline="") as f:
        rows = list(csv.reader(f))
    rows[row][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    with open(p, "w", newline="") as f:
        f.write(buf.getvalue())


for col, val in (("throttled_samples", "9e18"), ("samples", "-9223372036854775808"), ("samples", "1e30"),
                 ("samples", "inf"), ("median_s", "1e400"), ("samples", "nan")):
    d = fresh(f"num_{col}_{val}")
    set_cell(d, col, val)
    check(f"num_{col}_{val}_report", ["report", d, "--no-charts"], 2, f"'{col}'")
    if col == "samples":
        check(f"num_{col}_{val}_gate", ["gate", "--baseline", SOURCE, "--current", d], 2, f"'{col}'")

# 5. Wrong exit codes and messages: a directory where a file is expected, wrong JSON types.
d = fresh("meta_is_dir")
os.remove(os.path.join(d, "meta.json"))
os.mkdir(os.path.join(d, "meta.json"))
check("meta_is_dir_report", ["report", d, "--no-charts"], 2, "meta.json: a directory")
check("meta_is_dir_gate", ["gate", "--baseline", SOURCE, "--current", d], 2, "meta.json: a directory")
check("gpus_is_dir", ["report", SOURCE, "--no-charts", "--gpus", WORK, "--out", os.path.join(WORK, "r_gpus")], 2,
      "a directory")
check("models_is_dir",
      ["report", SOURCE, "--no-charts", "--models-file", WORK, "--out", os.path.join(WORK, "r_models")], 2,
      "a directory")
for key, val in (("suite_version", 5), ("device", {"name": 7}), ("device", {"llc_bytes": "big"}),
                 ("studies", {"stream": {"status": []}}), ("git_sha", {"a": 1})):
    d = fresh(f"meta_type_{key}")
    edit_meta(d, lambda m: m.__setitem__(key, val) if key != "device" else m["device"].update(val))
    check(f"meta_type_{key}_report", ["report", d, "--no-charts"], 2, "meta.json: key")

# 6. Torn rows: a full disk cut the last row; the finished rows are reported and the torn one named.
def nudge_first_sample(d):
    """One sample a hair slower: an exact copy of the baseline's samples (in every case they share, so a torn
    copy too) is refused by the gate as the same run."""
    lines = csv_rows(d, "samples.csv").splitlines()
    first = float(lines[1].split(",")[lines[0].split(",").index("seconds")])
    set_cell(d, "seconds", repr(first * 1.000001), name="samples.csv")


for fname in ("cases.csv", "samples.csv"):
    d = fresh(f"torn_{fname}")
    nudge_first_sample(d)
    p = os.path.join(d, fname)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) - 7])
    rc, out, err = check(f"torn_{fname}_report", ["report", d, "--no-charts"], 0)
    if "torn last row" not in err:
        failures.append(f"torn_{fname}_report: no warning naming the torn row: {err[-300:]}")
    rc, out, err = check(f"torn_{fname}_gate", ["gate", "--baseline", SOURCE, "--current", d, "--min-samples", "3"], 0)
    if "torn last row" not in out:
        failures.append(f"torn_{fname}_gate: the gate report does not name the torn row")

# A cases.csv cut short mid-row with several rows gone: only the torn row's case may have samples without a row.
d = fresh("torn_cases_cut_short")
p = os.path.join(d, "cases.csv")
data = open(p, "rb").read()
rows = data.split(b"\n")
open(p, "wb").write(b"\n".join(rows[:2]) + b"\n" + rows[2][:20])
check("torn_cases_cut_short_report", ["report", d, "--no-charts"], 2, "can account for one case only")

# 7. RFC 4180: a quoted field holding a line break is read.
d = fresh("quoted_newline")
set_cell(d, "note", "first line\nsecond line, with \"quotes\"")
nudge_first_sample(d)
check("quoted_newline_report", ["report", d, "--no-charts"], 0)
check("quoted_newline_gate", ["gate", "--baseline", SOURCE, "--current", d, "--min-samples", "3"], 0)

# 8. Bad limit flags.
check("limit_flag_zero", ["report", SOURCE, "--max-file-mib", "0"], 2, "--max-file-mib")
check("limit_flag_text", ["gate", "--baseline", SOURCE, "--current", SOURCE, "--max-line-kib", "lots"], 2,
      "--max-line-kib")

# 9. A kvf residency replay beside the results (issue 17): residency/residency.csv and residency.json are read
# bounded, by column name; a bad one is said in the report (a warning naming file:line, the Residency section
# "Not available") and the rest of the report stands (exit 0). The same files as a replay's own directory are the
# whole input: bad is exit 2, one line. Payloads in a policy name stay text.
REPLAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report", "fixtures", "gpu_residency", "residency")


def with_replay(name):
    d = fresh(name)
    shutil.copytree(REPLAY, os.path.join(d, "residency"))
    return d, os.path.join(d, "residency")


def set_replay_cell(rd, column, value, row=1):
    set_cell(rd, column, value, row, name="residency.csv")


def replay_unreadable(name, d, needle):
    """kvf report exits 0, warns naming `needle`, and report.md says the section is not available."""
    rc, out, err = check(name, ["report", d, "--no-charts"], 0)
    if needle not in err:
        failures.append(f"{name}: no warning naming {needle!r}: {err[-400:]}")
    md = os.path.join(d, "report", "report.md")
    if rc == 0 and "Not available: " not in open(md, errors="replace").read():
        failures.append(f"{name}: report.md does not say the Residency section is not available")


d, rd = with_replay("replay_bad_number")
set_replay_cell(rd, "added_p99_us", "12ms", row=3)
replay_unreadable("replay_bad_number", d, "residency.csv:4: column 'added_p99_us'")
check("replay_bad_number_own_dir", ["report", rd, "--no-charts", "--out", os.path.join(WORK, "r_replay")], 2,
      "residency.csv:4: column 'added_p99_us'")
d, rd = with_replay("replay_nan_rate")
set_replay_cell(rd, "hit_rate_hbm", "nan")
replay_unreadable("replay_nan_rate", d, "residency.csv:2: column 'hit_rate_hbm'")
d, rd = with_replay("replay_missing_column")
open(os.path.join(rd, "residency.csv"), "w").write("policy,hbm_gib\nlru,4\n")
replay_unreadable("replay_missing_column", d, "missing column 'host_gib'")
d, rd = with_replay("replay_bad_json")
open(os.path.join(rd, "residency.json"), "w").write('{"model": "m", "gpu": ')
replay_unreadable("replay_bad_json", d, "residency.json")
d, rd = with_replay("replay_deep_json")
open(os.path.join(rd, "residency.json"), "w").write("[" * 100000 + "]" * 100000)
replay_unreadable("replay_deep_json", d, "residency.json")
d, rd = with_replay("replay_huge_field")
set_replay_cell(rd, "policy", "p" * (2 << 20))
replay_unreadable("replay_huge_field", d, "--max-field-kib")
d, rd = with_replay("replay_fifo")
os.remove(os.path.join(rd, "residency.csv"))
os.mkfifo(os.path.join(rd, "residency.csv"))
replay_unreadable("replay_fifo", d, "FIFO")
d, rd = with_replay("replay_symlink_out")
os.remove(os.path.join(rd, "residency.json"))
os.symlink("/etc/passwd", os.path.join(rd, "residency.json"))
replay_unreadable("replay_symlink_out", d, "--follow-symlinks")
d, rd = with_replay("replay_torn")
p = os.path.join(rd, "residency.csv")
data = open(p, "rb").read()
open(p, "wb").write(data[: len(data) - 7])
rc, out, err = check("replay_torn", ["report", d, "--no-charts"], 0)
if "torn last row" not in err:
    failures.append(f"replay_torn: no warning naming the torn row: {err[-300:]}")
for pname, make in payloads.items():
    name = f"replay_policy_{pname}"
    d, rd = with_replay(name)
    mark = os.path.join(WORK, name + ".pwned")
    for row in range(1, 4):
        set_replay_cell(rd, "policy", make(mark) + str(row), row=row)
    check(name, ["report", d], 0, marks=[mark])
    gp_strings_clean(name, d)
check("replay_flag_zero", ["report", SOURCE, "--no-charts", "--residency-hbm-gib", "0"], 2, "--residency-hbm-gib")

# 10. bench_attention's output beside the results (issue 19): attention/*.csv and meta.json are read bounded, by
# column name; a bad one is said in the report (a warning naming the file, the attention section "Not available",
# claims 7-9 "not available") and the rest of the report stands (exit 0). Payloads in the model path stay text.
ATTN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report", "fixtures", "gpu_attention", "attention")


def with_attention(name):
    d = fresh(name)
    shutil.copytree(ATTN, os.path.join(d, "attention"))
    return d, os.path.join(d, "attention")


d, ad = with_attention("attn_bad_number")
set_cell(ad, "recall", "most", row=3, name="selection.csv")
replay_unreadable("attn_bad_number", d, "selection.csv:4: column 'recall'")
d, ad = with_attention("attn_bad_json")
open(os.path.join(ad, "meta.json"), "w").write('{"schema": ')
replay_unreadable("attn_bad_json", d, "meta.json")
d, ad = with_attention("attn_deep_json")
open(os.path.join(ad, "meta.json"), "w").write("[" * 100000 + "]" * 100000)
replay_unreadable("attn_deep_json", d, "meta.json")
d, ad = with_attention("attn_missing_column")
open(os.path.join(ad, "locality.csv"), "w").write("layer,head\n0,0\n")
replay_unreadable("attn_missing_column", d, "missing column 'sink'")
d, ad = with_attention("attn_fifo")
os.remove(os.path.join(ad, "entropy.csv"))
os.mkfifo(os.path.join(ad, "entropy.csv"))
replay_unreadable("attn_fifo", d, "FIFO")
d, ad = with_attention("attn_symlink_out")
os.remove(os.path.join(ad, "layer_entropy.csv"))
os.symlink("/etc/passwd", os.path.join(ad, "layer_entropy.csv"))
replay_unreadable("attn_symlink_out", d, "--follow-symlinks")
d, ad = with_attention("attn_torn")
p = os.path.join(ad, "needle.csv")
data = open(p, "rb").read()
open(p, "wb").write(data[: len(data) - 5])
rc, out, err = check("attn_torn", ["report", d, "--no-charts"], 0)
if "torn last row" not in err:
    failures.append(f"attn_torn: no warning naming the torn row: {err[-300:]}")
for pname, make in payloads.items():
    name = f"attn_model_{pname}"
    d, ad = with_attention(name)
    mark = os.path.join(WORK, name + ".pwned")
    meta_path = os.path.join(ad, "meta.json")
    m = json.load(open(meta_path))
    m["model_dir"] = "/models/" + make(mark)
    m["tokens_file"] = make(mark)
    json.dump(m, open(meta_path, "w"))
    check(name, ["report", d], 0, marks=[mark])
    gp_strings_clean(name, d)

print(f"{checks} checks, {len(failures)} failed")
for f in failures:
    print("FAIL", f)
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
