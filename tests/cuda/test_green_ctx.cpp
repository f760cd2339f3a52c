// kvf::GreenSplit (harness/include/kvf/green_ctx.hpp). The SM rounding and request checks run everywhere;
// *NoGpu* checks that a machine without a driver gets available() == false with a reason, not a crash; the GPU
// tests skip unless probe_cuda_impl() finds a usable GPU. On a GPU they settle what the idleness study's
// green-context cases assume: runtime launches on a partition's stream stay on that partition's SMs and use
// cudaMalloc'd memory of the primary context, events hop between the backend's stream and the partitions in
// order, and elapsed times between events of two partitions (two contexts) can be read.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cuda_backend_impl.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/green_ctx.hpp"

// test_green_ctx_kernels.cu: each launches one kernel on `s` and returns cudaGetLastError().
cudaError_t launch_smid(cudaStream_t s, unsigned* out, int blocks, unsigned long long spin_ns);
cudaError_t launch_spin_then_set(cudaStream_t s, int* flag, unsigned long long spin_ns);
cudaError_t launch_copy_flag(cudaStream_t s, const int* flag, int* out);

namespace {

const kvf::CudaProbe& probe() {
  static const kvf::CudaProbe p = kvf::probe_cuda_impl();
  return p;
}

// ------------------------------------------------------------------ pure logic
TEST(GreenCtxMath, RoundsUpToAlignmentAndMinimum) {
  const kvf::SmLimits h100{132, 8, 8};
  EXPECT_EQ(kvf::round_partition_sms(1, h100), 8);
  EXPECT_EQ(kvf::round_partition_sms(8, h100), 8);
  EXPECT_EQ(kvf::round_partition_sms(9, h100), 16);
  EXPECT_EQ(kvf::round_partition_sms(33, h100), 40);
  EXPECT_EQ(kvf::round_partition_sms(0, h100), 0);
  EXPECT_EQ(kvf::round_partition_sms(-4, h100), 0);
  const kvf::SmLimits a100{108, 4, 2};
  EXPECT_EQ(kvf::round_partition_sms(1, a100), 4);
  EXPECT_EQ(kvf::round_partition_sms(5, a100), 6);
  EXPECT_EQ(kvf::round_partition_sms(27, a100), 28);
  EXPECT_EQ(kvf::round_partition_sms(3, kvf::SmLimits{0, 8, 8}), 0);
  // A minimum that is not a multiple of the alignment is rounded up too.
  EXPECT_EQ(kvf::round_partition_sms(1, kvf::SmLimits{64, 6, 4}), 8);
}

TEST(GreenCtxMath, LargestRequestLeavesTheRestAPartition) {
  EXPECT_EQ(kvf::max_partition_request({132, 8, 8}), 120);  // 124 would round to 128, leaving 4
  EXPECT_EQ(kvf::max_partition_request({108, 4, 2}), 104);
  EXPECT_EQ(kvf::max_partition_request({16, 8, 8}), 8);
  EXPECT_EQ(kvf::max_partition_request({15, 8, 8}), 0);  // two partitions of 8 do not fit
  EXPECT_EQ(kvf::max_partition_request({8, 8, 8}), 0);
  EXPECT_EQ(kvf::max_partition_request({0, 8, 8}), 0);
}

TEST(GreenCtxMath, RequestProblemNamesValueAndRange) {
  const kvf::SmLimits h100{132, 8, 8};
  EXPECT_EQ(kvf::partition_request_problem(32, h100), "");
  EXPECT_EQ(kvf::partition_request_problem(1, h100), "");
  EXPECT_EQ(kvf::partition_request_problem(120, h100), "");
  for (int bad : {0, -1, 121, 124, 132, 1000}) {
    const std::string p = kvf::partition_request_problem(bad, h100);
    EXPECT_NE(p.find(std::to_string(bad) + " SMs: allowed 1..120 on this 132-SM device"), std::string::npos) << p;
    EXPECT_NE(p.find("multiples of 8"), std::string::npos) << p;
  }
  const std::string tiny = kvf::partition_request_problem(8, {12, 8, 8});
  EXPECT_NE(tiny.find("12-SM device cannot be split"), std::string::npos) << tiny;
}

TEST(GreenCtxMath, DefaultIsAboutAQuarter) {
  EXPECT_EQ(kvf::default_partition_sms({132, 8, 8}), 32);   // H100 SXM
  EXPECT_EQ(kvf::default_partition_sms({114, 8, 8}), 32);   // H100 PCIe: 28.5 -> 32 (nearest multiple of 8)
  EXPECT_EQ(kvf::default_partition_sms({108, 4, 2}), 28);   // A100: 27 -> 28
  EXPECT_EQ(kvf::default_partition_sms({148, 8, 8}), 40);   // B200: 37 -> 40
  EXPECT_EQ(kvf::default_partition_sms({16, 8, 8}), 8);     // the minimum, still splittable
  EXPECT_EQ(kvf::default_partition_sms({12, 8, 8}), 0);     // cannot be split
  for (const kvf::SmLimits l : {kvf::SmLimits{132, 8, 8}, {108, 4, 2}, {16, 8, 8}, {24, 8, 8}, {46, 2, 2}}) {
    const int n = kvf::default_partition_sms(l);
    EXPECT_EQ(kvf::partition_request_problem(n, l), "") << l.total;
    EXPECT_EQ(kvf::round_partition_sms(n, l), n) << l.total;  // already on the granularity
  }
}

// ------------------------------------------------------------------ without a GPU
TEST(GreenCtxNoGpu, UnavailableWithAReasonInsteadOfACrash) {
  if (probe().usable) GTEST_SKIP() << "a GPU is present";
  kvf::SmLimits l;
  std::string why;
  EXPECT_FALSE(kvf::query_sm_limits(0, l, why));
  EXPECT_FALSE(why.empty());
  std::printf("  query_sm_limits: %s\n", why.c_str());
  kvf::GreenSplit split(0, 32);
  EXPECT_FALSE(split.available());
  EXPECT_NE(split.reason().find("cuda"), std::string::npos) << split.reason();  // names the failing call
  EXPECT_EQ(split.stream(0), nullptr);
  EXPECT_EQ(split.sm_count(1), 0);
  EXPECT_THROW(split.make_event(0), std::runtime_error);
  std::printf("  GreenSplit: %s\n", split.reason().c_str());
}

// ------------------------------------------------------------------ with a GPU
// Kernels in test_green_ctx_kernels.cu, so this unit compiles as C++ with the tests' precompiled header.
std::set<unsigned> smids_on(cudaStream_t s, unsigned* dev, int blocks) {
  EXPECT_EQ(launch_smid(s, dev, blocks, 20000), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<unsigned> h(static_cast<std::size_t>(blocks));
  EXPECT_EQ(cudaMemcpy(h.data(), dev, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return {h.begin(), h.end()};
}

class GreenCtxGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!probe().usable) GTEST_SKIP() << "no usable GPU: " << probe().error;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaGetDeviceProperties(&prop_, 0), cudaSuccess);
  }
  cudaDeviceProp prop_{};
};

TEST_F(GreenCtxGpu, LimitsMatchTheDevice) {
  kvf::SmLimits l;
  std::string why;
  ASSERT_TRUE(kvf::query_sm_limits(0, l, why)) << why;
  std::printf("  %s: %d SMs, min partition %d, alignment %d\n", prop_.name, l.total, l.min_partition, l.alignment);
  EXPECT_EQ(l.total, prop_.multiProcessorCount);
  EXPECT_GE(l.min_partition, 1);
  EXPECT_GE(l.alignment, 1);
}

TEST_F(GreenCtxGpu, PartitionsKeepToTheirSmsAndShareMemory) {
  kvf::SmLimits l;
  std::string why;
  ASSERT_TRUE(kvf::query_sm_limits(0, l, why)) << why;
  const int want = kvf::default_partition_sms(l);
  ASSERT_GT(want, 0);
  kvf::GreenSplit split(0, want);
  ASSERT_TRUE(split.available()) << split.reason();
  std::printf("  asked %d SMs: partition 0 %d SMs, partition 1 %d SMs (device %d)\n", want, split.sm_count(0),
              split.sm_count(1), l.total);
  EXPECT_GE(split.sm_count(0), want);
  EXPECT_GT(split.sm_count(1), 0);
  EXPECT_LE(split.sm_count(0) + split.sm_count(1), l.total);
  unsigned* dev = nullptr;  // primary-context memory, written by kernels on the partitions' streams
  const int blocks = 8 * l.total;
  ASSERT_EQ(cudaMalloc(&dev, std::size_t(blocks) * 4), cudaSuccess);
  const auto s0 = smids_on(split.stream(0), dev, blocks);
  const auto s1 = smids_on(split.stream(1), dev, blocks);
  std::printf("  distinct SMs used: partition 0 %zu, partition 1 %zu\n", s0.size(), s1.size());
  EXPECT_LE(int(s0.size()), split.sm_count(0));
  EXPECT_LE(int(s1.size()), split.sm_count(1));
  EXPECT_GE(int(s0.size()), split.sm_count(0) / 2);  // spread over the partition, not one SM
  for (unsigned id : s0) EXPECT_EQ(s1.count(id), 0u) << "SM " << id << " in both partitions";
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(GreenCtxGpu, EventsHopBetweenTheBackendStreamAndPartitionsInOrder) {
  kvf::SmLimits l;
  std::string why;
  ASSERT_TRUE(kvf::query_sm_limits(0, l, why)) << why;
  kvf::GreenSplit split(0, kvf::default_partition_sms(l));
  ASSERT_TRUE(split.available()) << split.reason();
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t in = nullptr;
  ASSERT_EQ(cudaEventCreate(&in), cudaSuccess);
  cudaEvent_t out = split.make_event(0), a = split.make_event(0), b = split.make_event(1);
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 16), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, 16), cudaSuccess);
  // backend stream: 20 ms then flag = 1 -> partition 0 waits, copies the flag -> the backend stream waits.
  ASSERT_EQ(launch_spin_then_set(st, d, 20000000ull), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(in, st), cudaSuccess);
  split.wait(split.stream(0), in);
  split.record(a, 0);
  ASSERT_EQ(launch_copy_flag(split.stream(0), d, d + 1), cudaSuccess);
  split.record(out, 0);
  split.wait(split.stream(1), out);
  split.record(b, 1);
  split.wait(st, out);
  ASSERT_EQ(launch_copy_flag(st, d + 1, d + 2), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  int h[3] = {};
  ASSERT_EQ(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 1);
  EXPECT_EQ(h[1], 1) << "partition 0 ran before the backend stream's event";
  EXPECT_EQ(h[2], 1) << "the backend stream ran before partition 0's event";
  split.sync(b);
  float ms = -1;
  std::string err;
  // Same partition, then across partitions (two green contexts): the overlap accounting reads the latter.
  EXPECT_TRUE(split.elapsed_ms(a, out, ms, err)) << err;
  std::printf("  elapsed, same partition: %.4f ms (%s)\n", ms, err.c_str());
  EXPECT_GE(ms, 0.f);
  const bool cross = split.elapsed_ms(a, b, ms, err);
  std::printf("  elapsed, across partitions: %s %.4f ms %s\n", cross ? "ok" : "FAILED", ms, err.c_str());
  EXPECT_TRUE(cross) << err;
  // A runtime event of the primary context against a partition's event (informational).
  float ms2 = -1;
  const cudaError_t e2 = cudaEventElapsedTime(&ms2, in, a);
  std::printf("  cudaEventElapsedTime(primary event, partition event): %s %.4f ms\n", cudaGetErrorName(e2), ms2);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(in), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
}

TEST_F(GreenCtxGpu, BadSplitIsUnavailableAndSplitsComeAndGo) {
  kvf::GreenSplit bad(0, 100000);
  EXPECT_FALSE(bad.available());
  EXPECT_NE(bad.reason().find("allowed 1.."), std::string::npos) << bad.reason();
  for (int i = 0; i < 3; ++i) {
    kvf::GreenSplit s(0, 1);
    ASSERT_TRUE(s.available()) << s.reason();
    (void)s.make_event(1);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
