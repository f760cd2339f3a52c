// test_access_portable is registered twice (tests/access/CMakeLists.txt): portable.* capped at AVX2, and
// portable_dispatch.* uncapped, for the AVX-512 paths a portable build dispatches to. On a CPU without AVX-512
// the uncapped run takes exactly the paths of the capped one, so under KVF_SKIP_WITHOUT_AVX512=1 (set on that
// registration only) it skips instead of repeating them: half a minute of CI on the AVX2 machines.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "kvf/cpu_isa.hpp"

namespace {

class SkipWithoutAvx512 : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* v = std::getenv("KVF_SKIP_WITHOUT_AVX512");
    if (v != nullptr && std::strcmp(v, "1") == 0 && !kvf::cpu_avx512())
      GTEST_SKIP() << "no AVX-512 on this CPU: the dispatched paths are the AVX2 ones, checked by portable.*";
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SkipWithoutAvx512);

}  // namespace
