// bench_attention end to end on a tiny checkpoint written here (issue 19): the cost said first, the CSV files
// with one row per (layer, head, figure, parameter), figures that must hold whatever the weights (keeping every
// token keeps all the mass; the window that covers the prompt holds all of it; the oracle keeps at least what
// the block and token arms keep at the same budget), and bad input as one line with exit 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvf/attention/checkpoint.hpp"
#include "kvf/attention/forward.hpp"
#include "kvf/table.hpp"
#include "tiny_checkpoint.hpp"
#ifdef KVF_HAVE_ATTENTION_REPORT
#include "kvf/attention_report.hpp"
#endif

namespace fs = std::filesystem;
using namespace kvf::attention::test;

namespace {

struct BenchRun {
  int code = -1;
  std::string err;
};
BenchRun bench(const std::string& args) {
  const fs::path log = fresh_dir("bench_attention_log") / "stderr.txt";
  const std::string cmd = std::string(KVF_BENCH_ATTENTION) + " " + args + " 2>" + log.string() + " >/dev/null";
  const int st = std::system(cmd.c_str());
  BenchRun r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

// Rows by column name, through the suite's own reader (quoted fields, limits).
std::vector<std::map<std::string, std::string>> read_csv(const fs::path& p) {
  const kvf::CsvTable t = kvf::read_csv_table(p.string());
  std::vector<std::map<std::string, std::string>> rows;
  for (const auto& fields : t.rows) {
    std::map<std::string, std::string> r;
    for (std::size_t i = 0; i < t.header.size(); ++i) r[t.header[i]] = fields[i];
    rows.push_back(std::move(r));
  }
  return rows;
}

// A tiny model (3 layers, 4 query heads, 2 kv heads) and a 64-token prompt.
struct Fixture {
  fs::path model, tokens;
  explicit Fixture(const TinySpec& spec = {}) {
    const fs::path root = fresh_dir("bench_attention");
    model = fresh_dir("bench_attention_model");
    write_tiny_checkpoint(model, spec);
    tokens = root / "prompt.tokens.json";
    std::string ids = "[";
    for (int i = 0; i < 64; ++i) ids += (i ? "," : "") + std::to_string((i * 37 + 5) % 64);
    write_text(tokens, ids + "]");
  }
  std::string args(const fs::path& out, const std::string& queries = "4") const {
    return "--model-dir " + model.string() + " --tokens " + tokens.string() + " --out " + out.string() +
           " --queries " + queries + " --blocks 16,32 --keeps 1,0.5 --windows 0,8,64 --needle 20:4";
  }
};

TEST(BenchAttention, WritesEveryFigureAndTheyHoldTheirInvariants) {
  const Fixture fx;
  const fs::path out = fresh_dir("bench_attention_out");
  const BenchRun r = bench(fx.args(out));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("estimate:"), std::string::npos) << r.err;  // the cost is said first
  EXPECT_NE(r.err.find("figures (on the CPU, after the pass): about"), std::string::npos) << r.err;  // theirs too
  const auto meta = nlohmann::json::parse(std::ifstream(out / "meta.json"));
  EXPECT_GT(meta["estimate"]["figures_seconds"].get<double>(), 0.0);
  EXPECT_EQ(meta["context"], 64);
  EXPECT_EQ(meta["captured_layers"].size(), 3u);

  const auto ent = read_csv(out / "entropy.csv");
  EXPECT_EQ(ent.size(), 3u * 4u);  // mean-of-rows rows: layers x query heads
  for (const auto& e : ent) {
    const double n = std::stod(e.at("normalized"));
    EXPECT_GE(n, 0.0);
    EXPECT_LE(n, 1.0 + 1e-9);
  }
  EXPECT_EQ(read_csv(out / "layer_entropy.csv").size(), 3u);

  for (const auto& l : read_csv(out / "locality.csv")) {
    if (l.at("window") == "64") {
      EXPECT_NEAR(std::stod(l.at("mass")), 1.0, 1e-5) << "a window over the whole prompt";
    }
  }

  const auto sel = read_csv(out / "selection.csv");
  ASSERT_FALSE(sel.empty());
  std::map<std::string, double> by_key;
  for (const auto& s : sel) {
    const double recall = std::stod(s.at("recall"));
    if (s.at("keep") == "1") {
      EXPECT_NEAR(recall, 1.0, 1e-5) << "keeping every token keeps all the mass";
      EXPECT_NEAR(std::stod(s.at("out_error")), 0.0, 1e-5);
    }
    by_key[s.at("layer") + "/" + s.at("head") + "/" + s.at("block") + "/" + s.at("keep") + "/" + s.at("arm")] = recall;
  }
  for (const auto& [k, v] : by_key)
    if (k.size() > 7 && k.substr(k.size() - 6) == "oracle") {  // the same budget's block and token rows
      const std::string base = k.substr(0, k.size() - 6);
      EXPECT_GE(v + 1e-9, by_key.at(base + "block")) << k;
      EXPECT_GE(v + 1e-9, by_key.at(base + "token")) << k;
    }
  const auto ndl = read_csv(out / "needle.csv");
  ASSERT_FALSE(ndl.empty());
  for (const auto& n : ndl) EXPECT_LE(std::stod(n.at("kept_mass")), std::stod(n.at("mass")) + 1e-9);
}

// Where a GPU is visible: the same prompt with --backend cuda and --backend cpu on a tiny model the GPU kernels take
// (head dim 64): both write their files, meta.json says which ran, and the per-layer entropies agree within the bf16
// tolerance of the GPU pass (AttentionForwardGpu: probabilities within 0.03). Skipped elsewhere.
TEST(BenchAttention, GpuBackendAgreesWithTheCpuOne) {
  if (!kvf::attention::forward_gpu_built() || !gpu_visible()) GTEST_SKIP() << "no GPU forward here";
  TinySpec spec;
  spec.hidden = 128, spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64, spec.intermediate = 192;
  const Fixture fx(spec);
  std::map<std::string, std::vector<std::map<std::string, std::string>>> entropy;
  for (const std::string backend : {"cpu", "cuda"}) {
    const fs::path out = fresh_dir("bench_attention_" + backend);
    const BenchRun r = bench(fx.args(out) + " --backend " + backend);
    ASSERT_EQ(r.code, 0) << backend << ": " << r.err;
    const auto meta = nlohmann::json::parse(std::ifstream(out / "meta.json"));
    EXPECT_EQ(meta["backend"], backend);
    entropy[backend] = read_csv(out / "layer_entropy.csv");
  }
  ASSERT_EQ(entropy["cpu"].size(), entropy["cuda"].size());
  for (std::size_t i = 0; i < entropy["cpu"].size(); ++i)
    for (const auto& [col, v] : entropy["cpu"][i])
      if (col == "normalized") {
        EXPECT_NEAR(std::stod(entropy["cuda"][i].at(col)), std::stod(v), 0.03) << "row " << i << " " << col;
      }
}

#ifdef KVF_HAVE_ATTENTION_REPORT
// What bench_attention writes into RESULTS/attention is what the report reads (studies/attention/report): every file
// passes its checks, and claims 7 and 8 are judged on it (not "not available").
TEST(BenchAttention, TheReportReadsItsOutput) {
  namespace at = kvf::report::attention;
  const Fixture fx;
  const fs::path results = fresh_dir("bench_attention_results");
  const BenchRun r = bench(fx.args(results / "attention"));
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(at::find_runs(results), std::vector<fs::path>{results / "attention"});
  at::Run run;
  ASSERT_NO_THROW(run = at::read_run(results / "attention", results));
  EXPECT_EQ(run.context, 64);
  EXPECT_EQ(run.layers.size(), 3u);
  EXPECT_TRUE(run.read_around.empty());
  EXPECT_FALSE(run.needles.empty());
  EXPECT_EQ(at::h1_window(run), 8);  // windows 0, 8, 64 over 64 tokens
  // meta.json's boundary is the library's; the report computes it again from layer_entropy.csv
  const at::Boundary b = at::boundary(run);
  EXPECT_EQ(b.first_below, run.meta_first_below);
  EXPECT_EQ(b.largest_drop, run.meta_largest_drop);
  EXPECT_NE(at::judge_h1(&run, "", "cpu").verdict, "not available") << at::judge_h1(&run, "", "cpu").figures;
  EXPECT_NE(at::judge_h3(&run, "", "cpu").verdict, "not available") << at::judge_h3(&run, "", "cpu").figures;
  // A block size or a needle given twice is one (needle.csv held its rows twice, and the report refused the run).
  const fs::path twice = fresh_dir("bench_attention_twice");
  const BenchRun r2 = bench(fx.args(twice / "attention") + " --blocks 16 --needle 20:4");
  ASSERT_EQ(r2.code, 0) << r2.err;
  ASSERT_NO_THROW(run = at::read_run(twice / "attention", twice));
  EXPECT_TRUE(run.read_around.empty());
  EXPECT_NE(at::judge_h1(&run, "", "cpu").verdict, "not available") << at::judge_h1(&run, "", "cpu").figures;
}
#endif

// Needle decoding (--answer): the answer planted here is what the model itself decodes after the prompt with full
// attention (the library's greedy decode), so the dense row matches it exactly; at keep 1 every selection keeps
// every key, so every arm decodes the same tokens; a budget below sink + latest is left out as the figures leave it.
TEST(BenchAttention, AnswerIsDecodedDenseAndUnderEachSelection) {
  const Fixture fx;
  const fs::path out = fresh_dir("bench_attention_answer") / "attention";
  const kvf::attention::Checkpoint ck(fx.model);
  const auto prompt = kvf::attention::read_token_ids(fx.tokens, ck.config().shape.vocab);
  const auto expect = kvf::attention::greedy_decode_cpu(ck, prompt, 3, nullptr, 256);
  std::string ids, spaced;
  for (const auto t : expect) {
    ids += (ids.empty() ? "" : ",") + std::to_string(t);
    spaced += (spaced.empty() ? "" : " ") + std::to_string(t);
  }
  const fs::path answer = out.parent_path() / "answer.tokens.json";
  write_text(answer, "[" + ids + "]");
  const BenchRun r = bench(fx.args(out) + " --answer " + answer.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("needle decoding: 7 decodes"), std::string::npos) << r.err;  // said before it runs
  const auto rows = read_csv(out / "needle_decode.csv");
  // dense + block and token at (16, 1), (16, 1/2), (32, 1); (32, 1/2) is one block, below sink + latest
  ASSERT_EQ(rows.size(), 7u);
  EXPECT_EQ(rows[0].at("arm"), "dense");
  EXPECT_EQ(rows[0].at("decoded"), spaced);
  EXPECT_EQ(rows[0].at("exact_match"), "1");
  EXPECT_EQ(rows[0].at("matched_prefix"), "3");
  int full = 0;
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("answer_tokens"), "3");
    const int prefix = std::stoi(row.at("matched_prefix"));
    EXPECT_EQ(row.at("exact_match") == "1", prefix == 3) << row.at("arm") << " " << row.at("keep");
    if (row.at("arm") != "dense" && row.at("keep") == "1") {
      ++full;
      EXPECT_EQ(row.at("budget"), "64");
      EXPECT_EQ(row.at("decoded"), spaced) << row.at("arm") << " block " << row.at("block");
    }
    if (row.at("keep") == "0.5") {
      EXPECT_EQ(row.at("budget"), "32");
    }
  }
  EXPECT_EQ(full, 4);
  std::ifstream meta_in(out / "meta.json");
  const auto meta = nlohmann::json::parse(meta_in);
  EXPECT_EQ(meta.at("answer").at("tokens"), 3);
  EXPECT_FALSE(meta.at("git_sha").get<std::string>().empty());  // provenance, as every results directory has it
  EXPECT_NE(meta.at("command").get<std::string>().find("--answer"), std::string::npos);
  // The selection applies in every layer: a partial capture is refused; so is an id beyond the vocabulary.
  // (into a new directory: one that holds a run already is refused first)
  const fs::path again = out.parent_path() / "again";
  const BenchRun taken = bench(fx.args(out));
  EXPECT_EQ(taken.code, 2) << taken.err;
  EXPECT_NE(taken.err.find("holds a meta.json already"), std::string::npos) << taken.err;
  const BenchRun partial = bench(fx.args(again) + " --layers 0 --answer " + answer.string());
  EXPECT_EQ(partial.code, 2) << partial.err;
  EXPECT_NE(partial.err.find("capture every layer"), std::string::npos) << partial.err;
  write_text(answer, "[1,64]");
  // One answer token: every arm decodes it from the dense prefill, so it tests nothing (it read "7 of 7 exact").
  const fs::path one = out.parent_path() / "one.tokens.json";
  write_text(one, "[" + std::to_string(expect.front()) + "]");
  const BenchRun single = bench(fx.args(fresh_dir("bench_attention_one") / "attention") + " --answer " + one.string());
  EXPECT_EQ(single.code, 2) << single.err;
  EXPECT_NE(single.err.find("one token; the first answer token comes from the dense prefill"), std::string::npos)
      << single.err;
  const BenchRun beyond = bench(fx.args(again) + " --answer " + answer.string());
  EXPECT_EQ(beyond.code, 2) << beyond.err;
  EXPECT_EQ(std::count(beyond.err.begin(), beyond.err.end(), '\n'), 1) << beyond.err;
}

// The figures computed beside the pass (on a worker, each layer as the pass finishes it) equal those computed after
// it, file for file; meta.json says which ran.
TEST(BenchAttention, FiguresDuringThePassEqualFiguresAfterIt) {
  const Fixture fx;
  const fs::path after = fresh_dir("bench_attention_after"), beside = fresh_dir("bench_attention_beside");
  const BenchRun ra = bench(fx.args(after) + " --backend cpu --figures-during-pass off");
  ASSERT_EQ(ra.code, 0) << ra.err;
  const BenchRun rb = bench(fx.args(beside) + " --backend cpu --figures-during-pass on");
  ASSERT_EQ(rb.code, 0) << rb.err;
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* name : {"locality.csv", "entropy.csv", "layer_entropy.csv", "selection.csv", "needle.csv"}) {
    ASSERT_TRUE(fs::exists(after / name)) << name;
    ASSERT_TRUE(fs::exists(beside / name)) << name;
    EXPECT_EQ(slurp(after / name), slurp(beside / name)) << name;
  }
  const auto ma = nlohmann::json::parse(std::ifstream(after / "meta.json"));
  const auto mb = nlohmann::json::parse(std::ifstream(beside / "meta.json"));
  EXPECT_EQ(ma["figures_during_pass"], false);
  EXPECT_EQ(mb["figures_during_pass"], true);
  // The estimate line says where the figures run.
  EXPECT_NE(ra.err.find("figures (on the CPU, after the pass): about"), std::string::npos) << ra.err;
  EXPECT_NE(rb.err.find("figures (on the CPU, beside the pass: what outlasts it adds to the run): about"),
            std::string::npos)
      << rb.err;
}

TEST(BenchAttention, EstimateOnlyWritesNothing) {
  const Fixture fx;
  const fs::path out = fresh_dir("bench_attention_est") / "none";
  const BenchRun r = bench(fx.args(out) + " --estimate-only --gflops 10");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("estimate:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("figures (on the CPU, after the pass): about"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(BenchAttention, BadInputIsOneLineAndExit2) {
  const Fixture fx;
  const fs::path out = fresh_dir("bench_attention_bad");
  const struct {
    std::string extra, says;
  } cases[] = {
      {" --needle 60:10", "--needle 60:10"},
      {" --needle x", "expected POS:LEN"},
      {" --keeps 2", "--keeps 2"},
      {" --layers 3", "--layers 3"},
      {" --entropy-threshold 1", "--entropy-threshold 1"},
      {" --backend gpu", "--backend gpu: auto, cpu or cuda"},
      {" --device all", "--device all: bench_attention runs one prefill"},
      {" --device 3x", "--device 3x: allowed: cpu, all, or a GPU ordinal"},
      {" --device cpu --backend cuda", "--device cpu with --backend cuda"},
      {" --figures-during-pass maybe", "--figures-during-pass maybe: auto, on or off"},
      // found by review: a needle whose end overflowed, 0 taken as "measure", a GPU ordinal beside --backend cpu
      {" --needle 9223372036854775807:1", "--needle 9223372036854775807:1: the passage must lie inside"},
      {" --gflops 0", "--gflops 0: a rate > 0"},
      {" --device 0 --backend cpu", "--device 0 with --backend cpu"},
  };
  for (const auto& c : cases) {
    const BenchRun r = bench(fx.args(out) + c.extra);
    EXPECT_EQ(r.code, 2) << c.extra << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.extra << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.extra << ": " << r.err;
  }
  // --backend cuda where there is no GPU forward: refused before the checkpoint is read (on a GPU box it runs).
  if (!kvf::attention::forward_gpu_built() || !gpu_visible()) {
    const BenchRun r = bench(fx.args(out) + " --backend cuda");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--backend cuda: no usable GPU ("), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A sweep the figures refuse (M - 1 above the smallest block: 19 > 16) is refused before the pass.
  const BenchRun m20 = bench(fx.args(out, "20"));
  EXPECT_EQ(m20.code, 2) << m20.err;
  EXPECT_NE(m20.err.find("the figures would refuse this run after the pass: rows (M) 20 with block 16"),
            std::string::npos) << m20.err;
  EXPECT_EQ(std::count(m20.err.begin(), m20.err.end(), '\n'), 1) << "refused before anything else: " << m20.err;
  const BenchRun m0 = bench(fx.args(out, "0"));
  EXPECT_EQ(m0.code, 2) << m0.err;
  EXPECT_NE(m0.err.find("--queries 0"), std::string::npos) << m0.err;
  const BenchRun nodir = bench("--model-dir " + (out / "nothing").string() + " --tokens x --out " + out.string());
  EXPECT_EQ(nodir.code, 2) << nodir.err;
  EXPECT_NE(nodir.err.find("model directory"), std::string::npos) << nodir.err;
  const fs::path empty = fresh_dir("bench_attention_empty");
  const BenchRun noconfig = bench("--model-dir " + empty.string() + " --tokens x --out " + out.string());
  EXPECT_EQ(noconfig.code, 2) << noconfig.err;
  EXPECT_NE(noconfig.err.find("config.json"), std::string::npos) << noconfig.err;
}

// A dump as a framework's hook writes it (studies/attention/README.md): F32 tensors layers.<l>.q/.k/.v/.probs.
RawTensor f32_tensor(const std::string& name, std::vector<std::int64_t> shape, const std::vector<float>& v) {
  RawTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = std::move(shape);
  t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

// Two layers (5 and 2, out of order), 2 query heads on 1 kv head, d 16, 64 keys, the last 2 rows of a causal
// prefill: layer 5 attends uniformly to every visible key, layer 2 only to key 0.
std::vector<RawTensor> planted_dump() {
  const int H = 2, M = 2, C = 64, D = 16;
  std::vector<float> q(H * M * D, 0.1f), k(C * D, 0.2f), v(C * D);
  for (int i = 0; i < C * D; ++i) v[i] = static_cast<float>(i % 7);
  std::vector<float> uniform(H * M * C, 0.0f), onehot(H * M * C, 0.0f);
  for (int h = 0; h < H; ++h)
    for (int m = 0; m < M; ++m) {
      const int visible = C - (M - 1 - m);
      for (int t = 0; t < visible; ++t) uniform[(h * M + m) * C + t] = 1.0f / visible;
      onehot[(h * M + m) * C] = 1.0f;
    }
  std::vector<RawTensor> ts;
  for (const auto& [l, p] : {std::pair<int, std::vector<float>*>{5, &uniform}, {2, &onehot}}) {
    const std::string b = "layers." + std::to_string(l) + ".";
    ts.push_back(f32_tensor(b + "q", {H, M, D}, q));
    ts.push_back(f32_tensor(b + "k", {1, C, D}, k));
    ts.push_back(f32_tensor(b + "v", {1, C, D}, v));
    ts.push_back(f32_tensor(b + "probs", {H, M, C}, *p));
  }
  return ts;
}

TEST(BenchAttention, AUsersDumpGivesThePlantedFigures) {
  const fs::path dir = fresh_dir("bench_attention_dump");
  write_text(dir / "capture.safetensors", safetensors_image(planted_dump()));
  const fs::path out = dir / "out";
  const BenchRun r = bench("--dump " + (dir / "capture.safetensors").string() + " --out " + out.string() +
                           " --blocks 16 --keeps 1 --windows 0 --sink 16");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto layers = read_csv(out / "layer_entropy.csv");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].at("layer"), "2");  // ascending, whatever the file's order
  EXPECT_NEAR(std::stod(layers[0].at("nats")), 0.0, 1e-6);  // one-hot
  // uniform: the mean over the two rows of ln(visible), visible 63 and 64
  EXPECT_NEAR(std::stod(layers[1].at("nats")), (std::log(63.0) + std::log(64.0)) / 2, 1e-5);
  EXPECT_NEAR(std::stod(layers[1].at("normalized")), 1.0, 1e-5);
  for (const auto& l : read_csv(out / "locality.csv")) {
    // sink 16 and no window: all of layer 2's mass, 16 / visible of layer 5's
    const double want = l.at("layer") == "2" ? 1.0 : (16.0 / 63 + 16.0 / 64) / 2;
    EXPECT_NEAR(std::stod(l.at("mass")), want, 1e-6) << l.at("layer");
  }
  const auto meta = nlohmann::json::parse(std::ifstream(out / "meta.json"));
  EXPECT_EQ(meta["source"], "dump");
  EXPECT_EQ(meta["entropy_boundary"]["largest_drop"], -1);  // entropy rises from layer 2 to 5
}

TEST(BenchAttention, ABadDumpIsOneLineAndExit2) {
  const fs::path dir = fresh_dir("bench_attention_baddump");
  auto ts = planted_dump();
  ts.erase(ts.begin() + 1);  // layer 5 loses its k
  write_text(dir / "nok.safetensors", safetensors_image(ts));
  write_text(dir / "none.safetensors", safetensors_image({f32_tensor("other", {2}, {1.0f, 2.0f})}));
  const struct {
    std::string file, says;
  } cases[] = {{"nok.safetensors", "has no layers.5.k"}, {"none.safetensors", "no layers.<l>.q tensor"}};
  for (const auto& c : cases) {
    const BenchRun r = bench("--dump " + (dir / c.file).string() + " --out " + (dir / "o").string());
    EXPECT_EQ(r.code, 2) << c.file << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.file << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const BenchRun both = bench("--dump x --model-dir y --out " + (dir / "o").string());
  EXPECT_EQ(both.code, 2) << both.err;
  const BenchRun neither = bench("--out " + (dir / "o").string());
  EXPECT_EQ(neither.code, 2) << neither.err;
  EXPECT_NE(neither.err.find("or --dump FILE"), std::string::npos) << neither.err;
}

// On a dump: --layers picks layers (one not in the dump is refused), the flags of a forward pass are refused
// rather than ignored, a block list of which none divides the prompt is named, a repeated keep writes its rows
// once, an --out that is a file is refused before any work.
TEST(BenchAttention, DumpFlagsAreHonouredOrRefused) {
  const fs::path dir = fresh_dir("bench_attention_dumpflags");
  write_text(dir / "capture.safetensors", safetensors_image(planted_dump()));
  const std::string dump = "--dump " + (dir / "capture.safetensors").string();
  const fs::path out = dir / "out";
  const BenchRun one = bench(dump + " --out " + out.string() + " --blocks 16 --keeps 0.5,0.5 --layers 5");
  ASSERT_EQ(one.code, 0) << one.err;
  const auto layers = read_csv(out / "layer_entropy.csv");
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].at("layer"), "5");
  std::size_t half = 0;
  for (const auto& row : read_csv(out / "selection.csv")) half += std::stod(row.at("keep")) == 0.5;
  EXPECT_GT(half, 0u);
  const std::size_t rows_once = half;
  const BenchRun again = bench(dump + " --out " + (dir / "out1").string() + " --blocks 16 --keeps 0.5 --layers 5");
  ASSERT_EQ(again.code, 0) << again.err;
  std::size_t single = 0;
  for (const auto& row : read_csv(dir / "out1" / "selection.csv")) single += std::stod(row.at("keep")) == 0.5;
  EXPECT_EQ(rows_once, single);  // 0.5 given twice: its rows once
  write_text(dir / "a_file", "");
  const struct {
    std::string extra, says;
  } cases[] = {
      {" --layers 3", "--layers 3: " + (dir / "capture.safetensors").string() + " holds layers 2, 5"},
      {" --queries 4", "--dump excludes --queries"},
      {" --estimate-only", "--dump excludes --estimate-only"},
      {" --backend cpu", "--dump excludes --backend"},
      {" --blocks 7,128", "--blocks 7,128: none divides the prompt's 64 tokens"},
      {" --keeps nan", "--keeps nan: a fraction in (0, 1]"},
  };
  for (const auto& c : cases) {
    const BenchRun r = bench(dump + " --out " + (dir / "o").string() + c.extra);
    EXPECT_EQ(r.code, 2) << c.extra << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.extra << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.extra << ": " << r.err;
  }
  const BenchRun file = bench(dump + " --out " + (dir / "a_file" / "x").string());
  EXPECT_EQ(file.code, 2) << file.err;
  EXPECT_NE(file.err.find("--out " + (dir / "a_file" / "x").string()), std::string::npos) << file.err;
}

}  // namespace
