#!/usr/bin/env bash
# check_cli_out.sh KVF TRACE DIR: `kvf residency` on TRACE with 2 policies x 3 HBM budgets and a host budget
# writes DIR/residency.csv with a header and one row per policy x budget (each pair once, the budgets the sweep
# names), DIR/residency.json with the inputs and the same rows, no temporary file left, and prints the note for
# the policy without a host tier.
set -u
kvf=$1; trace=$2; dir=$3
rm -rf "$dir"
fail() { echo "FAIL: $1"; exit 1; }
out=$("$kvf" residency --trace "$trace" --model Llama-3.1-8B --gpu "H100 SXM" --policies lru,lru-host \
      --sweep-hbm 1:5:3 --host-gib 16 --out "$dir" 2>&1) || fail "exit $?: $out"
grep -qF "note: lru has no host tier: --host-gib 16 not applied to it" <<<"$out" || fail "no host-tier note: $out"
grep -qF "0 warnings" <<<"$out" || fail "no warnings count: $out"
csv=$dir/residency.csv json=$dir/residency.json
[ -s "$csv" ] && [ -s "$json" ] || fail "missing output: $(ls -la "$dir")"
[ -z "$(find "$dir" -name '*.tmp')" ] || fail "a temporary file was left"
[ "$(wc -l <"$csv")" = 7 ] || fail "expected a header and 6 rows, got $(wc -l <"$csv") lines"
head -1 "$csv" | grep -q '^policy,offline,hbm_gib,host_gib,' || fail "header: $(head -1 "$csv")"
head -1 "$csv" | grep -q 'prefill_source,fetch_source,disk_source,restore_source$' || fail "header lacks the sources: $(head -1 "$csv")"
pairs=$(tail -n +2 "$csv" | cut -d, -f1,3 | sort | tr '\n' ' ')
[ "$pairs" = "lru,1 lru,3 lru,5 lru-host,1 lru-host,3 lru-host,5 " ] || fail "policy x budget rows: $pairs"
# lru-host keeps its host budget, lru runs without one; every row states the cost sources
tail -n +2 "$csv" | grep -q '^lru,false,3,0,0,48,0,0,3993,121877,' || fail "lru row at 3 GiB: $(grep '^lru,false,3' "$csv")"
tail -n +2 "$csv" | grep -q '^lru-host,false,3,16,0,48,256,0,3993,121877,' || fail "lru-host row at 3 GiB"
[ "$(tail -n +2 "$csv" | grep -c ',model,model,none,model$')" = 6 ] || fail "cost sources"
grep -q '"requests": 3993' "$json" || fail "json lacks the trace's request count"
grep -q '"distinct_blocks": 43924' "$json" || fail "json lacks the distinct count"
grep -q '"block_bytes": 67108864' "$json" || fail "json lacks the block bytes"
[ "$(grep -c '"policy": "lru' "$json")" = 6 ] || fail "json rows"
# Forms: blocks entering as int8 K/V (half the bytes and a scale per 128 values) and `cost` compressing to int4:
# the rows name both, lru holds everything as kv-int8, cost reports compressed blocks and their passes.
rm -rf "$dir"
out=$("$kvf" residency --trace "$trace" --model Llama-3.1-8B --gpu "H100 SXM" --policies lru,cost --form kv-int8 \
      --compress-to kv-int4 --hbm-gib 3 --host-gib 16 --out "$dir" 2>&1) || fail "exit $?: $out"
grep -qF "34603008 bytes per block (int8 K/V, 32 layers)" <<<"$out" || fail "form line: $out"
grep -qF "cost may compress HBM blocks to: kv-int4 (int4 K/V, 17825792 bytes)" <<<"$out" || fail "compress line: $out"
col() { head -1 "$csv" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1; }
row() { grep "^$1," "$csv" | cut -d, -f"$(col "$2")"; }
[ "$(row lru form)" = kv-int8 ] && [ "$(row cost form)" = kv-int8 ] || fail "form column"
[ "$(row lru hbm_blocks)" = 93 ] || fail "lru blocks at 3 GiB of int8: $(row lru hbm_blocks)"
[ "$(row cost compress_to)" = kv-int4 ] || fail "compress_to column: $(row cost compress_to)"
[ "$(row lru hbm_share_kv_int4)" = 0 ] && [ "$(row lru compressed_blocks)" = 0 ] || fail "lru compressed"
awk "BEGIN{exit !($(row cost compressed_blocks) > 0 && $(row cost compress_total_s) > 0)}" || fail "cost compressed nothing"
awk "BEGIN{exit !($(row lru restore_total_s) > 0)}" || fail "int8 hits cost no dequantize"
exit 0
