#!/usr/bin/env bash
# report_golden.sh KVF RESULTS_DIR GOLDEN_MD: `kvf report --no-charts` on a committed results directory gives
# exactly the committed report.md (run from the source root: the report names the directory as given).
# A deliberate change of the report regenerates the golden file: the same command with --update.
set -euo pipefail
kvf=$1 dir=$2 golden=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$kvf" report "$dir" --out "$out" --no-charts >/dev/null
if [ "${4:-}" = "--update" ]; then cp "$out/report.md" "$golden"; echo "wrote $golden"; exit 0; fi
if ! diff -u "$golden" "$out/report.md" > "$out/diff"; then
  head -60 "$out/diff"
  echo "report.md of $dir differs from $golden ($(grep -c '^[-+][^-+]' "$out/diff") lines)" >&2
  exit 1
fi
echo "report.md of $dir as in $golden"
