// Names typed by the user against data-file entries (kvf/names.hpp): case-blind canonical names and aliases,
// an alias two entries share refused with both, unknown names listing the known ones, conflicting files refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/names.hpp"

namespace {

const std::vector<kvf::NamedEntry> kGpus = {
    {"H100 SXM", {"NVIDIA H100 80GB HBM3", "H100"}},
    {"H100 PCIe", {"NVIDIA H100 PCIe", "H100"}},
    {"H200", {"NVIDIA H200"}},
};

std::string message(const std::string& given) {
  try {
    kvf::resolve_name(kGpus, given, "--gpu", "GPU");
  } catch (const kvf::UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Names, CanonicalAndAliasesCaseBlind) {
  EXPECT_EQ(kvf::resolve_name(kGpus, "H100 SXM", "--gpu", "GPU"), 0u);
  EXPECT_EQ(kvf::resolve_name(kGpus, "h100 sxm", "--gpu", "GPU"), 0u);
  EXPECT_EQ(kvf::resolve_name(kGpus, "nvidia h100 pcie", "--gpu", "GPU"), 1u);
  EXPECT_EQ(kvf::resolve_name(kGpus, "NVIDIA H200", "--gpu", "GPU"), 2u);
}

TEST(Names, SharedAliasIsRefusedWithTheCandidates) {
  EXPECT_EQ(message("h100"), "--gpu h100: ambiguous GPU alias, names 2: H100 SXM, H100 PCIe (give one of them)");
}

TEST(Names, UnknownListsTheKnownOnesOnOneLine) {
  const std::string m = message("V100\nx");
  EXPECT_EQ(m, "--gpu V100?x: unknown GPU; known: H100 SXM, H100 PCIe, H200 (case-blind; aliases in the data file)");
  EXPECT_EQ(message(""), "--gpu '': unknown GPU; known: H100 SXM, H100 PCIe, H200 (case-blind; aliases in the data file)");
}

TEST(Names, ConflictsInAFile) {
  EXPECT_EQ(kvf::name_conflict(kGpus), "");
  EXPECT_EQ(kvf::name_conflict({{"A", {}}, {"a", {}}}), "'a' and 'A' are one name (case-blind)");
  EXPECT_EQ(kvf::name_conflict({{"A", {"b"}}, {"B", {}}}), "alias 'b' of 'A' is the name of 'B'");
  EXPECT_EQ(kvf::name_conflict({{"A", {""}}}), "'A' has an empty alias");
  // An entry may list its own name (any case) among its aliases.
  EXPECT_EQ(kvf::name_conflict({{"A", {"a"}}}), "");
}

}  // namespace
