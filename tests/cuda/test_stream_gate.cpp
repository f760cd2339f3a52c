// kvf::StreamGate: work queued behind close() on one stream waits for open() on another, on the device;
// a gate never opened gives up after its timeout and says so. Skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kvf/stream_gate.hpp"

namespace {
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
}  // namespace
TEST(StreamGate, HoldsAQueueUntilOpenedFromAnotherStream) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  int* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, sizeof(int)), cudaSuccess);
  {
    kvf::StreamGate gate(10.0);
    gate.warm(a);
    gate.warm(b);
    for (int round = 1; round <= 2; ++round) {  // tickets advance: a second close waits for a second open
      gate.close(a);
      unsigned char v = 0;
      ASSERT_EQ(cudaMemsetAsync(x, 0, sizeof(int), a), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(x, 0x11 * round, 1, a), cudaSuccess);  // behind the gate
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_EQ(cudaStreamQuery(a), cudaErrorNotReady) << "round " << round << ": the gate did not hold";
      gate.open(b);
      ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(&v, x, 1, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(v, 0x11 * round);
      EXPECT_FALSE(gate.timed_out());
    }
  }
  {
    kvf::StreamGate gate(0.05);  // never opened: gives up after 50 ms and says so
    gate.warm(a);
    gate.close(a);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT_TRUE(gate.timed_out());
  }
  (void)cudaFree(x);
  (void)cudaStreamDestroy(a);
  (void)cudaStreamDestroy(b);
}
