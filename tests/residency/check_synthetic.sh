#!/usr/bin/env bash
# check_synthetic.sh KVF DIR: `kvf residency --synthetic --save-trace` replays a generated trace and saves it;
# the saved file replayed with --trace gives the same trace counts and the same result rows (the CSV minus
# nothing: the rows depend only on the trace, the model and the budgets), and a second seed gives another trace.
set -u
kvf=$1; dir=$2
rm -rf "$dir"; mkdir -p "$dir"
fail() { echo "FAIL: $1"; exit 1; }
common=(--model Llama-3.1-8B --gpu "H100 SXM" --hbm-gib 4 --host-gib 16 --policies lru,lru-host)
a=$("$kvf" residency --synthetic --synthetic-requests 300 --seed 7 --save-trace "$dir/t.jsonl" --out "$dir/a" "${common[@]}" 2>&1) \
  || fail "synthetic run: $a"
[ -s "$dir/t.jsonl" ] || fail "no saved trace"
[ "$(wc -l <"$dir/t.jsonl")" = 300 ] || fail "saved trace lines: $(wc -l <"$dir/t.jsonl")"
b=$("$kvf" residency --trace "$dir/t.jsonl" --out "$dir/b" "${common[@]}" 2>&1) || fail "replay of the saved trace: $b"
counts() { grep -o '[0-9]* requests, [0-9]* block references, [0-9]* distinct blocks' <<<"$1"; }
[ -n "$(counts "$a")" ] && [ "$(counts "$a")" = "$(counts "$b")" ] || fail "trace counts differ: '$(counts "$a")' vs '$(counts "$b")'"
cmp -s "$dir/a/residency.csv" "$dir/b/residency.csv" || fail "rows differ: $(diff "$dir/a/residency.csv" "$dir/b/residency.csv" | head -5)"
c=$("$kvf" residency --synthetic --synthetic-requests 300 --seed 8 "${common[@]}" 2>&1) || fail "seed 8: $c"
[ "$(counts "$a")" != "$(counts "$c")" ] || fail "seeds 7 and 8 gave the same trace counts"
exit 0
