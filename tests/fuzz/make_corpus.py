#!/usr/bin/env python3
"""Rebuilds tests/fuzz/corpus/<target>/ (docs/fuzzing.md): seeds sliced from real results files in the
repository plus hand-made hostile inputs. Files are named by the SHA-1 of their content (as libFuzzer names
what it adds), so rerunning is idempotent. Keep the corpus small (< 2 MB in all): slices, not whole files.

    python3 tests/fuzz/make_corpus.py          # from the repository root or anywhere
"""
import glob
import hashlib
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_SEED = 16 * 1024  # bytes per seed sliced from a real file

corpus = {t: {} for t in ("fuzz_cases_csv", "fuzz_samples_csv", "fuzz_counters_csv", "fuzz_meta_json", "fuzz_gbench_json",
                          "fuzz_residency_csv", "fuzz_safetensors")}


MAX_LEN = 64 * 1024  # run.sh fuzzes with -max_len=65536: a longer seed would be cut


def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_LEN, f"{target}: a seed of {len(data)} bytes"
    corpus[target][hashlib.sha1(data).hexdigest()] = data


def csv_slices(path):
    """Whole file when small; else the header with the first, a middle and the last rows (< MAX_SEED each)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) <= MAX_SEED:
        return [data]
    lines = data.splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    out = []
    for start in (0, len(rows) // 2, max(0, len(rows) - 40)):
        chunk, size = [header], len(header)
        for r in rows[start:]:
            if size + len(r) > MAX_SEED:
                break
            chunk.append(r)
            size += len(r)
        out.append(b"".join(chunk))
    return out


def rel_glob(pattern):
    return sorted(glob.glob(os.path.join(ROOT, pattern)))


# ----------------------------------------------------------------------------------------- real files
sources = ["results/baselines/*/run-*", "tests/gate/fixtures/*", "tests/report/fixtures/*", "results/gpu/*/*"]
for pattern in sources:
    for d in rel_glob(pattern):
        if not os.path.isdir(d):
            continue
        for name, target in (("cases.csv", "fuzz_cases_csv"), ("samples.csv", "fuzz_samples_csv"),
                             ("counters.csv", "fuzz_counters_csv"), ("counters_ranges.csv", "fuzz_counters_csv")):
            p = os.path.join(d, name)
            if os.path.isfile(p):
                for s in csv_slices(p):
                    add(target, s)
        p = os.path.join(d, "meta.json")
        if os.path.isfile(p) and os.path.getsize(p) <= 4 * MAX_SEED:
            add("fuzz_meta_json", open(p, "rb").read())
for p in rel_glob("tests/gate/fixtures/*.json"):
    add("fuzz_gbench_json", open(p, "rb").read())

# ----------------------------------------------------------------------------------------- hostile CSV
CASES_HDR = ("study,case,backend,device,mode,samples,median_s,mean_s,min_s,max_s,q1_s,q3_s,rel_stdev,bytes,flops,"
             "gbps,tflops,pct_of_ceiling,ceiling,ceiling_value,verified,stop_reason,throttled_samples,note,op,block\n")


def case_row(study="stream", case="read", device="Fuzz CPU", mode="cold", samples="10", median="0.001",
             throttled="0", note="", q1="0.0009", q3="0.0011", block=""):
    return (f"{study},{case},cpu,{device},{mode},{samples},{median},{median},{median},{median},{q1},{q3},0.01,"
            f"1000,,1,,,,,n/a,budget,{throttled},{note},read,{block}\n")


def quote(s):
    return '"' + s.replace('"', '""') + '"'


hostile_cases = [
    CASES_HDR + case_row(note=quote("line one\nline two, with a comma and \"quotes\"")),  # RFC 4180 line break
    CASES_HDR + case_row(note=quote("crlf\r\ninside")).replace("\n", "\r\n"),
    CASES_HDR + case_row(samples="1e30"),
    CASES_HDR + case_row(samples="-9223372036854775808"),
    CASES_HDR + case_row(samples="9223372036854775807"),
    CASES_HDR + case_row(samples="9e18", throttled="9e18"),
    CASES_HDR + case_row(samples="nan", median="inf"),
    CASES_HDR + case_row(samples="0x10", median="-0"),
    CASES_HDR + case_row(samples=" 5", median="1e309"),
    CASES_HDR + case_row(samples="5.5", median="-1"),
    CASES_HDR + case_row(median="4.9e-324", q1="nan", q3="-inf"),
    CASES_HDR + case_row(device=quote("`touch /tmp/kvf-pwned`")),
    CASES_HDR + case_row(device=quote("x\"\n!touch /tmp/kvf-pwned\nset title \"")),
    CASES_HDR + case_row(device=quote("<script>alert(1)</script>|**bold**|[x](javascript:alert(1))")),
    CASES_HDR + case_row(device=quote("\u202eevil\u200b\u2028\x7f\x01")),
    CASES_HDR + case_row(device="D" * 3000),
    CASES_HDR + case_row(device="D" * 5000),  # over the fuzzers' 4 KiB field limit
    CASES_HDR + case_row(mode="warm"),
    CASES_HDR + case_row() + case_row(),  # duplicate case
    CASES_HDR + case_row() + case_row(block="64"),  # same case, other parameters
    CASES_HDR + case_row(study="", case=""),
    CASES_HDR + case_row().rstrip("\n"),  # torn last row (no line end)
    CASES_HDR + case_row() + "stream,write,cpu,Fuzz",  # torn mid-row
    CASES_HDR + case_row(note='"unterminated'),
    CASES_HDR + case_row(note='mid"quote'),
    CASES_HDR + case_row(note='"closed"trailing'),
    CASES_HDR + case_row().replace(",", ",,", 1),  # one field too many
    CASES_HDR + case_row().replace(",cold", "", 1),  # one field too few
    CASES_HDR.replace("note", "study"),  # duplicate column
    CASES_HDR.replace(",samples", ""),  # missing column
    CASES_HDR.rstrip("\n") + "," + ",".join(f"p{i}" for i in range(1100)) + "\n",  # too many columns
    "\ufeff" + CASES_HDR + case_row(),  # byte order mark
    "",
    "\n",
    "\n\n\n" + CASES_HDR,
    CASES_HDR,
    CASES_HDR + "\0" + case_row(),
    CASES_HDR + case_row(note=quote("x" * 20000)),  # one record over the 16 KiB line limit
    CASES_HDR + "".join(case_row(case=f"c{i}", samples="0", median="") for i in range(300)),
    CASES_HDR + case_row(study="idleness", case="decode/b1", samples="5"),
    CASES_HDR + case_row(study="frontier", case="x/Llama-3.1-8B/bf16/T16/P1"),
]
for s in hostile_cases:
    add("fuzz_cases_csv", s)

SAMPLES_HDR = "study,case,mode,sample,seconds,clock_mhz,throttled\n"


def samples(case="read", n=10, secs=lambda i: 0.001 + i * 1e-6, throttled=lambda i: 0, mode="cold"):
    return "".join(f"stream,{case},{mode},{i},{secs(i)!r},,{throttled(i)}\n" for i in range(n))


hostile_samples = [
    SAMPLES_HDR + samples(secs=lambda i: 0),
    SAMPLES_HDR + samples(secs=lambda i: -1),
    SAMPLES_HDR + samples(secs=lambda i: 1e308 * (i + 1) / 10),
    SAMPLES_HDR + samples(secs=lambda i: 5e-324),
    SAMPLES_HDR + samples().replace(",0\n", ",nan\n"),
    SAMPLES_HDR + samples(throttled=lambda i: 2),
    SAMPLES_HDR + samples(throttled=lambda i: "1e30"),
    SAMPLES_HDR + samples(throttled=lambda i: "yes"),
    SAMPLES_HDR + samples(throttled=lambda i: 1),  # every sample throttled
    SAMPLES_HDR + samples(secs=lambda i: 0.001),  # all tied
    SAMPLES_HDR + samples(n=3),  # too few
    SAMPLES_HDR + samples(n=1200) + samples(case="write", n=300),  # normal approximation, many ties
    SAMPLES_HDR + samples(case="nosuchcase"),  # orphans
    SAMPLES_HDR + samples(case=quote("read\nwrite")),
    SAMPLES_HDR + samples().rstrip("\n"),
    SAMPLES_HDR.replace(",throttled", ""),
    SAMPLES_HDR + samples(mode="hot"),
]
for s in hostile_samples:
    add("fuzz_samples_csv", s)

COUNTERS_HDR = "study,case,source,capture,range_index,range,t_start_ns,t_end_ns,chip,metric,value,unit\n"


def counter(value="30", index="0", metric="kvf:idle_sm_pct", t0="", t1="", rng="step0", case="decode/b1"):
    return f"idleness,{case},range,cap1,{index},{rng},{t0},{t1},GH100,{metric},{value},%\n"


hostile_counters = [
    COUNTERS_HDR + counter(value="1e30"),
    COUNTERS_HDR + counter(value="-1e30", index="1e30"),
    COUNTERS_HDR + counter(index="-1"),
    COUNTERS_HDR + counter(index="9e18"),
    COUNTERS_HDR + counter(index="9223372036854775808"),
    COUNTERS_HDR + counter(t0="nan", t1="inf"),
    COUNTERS_HDR + counter(t0="1e300", t1="-1e300"),
    COUNTERS_HDR + counter(metric=""),
    COUNTERS_HDR + counter(metric=quote("`id`\n!id")),
    COUNTERS_HDR + counter(rng=quote("<b>x</b>" * 10)),
    COUNTERS_HDR + "".join(counter(value=str(i % 100), index=str(i), rng=f"step{i}") for i in range(400)),
    COUNTERS_HDR + counter(case="nosuchcase"),
    COUNTERS_HDR.replace(",value", ""),
    COUNTERS_HDR + counter().rstrip("\n"),
    COUNTERS_HDR + counter(metric="gpu__time_duration.sum", value="0"),
]
for s in hostile_counters:
    add("fuzz_counters_csv", s)

# ----------------------------------------------------------------------------------------- hostile JSON
META = json.load(open(os.path.join(ROOT, "tests/report/fixtures/gpu/meta.json")))


def meta_with(path, value, base=META):
    m = json.loads(json.dumps(base))
    cur = m
    for k in path[:-1]:
        cur = cur.setdefault(k, {}) if isinstance(cur, dict) else cur
    cur[path[-1]] = value
    return json.dumps(m, indent=1)


hostile_meta = [
    meta_with(["device", "llc_bytes"], 1e30),
    meta_with(["device", "llc_bytes"], -1),
    meta_with(["device", "llc_bytes"], 1.5),
    meta_with(["device", "llc_bytes"], "52428800"),
    meta_with(["device", "llc_bytes"], 9223372036854775807),
    meta_with(["device", "llc_bytes"], 18446744073709551615),
    meta_with(["device", "compute_units"], 1e10),
    meta_with(["device", "compute_units"], True),
    meta_with(["device", "name"], "`touch /tmp/kvf-pwned`"),
    meta_with(["device", "name"], "x\"\n!touch /tmp/kvf-pwned\nset title \""),
    meta_with(["device", "name"], "<script>alert(1)</script>"),
    meta_with(["device", "name"], "\u202e\u200b\u2028\x7f\x01\x00"),
    meta_with(["device", "name"], "N" * 5000),
    meta_with(["device", "name"], 42),
    meta_with(["device", "name"], ["a", "b"]),
    meta_with(["device"], "a device as a string"),
    meta_with(["device"], None),
    meta_with(["suite_version"], ""),
    meta_with(["suite_version"], {"major": 0}),
    meta_with(["studies"], ["stream", "access"]),
    meta_with(["studies", "stream", "status"], "running"),
    meta_with(["studies", "stream", "status"], 7),
    meta_with(["studies", "stream", "machine_load"], {"loadavg_1m": 1e300, "hardware_threads": 1e30}),
    meta_with(["studies", "stream", "machine_load_at_end"], {"loadavg_1m": -1, "hardware_threads": -5}),
    meta_with(["studies", "stream", "machine_load"], {"loadavg_1m": "high", "hardware_threads": 2.5}),
    meta_with(["studies", "stream", "started_utc"], 20260101),
    meta_with(["studies", "stream"], "complete"),
    '{"suite_version": "0.1.0", "device": {"llc_bytes": 1e400}}',
    '{"suite_version": "0.1.0", "device": {"llc_bytes": -0}}',
    '{"suite_version": "0.1.0", "suite_version": "9.9.9"}',
    '{"suite_version": "0.1.0", "device": {"name": "\\ud800"}}',
    '{"suite_version": "0.1.0", "device": {"name": "\\u0000"}}',
    '{"suite_version": "0.1.0", "device": {"name": "\xff\xfe"}}',
    '{"suite_version": "0.1.0"',
    '{"suite_version": "0.1.0"} trailing',
    "[]",
    "null",
    '"just a string"',
    "",
    "{" * 63 + "}" * 63,
    '{"a":' * 63 + "1" + "}" * 63,
    '{"a":' * 70 + "1" + "}" * 70,
    "[" * 100 + "]" * 100,
    "[" * 50000,  # the stack-overflow case of issue 12 (the reader bounds depth; the walk is iterative)
    '{"device":' * 40 + '{"name": "deep"}' + "}" * 40,
    json.dumps({"suite_version": "0.1.0", "studies": {f"s{i}": {"device": {"name": f"d{i}"}} for i in range(300)}}),
]
for s in hostile_meta:
    add("fuzz_meta_json", s)


def bench(name="BM_Copy/4096", real=850.0, unit="ns", run_type="iteration", **extra):
    b = {"name": name, "run_name": name, "run_type": run_type, "repetitions": 6, "real_time": real,
         "cpu_time": real, "time_unit": unit, "iterations": 1000}
    b.update(extra)
    return b


def gbench(benchmarks, context=None):
    return json.dumps({"context": context if context is not None else {"num_cpus": 4}, "benchmarks": benchmarks},
                      indent=None if len(benchmarks) > 20 else 1)


hostile_gbench = [
    gbench([bench(real=-1)] * 6),
    gbench([bench(real=0)] * 6),
    gbench([bench(real=1e308, unit="s")] * 6),
    gbench([bench(real=5e-324)] * 6),
    gbench([bench(real="850")] * 6),
    gbench([bench(unit="ks")] * 6),
    gbench([bench(unit=5)] * 6),
    gbench([bench(error_occurred="yes")] * 6),
    gbench([bench(error_occurred=True, error_message="`id`")] * 6),
    gbench([bench(run_type="aggregate")] * 3),
    gbench([bench(name=None)] * 6),
    gbench([bench(name=["a"])] * 6),
    gbench([bench(run_type=1)] * 6),
    gbench([bench(real=800 + i) for i in range(250)]),
    gbench([bench(name=f"BM_{i}", real=100 + i % 7) for i in range(200)]),
    gbench([bench()] * 6, context={"kvf_device": "<script>x</script>", "device": 4}),
    gbench([bench()] * 6, context={"kvf_device": 7}),
    gbench([bench()] * 6, context=[]),
    gbench([1, "two", None]),
    json.dumps({"benchmarks": {}}),
    json.dumps({"context": {}}),
    '{"benchmarks": [' + '{"real_time": 1e400, "name": "x"},' * 6 + '{}]}',
    '{"benchmarks": [' + "[" * 70 + "]" * 70 + "]}",
]
for s in hostile_gbench:
    add("fuzz_gbench_json", s)

# ----------------------------------------------------------------------------------------- residency.csv
# The committed replay (its residency.json is the target's companion: requests must agree), then hostile edits.
REPLAY_CSV = open(os.path.join(ROOT, "tests/report/fixtures/gpu_residency/residency/residency.csv")).read()
add("fuzz_residency_csv", REPLAY_CSV)
_lines = REPLAY_CSV.splitlines(keepends=True)
_head = _lines[0].rstrip("\n").split(",")


def replay_with(column, value, row=1):
    rows = [l.rstrip("\n").split(",") for l in _lines]
    rows[row][_head.index(column)] = value
    return "".join(",".join(r) + "\n" for r in rows)


hostile_replay = [
    _lines[0],  # header only: no rows
    "".join(_lines[:3]) + _lines[2],  # a (policy, budget) twice
    REPLAY_CSV[:-9],  # torn last row
    "extra," + _lines[0] + "".join("x," + l for l in _lines[1:]),  # an unknown column first
    replay_with("added_p99_us", "fast"),
    replay_with("added_p99_us", "1e400"),
    replay_with("hit_rate_hbm", "nan"),
    replay_with("hit_rate_host", "-0.5"),
    replay_with("hbm_gib", "0"),
    replay_with("hbm_gib", "1e300"),
    replay_with("requests", "7"),
    replay_with("requests", "1e30"),
    replay_with("offline", "maybe"),
    replay_with("policy", ""),
    replay_with("policy", quote("`touch /tmp/kvf_fuzz_pwned`\nsystem('id')")),
    replay_with("prefill_source", quote("<script>x</script>")),
    "policy,hbm_gib\nlru,4\n",  # required columns missing
    _lines[0] + "".join(replay_with("policy", f"p{i}", 1).splitlines(keepends=True)[1] for i in range(70)),
]
for s in hostile_replay:
    add("fuzz_residency_csv", s)

# ----------------------------------------------------------------------------------------- safetensors
# Whole safetensors files (issue 19): 8-byte little-endian header length, JSON header, data. Small tensors of the
# dtypes a model uses, then headers that lie about each thing the reader checks.
def st_file(header, data=b"", length=None):
    h = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, (bytes, str)) else (
        header.encode() if isinstance(header, str) else header)
    n = len(h) if length is None else length
    return n.to_bytes(8, "little") + h + data


def st_tensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    return st_file(header, data)


_bf16 = bytes([0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x80, 0xbf])  # 1, 2, 3, -1
_f32 = bytes([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0])                  # 1, -2
_f16 = bytes([0x00, 0x3c, 0x01, 0x00, 0x00, 0x7c, 0x00, 0x7e])    # 1, subnormal, inf, nan
for seed in [
    st_tensors([("model.embed_tokens.weight", "BF16", [2, 2], _bf16), ("model.norm.weight", "F32", [2], _f32)],
               {"format": "pt"}),
    st_tensors([("a", "F16", [4], _f16), ("b", "F32", [], _f32[:4]), ("z", "BF16", [0, 3], b"")]),
    st_tensors([("ids", "I64", [1], bytes(8)), ("mask", "BOOL", [2], b"\x01\x00"), ("q", "F8_E4M3", [2], b"\x38\x40")]),
    st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),    # overlap
    st_file({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),  # past the data
    st_file({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),  # span != dtype x shape
    st_file({"a": {"dtype": "F32", "shape": [65536, 65536, 65536, 65536], "data_offsets": [0, 8]}}, bytes(8)),
    st_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}, bytes(8)),
    st_file({"__metadata__": {"k": 1}}),
    st_file("{}", length=1 << 40),                                                       # length beyond the file
    st_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}   ', bytes(4)),     # padded with spaces
    st_file("[" * 100 + "]" * 100),
]:
    add("fuzz_safetensors", seed)

# ----------------------------------------------------------------------------------------- write
total = 0
for target, seeds in corpus.items():
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")
print(f"total {total} bytes")
assert total < 2 * 1024 * 1024, "the committed corpus must stay under 2 MB"
