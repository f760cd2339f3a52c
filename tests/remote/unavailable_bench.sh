#!/usr/bin/env bash
# unavailable_bench.sh KVF DATA_DIR BENCH...: kvf run's plan with a bench_remote that cannot start (its loader
# finds no libmpi): skipped with a note when no --study names it, bad input (exit 2, one line) when one does.
set -u
kvf=$1 data=$2; shift 2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$kvf" "$d/kvf"
for b in "$@"; do ln -s "$b" "$d/"; done
{
  echo '#!/bin/sh'
  echo 'echo "bench_remote: error while loading shared libraries: libmpi.so.40: cannot open shared object file" >&2'
  echo 'exit 127'
} >"$d/bench_remote"
chmod +x "$d/bench_remote"
fail() { echo "FAIL: $1"; exit 1; }
out=$(KVF_DATA_DIR=$data "$d/kvf" run --list --quick 2>&1); rc=$?
[ "$rc" = 0 ] || fail "kvf run --list exited $rc: $out"
grep -q "study remote is not available (.*libmpi.so.40.*); skipping it" <<<"$out" || fail "no note: $out"
err=$(KVF_DATA_DIR=$data "$d/kvf" run --list --quick --study remote 2>&1 >/dev/null); rc=$?
[ "$rc" = 2 ] || fail "--study remote exited $rc: $err"
[ "$(wc -l <<<"$err")" = 1 ] || fail "more than one line: $err"
grep -q "study remote: not available: .*libmpi.so.40" <<<"$err" || fail "wrong line: $err"
exit 0
