// The frontier study: recompute a KV page or fetch it? Measures both sides of the crossover (README.md).
// This file holds its flags, their checks, the arm list and main(); each arm lives in its arm_*.cpp.
//
// Shared or oversubscribed CPU (load average above the core count): OpenMP's default spin-then-sleep
// wait lets an idle worker lose its core, and the next parallel region (a 2 MiB host copy, a GEMM)
// can wait a whole scheduler period for it (~24 ms measured on the 2-core VM, against ~0.1 ms for the
// copy). Run with OMP_WAIT_POLICY=passive there; it must be in the environment at start (libgomp reads
// it when loaded), and on a dedicated machine the default is the better choice.
#include <sys/statvfs.h>

#include <algorithm>
#include <map>

#include "frontier.hpp"
#include "kvf/errors.hpp"
#include "kvf/onednn_isa_flag.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/model_shapes.hpp"
#include "kvf/units.hpp"
#include "recompute.hpp"

namespace kvf::frontier_study {

kvf::ArmList<Env> ceiling_arms(const Env& env) { return kvf::ArmList<Env>({gemm_ceiling_arm(env)}); }

// What --arms takes, in run order. Two declarations may share a name (file: the tier's streaming reads,
// then one page from a random offset): --arms selects both.
kvf::ArmList<Env> frontier_arms(const Env& env) {
  return kvf::ArmList<Env>({x_arm(env), xq_arm(env), layers_arm(env), mla_arm(env), copy_arm(env),
                            granularity_arm(env), file_arm(env), file_page_arm(env), overlap_arm(env),
                            link_arm(env)});
}
// The first arms of the list (x, xq, layers) run model by model: one model's recompute rows together,
// then the next model's.
constexpr std::size_t kModelMajorArms = 3;

namespace {

std::vector<std::string> unique_names(const kvf::ArmList<Env>& list) {
  std::vector<std::string> out;
  for (const auto& n : list.names())
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

std::string arms_help() {
  const auto list = frontier_arms(Env{});
  std::string s = "arms to run (default all):";
  for (const auto& n : unique_names(list)) {
    std::string doc;
    for (const auto& a : list.all())
      if (a.name == n) doc += (doc.empty() ? "" : "; ") + a.doc;
    s += "\n  " + n + ": " + doc;
  }
  return s;
}

// Each item through kvf::flag_int (plain digits in [lo, hi], a multiple of `multiple`).
std::vector<int> parse_ints(const std::vector<std::string>& texts, const char* flag, int lo, int hi, int multiple,
                            const std::string& allowed) {
  std::vector<int> out;
  for (const auto& t : texts) out.push_back(kvf::flag_int(t, flag, lo, hi, multiple, allowed));
  return out;
}

class FrontierStudy final : public kvf::Study {
 public:
  std::string name() const override { return "frontier"; }

  void add_options(kvf::StudyFlags& flags) override {
    flags_ = flags;
    flags.list("--models", models_, "models from data/models.json: names, aliases or Hugging Face ids, case-blind (default Llama-3.1-8B,DeepSeek-V3)");
    flags.text("--models-file", models_file_, "model shape file (default: models.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)");
    flags.list("--tokens", tokens_text_, "tokens per page T, 16..4096, multiple of 16 (default per arm)");
    flags.list("--pages", pages_text_, "pages per recompute call P, 1..64 (default per arm)");
    flags.list("--layers", layers_text_, "layers L for the through-layers arm, 1..model layers");
    flags.list("--prefix", prefix_text_, "resident prefix N tokens for the through-layers arm, 0..1048576");
    flags.list("--xdtypes", xdtypes_, "X forms of the quantized arm: int8,int4 (default both)");
    flags.list("--arms", arms_, arms_help());
    flags.list("--copy-sizes", copy_sizes_, "copy sizes of the transfer arms, multiples of 4 KiB in 4 KiB .. 1 GiB, "
               "e.g. 32KiB,2MiB");
    kvf::study::add_file_dir_option(flags, env_.file_dir, "the file tier arms (file, overlap)");
    kvf::study::add_onednn_isa_option(flags, onednn_isa_);
    flags.text("--file-size", file_size_text_, "size of the file tier's file, a multiple of 2 MiB that fits the "
               "free space of --file-dir (default 256MiB; --quick 64MiB)");
  }

  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override;

 private:
  std::vector<std::string> models_, xdtypes_, arms_, copy_sizes_;
  std::string models_file_, file_size_text_, onednn_isa_;
  // Numbers are kept as text and parsed in cases(): plain digits in a stated range, one clear line otherwise.
  std::vector<std::string> tokens_text_, pages_text_, layers_text_, prefix_text_;
  kvf::StudyFlags flags_;  // its command line outlives cases(): bench_main owns it
  Env env_;                  // outlives the cases, which read it
  kvf::UserLists user_;

  bool selected(const std::string& arm) const {
    return arms_.empty() || std::find(arms_.begin(), arms_.end(), arm) != arms_.end();
  }
  void check_flags(Backend& be);
  void check_flags_have_arms(const kvf::Target& t) const;
  void check_named_arms_have_cases(const kvf::Target& t) const;
  void check_files();
  void check_memory(const std::vector<int>& tokens, const std::vector<int>& pages, const std::vector<int>& layers);
};

// Every flag value is checked before any case exists: one line naming the flag, the value and what is
// allowed. The order of the checks decides which of several bad flags is reported.
void FrontierStudy::check_flags(Backend& be) {
  env_.be = &be;
  env_.gpu = be.name() == "cuda";
#if !defined(KVF_HAVE_CUDA)
  if (env_.gpu) throw kvf::UsageError("--backend cuda: this build of bench_frontier has no CUDA kernels");
#endif
  // A flag given with an empty value is refused, never taken for "not given".
  if (flags_.given("--models-file") && models_file_.empty()) kvf::bad_flag("--models-file", "", "the path of a model shape file");
  if (flags_.given("--file-dir") && env_.file_dir.empty()) kvf::study::check_file_dir_flag(env_.file_dir);
  kvf::study::apply_onednn_isa_flag(onednn_isa_, flags_.given(kvf::study::kOnednnIsaFlag));
  if (flags_.given("--file-size") && file_size_text_.empty())
    kvf::bad_flag("--file-size", "", "a size, a multiple of 2 MiB (e.g. 64MiB, 1GiB)");
  kvf::check_arm_names("--arms", arms_, unique_names(frontier_arms(env_)));
  kvf::check_arms_here("--arms", arms_, frontier_arms(env_).names_on(env_.gpu), env_.gpu);
  const auto tokens = parse_ints(tokens_text_, "--tokens", 16, 4096, fr::kBlockTokens,
                                 "tokens per page must be a whole number in 16..4096 and a multiple of 16");
  const auto pages = parse_ints(pages_text_, "--pages", 1, 64, 1, "pages per call must be a whole number in 1..64");
  env_.prefix = parse_ints(prefix_text_, "--prefix", 0, 1 << 20, 1, "prefix must be a whole number of tokens in 0..1048576");
  const auto layers = parse_ints(layers_text_, "--layers", 1, 1 << 16, 1, "must be a whole number in 1..the model's layers");
  for (const auto& x : xdtypes_)
    if (x != "int8" && x != "int4") kvf::bad_flag("--xdtypes", x, "allowed: int8, int4");
  env_.xdtypes = xdtypes_.empty() ? std::vector<std::string>{"int8", "int4"} : xdtypes_;
  env_.all = md::load_models(models_file_.empty() ? md::default_models_path() : models_file_);
  std::vector<std::string> names = !models_.empty() ? models_ : std::vector<std::string>{"Llama-3.1-8B", "DeepSeek-V3"};
  if (env_.gpu && models_.empty() && !env_.quick) {
    names.clear();
    for (const auto& m : env_.all) names.push_back(m.name);
  }
  for (const auto& n : names) env_.models.push_back(&md::find_model(env_.all, n));
  for (int L : layers)
    for (const auto* m : env_.models)
      if (!m->is_mla && L > m->layers)
        throw kvf::UsageError("--layers " + std::to_string(L) + ": " + m->name + " has " + std::to_string(m->layers) +
                              " layers");
  for (const auto& s : copy_sizes_) {
    if (s.empty()) kvf::bad_flag("--copy-sizes", s, "a size, a multiple of 4 KiB between 4 KiB and 1 GiB (e.g. 32KiB)");
    const std::size_t b = kvf::parse_bytes(s, "--copy-sizes");
    if (b < 4096 || b > (std::size_t(1) << 30) || b % 4096)
      kvf::bad_flag("--copy-sizes", s, "must be a multiple of 4 KiB between 4 KiB and 1 GiB");
    env_.copy_sizes.push_back(std::to_string(b));
  }
  env_.file_bytes = env_.quick ? std::size_t(64) << 20 : std::size_t(256) << 20;
  if (!file_size_text_.empty()) {
    env_.file_bytes = kvf::parse_bytes(file_size_text_, "--file-size");
    if (env_.file_bytes % (std::size_t(2) << 20) || env_.file_bytes < (std::size_t(2) << 20))
      kvf::bad_flag("--file-size", file_size_text_, "must be a multiple of 2 MiB");
  }
  env_.mem_avail = double(kvf::host_memory_bytes() ? kvf::host_memory_bytes() : (std::size_t(8) << 30)) * 0.6;
  check_files();
  if (env_.gpu) env_.gpu_memory_bytes = be.info().memory_bytes;
  check_memory(tokens, pages, layers);
  // The user's lists replace the arms' grids (kvf::arm_grid); numbers as the case names print them.
  const std::pair<const char*, std::vector<std::string>> lists[] = {
      {"--tokens", texts(tokens)}, {"--pages", texts(pages)}, {"--layers", texts(layers)},
      {"--prefix", texts(env_.prefix)}, {"--copy-sizes", env_.copy_sizes}};
  for (const auto& [flag, values] : lists)
    if (!values.empty()) user_[flag] = values;
}

void FrontierStudy::check_files() {
  if (!(selected("file") || selected("overlap")) || env_.gpu) return;
  kvf::study::check_file_dir_flag(env_.file_dir);
  // The tier file is written whole at setup: one that cannot fit would fill the disk mid-run.
  struct statvfs fs {};
  if (selected("file") && ::statvfs(env_.file_dir.c_str(), &fs) == 0) {
    const double free_bytes = double(fs.f_bavail) * double(fs.f_frsize);
    if (double(env_.file_bytes) > 0.9 * free_bytes)
      kvf::bad_flag("--file-size",
                    file_size_text_.empty() ? kvf::format_bytes(double(env_.file_bytes)) : file_size_text_,
                    "more than 90% of the free space of --file-dir " + kvf::shown_value(env_.file_dir) + " (" +
                        kvf::format_bytes(free_bytes) + " free)");
  }
}

// The largest recompute batch and the through-layers prefix must fit.
void FrontierStudy::check_memory(const std::vector<int>& tokens, const std::vector<int>& pages,
                                 const std::vector<int>& layers) {
  const double dev_mem = env_.gpu ? double(env_.gpu_memory_bytes) * 0.8 : env_.mem_avail;
  for (const auto* m : env_.models) {
    for (int T : tokens)
      for (int P : pages) {
        const double need = double(T) * P * m->hidden * (env_.gpu ? 2 + 8 : 2 + 4 + 8);
        if (need > dev_mem)
          throw kvf::UsageError("--tokens " + std::to_string(T) + " --pages " + std::to_string(P) + ": " + m->name +
                                " needs " + kvf::format_bytes(need) + " for X and the GEMM output, more than the " +
                                kvf::format_bytes(dev_mem) + " available");
      }
    if (m->is_mla) continue;
    for (int L : layers)
      for (int N : env_.prefix) {
        const double need = double(fr::prefix_bytes(*m, L, N, 4096));
        if (need > env_.mem_avail)
          throw kvf::UsageError("--prefix " + std::to_string(N) + ": the fp32 prefix K/V of " + std::to_string(L) +
                                " layers of " + m->name + " needs " + kvf::format_bytes(need) + ", more than the " +
                                kvf::format_bytes(env_.mem_avail) + " available");
      }
  }
}

// A sweep flag that only arms outside --arms read (or none on this backend) would be dropped in silence: refused.
void FrontierStudy::check_flags_have_arms(const kvf::Target& t) const {
  std::map<std::string, std::vector<std::string>> readers;  // flag -> the arms on this backend that read it
  const auto add = [&](const std::string& flag, const std::string& arm) {
    auto& v = readers[flag];
    if (std::find(v.begin(), v.end(), arm) == v.end()) v.push_back(arm);
  };
  const auto list = frontier_arms(env_);
  for (const auto& a : list.all()) {
    if (!(t.gpu ? a.on_gpu : a.on_cpu)) continue;
    for (const auto& ax : a.axes)
      if (!ax.flag.empty()) add(ax.flag, a.name);
    if (a.name == "xq") add("--xdtypes", a.name);
    if (a.name == "granularity") add("--copy-sizes", a.name);  // its chunks, from the Env (granularity_arm)
    if (!t.gpu && (a.name == "file" || a.name == "overlap")) add("--file-size", a.name);
  }
  const std::map<std::string, std::string> shown = {{"--xdtypes", kvf::join_names(xdtypes_, ",")},
                                                    {"--file-size", file_size_text_}};
  for (const char* flag : {"--tokens", "--pages", "--layers", "--prefix", "--copy-sizes", "--xdtypes", "--file-size"}) {
    if (!flags_.given(flag)) continue;
    const auto it = readers.find(flag);
    const std::vector<std::string> none;
    const auto& by = it == readers.end() ? none : it->second;
    if (std::any_of(by.begin(), by.end(), [&](const std::string& a) { return selected(a); })) continue;
    const auto u = user_.find(flag);
    const std::string value = u != user_.end() ? kvf::join_names(u->second, ",") : shown.at(flag);
    kvf::bad_flag(flag, value,
                  by.empty() ? std::string("no arm on this backend reads it")
                             : "read only by " + kvf::join_names(by) + ", which --arms " + kvf::join_names(arms_, ",") +
                                   " leaves out (the run would ignore it)");
  }
}

// An arm named in --arms that has no case with the other flags (a model it does not take) would run nothing and
// say nothing: refused, outside --quick (whose subset leaves arms out by design).
void FrontierStudy::check_named_arms_have_cases(const kvf::Target& t) const {
  if (t.quick) return;
  const auto list = frontier_arms(env_);
  std::vector<std::string> models;
  for (const auto* m : env_.models) models.push_back(m->name);
  for (const auto& name : arms_) {
    bool any = false;
    for (const auto& a : list.all())
      if (a.name == name) any = any || !list.points(a, t, user_, env_).empty();
    if (!any)
      kvf::bad_flag("--arms", name,
                    "no case with the other flags (--models " + kvf::join_names(models, ",") +
                        ": a model it does not take, or sizes it does not run; --list shows the cases)");
  }
}

std::vector<std::unique_ptr<kvf::Case>> FrontierStudy::cases(const kvf::StudyContext& ctx) {
  env_.quick = ctx.quick;
  check_flags(*ctx.backend);
  const kvf::Target t{.gpu = env_.gpu, .quick = env_.quick};
  check_flags_have_arms(t);
  check_named_arms_have_cases(t);
  std::vector<std::unique_ptr<kvf::Case>> out;
  // The ceilings first: every figure of the arms is stated against them.
  const auto ceilings = ceiling_arms(env_);
  for (const auto& a : ceilings.all()) ceilings.add_cases(a, t, user_, env_, out);
  const auto list = frontier_arms(env_);
  const auto& arms = list.all();
  for (const auto& m : env_.model_names(false))
    for (std::size_t i = 0; i < kModelMajorArms; ++i) {
      if (!selected(arms[i].name)) continue;
      for (const auto& p : list.points(arms[i], t, user_, env_))
        if (p["model"] == m) out.push_back(list.make_case(arms[i], p, env_));
    }
  for (std::size_t i = kModelMajorArms; i < arms.size(); ++i)
    if (selected(arms[i].name)) list.add_cases(arms[i], t, user_, env_, out);
  return out;
}

}  // namespace
}  // namespace kvf::frontier_study

int main(int argc, char** argv) {
  kvf::frontier_study::FrontierStudy study;
  return kvf::bench_main(argc, argv, study);
}
