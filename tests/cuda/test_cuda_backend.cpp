// The CUDA backend. Tests named *NoGpu* (and the checks of arguments) run everywhere, a machine
// without a driver included; the rest skip unless probe_cuda_impl() finds a usable GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_backend_impl.hpp"
#include "kvf/backend.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/pattern.hpp"
#include "stream.hpp"
#include "stream_gpu.hpp"

namespace {

const kvf::CudaProbe& probe() {
  static const kvf::CudaProbe p = kvf::probe_cuda_impl();
  return p;
}

// Byte j of a buffer filled with pattern `seed`: byte j % 8 of word j / 8 (little-endian).
unsigned char expected_byte(std::uint64_t seed, std::size_t j) {
  return static_cast<unsigned char>(kvf::pattern_word(seed, j / 8) >> (8 * (j % 8)));
}

// Index of the first byte that differs from the pattern, or -1.
long long first_mismatch(const void* p, std::size_t bytes, std::uint64_t seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t j = 0; j < bytes; ++j)
    if (b[j] != expected_byte(seed, j)) return static_cast<long long>(j);
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Without a GPU
// ---------------------------------------------------------------------------------------------

TEST(CudaProbeNoGpu, NeverThrowsAndExplainsItself) {
  kvf::CudaProbe p;
  ASSERT_NO_THROW(p = kvf::probe_cuda_impl());
  EXPECT_TRUE(p.compiled);
  std::printf("  usable=%d error='%s'\n", p.usable, p.error.c_str());
  if (!p.usable) {
    EXPECT_FALSE(p.error.empty());
    // CUDA's own text, e.g. "cudaErrorInsufficientDriver: CUDA driver version is insufficient ..."
    EXPECT_NE(p.error.find("cuda"), std::string::npos) << p.error;
  } else {
    EXPECT_TRUE(p.error.empty()) << p.error;
  }
  // A second probe says the same (no state left broken by the first).
  const kvf::CudaProbe q = kvf::probe_cuda_impl();
  EXPECT_EQ(q.usable, p.usable);
  EXPECT_EQ(q.error, p.error);
}

TEST(CudaProbeNoGpu, ModuleLoadingIsEagerUnlessTheUserChose) {
  (void)probe();
  const char* ml = std::getenv("CUDA_MODULE_LOADING");
  ASSERT_NE(ml, nullptr);
  EXPECT_FALSE(std::string(ml).empty());
}

TEST(CudaBackendNoGpu, MakeWithoutGpuIsAUsageError) {
  if (probe().usable) GTEST_SKIP() << "a GPU is present";
  try {
    (void)kvf::make_cuda_backend(0);
    FAIL() << "make_cuda_backend(0) returned without a GPU";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

TEST(CudaBackendNoGpu, BadOrdinalIsAUsageError) {
  EXPECT_THROW((void)kvf::make_cuda_backend(4096), kvf::UsageError);
  EXPECT_THROW((void)kvf::make_cuda_backend(-1), kvf::UsageError);
}

TEST(CudaCheckNoGpu, ThrowsWithCallTextAndErrorName) {
  EXPECT_NO_THROW(kvf::cuda_check(cudaSuccess, "nothing"));
  try {
    kvf::cuda_check(cudaErrorInvalidValue, "cudaMemcpy(dst, src, n)");
    FAIL() << "cuda_check did not throw";
  } catch (const std::runtime_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("cudaMemcpy(dst, src, n)"), std::string::npos) << w;
    EXPECT_NE(w.find("cudaErrorInvalidValue"), std::string::npos) << w;
  }
  EXPECT_THROW(KVF_CUDA_CHECK(cudaErrorMemoryAllocation), std::runtime_error);
}

TEST(CudaBackendNoGpu, CudaAccessorsRejectTheCpuBackend) {
  auto cpu = kvf::make_cpu_backend();
  EXPECT_THROW((void)kvf::cuda_stream(*cpu), kvf::UsageError);
  EXPECT_THROW((void)kvf::cuda_props(*cpu), kvf::UsageError);
}

TEST(StreamGpuNoGpu, RejectsSizesAndPointersBeforeTouchingCuda) {
  alignas(16) static unsigned char buf[64];
  unsigned long long cs = 0;
  EXPECT_THROW(kvf::stream::gpu_read(buf, 17, &cs, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_read(buf + 8, 32, &cs, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_read(buf, 32, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_read(nullptr, 32, &cs, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_write(buf, 8, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_write(buf + 4, 16, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_copy(buf, buf + 32, 24, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_copy(buf + 1, buf + 32, 16, nullptr), std::invalid_argument);
  EXPECT_THROW(kvf::stream::gpu_copy(buf, buf + 33, 16, nullptr), std::invalid_argument);
  // Zero bytes: nothing to do, no CUDA call, no error.
  EXPECT_NO_THROW(kvf::stream::gpu_read(buf, 0, &cs, nullptr));
  EXPECT_NO_THROW(kvf::stream::gpu_write(buf, 0, 1, nullptr));
  EXPECT_NO_THROW(kvf::stream::gpu_copy(buf, buf + 32, 0, nullptr));
}

// ---------------------------------------------------------------------------------------------
// With a GPU
// ---------------------------------------------------------------------------------------------

class CudaGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (probe().usable) be_ = kvf::make_cuda_backend(0);
  }
  static void TearDownTestSuite() { be_.reset(); }
  void SetUp() override {
    if (!probe().usable) GTEST_SKIP() << "no usable GPU: " << probe().error;
  }
  static kvf::Backend& be() { return *be_; }
  static cudaStream_t stream() { return kvf::cuda_stream(*be_); }

  // Copies any buffer to a fresh pageable host buffer and returns it.
  static kvf::BufferHandle to_host(const kvf::Buffer& b, std::size_t bytes) {
    kvf::BufferHandle h(be(), bytes, kvf::MemKind::pageable_host);
    be().copy(h.get(), b, bytes);
    return h;
  }
  static unsigned long long gpu_checksum(const void* src, std::size_t bytes) {
    kvf::BufferHandle cs(be(), sizeof(unsigned long long), kvf::MemKind::device);
    KVF_CUDA_CHECK(cudaMemsetAsync(cs->ptr, 0, sizeof(unsigned long long), stream()));
    kvf::stream::gpu_read(src, bytes, cs->as<unsigned long long>(), stream());
    unsigned long long out = 0;
    KVF_CUDA_CHECK(cudaMemcpyAsync(&out, cs->ptr, sizeof out, cudaMemcpyDeviceToHost, stream()));
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return out;
  }

  static inline std::unique_ptr<kvf::Backend> be_;
};

TEST_F(CudaGpu, InfoDescribesTheDevice) {
  const kvf::DeviceInfo& d = be().info();
  EXPECT_EQ(be().name(), "cuda");
  EXPECT_EQ(d.backend, "cuda");
  EXPECT_FALSE(d.name.empty());
  EXPECT_TRUE(std::regex_match(d.arch, std::regex("sm_[0-9]+"))) << d.arch;
  EXPECT_GT(d.compute_units, 0);
  EXPECT_GT(d.memory_bytes, 0u);
  EXPECT_GT(d.llc_bytes, 0u);
  EXPECT_GT(d.max_clock_mhz, 100.0);
  EXPECT_FALSE(d.runtime_version.empty());
  EXPECT_FALSE(d.driver_version.empty());
  EXPECT_TRUE(d.extra.contains("ecc"));
  EXPECT_TRUE(d.extra.contains("memory_bus_width_bits"));
  EXPECT_TRUE(d.extra.contains("compute_mode"));
  EXPECT_EQ(kvf::cuda_props(be()).multiProcessorCount, d.compute_units);
  std::printf("  %s %s, %d SMs, L2 %llu B, max clock %.0f MHz, clock %.0f MHz, PCIe '%s', driver %s\n",
              d.name.c_str(), d.arch.c_str(), d.compute_units, static_cast<unsigned long long>(d.llc_bytes),
              d.max_clock_mhz, d.clock_mhz, d.pcie_link.c_str(), d.driver_version.c_str());
}

TEST_F(CudaGpu, AllocRejectsZeroAndHugeSizes) {
  EXPECT_THROW((void)be().alloc(0, kvf::MemKind::device), kvf::UsageError);
  EXPECT_THROW((void)be().alloc(std::size_t{1} << 60, kvf::MemKind::device), kvf::UsageError);
  // The failed allocation left no error behind.
  kvf::BufferHandle ok(be(), 4096, kvf::MemKind::device);
  EXPECT_NE(ok->ptr, nullptr);
}

TEST_F(CudaGpu, FillWritesThePatternInEveryKind) {
  for (const auto kind : {kvf::MemKind::device, kvf::MemKind::pinned_host, kvf::MemKind::pageable_host}) {
    for (const std::size_t bytes : {std::size_t{8}, std::size_t{13}, std::size_t{4096 + 5}, (std::size_t{64} << 20) + 3}) {
      kvf::BufferHandle b(be(), bytes, kind);
      be().fill(b.get(), 42 + bytes);
      kvf::BufferHandle h = to_host(b.get(), bytes);
      EXPECT_EQ(first_mismatch(h->ptr, bytes, 42 + bytes), -1)
          << kvf::to_string(kind) << " bytes=" << bytes;
    }
  }
}

TEST_F(CudaGpu, FillOfAnUnalignedDeviceViewMatchesThePatternFromItsStart) {
  kvf::BufferHandle b(be(), 1024, kvf::MemKind::device);
  kvf::Buffer view = b.get();
  view.ptr = static_cast<char*>(view.ptr) + 3;
  view.bytes = 1000;
  be().fill(view, 7);
  kvf::BufferHandle h = to_host(view, view.bytes);
  EXPECT_EQ(first_mismatch(h->ptr, view.bytes, 7), -1);
}

TEST_F(CudaGpu, CopyBetweenEveryPairOfKinds) {
  const std::size_t bytes = (std::size_t{8} << 20) + 24;
  const kvf::MemKind kinds[] = {kvf::MemKind::device, kvf::MemKind::pinned_host, kvf::MemKind::pageable_host};
  for (const auto sk : kinds) {
    for (const auto dk : kinds) {
      kvf::BufferHandle src(be(), bytes, sk), dst(be(), bytes, dk);
      be().fill(src.get(), 1);
      be().fill(dst.get(), 2);
      be().copy(dst.get(), src.get(), bytes);
      kvf::BufferHandle h = to_host(dst.get(), bytes);
      EXPECT_EQ(first_mismatch(h->ptr, bytes, 1), -1) << kvf::to_string(sk) << " -> " << kvf::to_string(dk);
    }
  }
  kvf::BufferHandle a(be(), 64, kvf::MemKind::device), b(be(), 32, kvf::MemKind::device);
  EXPECT_THROW(be().copy(b.get(), a.get(), 64), kvf::UsageError);
}

TEST_F(CudaGpu, MappedPinnedMemoryHasADeviceAlias) {
  const std::size_t bytes = std::size_t{16} << 20;
  kvf::AllocOptions o;
  o.mapped = true;
  kvf::BufferHandle b(be(), bytes, kvf::MemKind::pinned_host, o);
  ASSERT_NE(b->device_alias, nullptr);
  be().fill(b.get(), 9);
  unsigned long long cs = 0;
  {
    kvf::BufferHandle dcs(be(), 8, kvf::MemKind::device);
    KVF_CUDA_CHECK(cudaMemsetAsync(dcs->ptr, 0, 8, stream()));
    kvf::stream::gpu_read_mapped(b->device_alias, bytes, dcs->as<unsigned long long>(), stream());
    KVF_CUDA_CHECK(cudaMemcpyAsync(&cs, dcs->ptr, 8, cudaMemcpyDeviceToHost, stream()));
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  EXPECT_EQ(cs, kvf::stream::read_checksum_ref(9, bytes));
}

TEST_F(CudaGpu, TimeRegionHidesLaunchAndReadsTheClock) {
  const std::size_t bytes = std::size_t{256} << 20;
  kvf::BufferHandle b(be(), bytes, kvf::MemKind::device);
  auto region = [&] { kvf::stream::gpu_write(b->ptr, bytes, 3, stream()); };
  region();  // loads nothing new later; warms the allocation
  be().synchronize();
  for (const bool hide : {true, false}) {
    for (const int reps : {1, 5}) {
      kvf::TimeOptions o;
      o.hide_launch = hide;
      o.reps = reps;
      const kvf::Sample s = be().time_region(region, o);
      EXPECT_GT(s.seconds, 0.0);
      EXPECT_LT(s.seconds, 1.0);
      ASSERT_FALSE(std::isnan(s.clock_mhz));
      EXPECT_GT(s.clock_mhz, 100.0);
      EXPECT_LT(s.clock_mhz, 1.2 * be().info().max_clock_mhz + 100.0);
      std::printf("  hide_launch=%d reps=%d: %.1f us per rep, %.0f GB/s, SM clock %.0f MHz\n", hide, reps,
                  s.seconds * 1e6, bytes / s.seconds / 1e9, s.clock_mhz);
    }
  }
}

TEST_F(CudaGpu, DeadlockBehindTheBlockingKernelIsAnErrorNotAHang) {
  kvf::TimeOptions o;
  o.hide_launch = true;
  o.deadlock_timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Synchronizing the stream inside the region waits for the blocking kernel, which waits for the
    // host: the classic deadlock.
    (void)be().time_region([&] { KVF_CUDA_CHECK(cudaStreamSynchronize(stream())); }, o);
    FAIL() << "time_region returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 10.0);
  // The backend is usable afterwards.
  kvf::BufferHandle b(be(), 1 << 20, kvf::MemKind::device);
  const kvf::Sample s = be().time_region([&] { kvf::stream::gpu_write(b->ptr, 1 << 20, 1, stream()); }, {});
  EXPECT_GT(s.seconds, 0.0);
}

TEST_F(CudaGpu, ExceptionInsideTheRegionReleasesTheStream) {
  EXPECT_THROW((void)be().time_region([] { throw std::logic_error("boom"); }, {}), std::logic_error);
  kvf::BufferHandle b(be(), 1 << 20, kvf::MemKind::device);
  kvf::TimeOptions o;
  o.deadlock_timeout_s = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const kvf::Sample s = be().time_region([&] { kvf::stream::gpu_write(b->ptr, 1 << 20, 1, stream()); }, o);
  EXPECT_GT(s.seconds, 0.0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.5);
}

TEST_F(CudaGpu, FlushCoversTwiceTheL2) {
  EXPECT_GE(be().flush_bytes(), 2 * be().info().llc_bytes);
  EXPECT_NO_THROW(be().flush_caches());
  // An L2-resident read is faster hot than right after a flush.
  const std::size_t bytes = std::min<std::size_t>(be().info().llc_bytes / 4, std::size_t{8} << 20) / 16 * 16;
  kvf::BufferHandle b(be(), bytes, kvf::MemKind::device), cs(be(), 8, kvf::MemKind::device);
  be().fill(b.get(), 5);
  auto region = [&] { kvf::stream::gpu_read(b->ptr, bytes, cs->as<unsigned long long>(), stream()); };
  double hot = 1e9, cold = 1e9;
  for (int i = 0; i < 5; ++i) {
    (void)be().time_region(region, {});
    hot = std::min(hot, be().time_region(region, {}).seconds);
    be().flush_caches();
    cold = std::min(cold, be().time_region(region, {}).seconds);
  }
  std::printf("  %zu bytes: hot %.2f us, cold %.2f us\n", bytes, hot * 1e6, cold * 1e6);
  EXPECT_GT(cold, hot);
}

}  // namespace
