#!/usr/bin/env bash
# Runs the libFuzzer targets built by the fuzz preset (docs/fuzzing.md).
#   run.sh replay BIN_DIR [TARGET...]          every committed corpus and regression input once (ctest)
#   run.sh fuzz BIN_DIR SECONDS ARTIFACTS [TARGET...]
#                                              SECONDS of fuzzing per target over a copy of the corpus
# The committed corpus is never written to: fuzzing mutates a copy in a temporary directory. Exit status:
# 0 when no target found anything, 1 when one crashed, leaked, ran out of memory or timed out (the input is
# kept under ARTIFACTS/<target>/ and its path printed), 2 for bad usage.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALL=(fuzz_cases_csv fuzz_samples_csv fuzz_counters_csv fuzz_meta_json fuzz_gbench_json fuzz_residency_csv fuzz_safetensors)

dict_of() {
  case "$1" in
    *_csv) echo "$HERE/dict/csv.dict" ;;
    *_json) echo "$HERE/dict/json.dict" ;;
    *_safetensors) echo "$HERE/dict/safetensors.dict" ;;
  esac
}

# Sanitizer settings: abort on the first report of any kind, with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:symbolize=1}

mode=${1:-}
bin=${2:-}
[ -n "$mode" ] && [ -d "$bin" ] || { echo "usage: run.sh replay|fuzz BIN_DIR ..." >&2; exit 2; }
shift 2

if [ "$mode" = replay ]; then
  targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
  status=0
  for t in "${targets[@]}"; do
    inputs=()
    for d in "$HERE/corpus/$t" "$HERE/regressions/$t"; do
      [ -d "$d" ] && while IFS= read -r -d '' f; do inputs+=("$f"); done < <(find "$d" -type f -print0 | sort -z)
    done
    [ ${#inputs[@]} -gt 0 ] || { echo "$t: no corpus" >&2; status=1; continue; }
    log=$(mktemp)
    # Files (not directories) as arguments: libFuzzer runs each once and writes nothing.
    if "$bin/$t" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 "${inputs[@]}" >"$log" 2>&1; then
      echo "$t: replayed ${#inputs[@]} inputs: ok"
    else
      tail -n 60 "$log"; echo "$t: FAILED on the corpus replay (log above)"; status=1
    fi
    rm -f "$log"
  done
  exit $status
fi

[ "$mode" = fuzz ] || { echo "run.sh: unknown mode '$mode'" >&2; exit 2; }
secs=${1:-20}; artifacts=${2:-}
[[ "$secs" =~ ^[1-9][0-9]*$ ]] && [ -n "$artifacts" ] || { echo "usage: run.sh fuzz BIN_DIR SECONDS ARTIFACTS [TARGET...]" >&2; exit 2; }
shift 2
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
work=$(mktemp -d "${TMPDIR:-/tmp}/kvf-fuzz-run.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One target: fuzz it, then write its console text to $work/$t.out and its summary line to $work/$t.line;
# exit 1 when it found anything.
fuzz_one() {
  local t=$1 log="$artifacts/$1/fuzz.log" out="$work/$1.out" rc verdict
  mkdir -p "$artifacts/$t" "$work/$t"
  cp -r "$HERE/corpus/$t" "$work/$t/corpus"
  local extra=()
  [ -d "$HERE/regressions/$t" ] && extra+=("$HERE/regressions/$t")  # read only: new inputs go to the first dir
  echo "== $t: fuzzing ${secs}s over $(ls "$work/$t/corpus" | wc -l) corpus inputs (log: $log)" >"$out"
  set +e
  "$bin/$t" "$work/$t/corpus" "${extra[@]}" -dict="$(dict_of "$t")" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -detect_leaks=1 -print_final_stats=1 -max_len=65536 \
    -artifact_prefix="$artifacts/$t/" >"$log" 2>&1
  rc=$?
  set -e
  local execs eps rss last cov ft corp found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  found=$(find "$artifacts/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  verdict=ok
  if [ $rc -ne 0 ] || [ -n "$found" ]; then
    verdict=FAILED
    {
      grep -E 'ERROR: |SUMMARY: |runtime error|property violated|deadly signal|terminate called|what\(\)' "$log" | head -20 || true
      echo "$t: FAILED (libFuzzer exit $rc); input(s):"
      for f in $found; do echo "  $f"; done
      [ -n "$found" ] || tail -n 40 "$log"
    } >>"$out"
  fi
  printf '%-18s %-6s execs %-9s exec/s %-6s cov %-6s ft %-7s corpus %-12s peak RSS %s MB' \
    "$t" "$verdict" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" >"$work/$t.line"
  [ "$verdict" = ok ]
}

# libFuzzer runs one process on one core: the targets run side by side, one per core (KVF_FUZZ_JOBS to
# change), each for the full SECONDS, so a 2-core CI fuzzes five targets in three rounds instead of five
# (CI time). Executions per target stay the same only where those cores have nothing else to do: on a shared
# machine, KVF_FUZZ_JOBS=1 gives each target the cores it can get.
njobs=${KVF_FUZZ_JOBS:-$(nproc)}
[[ "$njobs" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: KVF_FUZZ_JOBS must be a whole number > 0, got '$njobs'" >&2; exit 2; }
echo "fuzzing ${#targets[@]} targets, ${secs}s each, $njobs at a time"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait || true
status=0
summary=()
for t in "${targets[@]}"; do
  cat "$work/$t.out" 2>/dev/null || true
  line=$(cat "$work/$t.line" 2>/dev/null || printf '%-18s %-6s (the runner stopped before its summary)' "$t" FAILED)
  [[ "$line" =~ ^[^\ ]+\ +ok\  ]] || status=1
  echo "$line"
  summary+=("$line")
done
echo
echo "kvf fuzz summary (${secs}s per target; cov = edges covered, ft = features):"
printf '  %s\n' "${summary[@]}"
exit $status
