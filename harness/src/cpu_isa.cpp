#include "kvf/cpu_isa.hpp"

#include <cstdlib>
#include <string_view>

#include "kvf/errors.hpp"

namespace kvf {

namespace {

bool capped() {
  const char* v = std::getenv(kCpuIsaEnv);
  const std::string_view s = v ? v : "";
  if (s.empty() || s == "auto") return false;
  if (s == "avx2") return true;
  throw UsageError(std::string(kCpuIsaEnv) + " " + shown_value(s) + ": allowed auto (or unset), avx2");
}

bool detect_avx512() {
#if KVF_AVX512_DISPATCH || (defined(__AVX512F__) && defined(__AVX512BW__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool detect_avx512_bf16() {
#if KVF_AVX512_DISPATCH || defined(__AVX512BF16__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace

// Read once: kernels ask per call. A bad KVF_CPU_ISA throws on every call (the static is not initialized), on a CPU
// without AVX-512 too (the cap is read first: it had been read only where there was something to cap).
bool cpu_avx512() {
  static const bool use = !capped() && detect_avx512();
  return use;
}

bool cpu_avx512_bf16() {
  static const bool use = detect_avx512_bf16() && cpu_avx512();
  return use;
}

std::string dispatch_isa() {
  if (cpu_avx512()) return "avx512";
  const std::string base = compiled_isa();
  return base == "avx512" ? "avx2" : base;  // capped: the AVX2 (-march baseline) paths
}

std::string compiled_isa() {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__aarch64__)
  return "neon";
#else
  return "generic";
#endif
}

std::string avx512_paths() {
#if KVF_AVX512_DISPATCH || (defined(__AVX512F__) && defined(__AVX512BW__))
  return "compiled";
#elif defined(KVF_NATIVE_WITHOUT_AVX512)
  return "not compiled: native build, no AVX-512 here";  // KVF_AVX512_PATHS=ON or the portable preset has them
#elif defined(__x86_64__)
  return "not compiled: no #pragma GCC target, -march without AVX-512";
#else
  return "not compiled: not x86-64";
#endif
}

}  // namespace kvf
