// The idleness study (issue 5): how idle is compute during memory-bound decode, by which definition, and is
// recompute placed beside decode free? Its question, arms, flags and figures: studies/idleness/README.md.
//
// This file holds the study: its flags and their checks, the arm list (the one place an arm is listed), and
// main(). Each arm is declared, with its cases, in its own file (ceilings, decode, decode_gpu, prefill, corun).

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "idleness.hpp"
#include "kvf/errors.hpp"
#include "kvf/onednn_isa_flag.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/perf_events.hpp"
#include "recompute.hpp"

#if defined(KVF_HAVE_CUPTI)
#include "kvf/cupti/metric_sets.hpp"
#endif

namespace kvf::idleness {
namespace {

// The ceilings always run, whatever --arms says: every figure of the study is stated against them.
bool always_runs(const Arm& a) { return a.name.ends_with("_ceiling"); }

// The bench's flags are independent: each replaces its own axis, and the arm's other axes keep their defaults for
// the target (kvf::arm_grid would fix them at one value once any flag is given; the flags worked this way before
// the registry and the golden lists hold it). So every flagged axis of the arm gets a list: the user's, else its
// defaults.
kvf::UserLists lists_for(const Arm& arm, const kvf::Target& t, const kvf::UserLists& given) {
  kvf::UserLists out;
  for (const auto& a : arm.axes) {
    if (a.flag.empty()) continue;
    const auto it = given.find(a.flag);
    out[a.flag] = it != given.end() ? it->second : a.defaults(t);
  }
  return out;
}

// Contexts outermost: a sweep walks one K/V size at a time (the order of the rows before the registry).
void contexts_outer(std::vector<kvf::Point>& pts) {
  if (!std::all_of(pts.begin(), pts.end(), [](const kvf::Point& p) { return p.has("context"); })) return;
  std::vector<std::string> order;
  for (const auto& p : pts)
    if (std::find(order.begin(), order.end(), p["context"]) == order.end()) order.push_back(p["context"]);
  const auto rank = [&](const kvf::Point& p) { return std::find(order.begin(), order.end(), p["context"]) - order.begin(); };
  std::stable_sort(pts.begin(), pts.end(), [&](const kvf::Point& a, const kvf::Point& b) { return rank(a) < rank(b); });
}

class IdlenessStudy final : public kvf::Study {
 public:
  explicit IdlenessStudy(std::string out_dir) : arms_(study_arms(false)) { env_.out_dir = std::move(out_dir); }
  std::string name() const override { return "idleness"; }
  void add_options(kvf::StudyFlags& flags) override;
  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override;

 private:
  std::vector<std::string> selectable() const {
    std::vector<std::string> n;
    for (const auto& a : arms_.all())
      if (!always_runs(a)) n.push_back(a.name);
    return n;
  }
  bool selected(const Arm& a) const {
    return always_runs(a) || arms_flag_.empty() ||
           std::find(arms_flag_.begin(), arms_flag_.end(), a.name) != arms_flag_.end();
  }
  void validate_counters_flags();
  kvf::UserLists parse_sweep_flags();
  void resolve_models(const kvf::Target& t, const kvf::UserLists& given);
  void probe_backend(kvf::Backend& be, const kvf::Target& t);
  void add_model(const kvf::Target& t, const kvf::UserLists& given, std::vector<std::unique_ptr<kvf::Case>>& out);

  // The arm list, the one place an arm is listed; built for the CPU (help, --arms names) and again in cases()
  // once the backend is known (the GPU arms carry the launch axis).
  static kvf::ArmList<Env> study_arms(bool gpu) {
    return kvf::ArmList<Env>({gemm_ceiling_arm(), read_ceiling_arm(), decode_arm(gpu), prefill_arm(gpu), corun_arm()});
  }
  kvf::ArmList<Env> arms_;
  Env env_;
  kvf::StudyFlags flags_;  // its command line outlives cases(): bench_main owns it
  // Flag values as given; numbers are kept as text and parsed in cases(): plain digits in a stated range, one
  // clear line otherwise.
  std::vector<std::string> models_, arms_flag_, batches_text_, contexts_text_, prefill_attention_;
  std::string models_file_, chip_, layers_text_, prefill_tokens_text_, green_sms_text_, onednn_isa_;
  std::vector<std::string> model_names_;  // --models, else the model axis's defaults
};

void IdlenessStudy::add_options(kvf::StudyFlags& flags) {
  flags_ = flags;
  std::vector<std::string> ceilings;
  for (const auto& a : arms_.all())
    if (always_runs(a)) ceilings.push_back(a.name);
  std::string arm_help = "arms to run (default all: " + kvf::join_names(selectable()) + "; the ceilings " +
                         kvf::join_names(ceilings) + " always run).";
  for (const auto& a : arms_.all())
    if (!always_runs(a)) arm_help += " " + a.name + ": " + a.doc + ".";
  flags.list("--models", models_, "models from data/models.json: names, aliases or Hugging Face ids, case-blind (default Llama-3.1-8B)");
  flags.text("--models-file", models_file_, "model shape file (default: models.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)");
  flags.list("--batches", batches_text_, "batch sizes B, 1..256 (default CPU 1,4,16,64; GPU 1,4,16,64,256)");
  flags.list("--contexts", contexts_text_,
             "contexts C in tokens, multiples of 1024 in 1024..131072, or 1K..128K (default CPU 1024,4096; GPU "
             "1024,8192,32768,131072)");
  flags.text("--layers", layers_text_, "layers L per step, 1..model layers (default CPU 1; GPU 4)");
  flags.text("--prefill-tokens", prefill_tokens_text_, "prefill chunk tokens T, 16..4096 (default CPU 128; GPU 512)");
  flags.list("--prefill-attention", prefill_attention_,
             "GPU prefill's causal attention kernel: mma (tensor cores, the default), cuda_core (fp32 FMAs, the kernel "
             "of the runs before 2026-11-27), or both (mma,cuda_core); the CPU backend ignores it");
  flags.list("--arms", arms_flag_, arm_help);
  flags.text("--metric-set", env_.metric_set, "range-profiler metric set (GPU): decode_idleness (default)");
  flags.list("--metrics", env_.metrics, "range-profiler metrics instead of the set's (must fit one pass)");
  flags.text("--chip", chip_, "check the metric set for this chip (GA100, GH100, GB100) instead of the device's");
  flags.flag("--no-counters", env_.no_counters, "GPU: timings only, no CUPTI collection");
  kvf::study::add_file_dir_option(flags, env_.file_dir, "the corun arm's bg_file background (CPU)");
  kvf::study::add_onednn_isa_option(flags, onednn_isa_);
  flags.text("--green-sms", green_sms_text_,
             "GPU co-run on SM partitions (green contexts): SMs for the recompute partition, 0..4096, decode "
             "gets the rest; rounded up to the device's granularity (Hopper: multiples of 8); 0 = no "
             "green-context cases (default: about a quarter of the SMs)");
}

// Every flag value is checked before any case exists: one line naming the flag, the value and what is allowed.
void IdlenessStudy::validate_counters_flags() {
  if (env_.metric_set != "decode_idleness")
    kvf::bad_flag("--metric-set", env_.metric_set,
                  "unknown metric set; allowed: decode_idleness "
                  "(the one-pass range-profiler set; idleness_timeline is the PM-sampling set)");
  if (flags_.given("--chip") && chip_.empty()) kvf::bad_flag("--chip", chip_, "allowed GA100, GH100, GB100");
  for (const auto& m : env_.metrics)
    if (m.empty()) kvf::bad_flag("--metrics", m, "a metric name (e.g. sm__cycles_active.avg)");
#if defined(KVF_HAVE_CUPTI)
  if (!chip_.empty() || !env_.metrics.empty()) {
    // Offline check with the Profiler Host API: unknown chip, unknown metric, more than one pass -> exit 2.
    const std::string chip = chip_.empty() ? std::string("GH100") : chip_;
    kvf::cupti::require_study_chip(chip);
    auto set = kvf::cupti::default_set(chip, kvf::cupti::Profiler::range);
    if (!env_.metrics.empty()) set.metrics = env_.metrics;
    set.one_pass = true;
    const auto chk = kvf::cupti::check_set(chip, set);
    if (!chk.ok()) throw kvf::UsageError("--metrics: " + chk.problem());
  }
#else
  if (!chip_.empty() || !env_.metrics.empty())
    throw kvf::UsageError(std::string(!chip_.empty() ? "--chip " + chip_ : "--metrics") +
                          ": metric checks need a build with CUDA and CUPTI (this build has neither)");
#endif
}

// The sweep flags the user gave, checked, as lists by flag (a flag given with an empty value is refused, never
// taken for "not given").
kvf::UserLists IdlenessStudy::parse_sweep_flags() {
  kvf::UserLists user;
  for (const auto& t : batches_text_)
    user["--batches"].push_back(i2s(kvf::flag_int(t, "--batches", dc::kMinBatch, dc::kMaxBatch, 1,
                                                  "batch must be a whole number in 1..256")));
  for (const auto& t : contexts_text_) {
    // 4K = 4096, as the access study's --contexts takes it.
    const bool k = !t.empty() && (t.back() == 'K' || t.back() == 'k');
    const std::string allowed = "context must be a multiple of 1024 in 1024..131072, as digits or with K (1K..128K)";
    int v = 0;
    try {
      v = kvf::flag_int(k ? t.substr(0, t.size() - 1) : t, "--contexts", k ? dc::kMinContext / 1024 : dc::kMinContext,
                        k ? dc::kMaxContext / 1024 : dc::kMaxContext, k ? 1 : 1024, allowed);
    } catch (const kvf::UsageError&) {
      kvf::bad_flag("--contexts", t, allowed);  // naming the value as typed, K included
    }
    user["--contexts"].push_back(i2s(k ? v * 1024 : v));
  }
  for (const auto& a : prefill_attention_) {
    if (a == "both") {  // as the help says: mma,cuda_core
      for (const char* k : {"mma", "cuda_core"}) user["--prefill-attention"].push_back(k);
      continue;
    }
    if (a != "mma" && a != "cuda_core")
      kvf::bad_flag("--prefill-attention", a, "not a kernel; allowed: mma, cuda_core or both");
    user["--prefill-attention"].push_back(a);
  }
  if (flags_.given("--prefill-tokens"))
    user["--prefill-tokens"] = {i2s(kvf::flag_int(prefill_tokens_text_, "--prefill-tokens", 16, 4096, 1,
                                                  "must be a whole number in 16..4096"))};
  // The device's own limits are checked once the GPU is known (probe_green); the CPU backend ignores the flag.
  if (flags_.given("--green-sms"))
    env_.green_sms = kvf::flag_int(green_sms_text_, "--green-sms", 0, 4096, 1,
                                   "must be 0 (no green-context cases) or 1..4096 SMs (and leave the rest of the "
                                   "device a partition)");
  if (flags_.given("--layers"))
    user["--layers"] = {
        i2s(kvf::flag_int(layers_text_, "--layers", 1, 1 << 16, 1, "must be a whole number in 1..the model's layers"))};
  if (flags_.given("--models-file") && models_file_.empty()) kvf::bad_flag("--models-file", "", "the path of a model shape file");
  return user;
}

// Loads the shapes, resolves the model list and L (the same for every model) and checks L against each model.
void IdlenessStudy::resolve_models(const kvf::Target& t, const kvf::UserLists& given) {
  env_.shapes = md::load_models(models_file_.empty() ? md::default_models_path() : models_file_);
  model_names_ = models_.empty() ? model_axis().defaults(t) : models_;
  // An unknown model is bad input before anything runs; an alias becomes the canonical name rows record.
  for (auto& n : model_names_) n = env_.shape(n).name;
  const auto layers = given.count("--layers") ? given.at("--layers") : layers_axis().defaults(t);
  env_.layers = std::stoi(layers.front());
  for (const auto& n : model_names_) {
    const auto& m = env_.shape(n);
    if (env_.layers > m.layers)
      throw kvf::UsageError("--layers " + i2s(env_.layers) + ": " + m.name + " has " + i2s(m.layers) + " layers");
  }
  const auto contexts = given.count("--contexts") ? given.at("--contexts") : context_axis().defaults(t);
  env_.first_context = std::stoi(contexts.front());
  env_.user_shape = given.count("--batches") && given.count("--contexts");
}

// Facts of the backend the arms read: usable memory (weights and one layer's K/V must fit: bad input when the
// user asked for the point, skipped otherwise), the counters available, the GPU co-run's SM split.
void IdlenessStudy::probe_backend(kvf::Backend& be, const kvf::Target& t) {
  env_.usable_bytes =
      env_.gpu ? double(be.info().memory_bytes) * 0.85
               : double(kvf::host_memory_bytes() ? kvf::host_memory_bytes() : (std::size_t(8) << 30)) * 0.6;
  if (!env_.gpu) {
    const auto p = kvf::probe_perf();
    env_.perf_ok = p.available;
    env_.perf_reason = p.reason;
    if (!env_.perf_ok) std::fprintf(stderr, "bench_idleness: CPU hardware counters absent: %s\n", p.reason.c_str());
  }
  env_.device_name = be.info().name;
#if defined(KVF_HAVE_CUDA)
  probe_counters(env_);
  // After the counters probe: the green-context split is tried in the process as it will run.
  if (env_.gpu && selected(arms_.at("corun")) && !t.quick) probe_green(env_);
#else
  (void)t;
#endif
}

// One model's rows together: decode, then prefill, then the co-run, each in its declared order.
void IdlenessStudy::add_model(const kvf::Target& t, const kvf::UserLists& given,
                              std::vector<std::unique_ptr<kvf::Case>>& out) {
  const md::ModelShape& m = env_.shape(env_.model);
  if (const std::string why = dc::unsupported_reason(m); !why.empty()) {
    out.push_back(kvf::skipped_case("decode/" + m.name, {{"arm", "decode"}, {"model", m.name}}, why));
    return;
  }
  kvf::UserLists lists = given;
  lists["--models"] = {m.name};
  for (const auto& arm : arms_.all()) {
    if (always_runs(arm) || !selected(arm)) continue;
    auto pts = arms_.points(arm, t, lists_for(arm, t, lists), env_);
    contexts_outer(pts);
    for (const auto& p : pts) out.push_back(arms_.make_case(arm, p, env_));
  }
}

std::vector<std::unique_ptr<kvf::Case>> IdlenessStudy::cases(const kvf::StudyContext& ctx) {
  kvf::Backend& be = *ctx.backend;
  env_.gpu = be.name() == "cuda";
  env_.quick = ctx.quick;
  arms_ = study_arms(env_.gpu);
  const kvf::Target t{.gpu = env_.gpu, .quick = ctx.quick};
#if !defined(KVF_HAVE_CUDA)
  if (env_.gpu) throw kvf::UsageError("--backend cuda: this build of bench_idleness has no CUDA kernels");
#endif
  validate_counters_flags();
  kvf::study::apply_onednn_isa_flag(onednn_isa_, flags_.given(kvf::study::kOnednnIsaFlag));
  kvf::check_arm_names("--arms", arms_flag_, selectable());
  const kvf::UserLists given = parse_sweep_flags();
  resolve_models(t, given);
  probe_file_dir(env_, flags_.given("--file-dir"), selected(arms_.at("corun")) && !env_.gpu && !t.quick);
  probe_backend(be, t);

  std::vector<std::unique_ptr<kvf::Case>> out;
  for (const auto& arm : arms_.all())
    if (always_runs(arm)) arms_.add_cases(arm, t, {}, env_, out);
  for (const auto& name : model_names_) {
    env_.model = name;
    add_model(t, given, out);
  }
  return out;
}

}  // namespace
}  // namespace kvf::idleness

int main(int argc, char** argv) {
  // The study writes counters.csv next to cases.csv: make the results directory explicit for bench_main.
  std::vector<std::string> args(argv, argv + argc);
  std::string out_dir;
  bool has_out = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--out" && i + 1 < args.size()) {
      has_out = true;
      out_dir = args[i + 1];
    }
    if (args[i].rfind("--out=", 0) == 0) {
      has_out = true;
      out_dir = args[i].substr(6);
    }
  }
  if (!has_out) {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
    out_dir = "results/runs/" + std::string(buf) + "-idleness";
    args.push_back("--out");
    args.push_back(out_dir);
  }
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  kvf::frontier::blas_on_openmp();  // all BLAS parallelism through OpenMP (kernels/frontier/recompute.hpp)
  kvf::idleness::IdlenessStudy s(out_dir);
  return kvf::bench_main(int(args.size()), av.data(), s);
}
