// The fp32 FMA peak of this CPU (fma_peak_cpu.cpp), its own library: the access study states CPU attention rows
// against it (their arithmetic floor) and the frontier study its CPU GEMM ceiling (how near the hardware it is).
#pragma once
#include <cstdint>
#include <string>

namespace kvf::access {

// The fp32 FMA peak of this CPU at the vector width the attention twin dispatches (fma_peak_cpu.cpp): what a
// row's flops would take with every FMA pipe busy, the arithmetic floor beside the read ceiling.
struct FmaChains {
  const char* isa;  // e.g. "avx2 ymm fp32 fma"
  int lanes;        // fp32 lanes per vector
  int chains;       // independent chains per thread
  int kernel;       // which loop runs them (fma_peak_cpu.cpp)
};
// The chains cpu_fma_peak runs on this CPU and build; the generic ones (16-byte vectors), which run anywhere.
FmaChains fma_chains_for_this_cpu();
FmaChains fma_chains_generic();
// One thread's chains of f run `iters` steps; returns the sum of their final lanes. std::invalid_argument where
// f's kernel is not in this build or this CPU.
double run_fma_chains(const FmaChains& f, std::uint64_t iters);
// The same sum computed lane by lane in scalar code, each step fused (std::fma) or rounded twice (the generic
// loop's a * x + b where the baseline has no FMA and the compiler does not contract).
double fma_chains_ref(const FmaChains& f, std::uint64_t iters, bool fused);
struct FmaPeak {
  std::string isa;
  int threads = 0;
  double flops_per_s = 0;  // 2 per lane per FMA, all threads, best of the repeats
  double checksum = 0;     // the chains' sums, so the work is not optimized away
};
// `threads` threads (OpenMP) for about `seconds` per repeat, best of `repeats`; std::invalid_argument unless all
// three are positive.
FmaPeak cpu_fma_peak(int threads, double seconds = 0.02, int repeats = 5);

}  // namespace kvf::access
