// The stream ceiling on the CPU: read, write and copy over buffers larger than the LLC, all cores (the read
// written with 32-byte vectors, the write and copy plain loops the compiler vectorizes), plus the two
// baselines the ceiling is judged against (one thread with the same loop, and glibc memcpy).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvf::stream {

// XOR of every 64-bit word (the tail past a multiple of 8 bytes is ignored). All threads.
std::uint64_t cpu_read(const void* src, std::size_t bytes);
// Explicit 512-bit (or 256-bit) loads with software prefetch `kPrefetchBytes` ahead, all threads: the
// study keeps every variant and the read ceiling is the best of them on each machine.
std::uint64_t cpu_read_prefetch(const void* src, std::size_t bytes);
inline constexpr std::size_t kPrefetchBytes = 2048;
// The read loop over two sequential streams per thread (the halves of its chunk in turn), all threads: some
// cores read two streams faster than one; the read ceiling takes the best of the three kernels.
std::uint64_t cpu_read_two_streams(const void* src, std::size_t bytes);
// The all-thread read kernels under one name each, the one list the stream study's `read` cases
// (read/<name>/...) and the idleness read ceiling (read_ceiling/<name>/...) run: which one reads fastest moves
// with the core, so every one is measured and the read ceiling is the best of them.
struct CpuReadKernel {
  const char* name;
  std::uint64_t (*read)(const void* src, std::size_t bytes);
  const char* doc;
};
inline constexpr CpuReadKernel kCpuReadKernels[] = {
    {"loop", &cpu_read, "32-byte vectors, four accumulators"},
    {"prefetch", &cpu_read_prefetch, "explicit vectors with a software prefetch 2 KiB ahead"},
    {"two_streams", &cpu_read_two_streams, "the loop over the two halves of each thread's chunk in turn"}};
// The kernel of that name; kvf::UsageError naming the allowed ones otherwise.
const CpuReadKernel& cpu_read_kernel(std::string_view name);
// "loop, prefetch, two_streams" (for axis docs and messages).
std::string cpu_read_kernel_names();
// The same loop on the calling thread only.
std::uint64_t cpu_read_1thread(const void* src, std::size_t bytes);
// word i = seed ^ i, all threads.
void cpu_write(void* dst, std::size_t bytes, std::uint64_t seed);
// dst = src, all threads, plain word loop.
void cpu_copy(void* dst, const void* src, std::size_t bytes);
// glibc memcpy: one call on the calling thread, or one call per thread on contiguous chunks.
void cpu_memcpy_1thread(void* dst, const void* src, std::size_t bytes);
void cpu_memcpy_threads(void* dst, const void* src, std::size_t bytes);

// References, written independently of the kernels above.
std::uint64_t read_checksum_ref(std::uint64_t seed, std::size_t bytes);  // xor of pattern_word(seed, i)
bool write_matches(const void* dst, std::size_t bytes, std::uint64_t seed);  // word i == seed ^ i
bool pattern_matches(const void* p, std::size_t bytes, std::uint64_t seed);  // word i == pattern_word(seed, i)

}  // namespace kvf::stream
