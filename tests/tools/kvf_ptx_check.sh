#!/usr/bin/env bash
# Static checks of one CUDA source for one architecture, without a GPU:
#   - it compiles (device code, ptxas) for the architecture;
#   - --no-spills:        ptxas -v reports no non-zero "spill stores" / "spill loads" in any function;
#   - --require-v4-loads: the PTX holds at least one 16-byte global load (ld.global ... .v4.<32-bit>,
#                         .v2.<64-bit>, or wider .v8) -- proof the vector path was not scalarized.
# Prints each kernel's registers, stack and spills (demangled when c++filt exists).
#
# usage: kvf_ptx_check.sh [--nvcc PATH] [--ccbin PATH] --arch sm_90 [--std 20] [--no-spills]
#                         [--require-v4-loads] [-I DIR]... [-D NAME[=VALUE]]... [--keep DIR] SOURCE.cu
# exit: 0 pass, 1 a check failed or the compile failed, 2 bad usage.
# Called by kvf_add_ptx_check() (cmake/KvfPtxChecks.cmake); also fine by hand from the repo root:
#   tests/tools/kvf_ptx_check.sh --arch sm_90 --no-spills --require-v4-loads \
#       -I harness/include -I kernels/stream -D KVF_HAVE_CUDA=1 kernels/stream/stream_gpu.cu
set -u -o pipefail

nvcc="${NVCC:-}"
ccbin=""
arch=""
std="20"
no_spills=0
require_v4=0
keep=""
src=""
flags=()

die_usage() { echo "kvf_ptx_check: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --nvcc) nvcc="${2:?}"; shift 2 ;;
    --ccbin) ccbin="${2:-}"; shift 2 ;;
    --arch) arch="${2:?}"; shift 2 ;;
    --std) std="${2:?}"; shift 2 ;;
    --no-spills) no_spills=1; shift ;;
    --require-v4-loads) require_v4=1; shift ;;
    --keep) keep="${2:?}"; shift 2 ;;
    -I) flags+=("-I${2:?}"); shift 2 ;;
    -I*) flags+=("$1"); shift ;;
    -D) flags+=("-D${2:?}"); shift 2 ;;
    -D*) flags+=("$1"); shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) die_usage "unknown option '$1'" ;;
    *) [ -z "$src" ] || die_usage "one source only (got '$src' and '$1')"; src="$1"; shift ;;
  esac
done

[ -n "$src" ] || die_usage "no source given"
[ -f "$src" ] || die_usage "source '$src' does not exist"
[[ "$arch" =~ ^sm_[0-9]+[af]?$ ]] || die_usage "--arch '$arch': expected sm_<NN>, e.g. sm_90"
if [ -z "$nvcc" ]; then
  if command -v nvcc >/dev/null 2>&1; then nvcc="$(command -v nvcc)"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc
  else die_usage "nvcc not found (pass --nvcc or set NVCC)"; fi
fi
[ -n "$ccbin" ] && flags+=("-ccbin" "$ccbin")

if [ -n "$keep" ]; then mkdir -p "$keep"; work="$keep"; else
  work="$(mktemp -d "${TMPDIR:-/tmp}/kvf_ptx_check.XXXXXX")" || exit 1
  trap 'rm -rf "$work"' EXIT
fi
demangle() { if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi; }

name="$(basename "$src" .cu)"
log="$work/$name.$arch.ptxas.log"
status=0

# 1. Device compile with ptxas statistics (no host object needed: -cubin). With --require-v4-loads it keeps
# its intermediate files: the PTX it hands to ptxas (for compute_XX, the virtual arch of sm_XX) is the one step 2
# reads, so the front end runs once, not twice (CI time).
keep=()
if [ "$require_v4" = 1 ]; then
  mkdir -p "$work/keep"
  keep=(--keep --keep-dir "$work/keep")
fi
if ! "$nvcc" -std=c++"$std" -arch="$arch" -cubin -Xptxas -v "${keep[@]}" "${flags[@]}" -o "$work/$name.$arch.cubin" "$src" >"$log" 2>&1; then
  echo "FAIL $src [$arch]: compile failed"
  demangle <"$log"
  exit 1
fi

# Table of functions: name, registers, stack, spill stores, spill loads.
# ptxas prints, per function: "Compiling entry function 'X' for 'sm_90'" (kernels only), then
# "Function properties for X" / "N bytes stack frame, S bytes spill stores, L bytes spill loads" /
# "Used R registers ...".
table="$(awk '
  /Function properties for / { sub(/.*Function properties for /, ""); fn=$0; next }
  /bytes stack frame/ {
    match($0, /[0-9]+ bytes stack frame/); stack=substr($0, RSTART, RLENGTH); sub(/ .*/, "", stack)
    match($0, /[0-9]+ bytes spill stores/); ss=substr($0, RSTART, RLENGTH); sub(/ .*/, "", ss)
    match($0, /[0-9]+ bytes spill loads/);  sl=substr($0, RSTART, RLENGTH); sub(/ .*/, "", sl)
    st[fn]=stack; sps[fn]=ss; spl[fn]=sl; order[++n]=fn; next
  }
  /Used [0-9]+ registers/ {
    match($0, /Used [0-9]+ registers/); r=substr($0, RSTART+5, RLENGTH-15); regs[fn]=r; next
  }
  END {
    for (i = 1; i <= n; ++i) { f = order[i]; printf "%s\t%s\t%s\t%s\t%s\n", (f in regs ? regs[f] : "-"), st[f], sps[f], spl[f], f }
  }' "$log")"

if [ -z "$table" ]; then
  echo "FAIL $src [$arch]: ptxas printed no function statistics (was -Xptxas -v honoured?)"
  cat "$log"
  exit 1
fi

echo "$src [$arch]: regs stack spill_st spill_ld function"
printf '%s\n' "$table" | demangle | awk -F'\t' '{ printf "  %4s %5s %8s %8s  %s\n", $1, $2, $3, $4, $5 }'

if [ "$no_spills" = 1 ]; then
  spilled="$(printf '%s\n' "$table" | awk -F'\t' '$3 != 0 || $4 != 0' | demangle)"
  if [ -n "$spilled" ]; then
    echo "FAIL $src [$arch]: register spills (regs stack spill_st spill_ld function):"
    printf '%s\n' "$spilled" | sed 's/^/  /'
    status=1
  else
    echo "ok   $src [$arch]: no spills"
  fi
fi

# 2. The vector-load check, on the PTX step 1 kept.
if [ "$require_v4" = 1 ]; then
  ptx="$work/keep/$name.ptx"
  if [ ! -s "$ptx" ]; then
    echo "FAIL $src [$arch]: nvcc --keep left no $name.ptx in $work/keep"
    ls -la "$work/keep"
    exit 1
  fi
  # ld.global[.nc][.L1::...][.L2::...]...(.v4.<b32|u32|s32|f32> | .v2.<b64|u64|s64|f64> | .v8.*)
  re='^[[:space:]]*(@!?%p[0-9]+[[:space:]]+)?ld\.global(\.[A-Za-z0-9_:]+)*\.(v4\.[bsuf]32|v2\.[bsuf]64|v8\.[bsuf](16|32)|v4\.[bsuf]64)[[:space:]]'
  count="$(grep -Ec "$re" "$ptx" || true)"
  if [ "${count:-0}" -gt 0 ]; then
    echo "ok   $src [$arch]: $count 16-byte (or wider) global loads in the PTX"
    grep -E "$re" "$ptx" | awk '{ print ($1 ~ /^@/ ? $2 : $1) }' | sort | uniq -c | sort -rn
  else
    echo "FAIL $src [$arch]: no 16-byte global load (ld.global*.v4.{b,u,s,f}32 or .v2.{b,u,s,f}64) in the PTX"
    echo "  global loads present:"
    grep -E '^[[:space:]]*(@!?%p[0-9]+[[:space:]]+)?ld\.global' "$ptx" | awk '{ print ($1 ~ /^@/ ? $2 : $1) }' | sort | uniq -c | sort -rn
    status=1
  fi
fi

exit "$status"
