#!/usr/bin/env bash
# isa_audit.sh BINARY...: passes when every function of each binary that holds an AVX-512 instruction (zmm,
# xmm/ymm 16-31, mask registers, AVX-512-only mnemonics) is one of the run-time dispatched AVX-512 kernels
# (kvf/cpu_isa.hpp). Run on a build whose -march has no AVX-512 (x86-64-v3): anything else holding one would be
# executed unconditionally and die with an illegal instruction on a CPU without it.
set -euo pipefail
allowed='item_avx512_impl|gather_runs_avx512|gather_pairs_avx512|xor_words_prefetch_avx512|chains_avx512'
bad=0
for bin in "$@"; do
  found=$(objdump -d --no-show-raw-insn "$bin" |
    awk '/^[0-9a-f]+ <.*>:$/ {fn = $2} /%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])|%k[0-7]|vdpbf16|vpternlog|vscalef|vrndscale|vpermt2|vpermi2/ {print fn}' |
    sort -u | c++filt)
  [ -n "$found" ] || { echo "isa_audit: $bin holds no AVX-512 code at all (the dispatched kernels are missing)"; bad=1; }
  stray=$(grep -Ev "$allowed" <<<"$found" || true)
  if [ -n "$stray" ]; then
    echo "isa_audit: $bin: AVX-512 outside the dispatched kernels:"; echo "$stray" | cut -c1-160; bad=1
  fi
done
exit $bad
