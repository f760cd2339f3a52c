#!/usr/bin/env bash
# install_relocate.sh BUILD_DIR WORK_DIR: see tests/install/CMakeLists.txt.
set -euo pipefail
build=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
fail() { echo "install.relocate: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
mv "$work/prefix" "$work/moved"   # the prefix the build was told about no longer exists
P=$work/moved
for f in bin/kvf libexec/kvfrontier/bench_stream share/kvfrontier/models.json share/kvfrontier/gpus.json; do
  [ -e "$P/$f" ] || fail "$f not installed (install.log: $(tr '\n' ' ' <"$work/install.log"))"
done
[ ! -e "$P/bin/bench_stream" ] || fail "bench_stream installed in bin/ (it belongs in libexec/kvfrontier/)"

cd "$work"   # no source or build tree below the working directory
unset KVF_DATA_DIR
# kvf finds its bench in libexec/; one short stream case keeps this quick.
"$P/bin/kvf" run --quick --backend cpu --study stream --out "$work/res" --stream.case-filter '^read/' >"$work/run.log" 2>&1 ||
  fail "kvf run failed: $(tail -5 "$work/run.log")"
[ -s "$work/res/cases.csv" ] || fail "kvf run wrote no cases.csv"
# kvf report reads share/kvfrontier/{gpus,models}.json (model and GPU flags are checked against them up front).
"$P/bin/kvf" report "$work/res" --no-charts --out "$work/rep" >"$work/report.log" 2>&1 ||
  fail "kvf report failed: $(tail -5 "$work/report.log")"
[ -s "$work/rep/report.md" ] || fail "kvf report wrote no report.md"
# A bench in libexec/kvfrontier finds models.json two levels up (frontier loads it while planning its list).
"$P/libexec/kvfrontier/bench_frontier" --backend cpu --quick --list >"$work/list.log" 2>&1 ||
  fail "bench_frontier --list failed: $(tail -5 "$work/list.log")"

# The data came from share/kvfrontier: without it both refuse, exit 2, naming what they tried.
mv "$P/share/kvfrontier" "$P/share/elsewhere"
expect2() {  # expect2 TEXT CMD...: exit code 2 and TEXT in stderr
  local text=$1; shift
  local rc=0
  "$@" >/dev/null 2>"$work/err.log" || rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $* ($(tail -3 "$work/err.log"))"
  grep -qF -- "$text" "$work/err.log" || fail "stderr lacks '$text': $(cat "$work/err.log")"
}
expect2 "data file models.json not found (tried $P/share/kvfrontier/models.json)" \
  "$P/bin/kvf" report "$work/res" --no-charts --out "$work/rep2"
expect2 "data file models.json not found (tried $P/share/kvfrontier/models.json)" \
  "$P/libexec/kvfrontier/bench_frontier" --backend cpu --quick --list
# KVF_DATA_DIR wins (and is the only place tried when set).
KVF_DATA_DIR="$P/share/elsewhere" "$P/bin/kvf" report "$work/res" --no-charts --out "$work/rep3" >/dev/null 2>&1 ||
  fail "kvf report with KVF_DATA_DIR failed"
expect2 "data file models.json not found (tried $work/nowhere/models.json); KVF_DATA_DIR is set" \
  env KVF_DATA_DIR="$work/nowhere" "$P/bin/kvf" report "$work/res" --no-charts --out "$work/rep4"
echo "install.relocate: ok ($P)"
