// Which instruction set the host kernels run. Their AVX-512 code is compiled whatever the baseline -march
// (native, or x86-64-v3 in the `portable` preset) inside `#pragma GCC target` regions and chosen at run time
// from cpuid, so one portable binary uses AVX-512 where the CPU has it and never executes it where it does not
// (a login node's binary on its compute nodes). Clang does not implement `#pragma GCC target`: a Clang build
// compiles the AVX-512 paths only when its -march has them.
#pragma once
#include <string>

// 1: the AVX-512 regions are compiled whatever -march says. Inside a region test
// `KVF_AVX512_DISPATCH || defined(__AVX512F__)`, never __AVX512F__ alone: GCC's C++ front end evaluates #if
// before the pragma takes effect, so the pragma does not define the ISA macros there.
// KVF_NATIVE_WITHOUT_AVX512 (CMake, KVF_AVX512_PATHS=AUTO): a -march=native build on a CPU without AVX-512,
// which could never run them, leaves them out.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KVF_NATIVE_WITHOUT_AVX512)
#define KVF_AVX512_DISPATCH 1
#else
#define KVF_AVX512_DISPATCH 0
#endif

namespace kvf {

// The environment variable that caps the dispatch: KVF_CPU_ISA=avx2 runs the non-AVX-512 paths on an AVX-512
// CPU (to compare the two, or to measure what a CPU without it would); unset, empty or "auto": the best the
// CPU has. Any other value is a UsageError naming it.
inline constexpr const char* kCpuIsaEnv = "KVF_CPU_ISA";

// AVX-512 F, BW, VL and DQ usable here (cpuid and OS register state), the AVX-512 paths compiled into this
// binary, and not capped by KVF_CPU_ISA.
bool cpu_avx512();
// cpu_avx512() and AVX512_BF16 (vdpbf16ps).
bool cpu_avx512_bf16();
// "avx512" when cpu_avx512(), else the baseline's: "avx2", "neon" or "generic".
std::string dispatch_isa();
// The ISA the binary was compiled for (its -march baseline): "avx512", "avx2", "neon" or "generic".
std::string compiled_isa();
// Whether the AVX-512 paths are in this binary: "compiled", or "not compiled: " and why (meta.json
// device.extra.avx512_paths, beside compiled_isa and dispatch_isa).
std::string avx512_paths();

}  // namespace kvf
