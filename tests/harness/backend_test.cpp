#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"
#include "kvf/thread_placement.hpp"

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
  EXPECT_EQ(be->flush_bytes(), past_llc_bytes(i.llc_bytes, 2, std::size_t{64} << 20, kFlushCapBytes));
  // llc_bytes is every L3 domain's cache (one per CCD on a Zen part): the flush must pass through each of them.
  EXPECT_EQ(i.llc_bytes, i.extra.at("llc_domain_bytes").get<std::uint64_t>() * i.extra.at("llc_domains").get<int>());
  EXPECT_EQ(i.extra.at("llc_domains").get<int>(), std::max(1, cpu_domains().l3_domains));
  EXPECT_FALSE(i.to_json().dump().empty());
}

TEST(PastLlcBytes, MultipleOfTheLlcBetweenFloorAndCap) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  EXPECT_EQ(past_llc_bytes(0, 2, 64 * MiB, kFlushCapBytes), 64 * MiB);            // LLC unknown: the floor
  EXPECT_EQ(past_llc_bytes(32 * MiB, 2, 64 * MiB, kFlushCapBytes), 64 * MiB);
  EXPECT_EQ(past_llc_bytes(100 * MiB, 2, 64 * MiB, kFlushCapBytes), 200 * MiB);   // the 2x rule
  EXPECT_EQ(past_llc_bytes(480 * MiB, 2, 64 * MiB, kFlushCapBytes), 512 * MiB);   // a VM reporting a socket's L3
  EXPECT_EQ(past_llc_bytes(480 * MiB, 4, 128 * MiB, kPoolCapBytes), 1024 * MiB);
  EXPECT_EQ(past_llc_bytes(1 * MiB, 1, 2048 * MiB, kPoolCapBytes), 2048 * MiB);   // a floor above the cap wins
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

// smaps counts a whole mapping: an array smaller than the huge page it sits in was reported 209.7% huge-backed.
TEST(HugePages, AShareOfAnArrayNeverPassesAllOfIt) {
  for (const std::size_t bytes : {std::size_t{1000000}, std::size_t{3} << 20, std::size_t{4} << 20}) {
    bool advised = false;
    auto* p = static_cast<unsigned char*>(kvf::host_alloc(bytes, true, &advised));
    std::memset(p, 1, bytes);
    const auto pct = kvf::huge_backed_pct(p, bytes);
    ASSERT_TRUE(pct.has_value());
    EXPECT_GE(*pct, 0) << bytes;
    EXPECT_LE(*pct, 100) << bytes;
    // Two arrays side by side: each its own share, not the pair's.
    auto* q = static_cast<unsigned char*>(kvf::host_alloc(bytes, true, &advised));
    std::memset(q, 1, bytes);
    EXPECT_LE(*kvf::huge_backed_pct(q, bytes), 100) << bytes;
    kvf::host_free(q, bytes);
    kvf::host_free(p, bytes);
  }
}

namespace {
std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}
}  // namespace

TEST(PlanBackend, DescribesTheDeviceOfAMetaJsonAndRunsNothing) {
  const auto path = write_temp("plan_meta.json",
                               R"({"device": {"backend": "cuda", "name": "NVIDIA H100 80GB HBM3", "arch": "sm_90",
                                  "compute_units": 132, "memory_bytes": 85017493504, "llc_bytes": 52428800}})");
  auto be = make_plan_backend(path);
  EXPECT_EQ(be->name(), "cuda");
  EXPECT_EQ(be->info().name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(be->info().compute_units, 132);
  EXPECT_EQ(be->info().memory_bytes, 85017493504ull);
  EXPECT_EQ(compute_capability(be->info()), 90);
  EXPECT_THROW(be->alloc(64, MemKind::device), std::logic_error);
  EXPECT_THROW(be->synchronize(), std::logic_error);
}

TEST(PlanBackend, ABareDeviceObjectToo) {
  auto be = make_plan_backend(write_temp("plan_device.json", R"({"backend": "cpu", "name": "AMD EPYC", "llc_bytes": 33554432})"));
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->info().llc_bytes, 33554432u);
  EXPECT_EQ(compute_capability(be->info()), 0);
}

TEST(PlanBackend, BadFilesAreUsageErrorsNamingTheKey) {
  auto message = [](const std::string& text) {
    try {
      make_plan_backend(write_temp("plan_bad.json", text));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"backend": "tpu"})").find("'tpu' is not cpu or cuda"), std::string::npos);
  EXPECT_NE(message(R"({"device": {"backend": "cuda", "memory_bytes": -1}})").find("device.memory_bytes"), std::string::npos);
  EXPECT_NE(message(R"({"device": 3})").find("'device'"), std::string::npos);
  EXPECT_NE(message(R"([1, 2])").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(message("{").find("--plan-device"), std::string::npos);
  EXPECT_THROW(make_plan_backend(::testing::TempDir() + "no_such_plan.json"), UsageError);
}

TEST(ComputeCapability, FromTheArchText) {
  DeviceInfo d;
  for (const auto& [arch, cc] : std::vector<std::pair<std::string, int>>{
           {"sm_80", 80}, {"sm_90", 90}, {"sm_100", 100}, {"sm_", 0}, {"sm_9x", 0}, {"x86_64 avx512", 0}, {"", 0}}) {
    d.arch = arch;
    EXPECT_EQ(compute_capability(d), cc) << arch;
  }
}
