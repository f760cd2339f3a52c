#!/usr/bin/env bash
# git_sha.sh SOURCE_DIR KVF_BINARY
# The commit a build claims (kvf --version, every meta.json) is the checkout's HEAD at build time, not at configure
# time: (1) the built kvf names the source tree's HEAD (with or without -dirty: tracked files may change after the
# build); (2) cmake/KvfGitSha.cmake in a scratch repository: a new commit changes the file, an unchanged one leaves
# it untouched (nothing relinks), an edited tracked file adds -dirty, no repository gives "unknown".
set -eu
src=$1 kvf=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
got=$("$kvf" --version)
if head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null); then
  [[ $got == *"($head)" || $got == *"($head-dirty)" ]] || fail "kvf --version says '$got'; HEAD is $head"
else
  [[ $got == *"(unknown)" ]] || fail "kvf --version says '$got' outside a git checkout"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'sha=@KVF_GIT_SHA@ version=@PROJECT_VERSION@\n' >"$tmp/in"
gen() {
  cmake -DKVF_SOURCE_DIR="$1" -DPROJECT_VERSION=9.8.7 -DKVF_VERSION_IN="$tmp/in" -DKVF_VERSION_OUT="$tmp/out" \
    -P "$src/cmake/KvfGitSha.cmake"
}
mkdir "$tmp/repo" "$tmp/plain"
g() { git -C "$tmp/repo" -c user.name=t -c user.email=t@t -c commit.gpgsign=false "$@"; }
g init -q
echo a >"$tmp/repo/f"
g add f && g commit -qm one
gen "$tmp/repo"
one=$(g rev-parse --short=12 HEAD)
[ "$(cat "$tmp/out")" = "sha=$one version=9.8.7" ] || fail "after the first commit: $(cat "$tmp/out")"
touch -d '2000-01-01' "$tmp/out"
gen "$tmp/repo"
[ "$(stat -c %Y "$tmp/out")" = "$(date -d '2000-01-01' +%s)" ] || fail "an unchanged commit rewrote the file"
g commit -q --allow-empty -m two
gen "$tmp/repo"
two=$(g rev-parse --short=12 HEAD)
[ "$one" != "$two" ] && [ "$(cat "$tmp/out")" = "sha=$two version=9.8.7" ] ||
  fail "after a new commit: $(cat "$tmp/out")"
echo untracked >"$tmp/repo/g"
gen "$tmp/repo"
[ "$(cat "$tmp/out")" = "sha=$two version=9.8.7" ] || fail "an untracked file made it dirty: $(cat "$tmp/out")"
echo b >"$tmp/repo/f"
gen "$tmp/repo"
[ "$(cat "$tmp/out")" = "sha=$two-dirty version=9.8.7" ] || fail "an edited tracked file: $(cat "$tmp/out")"
GIT_CEILING_DIRECTORIES=$tmp gen "$tmp/plain"
[ "$(cat "$tmp/out")" = "sha=unknown version=9.8.7" ] || fail "no repository: $(cat "$tmp/out")"
echo "ok: kvf names $got; the script follows commits, edits and no repository"
