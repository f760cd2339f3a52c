#!/usr/bin/env bash
# expect_exit.sh CODE [--stderr-has TEXT] -- CMD...: passes when CMD exits with CODE (and stderr has TEXT).
set -u
want=$1; shift
needle=""
if [ "${1:-}" = "--stderr-has" ]; then needle=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
got=$?
msg=$(cat "$err"); rm -f "$err"
if [ "$got" != "$want" ]; then
  echo "expected exit $want, got $got from: $*"; echo "$msg" | tail -5; exit 1
fi
if [ -n "$needle" ] && ! grep -qF -- "$needle" <<<"$msg"; then
  echo "stderr lacks '$needle': $msg"; exit 1
fi
exit 0
