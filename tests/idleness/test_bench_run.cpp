// A real CPU run of bench_idleness on a tiny model: cases verified, counters.csv rows (source cpu_model) joined to
// the decode cases, and the co-run arm's figures in the notes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kvf/csv.hpp"
#include "kvf/table.hpp"

namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
int run_bench(const std::filesystem::path& out, const std::string& args) {
  const std::string cmd = std::string(KVF_BENCH_IDLENESS) + " --backend cpu --models-file " KVF_IDLENESS_TEST_DIR
                          "/tiny_models.json --models Tiny-GQA " + args + " --budget 0.05 --min-samples 2 --warmup 1"
                          " --out " + out.string() + " >/dev/null 2>" + (out.parent_path() / "run.err").string();
  std::filesystem::create_directories(out.parent_path());
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

// The CPU twins compute in fp32: their idle compute, ridge and bound batch, and the prefill row's pct_of_ceiling,
// are stated against the OpenBLAS fp32 GEMM row, not a faster bf16 one (oneDNN's AMX matmul on such a host; here a
// planted row), which the note names beside.
TEST(IdlenessBench, CpuTwinsAreStatedAgainstTheFp32Gemm) {
  const std::filesystem::path out = std::filesystem::path(KVF_IDLENESS_TMP) / "fp32_ceiling";
  std::filesystem::remove_all(out);
  const std::string args = "--arms decode,prefill --batches 1 --contexts 1024 --layers 1 --prefill-tokens 16";
  ASSERT_EQ(run_bench(out, args), 0) << slurp(out.parent_path() / "run.err");
  kvf::CsvTable t = kvf::read_csv_table((out / "cases.csv").string());
  std::vector<std::string> fp32;
  for (const auto& row : t.rows)
    if (row[*t.column("case")] == "gemm_ceiling/2048" && row[*t.column("gemm_lib")] == "openblas_fp32") fp32 = row;
  ASSERT_FALSE(fp32.empty()) << "no OpenBLAS fp32 gemm_ceiling/2048 row";
  const double fp32_tflops = std::stod(fp32[*t.column("tflops")]);
  auto planted = fp32;
  planted[*t.column("case")] = "gemm_ceiling/2048/onednn_bf16";
  planted[*t.column("gemm_lib")] = "onednn_bf16";
  planted[*t.column("tflops")] = "1000";
  std::ofstream(out / "cases.csv", std::ios::app) << kvf::csv_line(planted);
  const std::size_t first = t.rows.size() + 1;  // the second run's rows
  // A directory takes one run of a study: the first run's entry leaves meta.json, its rows stay as the ceilings
  // the second run finds (as a stream study's do).
  auto meta = nlohmann::json::parse(slurp(out / "meta.json"));
  meta["studies"].erase("idleness");
  std::ofstream(out / "meta.json") << meta.dump(2);

  ASSERT_EQ(run_bench(out, args), 0) << slurp(out.parent_path() / "run.err");
  t = kvf::read_csv_table((out / "cases.csv").string());
  // The fp32 peak either run measured (the second run's twins may take the first's row: same directory). Not the
  // first run's alone: on a loaded machine the two runs' GEMM rates differ by 2x.
  double best_fp32 = fp32_tflops;
  for (const auto& row : t.rows)
    if (row[*t.column("gemm_lib")] == "openblas_fp32" && !row[*t.column("tflops")].empty())
      best_fp32 = std::max(best_fp32, std::stod(row[*t.column("tflops")]));
  int decode = 0, prefill = 0;
  for (std::size_t r = first; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    const std::string name = row[*t.column("case")], note = row[*t.column("note")];
    if (name.rfind("prefill/", 0) == 0) {
      ++prefill;
      EXPECT_EQ(row[*t.column("ceiling")], "idleness:arm=gemm_ceiling:gemm_lib=openblas_fp32:tflops");
      EXPECT_LE(std::stod(row[*t.column("ceiling_value")]), 1.001 * best_fp32) << note;
    }
    if (name.rfind("decode/", 0) == 0 || name.rfind("prefill/", 0) == 0) {
      decode += name[0] == 'd';
      EXPECT_NE(note.find("(fp32; the best GEMM row, oneDNN bf16, gives 1e+06 GFLOP/s)"), std::string::npos) << note;
      const auto at = note.find("gemm_ceiling_gflops=");
      ASSERT_NE(at, std::string::npos) << note;
      EXPECT_LE(std::stod(note.substr(at + 20)), 1.001e3 * best_fp32) << note;
    }
  }
  EXPECT_EQ(decode, 2);  // cold and hot
  EXPECT_EQ(prefill, 1);
}

TEST(IdlenessBench, CpuRunWritesCountersCsv) {
  const std::filesystem::path out = std::filesystem::path(KVF_IDLENESS_TMP) / "run";
  std::filesystem::remove_all(out);
  const std::string cmd = std::string(KVF_BENCH_IDLENESS) + " --backend cpu --models-file " KVF_IDLENESS_TEST_DIR
                          "/tiny_models.json --models Tiny-GQA --batches 1,4 --contexts 1024 --layers 2"
                          " --prefill-tokens 32 --budget 0.05 --min-samples 2 --warmup 1 --out " +
                          out.string() + " >/dev/null 2>" + (out.parent_path() / "run.err").string();
  std::filesystem::create_directories(out.parent_path());
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0) << slurp(out.parent_path() / "run.err");
  const std::string cases = slurp(out / "cases.csv");
  EXPECT_NE(cases.find("decode/Tiny-GQA/B4/C1K/L2,cpu,"), std::string::npos) << cases;
  EXPECT_NE(cases.find("cpu_idle_compute_pct="), std::string::npos);
  EXPECT_NE(cases.find("background recompute pages_per_s="), std::string::npos);
  // The co-run's copy and file backgrounds ran beside their steps (their notes say how much, and that they
  // overlapped: no "co-run INVALID").
  for (const char* bg : {"bg_copy", "bg_file"})
    EXPECT_NE(cases.find(std::string("corun/Tiny-GQA/B16/C4K/L2/") + bg + ",cpu,"), std::string::npos) << bg;
  EXPECT_NE(cases.find("512 KiB page copies between two 128 MiB DRAM pools (memcpy, one thread): units_per_s="),
            std::string::npos);
  EXPECT_NE(cases.find("512 KiB O_DIRECT reads of a 64 MiB tier file (one thread): units_per_s="), std::string::npos);
  EXPECT_EQ(cases.find("co-run INVALID"), std::string::npos) << cases;
  // Each co-run row is stated against decode alone of its own step, not any "none" row of the directory.
  EXPECT_NE(cases.find(",idleness:arm=corun:model=Tiny-GQA:batch=16:context=4096:layers=2:background=none:gbps,"),
            std::string::npos);
  EXPECT_EQ(cases.find(",idleness:arm=corun:background=none:gbps,"), std::string::npos);
  // Nothing skipped, but the oneDNN bf16 ceiling on a host whose oneDNN has no bf16 matmul (AVX2 only).
  for (std::size_t at = cases.find("skipped:"); at != std::string::npos; at = cases.find("skipped:", at + 1))
    EXPECT_EQ(cases.compare(at, 52, "skipped: this oneDNN has no bf16 matmul for this CPU"), 0)
        << cases.substr(at, 120);
  EXPECT_EQ(cases.find(",no,"), std::string::npos) << "a verify failed";
  const std::string counters = slurp(out / "counters.csv");
  EXPECT_EQ(counters.rfind("study,case,source,capture,range_index,range,t_start_ns,t_end_ns,chip,metric,value,unit\n", 0), 0u);
  for (const char* c : {"decode/Tiny-GQA/B1/C1K/L2", "decode/Tiny-GQA/B4/C1K/L2", "prefill/Tiny-GQA/T32/N1K/L2"}) {
    EXPECT_NE(counters.find(std::string("idleness,") + c + ",cpu_model,cpu_model,1,hot,,,"), std::string::npos) << c;
  }
  EXPECT_NE(counters.find(",kvf:idle_compute_pct,"), std::string::npos);
  EXPECT_NE(counters.find(",kvf:mem_use_pct,"), std::string::npos);
  EXPECT_NE(counters.find(",kvf:bound_batch,"), std::string::npos);
}
