// bench_attention (issue 19): what block and token selection keep of a real model's attention. Reads a Hugging
// Face Llama-family checkpoint and a token-id file, says what the run will cost (time, memory) before it starts,
// runs the forward pass (CPU, or GPU: --backend) capturing the last M query rows of every layer (kernels/attention/model), computes
// every quality figure per layer and head (kernels/attention/quality) and writes them as CSV files beside a
// meta.json. studies/attention/README.md says what each file holds.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/attention/checkpoint.hpp"
#include "kvf/attention/forward.hpp"
#include "kvf/attention/quality.hpp"
#include "kvf/attention/run_estimate.hpp"
#include "kvf/backend.hpp"
#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "dump_input.hpp"
#include "figures_during_pass.hpp"
#include "figures_out.hpp"
#include "needle_decode.hpp"

namespace fs = std::filesystem;
namespace q = kvf::attention::quality;
using kvf::UsageError;

namespace {

constexpr const char* kProg = "bench_attention";

struct Flags {
  std::string model_dir, tokens, out, dump, answer;
  std::string command;  // the command line, for meta.json
  int queries = 16, chunk = 256;
  std::vector<int> layers;  // empty: all
  std::uint32_t sink = 16;
  std::vector<std::uint32_t> windows{0, 64, 256, 1024, 4096}, blocks{16, 32, 64, 128, 256};
  std::vector<double> keeps{1.0 / 2, 1.0 / 4, 1.0 / 8, 1.0 / 16, 1.0 / 32};
  std::vector<std::string> needles;  // POS:LEN, token positions of a planted passage
  double entropy_threshold = 0.5;
  double gflops = 0;  // stated GEMM rate for the estimate; 0: measured
  bool estimate_only = false;
  std::string backend = "auto", device;  // the prefill's: cpu, or cuda (forward_gpu) on GPU `device`
  std::string figures_during_pass = "auto";  // auto (on with the GPU pass), on, off
};

// The prefill's backend: cuda where --backend says so or (auto) where this build has the GPU forward and a GPU is
// visible; `why` says which and why. --backend cuda without either is a usage error.
bool use_gpu(const Flags& f, int* ordinal, std::string* why) {
  const kvf::DeviceChoice dev = f.device.empty() ? kvf::DeviceChoice{} : kvf::parse_device(f.device);
  if (dev.kind == kvf::DeviceChoice::Kind::all)
    throw UsageError("--device all: bench_attention runs one prefill; name one GPU ordinal, or cpu");
  if (f.backend == "cpu" || dev.kind == kvf::DeviceChoice::Kind::cpu) {
    if (f.backend == "cuda") throw UsageError("--device cpu with --backend cuda: name a GPU ordinal");
    *why = "cpu (" + std::string(f.backend == "cpu" ? "--backend cpu" : "--device cpu") + ")";
    return false;
  }
  std::string none;
  const auto gpus = kvf::attention::forward_gpu_built() ? kvf::list_gpus(&none)
                                                         : std::vector<kvf::GpuListing>{};
  if (!kvf::attention::forward_gpu_built()) none = "this build has no CUDA";
  *ordinal = dev.kind == kvf::DeviceChoice::Kind::gpu ? dev.ordinal : 0;
  if (!gpus.empty() && *ordinal >= int(gpus.size()))
    throw UsageError("--device " + f.device + ": " + std::to_string(gpus.size()) + " GPU(s) visible (0 .. " +
                     std::to_string(gpus.size() - 1) + ")");
  if (gpus.empty()) {
    if (f.backend == "cuda" || dev.kind == kvf::DeviceChoice::Kind::gpu)
      throw UsageError((f.backend == "cuda" ? std::string("--backend cuda") : "--device " + f.device) +
                       ": no usable GPU (" + none + "); --backend cpu runs the prefill on the CPU");
    *why = "cpu (auto: no usable GPU: " + none + ")";
    return false;
  }
  *why = "cuda (" + std::string(f.backend == "cuda" ? "--backend cuda" : "auto") + "): GPU " +
         std::to_string(*ordinal) + ", " + gpus[std::size_t(*ordinal)].name;
  return true;
}

// A number in a message: csv_number's shortest text, and nan or inf where it would leave the cell empty.
std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return kvf::csv_number(v);
}

// A list flag's values sorted by `before`, each once: a value given twice would write its rows twice.
template <typename T, typename Before = std::less<>>
void sort_unique(std::vector<T>& v, Before before = {}) {
  std::sort(v.begin(), v.end(), before);
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

std::vector<q::Needle> parse_needles(const std::vector<std::string>& specs, int context) {
  std::vector<q::Needle> out;
  for (const auto& s : specs) {
    const auto colon = s.find(':');
    long long pos = -1, len = -1;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      std::size_t a = 0, b = 0;
      pos = std::stoll(s.substr(0, colon), &a);
      len = std::stoll(s.substr(colon + 1), &b);
      if (a != colon || b != s.size() - colon - 1) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      throw UsageError("--needle " + kvf::shown_value(s) + ": expected POS:LEN, token positions of the planted passage");
    }
    if (pos < 0 || len < 1 || pos > context || len > context - pos)  // no pos + len: it overflows
      throw UsageError("--needle " + s + ": the passage must lie inside the prompt's " + std::to_string(context) +
                       " tokens (POS >= 0, LEN >= 1)");
    out.push_back({static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(len)});
  }
  return out;
}

// The figures of one captured layer through the quality library (captured probabilities given: the pass's own).
q::LayerFigures figures_of(const kvf::attention::AttentionCapture& cap, int c, const q::QualityOptions& qo) {
  return q::layer_figures(kvf::attention::captured_layer(cap, c), qo);
}

// The sweep of the flags at one context: windows above it and blocks not dividing it left out.
q::QualityOptions quality_options(const Flags& f, std::uint32_t ctx, const std::vector<q::Needle>& needles) {
  q::QualityOptions qo;
  qo.sink = f.sink;
  qo.windows.clear();
  for (auto w : f.windows)
    if (w <= ctx) qo.windows.push_back(w);
  qo.selection.blocks.clear();
  for (auto b : f.blocks)
    if (ctx % b == 0) qo.selection.blocks.push_back(b);
  if (qo.selection.blocks.empty() && !f.blocks.empty()) {
    std::string given;
    for (auto b : f.blocks) given += (given.empty() ? "" : ",") + std::to_string(b);
    throw UsageError("--blocks " + given + ": none divides the prompt's " + std::to_string(ctx) +
                     " tokens (allowed: block sizes that divide it)");
  }
  qo.selection.keeps = f.keeps;
  qo.selection.needles = needles;
  return qo;
}

// The block sizes and windows the sweep leaves out at this context (a block that does not divide it, a window
// longer than it), said on stderr and recorded in meta.json (sweep_left_out): they had vanished without a word.
nlohmann::json sweep_left_out(const Flags& f, std::uint32_t ctx) {
  nlohmann::json out = nlohmann::json::array();
  const auto say = [&](const char* flag, std::uint32_t v, const std::string& why) {
    out.push_back({{"flag", flag}, {"value", v}, {"why", why}});
    std::fprintf(stderr, "%s: %s %u left out: %s\n", kProg, flag, v, why.c_str());
  };
  for (auto b : f.blocks)
    if (ctx % b != 0) say("--blocks", b, "does not divide the prompt's " + std::to_string(ctx) + " tokens");
  for (auto w : f.windows)
    if (w > ctx) say("--windows", w, "longer than the prompt's " + std::to_string(ctx) + " tokens");
  return out;
}

// The figures' cost, said with the pass's (they run on the CPU after it, for every captured layer, and on a GPU
// run they can take longer than the pass): one layer of this model's heads and M rows, at min(C, 4096) keys of
// random q, k, v, timed here, scaled linearly to C keys (the figures' passes are linear in the keys: one 32K layer
// took 4.0x one 8K layer, bench_attention_quality_cost) and by the captured layers. A sweep the figures refuse
// (e.g. M - 1 above the smallest block) is a UsageError here, before the pass, not after it.
double estimate_figures_s(const Flags& f, const kvf::attention::HfConfig& cfg, int C, int layers, double* one_layer_s,
                          std::uint32_t* calib_keys) {
  // The timed keys: at most 4096, a multiple of every block size that divides C (the timing must sweep the blocks
  // the run will), or C itself where that multiple is larger.
  std::uint64_t lcm = 1;
  for (auto b : f.blocks)
    if (b > 0 && C % static_cast<int>(b) == 0) lcm = std::lcm(lcm, std::uint64_t{b});
  const std::uint64_t cap = static_cast<std::uint64_t>(std::min(C, 4096));
  const std::uint32_t C0 = static_cast<std::uint32_t>(lcm <= cap ? cap / lcm * lcm : static_cast<std::uint64_t>(C));
  const std::uint32_t hq = static_cast<std::uint32_t>(cfg.shape.n_heads), hkv = static_cast<std::uint32_t>(cfg.shape.n_kv_heads);
  const std::uint32_t d = static_cast<std::uint32_t>(cfg.shape.head_dim), M = static_cast<std::uint32_t>(f.queries);
  std::vector<float> qv(std::size_t(hq) * M * d), kv(std::size_t(hkv) * C0 * d), vv(kv.size());
  std::uint64_t x = 0x2545F4914F6CDD1Dull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(static_cast<std::int64_t>(x >> 11) % 2001 - 1000) / 1000.0f;
  };
  for (float& e : qv) e = 2.0f * next();
  for (float& e : kv) e = next();
  for (float& e : vv) e = next();
  q::LayerAttention a;
  a.hq = hq;
  a.hkv = hkv;
  a.d = d;
  a.ctx = C0;
  a.rows = std::min(M, C0);
  a.causal = true;
  a.q = qv;
  a.k = kv;
  a.v = vv;
  try {
    // The sweep checked at the prompt's own C first (a block dividing C but not 4096, a sink above 4096): one head
    // of 16 dims is enough for every check the figures make, and costs milliseconds at any C.
    if (static_cast<std::uint32_t>(C) != C0) {
      q::LayerAttention full;
      full.hq = full.hkv = 1;
      full.d = 16;
      full.ctx = static_cast<std::uint32_t>(C);
      full.rows = std::min(M, full.ctx);
      full.causal = true;
      const std::vector<float> fq(std::size_t(full.rows) * full.d, 0.5f);
      std::vector<float> fk(std::size_t(full.ctx) * full.d);
      for (float& e : fk) e = next();
      full.q = fq;
      full.k = fk;
      full.v = fk;
      (void)q::layer_figures(full, quality_options(f, full.ctx, {}));
    }
    const auto t0 = std::chrono::steady_clock::now();
    (void)q::layer_figures(a, quality_options(f, C0, {}));
    *one_layer_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("the figures would refuse this run after the pass: ") + e.what());
  }
  *calib_keys = C0;
  return *one_layer_s * (double(C) / C0) * layers;
}

// A user's dump instead of a forward pass: every layer it holds, one at a time (dump_input.hpp has the format).
int run_dump(const Flags& f) {
  const kvf::attention::AttentionDump dump(f.dump);
  // --layers picks among the dump's layers, as among a checkpoint's
  auto layers = dump.layers();
  if (!f.layers.empty()) {
    std::string held;
    for (const auto l : layers) held += (held.empty() ? "" : ", ") + std::to_string(l);
    for (const auto want : f.layers)
      if (std::find(layers.begin(), layers.end(), want) == layers.end())
        throw UsageError("--layers " + std::to_string(want) + ": " + f.dump + " holds layers " + held);
    std::erase_if(layers, [&](auto l) { return std::find(f.layers.begin(), f.layers.end(), l) == f.layers.end(); });
  }
  kvf::attention::FigureFiles files;
  kvf::attention::AttentionDump::Store store;
  nlohmann::json meta;
  std::vector<q::Needle> needles;
  const auto t1 = std::chrono::steady_clock::now();
  for (const auto l : layers) {
    const q::LayerAttention a = dump.layer(l, store);
    if (files.layers() == 0) {
      needles = parse_needles(f.needles, static_cast<int>(a.ctx));
      meta["q_heads"] = a.hq;
      meta["kv_heads"] = a.hkv;
      meta["head_dim"] = a.d;
      meta["context"] = a.ctx;
      meta["queries"] = a.rows;
    } else if (meta["context"] != a.ctx || meta["queries"] != a.rows) {
      throw UsageError(f.dump + ": layer " + std::to_string(l) + " has " + std::to_string(a.ctx) + " keys and " +
                       std::to_string(a.rows) + " query rows, the first layer " + meta["context"].dump() + " and " +
                       meta["queries"].dump() + ": one prompt per dump");
    }
    files.add(q::layer_figures(a, quality_options(f, a.ctx, needles)));
  }
  meta["source"] = "dump";
  meta["command"] = f.command;
  meta["dump"] = f.dump;
  meta["causal"] = dump.causal();
  meta["captured_layers"] = layers;
  meta["figures_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  meta["sweep_left_out"] = sweep_left_out(f, meta["context"].get<std::uint32_t>());
  files.write(f.out, meta, f.entropy_threshold, !needles.empty());
  std::fprintf(stderr, "%s: %zu layers of %s; results in %s\n", kProg, files.layers(), f.dump.c_str(), f.out.c_str());
  return 0;
}

int run(const Flags& f) {
  int ordinal = 0;
  std::string backend_why;
  const bool gpu = use_gpu(f, &ordinal, &backend_why);
  const kvf::attention::Checkpoint ck(f.model_dir);
  const auto& cfg = ck.config();
  const auto tokens = kvf::attention::read_token_ids(f.tokens, cfg.shape.vocab);
  const int C = static_cast<int>(tokens.size());
  if (f.queries < 1 || f.queries > C)
    throw UsageError("--queries " + std::to_string(f.queries) + ": 1 .. the prompt's " + std::to_string(C) + " tokens");
  for (int l : f.layers)
    if (l < 0 || l >= cfg.shape.layers)
      throw UsageError("--layers " + std::to_string(l) + ": the model has layers 0 .. " + std::to_string(cfg.shape.layers - 1));
  const auto needles = parse_needles(f.needles, C);
  std::vector<int> capture = f.layers;  // ascending, once each: the entropy boundary reads layers in order
  std::sort(capture.begin(), capture.end());
  capture.erase(std::unique(capture.begin(), capture.end()), capture.end());

  std::vector<std::int32_t> answer;
  if (!f.answer.empty()) {
    if (!capture.empty() && static_cast<int>(capture.size()) != cfg.shape.layers)
      throw UsageError("--answer decodes with the selection in every layer: capture every layer (leave out --layers)");
    answer = kvf::attention::read_token_ids(f.answer, cfg.shape.vocab);
    if (answer.empty()) throw UsageError("--answer " + f.answer + ": the planted answer holds no token");
    // Its first token is the dense prefill's own next token, whatever the selection: one token tests none.
    if (answer.size() < 2)
      throw UsageError("--answer " + f.answer + ": one token; the first answer token comes from the dense prefill in "
                       "every arm, so it tests no selection (give 2 or more)");
  }

  // The figures' sweep first: one it refuses is a usage error before anything is printed or run.
  const int figure_layers = capture.empty() ? cfg.shape.layers : static_cast<int>(capture.size());
  double figures_one_s = 0;
  std::uint32_t figures_calib_keys = 0;
  const double figures_est_s = estimate_figures_s(f, cfg, C, figure_layers, &figures_one_s, &figures_calib_keys);
  std::fprintf(stderr, "%s: prefill backend: %s\n", kProg, backend_why.c_str());
  // The cost first (the issue: "say the cost first"), refused when this machine cannot hold it.
  kvf::attention::RunShape rs;
  rs.context = C;
  rs.queries = f.queries;
  rs.chunk = f.chunk;
  rs.capture_layers = capture.empty() ? -1 : static_cast<int>(capture.size());
  rs.threads = omp_get_max_threads();
  std::string rate_what;
  double rate = f.gflops * 1e9, attention_rate = rate;
  if (rate > 0) {
    rate_what = "stated: --gflops " + num(f.gflops);
  } else {
    const int T = std::min(f.chunk, C);
    rate = kvf::attention::measure_gemm_rate(T, static_cast<int>(cfg.shape.hidden), &rate_what);
    // The attention's rate at a chunk halfway through the context (its keys: the mean of the causal triangle).
    attention_rate = kvf::attention::measure_attention_rate(cfg.shape, T, std::max(T, std::min(C, C / 2 + T)));
    rate_what = "measured: " + rate_what + "; attention: oneDNN f32 matmul per query head";
  }
  const auto est = kvf::attention::estimate_run(cfg, ck.mapped_bytes(), ck.weight_bytes_per_param(), rs, rate, rate_what,
                                                attention_rate);
  const auto avail = kvf::attention::available_memory_bytes();
  std::fprintf(stderr, "%s: %s, %d tokens, M=%d: %s\n", kProg, cfg.architecture.c_str(), C, f.queries,
               kvf::attention::describe(est, avail).c_str());
  if (gpu)
    std::fprintf(stderr, "%s: the prefill runs on the GPU: the time above is the CPU pass's (the needle decode and the "
                 "figures stay on the CPU); the device memory is checked when the pass starts\n", kProg);
  kvf::attention::check_memory(est, avail, rs);
  const bool beside = f.figures_during_pass == "on" || (f.figures_during_pass == "auto" && gpu);
  std::fprintf(stderr, "%s: figures (on the CPU, %s): about %.3g s for %d layers (one layer of %u keys "
               "timed here: %.3g s, scaled to %d keys)\n", kProg,
               beside ? "beside the pass: what outlasts it adds to the run" : "after the pass", figures_est_s,
               figure_layers, figures_calib_keys, figures_one_s, C);
  if (!answer.empty()) {
    // All decodes at once from the prefill's K/V: one pass over the weights per answer token after the first.
    const std::size_t decodes = 1 + 2 * kvf::attention::decode_budgets(C, f.blocks, f.keeps).size();
    const double read_rate = kvf::attention::measure_read_rate();
    const auto de = kvf::attention::estimate_decode(cfg, C, static_cast<int>(decodes), static_cast<int>(answer.size()),
                                                    rate, read_rate);
    std::fprintf(stderr, "%s: needle decoding: %zu decodes (dense, block and token at each budget) of %zu tokens, "
                 "together from the prefill's K/V: %zu passes over the weights with %zu rows, %.0f GFLOP, and their "
                 "attention reading %s of fp32 K/V (every row taken dense) at %.1f GB/s measured: about %.3g s more "
                 "(a small-row GEMM runs below the estimate's rate); their own K/V %s\n",
                 kProg, decodes, answer.size(), answer.size() - 1, decodes, de.flops / 1e9,
                 kvf::attention::bytes_text(de.attention_bytes).c_str(), read_rate / 1e9, de.seconds,
                 kvf::attention::bytes_text(double(de.cache_bytes)).c_str());
  }
  if (f.estimate_only) return 0;

  const q::QualityOptions qo = quality_options(f, static_cast<std::uint32_t>(C), needles);
  kvf::attention::ForwardOptions fo;
  fo.chunk = f.chunk;
  fo.queries = f.queries;
  fo.capture_layers = capture;
  std::optional<kvf::attention::FiguresDuringPass> during;
  if (beside) {
    during.emplace(qo);
    fo.on_captured = [&during](const kvf::attention::AttentionCapture& cap, int c) { during->add(cap, c); };
  }
  std::string gpu_note;
  const auto t0 = std::chrono::steady_clock::now();
  const auto fw = gpu ? kvf::attention::forward_gpu(ck, tokens, fo, ordinal, &gpu_note)
                      : kvf::attention::forward_cpu(ck, tokens, fo);
  const double forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (gpu) std::fprintf(stderr, "%s: GPU forward: %s\n", kProg, gpu_note.c_str());
  if (!fw.phase_s.empty()) {
    std::string text;
    for (const auto& [name, sec] : fw.phase_s) {
      char b[64];
      std::snprintf(b, sizeof b, "%s%s %.3g s", text.empty() ? "" : ", ", name.c_str(), sec);
      text += b;
    }
    std::fprintf(stderr, "%s: forward phases: %s\n", kProg, text.c_str());
  }

  kvf::attention::FigureFiles files;
  const auto t1 = std::chrono::steady_clock::now();  // figures_s: after the pass (beside it: the wait for the rest)
  const auto& cap = fw.capture;
  if (during) {
    for (const q::LayerFigures& lf : during->finish()) files.add(lf);
  } else {
    for (std::size_t c = 0; c < cap.layer_ids.size(); ++c) files.add(figures_of(cap, static_cast<int>(c), qo));
  }
  const double figures_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  nlohmann::json meta;
  meta["source"] = "checkpoint";
  meta["command"] = f.command;
  meta["sweep_left_out"] = sweep_left_out(f, static_cast<std::uint32_t>(C));
  meta["model_dir"] = f.model_dir;
  meta["architecture"] = cfg.architecture;
  meta["torch_dtype"] = cfg.torch_dtype;
  meta["layers"] = cfg.shape.layers;
  meta["q_heads"] = cap.q_heads;
  meta["kv_heads"] = cap.kv_heads;
  meta["head_dim"] = cap.head_dim;
  meta["tokens_file"] = f.tokens;
  meta["context"] = C;
  meta["queries"] = f.queries;
  meta["captured_layers"] = cap.layer_ids;
  meta["gemm"] = fw.gemm;
  meta["backend"] = gpu ? "cuda" : "cpu";
  meta["backend_choice"] = backend_why;
  if (gpu) meta["gpu_forward"] = gpu_note;
  meta["next_token"] = fw.next_token;
  meta["forward_s"] = forward_s;
  for (const auto& [name, sec] : fw.phase_s) meta["forward_phases_s"][name] = sec;
  meta["figures_s"] = figures_s;
  meta["figures_during_pass"] = beside;
  meta["estimate"] = {{"seconds", est.seconds}, {"resident_bytes", est.resident_bytes}, {"rate", est.rate_source},
                      {"figures_seconds", figures_est_s}};
  if (!answer.empty()) {
    const auto t2 = std::chrono::steady_clock::now();
    const auto rows = kvf::attention::needle_decode(ck, fw, answer, f.blocks, f.keeps);
    kvf::attention::write_needle_decode(fs::path(f.out) / "needle_decode.csv", rows, answer.size());
    meta["answer"] = {{"tokens_file", f.answer}, {"tokens", answer.size()},
                      {"decode_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count()}};
  }
  files.write(f.out, meta, f.entropy_threshold, !needles.empty());
  std::fprintf(stderr, "%s: forward %.3g s, figures %.3g s; %zu layers captured; results in %s\n", kProg, forward_s,
               figures_s, cap.layer_ids.size(), f.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_attention: what block and token selection keep of a real model's attention (issue 19; "
               "studies/attention/README.md)"};
  Flags f;
  auto* model_dir = app.add_option("--model-dir", f.model_dir, "Hugging Face model directory (config.json + safetensors), local");
  auto* tokens = app.add_option("--tokens", f.tokens, "token ids of the prompt: a JSON array (README: the one-liner that writes it)");
  auto* dump = app.add_option("--dump", f.dump,
                              "a capture of your own instead of a checkpoint: safetensors with layers.<l>.q/.k/.v[/.probs] "
                              "(studies/attention/README.md)");
  dump->excludes(model_dir)->excludes(tokens);
  app.add_option("--out", f.out,
                 "directory for the CSV files and meta.json; RESULTS/attention puts them in `kvf report RESULTS` "
                 "(joined with the access study's latency there)")
      ->required();
  // The flags of a forward pass: a dump has no pass, so with --dump each is refused rather than ignored.
  std::vector<CLI::Option*> pass_only;
  pass_only.push_back(
      app.add_option("--queries", f.queries, "M: the last M query rows captured per layer and head (default 16)"));
  pass_only.push_back(app.add_option("--chunk", f.chunk, "query rows per prefill step (default 256)"));
  app.add_option("--layers", f.layers, "layers to capture, e.g. 0,1,31 (default all)")->delimiter(',');
  app.add_option("--sink", f.sink, "tokens of the sink block for the locality mass (default 16)");
  app.add_option("--windows", f.windows, "local windows W in tokens (default 0,64,256,1024,4096; above the prompt: left out)")
      ->delimiter(',');
  app.add_option("--blocks", f.blocks, "block sizes of the selections (default 16,32,64,128,256; those dividing the prompt)")
      ->delimiter(',');
  app.add_option("--keeps", f.keeps, "keep fractions in (0, 1] (default 1/2 .. 1/32)")->delimiter(',');
  app.add_option("--needle", f.needles, "a planted passage POS:LEN (token positions); repeatable");
  auto* answer = app.add_option("--answer", f.answer,
                 "token ids of the planted answer (a JSON array, as --tokens): greedy-decode it after the prompt with "
                 "full attention and with each block and token selection in every layer (needle_decode.csv); "
                 "needs every layer captured");
  answer->excludes(dump);
  app.add_option("--entropy-threshold", f.entropy_threshold, "normalized entropy of the first_below boundary (default 0.5)");
  pass_only.push_back(app.add_option("--gflops", f.gflops,
                                     "state one rate (GFLOP/s) for the estimate's GEMMs and attention instead of "
                                     "measuring them"));
  pass_only.push_back(app.add_flag("--estimate-only", f.estimate_only, "print the time and memory estimate and stop"));
  pass_only.push_back(app.add_option("--backend", f.backend,
                 "where the prefill runs: auto (cuda where this build has CUDA and a GPU is visible), cpu, or cuda "
                 "(bf16 weights, K/V and q, checked on layer 0 against the fp64 reference first); the needle decode "
                 "and the figures run on the CPU either way"));
  pass_only.push_back(
      app.add_option("--device", f.device, "cpu, or the GPU ordinal of --backend cuda/auto (default 0)"));
  pass_only.push_back(app.add_option("--figures-during-pass", f.figures_during_pass,
                                     "compute each captured layer's figures on the CPU while the pass goes on: auto "
                                     "(on when the pass runs on the GPU, whose host cores would wait), on, off (after "
                                     "the pass)"));
  for (CLI::Option* o : pass_only) dump->excludes(o);
  for (int i = 0; i < argc; ++i) f.command += (i ? " " : "") + std::string(argv[i]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as every other bad input (CLI11's own exit prints a second, "Run with --help ...").
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", kProg, kvf::one_line(e.what()).c_str(), kProg);
    return kvf::kExitUsage;
  }
  try {
    if (f.out.empty())
      throw UsageError("--out '': a directory is needed (allowed: a new directory, e.g. RESULTS/attention)");
    if (f.chunk < 1) throw UsageError("--chunk " + std::to_string(f.chunk) + ": at least 1");
    if (f.figures_during_pass != "auto" && f.figures_during_pass != "on" && f.figures_during_pass != "off")
      throw UsageError("--figures-during-pass " + f.figures_during_pass + ": auto, on or off");
    if (f.backend != "auto" && f.backend != "cpu" && f.backend != "cuda")
      throw UsageError("--backend " + kvf::shown_value(f.backend) + ": auto, cpu or cuda");
    for (double k : f.keeps)
      if (!(k > 0 && k <= 1))
        throw UsageError("--keeps " + num(k) + ": a fraction in (0, 1]");
    // A value given twice would write its rows twice, and an average over rows would count them twice.
    sort_unique(f.keeps, std::greater<>());
    sort_unique(f.windows);
    // Blocks and needles too: the needle decode and needle.csv wrote a repeated one twice, and kvf report then
    // refused the whole section ("the same row again"). Needles keep their order.
    sort_unique(f.blocks);
    std::vector<std::string> needles;
    for (const auto& n : f.needles)
      if (std::find(needles.begin(), needles.end(), n) == needles.end()) needles.push_back(n);
    f.needles = std::move(needles);
    // kvf report reads at most 64 of each (its bounded reader of untrusted results); more would be refused there.
    for (const auto& [flag, n] : {std::pair<const char*, std::size_t>{"--windows", f.windows.size()},
                                  {"--blocks", f.blocks.size()}, {"--keeps", f.keeps.size()},
                                  {"--needle", f.needles.size()}})
      if (n > 64)
        throw UsageError(std::string(flag) + ": " + std::to_string(n) + " distinct values; at most 64 (kvf report "
                         "reads no more)");
    kvf::check_out_dir(f.out, "--out");
    // One run per directory: a second would overwrite the first's figures, and a suite results directory given
    // by mistake would lose its own meta.json (the figures go to RESULTS/attention).
    if (fs::exists(fs::path(f.out) / "meta.json"))
      throw UsageError("--out " + f.out + ": holds a meta.json already (an earlier run, or a results directory: "
                       "bench_attention writes to a new directory, e.g. RESULTS/attention)");
    for (auto b : f.blocks)
      if (b < 1) throw UsageError("--blocks 0: a block holds at least one token");
    if (!(f.entropy_threshold > 0 && f.entropy_threshold < 1))
      throw UsageError("--entropy-threshold " + num(f.entropy_threshold) + ": in (0, 1)");
    // 0 is not "measure" when typed: a flag that is given states a rate.
    if (!(f.gflops > 0 && std::isfinite(f.gflops)) && (f.gflops != 0 || app.count("--gflops") > 0))
      throw UsageError("--gflops " + num(f.gflops) + ": a rate > 0 (leave the flag out to measure it)");
    if (f.backend == "cpu" && app.count("--device") > 0 && f.device != "cpu")
      throw UsageError("--device " + kvf::shown_value(f.device) + " with --backend cpu: a GPU ordinal picks a GPU for "
                       "--backend cuda or auto; leave it out, or give --device cpu");
    if (!f.dump.empty()) return run_dump(f);
    if (f.model_dir.empty() || f.tokens.empty())
      throw UsageError("--model-dir DIR and --tokens FILE (a checkpoint and a prompt), or --dump FILE: one is needed");
    return run(f);
  } catch (const UsageError& e) {  // "bench_attention: error: ...", as every bench and kvf say it
    std::fprintf(stderr, "%s: error: %s\n", kProg, kvf::one_line(e.what()).c_str());
    return kvf::kExitUsage;
  } catch (const std::invalid_argument& e) {  // the quality library's parameter checks
    std::fprintf(stderr, "%s: error: %s\n", kProg, kvf::one_line(e.what()).c_str());
    return kvf::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProg, kvf::one_line(e.what()).c_str());
    return 1;
  }
}
