// Bad input reaches the user as one line and exit code 2, through the real bench binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {
struct Result {
  int code = -1;
  std::string err;
};
Result run(const std::string& args) {
  const std::string cmd = std::string(KVF_BENCH_FRONTIER) + " --backend cpu --list " + args + " 2>&1 >/dev/null";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) r.err += buf.data();
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}
int error_lines(const std::string& s) {
  int n = 0;
  for (std::size_t at = 0; (at = s.find("error:", at)) != std::string::npos; ++at) ++n;
  return n;
}
}  // namespace

TEST(FrontierBenchCli, UnknownModel) {
  const auto r = run("--models NoSuchModel");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--models NoSuchModel: unknown model"), std::string::npos) << r.err;
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
}
TEST(FrontierBenchCli, TokensOutOfRangeOrNotAMultipleOf16) {
  for (const char* t : {"8", "5000", "100"}) {
    const auto r = run(std::string("--tokens ") + t);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(std::string("--tokens ") + t + ":"), std::string::npos) << r.err;
  }
}
TEST(FrontierBenchCli, PagesOutOfRange) {
  for (const char* p : {"0", "65"}) {
    const auto r = run(std::string("--pages ") + p);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(std::string("--pages ") + p + ":"), std::string::npos) << r.err;
  }
}
TEST(FrontierBenchCli, LayersBeyondTheModel) {
  const auto r = run("--models Llama-3.1-8B --layers 33");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--layers 33: Llama-3.1-8B has 32 layers"), std::string::npos) << r.err;
}
TEST(FrontierBenchCli, PrefixBeyondMemory) {
  // Within --prefix's range (1M tokens), beyond any host's memory for 80 layers of fp32 K/V.
  const auto r = run("--models Llama-3.1-70B --layers 80 --prefix 1000000");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--prefix 1000000: the fp32 prefix K/V"), std::string::npos) << r.err;
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
}
TEST(FrontierBenchCli, PrefixBeyondRange) {
  const auto r = run("--prefix 100000000");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--prefix 100000000: prefix must be a whole number of tokens in 0..1048576"), std::string::npos)
      << r.err;
}
TEST(FrontierBenchCli, FileDirNotWritable) {
  for (const char* d : {"/nonexistent/kvf", "/proc"}) {
    const auto r = run(std::string("--file-dir ") + d);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(std::string("--file-dir ") + d + ":"), std::string::npos) << r.err;
    EXPECT_EQ(error_lines(r.err), 1) << r.err;
  }
}
TEST(FrontierBenchCli, UnknownArmAndMissingModelsFile) {
  auto r = run("--arms teleport");
  EXPECT_EQ(r.code, 2) << r.err;
  r = run("--models-file /nonexistent.json");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--models-file /nonexistent.json"), std::string::npos) << r.err;
}
TEST(FrontierBenchCli, ListsTheDefaultAndQuickSets) {
  auto r = run("");
  EXPECT_EQ(r.code, 0) << r.err;
  r = run("--quick");
  EXPECT_EQ(r.code, 0) << r.err;
}
