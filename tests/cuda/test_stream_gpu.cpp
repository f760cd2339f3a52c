// GPU stream kernels against host references (skip without a usable GPU).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <algorithm>
#include <cstring>
#include <memory>

#include "cuda_backend_impl.hpp"
#include "kvf/backend.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/pattern.hpp"
#include "stream.hpp"
#include "stream_gpu.hpp"

namespace {

class StreamGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    probe_ = kvf::probe_cuda_impl();
    if (probe_.usable) be_ = kvf::make_cuda_backend(0);
  }
  static void TearDownTestSuite() { be_.reset(); }
  void SetUp() override {
    if (!probe_.usable) GTEST_SKIP() << "no usable GPU: " << probe_.error;
  }
  static kvf::Backend& be() { return *be_; }
  static cudaStream_t s() { return kvf::cuda_stream(*be_); }

  static unsigned long long read_checksum(const void* src, std::size_t bytes) {
    kvf::BufferHandle cs(be(), 8, kvf::MemKind::device);
    KVF_CUDA_CHECK(cudaMemsetAsync(cs->ptr, 0, 8, s()));
    kvf::stream::gpu_read(src, bytes, cs->as<unsigned long long>(), s());
    unsigned long long out = 0;
    KVF_CUDA_CHECK(cudaMemcpyAsync(&out, cs->ptr, 8, cudaMemcpyDeviceToHost, s()));
    KVF_CUDA_CHECK(cudaStreamSynchronize(s()));
    return out;
  }
  static bool words_match_pattern(const kvf::Buffer& b, std::size_t bytes, std::uint64_t seed) {
    kvf::BufferHandle h(be(), bytes, kvf::MemKind::pageable_host);
    be().copy(h.get(), b, bytes);
    const auto* w = h->as<const std::uint64_t>();
    for (std::size_t i = 0; i < bytes / 8; ++i)
      if (w[i] != kvf::pattern_word(seed, i)) {
        ADD_FAILURE() << "word " << i << " of " << bytes / 8;
        return false;
      }
    return true;
  }

  static inline kvf::CudaProbe probe_;
  static inline std::unique_ptr<kvf::Backend> be_;
};

// Sizes below, at and past one grid-stride step and one unrolled step, and a large one.
constexpr std::size_t kSizes[] = {16, 48, 4096, (1u << 20) + 16 * 7, (std::size_t{64} << 20) + 16,
                                  std::size_t{512} << 20};

TEST_F(StreamGpu, ReadChecksumEqualsTheHostXor) {
  for (const std::size_t bytes : kSizes) {
    kvf::BufferHandle b(be(), bytes, kvf::MemKind::device);
    be().fill(b.get(), 11);
    EXPECT_EQ(read_checksum(b->ptr, bytes), kvf::stream::read_checksum_ref(11, bytes)) << "bytes=" << bytes;
  }
}

TEST_F(StreamGpu, WriteProducesThePattern) {
  for (const std::size_t bytes : kSizes) {
    kvf::BufferHandle b(be(), bytes, kvf::MemKind::device);
    be().fill(b.get(), 1);
    kvf::stream::gpu_write(b->ptr, bytes, 77, s());
    be().synchronize();
    EXPECT_TRUE(words_match_pattern(b.get(), bytes, 77)) << "bytes=" << bytes;
  }
}

TEST_F(StreamGpu, CopyIsExact) {
  for (const std::size_t bytes : kSizes) {
    kvf::BufferHandle src(be(), bytes, kvf::MemKind::device), dst(be(), bytes, kvf::MemKind::device);
    be().fill(src.get(), 5);
    be().fill(dst.get(), 6);
    kvf::stream::gpu_copy(dst->ptr, src->ptr, bytes, s());
    be().synchronize();
    EXPECT_TRUE(words_match_pattern(dst.get(), bytes, 5)) << "bytes=" << bytes;
  }
}

// Not a benchmark: a floor that catches a kernel far from the HBM ceiling (scalar loads, too few
// bytes in flight). The ceiling is bus width x memory clock x 2 (DDR) from the device attributes.
TEST_F(StreamGpu, ReadAndCopyRunNearTheMemoryCeiling) {
  const auto& x = be().info().extra;
  if (!x.contains("memory_clock_mhz") || !x.contains("memory_bus_width_bits")) GTEST_SKIP() << "no memory clock";
  const double peak = x["memory_clock_mhz"].get<double>() * 1e6 * 2 * x["memory_bus_width_bits"].get<int>() / 8;
  const std::size_t bytes = std::size_t{1} << 30;
  kvf::BufferHandle a(be(), bytes, kvf::MemKind::device), b(be(), bytes, kvf::MemKind::device),
      cs(be(), 8, kvf::MemKind::device);
  be().fill(a.get(), 1);
  auto best = [&](const std::function<void()>& f) {
    double t = 1e9;
    for (int i = 0; i < 5; ++i) {
      be().flush_caches();
      t = std::min(t, be().time_region(f, {}).seconds);
    }
    return t;
  };
  const double tr = best([&] { kvf::stream::gpu_read(a->ptr, bytes, cs->as<unsigned long long>(), s()); });
  const double tw = best([&] { kvf::stream::gpu_write(b->ptr, bytes, 2, s()); });
  const double tc = best([&] { kvf::stream::gpu_copy(b->ptr, a->ptr, bytes, s()); });
  std::printf("  peak %.0f GB/s: read %.0f, write %.0f, copy %.0f GB/s (copy counts read + write)\n", peak / 1e9,
              bytes / tr / 1e9, bytes / tw / 1e9, 2 * bytes / tc / 1e9);
  EXPECT_GT(bytes / tr, 0.6 * peak);
  EXPECT_GT(bytes / tw, 0.5 * peak);
  EXPECT_GT(2 * bytes / tc, 0.5 * peak);
}

}  // namespace
