#!/usr/bin/env bash
# bad_flag.sh NEEDLE [--absent PATH]... -- CMD...
# Passes when a bad command line is refused as the user contract says: exit 2, exactly one line on stderr,
# that line holds NEEDLE (the flag and the value as typed), nothing on stdout, and nothing was written (each PATH,
# e.g. the --out directory, does not exist afterwards).
# In NEEDLE, PATH and CMD: @TMP@ is a fresh directory holding fifo (a FIFO), dir/ (empty), file (empty),
# res/counters.csv (a FIFO); @EMPTY@ alone is an empty argument (CMake drops empty list items); @NL@ is a
# line break.
set -u
needle=$1; shift
absent=()
while [ "${1:-}" = "--absent" ]; do absent+=("$2"); shift 2; done
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"; mkdir "$tmp/dir" "$tmp/res"; : >"$tmp/file"; mkfifo "$tmp/res/counters.csv"
expand() {
  local a=${1//@TMP@/$tmp}
  a=${a//@NL@/$'\n'}
  [ "$a" = "@EMPTY@" ] && a=""
  printf '%s' "$a"
}
needle=$(expand "$needle")
args=()
for a in "$@"; do args+=("$(expand "$a")"); done
for i in "${!absent[@]}"; do absent[$i]=$(expand "${absent[$i]}"); rm -rf "${absent[$i]}"; done

# A bad flag must be refused before anything runs; the timeout turns an accepted one into a failure, not a hang.
timeout 60 "${args[@]}" >"$tmp/stdout" 2>"$tmp/stderr" </dev/null
got=$?
cp "$tmp/stderr" "$tmp/lines"
n=$(wc -l <"$tmp/lines")
fail() { echo "FAIL: $1"; echo "command: ${args[*]}"; echo "stderr:"; head -c 2000 "$tmp/stderr"; exit 1; }
[ "$got" = 2 ] || fail "exit $got, expected 2"
[ "$n" = 1 ] || fail "$n lines on stderr, expected exactly 1"
grep -qF -- "$needle" "$tmp/lines" || fail "the line does not hold '$needle'"
for p in "${absent[@]}"; do [ ! -e "$p" ] || fail "$p was written"; done
# Refused before any work: nothing on stdout either (kvf residency once printed a whole replay, then refused --out).
[ ! -s "$tmp/stdout" ] || fail "it wrote to stdout before refusing: $(head -c 300 "$tmp/stdout")"
exit 0
