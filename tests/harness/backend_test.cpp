#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"

using namespace kvf;

TEST(BackendSelection, CpuOnRequest) {
  std::string note;
  auto be = make_backend("cpu", &note);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(note, "backend: cpu (requested)");
}

TEST(BackendSelection, UnknownBackendIsUsageError) {
  try {
    make_backend("tpu");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("allowed: auto, cpu, cuda"), std::string::npos);
  }
}

TEST(BackendSelection, AutoAndCudaFollowTheProbe) {
  const CudaProbe p = probe_cuda();
  std::string note;
  auto be = make_backend("auto", &note);
  if (p.usable) {
    EXPECT_EQ(be->name(), "cuda");
    EXPECT_NO_THROW(make_backend("cuda"));
  } else {
    // The no-GPU path (this machine and CI): auto falls back and says why; cuda refuses with the CUDA text.
    EXPECT_FALSE(p.error.empty());
    EXPECT_EQ(be->name(), "cpu");
    EXPECT_NE(note.find("no usable GPU"), std::string::npos) << note;
    EXPECT_NE(note.find(p.error), std::string::npos) << note;
    try {
      make_backend("cuda");
      FAIL() << "cuda without a GPU must be a usage error";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(p.error), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--backend cpu"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuBackend, DescribesTheMachine) {
  auto be = make_cpu_backend();
  const DeviceInfo& i = be->info();
  EXPECT_EQ(i.backend, "cpu");
  EXPECT_GT(i.compute_units, 0);
  EXPECT_GT(i.memory_bytes, 0u);
  EXPECT_GE(be->flush_bytes(), 2 * i.llc_bytes);
  EXPECT_FALSE(i.to_json().dump().empty());
}

TEST(CpuBackend, FillCopyAndTime) {
  auto be = make_cpu_backend();
  const std::size_t n = (3u << 20) + 5;  // not a multiple of 8: the tail gets its word's low bytes
  BufferHandle a(*be, n, MemKind::device), b(*be, n, MemKind::pinned_host, {.huge_pages = false});
  be->fill(a.get(), 42);
  const auto* w = a->as<const std::uint64_t>();
  EXPECT_EQ(w[0], pattern_word(42, 0));
  EXPECT_EQ(w[n / 8 - 1], pattern_word(42, n / 8 - 1));
  const std::uint64_t last = pattern_word(42, n / 8);
  EXPECT_EQ(std::memcmp(a->as<char>() + n / 8 * 8, &last, n % 8), 0);
  be->copy(b.get(), a.get(), n);
  EXPECT_EQ(std::memcmp(a->ptr, b->ptr, n), 0);
  EXPECT_THROW(be->copy(b.get(), a.get(), n + 1), UsageError);
  int calls = 0;
  const Sample s = be->time_region([&] { ++calls; }, {.reps = 4});
  EXPECT_EQ(calls, 4);
  EXPECT_GE(s.seconds, 0);
  be->flush_caches();
}

// NUMA facts from sysfs, and binding host memory to a node (node 0 exists on every Linux machine).
TEST(Numa, NodeListsCount) {
  EXPECT_EQ(kvf::count_node_list("0"), 1);
  EXPECT_EQ(kvf::count_node_list("0-1"), 2);
  EXPECT_EQ(kvf::count_node_list("0-1,3\n"), 3);
  EXPECT_EQ(kvf::count_node_list("0,2-5"), 5);
  EXPECT_EQ(kvf::count_node_list(""), 0);
  EXPECT_EQ(kvf::count_node_list("x"), 0);
  EXPECT_EQ(kvf::count_node_list("3-1"), 0);
  EXPECT_GE(kvf::numa_nodes_online(), 1);
  EXPECT_EQ(kvf::pci_numa_node(""), -1);
  EXPECT_EQ(kvf::pci_numa_node("ffff:ff:ff.7"), -1);
}

TEST(Numa, BindPlacesPagesOnTheNode) {
  const std::size_t bytes = std::size_t(8) << 20;
  void* p = kvf::host_alloc(bytes, false);
  std::string why;
  if (!kvf::bind_to_node(p, bytes, 0, &why)) {
    kvf::host_free(p, bytes);
    GTEST_SKIP() << "mbind refused here: " << why;
  }
  EXPECT_EQ(kvf::node_of_address(p), 0);
  EXPECT_EQ(kvf::node_of_address(static_cast<char*>(p) + bytes - 1), 0);
  EXPECT_FALSE(kvf::bind_to_node(p, bytes, -1, &why));
  EXPECT_NE(why.find("out of range"), std::string::npos);
  kvf::host_free(p, bytes);
}
