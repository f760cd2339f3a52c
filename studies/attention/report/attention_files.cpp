// Reading bench_attention's files for the report: the CSVs through the harness's CSV reader (kvf/table.hpp),
// meta.json through its bounded JSON reader (kvf/input.hpp). Columns are read by name (others are ignored, so a
// later bench_attention may add some); every value is checked against the range its definition allows
// (kernels/attention/quality/README.md), with a little slack on probabilities for fp32 sums.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "kvf/attention_report.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/study_report.hpp"
#include "kvf/table.hpp"

namespace kvf::report::attention {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSchema = "kvfrontier attention quality v1";
constexpr std::int64_t kMaxCount = std::int64_t{1} << 40;  // tokens, far above any context
constexpr std::int64_t kMaxHeads = 1 << 16;
// Far above bench_attention's sweeps, low enough that a hostile file cannot make a table of a million columns.
constexpr std::size_t kMaxDistinct = 64;
constexpr double kProbSlack = 1e-3;  // a probability summed in fp32 may pass 1 by rounding

std::int64_t whole(const CsvTable& t, std::size_t i, const char* column, std::int64_t lo, std::int64_t hi) {
  const auto v = parse_integer(t, i, column, lo, hi);
  if (!v) throw UsageError(t.where(i) + ": column '" + column + "': empty (a whole number is needed)");
  return *v;
}

int layer_of(const CsvTable& t, std::size_t i) { return static_cast<int>(whole(t, i, "layer", 0, kMaxLayers - 1)); }
int head_of(const CsvTable& t, std::size_t i) { return static_cast<int>(whole(t, i, "head", 0, kMaxHeads - 1)); }

std::string arm_of(const CsvTable& t, std::size_t i) {
  const std::string& a = t.at(i, "arm");
  if (a != "block" && a != "token" && a != "oracle")
    throw UsageError(t.where(i) + ": column 'arm': '" + a + "' (allowed: block, token, oracle)");
  return a;
}

// The table of one file, its required columns checked, a torn last row passed on.
CsvTable table(Run& r, const fs::path& root, const char* file, std::initializer_list<const char*> columns) {
  const fs::path p = r.dir / file;
  if (!input_exists(p)) throw UsageError(p.string() + ": no such file (bench_attention --out writes it beside meta.json)");
  CsvTable t = read_csv_table(p.string(), root);
  if (t.torn) r.read_around.push_back(*t.torn);
  for (const char* c : columns) t.require_column(c);
  if (t.rows.empty()) throw UsageError(p.string() + ": no rows (bench_attention writes one per layer and head)");
  return t;
}

// A key seen twice in one file: which row is right cannot be told.
template <class Key>
void once(std::map<Key, std::string>& seen, const Key& k, const CsvTable& t, std::size_t i) {
  const auto [it, fresh] = seen.emplace(k, t.where(i));
  if (!fresh) throw UsageError(t.where(i) + ": the same row again (first at " + it->second + "): which is right cannot be told");
}

template <class T>
void distinct_cap(std::set<T>& s, const T& v, const CsvTable& t, std::size_t i, const char* what) {
  s.insert(v);
  if (s.size() > kMaxDistinct)
    throw UsageError(t.where(i) + ": more than " + std::to_string(kMaxDistinct) + " distinct " + what +
                     " (the report tabulates each)");
}

void read_meta(Run& r, const fs::path& root) {
  const fs::path p = r.dir / "meta.json";
  const std::string src = p.string();
  const nlohmann::json j = read_json_input(p, root);
  if (!j.is_object()) throw UsageError(src + ": expected a JSON object");
  if (json_string(j, "schema", src, "schema").value_or("") != kSchema)
    throw UsageError(src + ": key 'schema': not '" + std::string(kSchema) + "' (not bench_attention's meta.json)");
  auto count = [&](const char* key, std::int64_t lo, std::int64_t hi) {
    const auto v = json_integer(j, key, src, key, lo, hi);
    if (!v) throw UsageError(src + ": key '" + key + "': missing (a whole number is needed)");
    return *v;
  };
  r.source = json_string(j, "source", src, "source").value_or("");
  if (r.source != "checkpoint" && r.source != "dump")
    throw UsageError(src + ": key 'source': '" + r.source + "' (allowed: checkpoint, dump)");
  r.context = count("context", 1, kMaxCount);
  r.queries = count("queries", 1, r.context);
  r.q_heads = count("q_heads", 1, kMaxHeads);
  r.kv_heads = count("kv_heads", 1, r.q_heads);
  r.head_dim = count("head_dim", 1, kMaxHeads);
  if (r.source == "checkpoint") {
    const std::string dir = json_string(j, "model_dir", src, "model_dir").value_or("");
    std::string name = fs::path(dir).filename().string();
    if (name.empty()) name = fs::path(dir).parent_path().filename().string();  // "/models/x/"
    const std::string arch = json_string(j, "architecture", src, "architecture").value_or("");
    r.model = (name.empty() ? std::string("a checkpoint") : name) + (arch.empty() ? "" : " (" + arch + ")");
    r.prompt = json_string(j, "tokens_file", src, "tokens_file").value_or("?");
  } else {
    r.model = "dump " + json_string(j, "dump", src, "dump").value_or("?");
    r.prompt = "the dump's";
  }
  if (!j.contains("entropy_boundary") || !j["entropy_boundary"].is_object())
    throw UsageError(src + ": key 'entropy_boundary': expected an object");
  const auto& b = j["entropy_boundary"];
  const auto thr = json_number(b, "threshold", src, "entropy_boundary.threshold", 0, 1);
  if (!thr || !(*thr > 0 && *thr < 1))
    throw UsageError(src + ": key 'entropy_boundary.threshold': missing or outside (0, 1)");
  r.threshold = *thr;
  r.meta_first_below = json_integer(b, "first_below", src, "entropy_boundary.first_below", -1, kMaxLayers).value_or(-1);
  r.meta_largest_drop = json_integer(b, "largest_drop", src, "entropy_boundary.largest_drop", -1, kMaxLayers).value_or(-1);
  if (j.contains("skipped_budgets") && !j["skipped_budgets"].is_null()) {
    const auto& s = j["skipped_budgets"];
    if (!s.is_array() || s.size() > 1024) throw UsageError(src + ": key 'skipped_budgets': expected an array of at most 1024");
    for (const auto& e : s) {
      if (!e.is_object()) throw UsageError(src + ": key 'skipped_budgets': expected objects {block, keep, why}");
      const auto blk = json_integer(e, "block", src, "skipped_budgets.block", 1, kMaxCount);
      const auto keep = json_number(e, "keep", src, "skipped_budgets.keep", 0, 1);
      r.skipped.push_back("block " + (blk ? std::to_string(*blk) : std::string("?")) + " keep " +
                          (keep ? keep_text(*keep) : std::string("?")) + ": " +
                          json_string(e, "why", src, "skipped_budgets.why").value_or(""));
    }
  }
}

void read_locality(Run& r, const fs::path& root) {
  const CsvTable t = table(r, root, "locality.csv", {"layer", "head", "sink", "window", "mass"});
  std::map<std::tuple<int, int, std::int64_t>, std::string> seen;
  std::set<std::int64_t> ws;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    LocalityRow w{layer_of(t, i), head_of(t, i), whole(t, i, "sink", 1, r.context), whole(t, i, "window", 0, r.context),
                  cell_number(t, i, "mass", 0, 1 + kProbSlack)};
    once(seen, std::make_tuple(w.layer, w.head, w.window), t, i);
    distinct_cap(ws, w.window, t, i, "windows");
    r.locality.push_back(w);
  }
}

void read_entropy(Run& r, const fs::path& root) {
  const double max_nats = std::log(static_cast<double>(r.context)) + kProbSlack;
  const CsvTable t = table(r, root, "entropy.csv", {"layer", "head", "nats", "normalized"});
  std::map<std::pair<int, int>, std::string> seen;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    EntropyRow e{layer_of(t, i), head_of(t, i), cell_number(t, i, "nats", 0, max_nats), cell_number(t, i, "normalized", 0, 1 + kProbSlack)};
    once(seen, std::make_pair(e.layer, e.head), t, i);
    r.entropy.push_back(e);
  }
  const CsvTable l = table(r, root, "layer_entropy.csv", {"layer", "nats", "normalized"});
  std::map<int, std::string> lseen;
  for (std::size_t i = 0; i < l.rows.size(); ++i) {
    LayerEntropyRow e{layer_of(l, i), cell_number(l, i, "nats", 0, max_nats), cell_number(l, i, "normalized", 0, 1 + kProbSlack)};
    once(lseen, e.layer, l, i);
    r.layers.push_back(e);
  }
  std::sort(r.layers.begin(), r.layers.end(), [](const auto& a, const auto& b) { return a.layer < b.layer; });
}

void read_selection(Run& r, const fs::path& root) {
  const CsvTable t = table(r, root, "selection.csv", {"layer", "head", "arm", "block", "keep", "budget", "recall", "out_error"});
  std::map<std::tuple<int, int, std::string, std::int64_t, double>, std::string> seen;
  std::set<std::int64_t> blocks;
  std::set<double> keeps;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    SelectionRow s;
    s.layer = layer_of(t, i);
    s.head = head_of(t, i);
    s.arm = arm_of(t, i);
    s.block = whole(t, i, "block", 1, r.context);
    s.keep = cell_number(t, i, "keep", 0, 1);
    if (!(s.keep > 0)) throw UsageError(t.where(i) + ": column 'keep': 0 (allowed: a fraction in (0, 1])");
    s.budget = whole(t, i, "budget", 0, r.context);
    s.recall = cell_number(t, i, "recall", 0, 1 + kProbSlack);
    if (parse_number(t, i, "out_error")) s.out_error = cell_number(t, i, "out_error", 0, std::numeric_limits<double>::max());
    once(seen, std::make_tuple(s.layer, s.head, s.arm, s.block, s.keep), t, i);
    distinct_cap(blocks, s.block, t, i, "block sizes");
    distinct_cap(keeps, s.keep, t, i, "keep fractions");
    r.selection.push_back(std::move(s));
  }
}

void read_needles(Run& r, const fs::path& root) {
  if (!input_exists(r.dir / "needle.csv")) return;  // written only when --needle was given
  const CsvTable t = table(r, root, "needle.csv", {"layer", "head", "pos", "len", "depth_pct", "arm", "block", "keep",
                                                   "budget", "mass", "kept_mass", "all_kept"});
  std::map<std::tuple<int, int, std::int64_t, std::int64_t, std::string, std::int64_t, double>, std::string> seen;
  std::set<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    NeedleRow n;
    n.layer = layer_of(t, i);
    n.head = head_of(t, i);
    n.pos = whole(t, i, "pos", 0, r.context - 1);
    n.len = whole(t, i, "len", 1, r.context - n.pos);
    n.depth_pct = cell_number(t, i, "depth_pct", 0, 100);
    n.arm = arm_of(t, i);
    n.block = whole(t, i, "block", 1, r.context);
    n.keep = cell_number(t, i, "keep", 0, 1);
    n.budget = whole(t, i, "budget", 0, r.context);
    n.mass = cell_number(t, i, "mass", 0, 1 + kProbSlack);
    n.kept_mass = cell_number(t, i, "kept_mass", 0, 1 + kProbSlack);
    n.all_kept = cell_number(t, i, "all_kept", 0, 1);
    once(seen, std::make_tuple(n.layer, n.head, n.pos, n.len, n.arm, n.block, n.keep), t, i);
    distinct_cap(spans, std::make_pair(n.pos, n.len), t, i, "needles");
    r.needles.push_back(std::move(n));
  }
}

void read_decodes(Run& r, const fs::path& root) {
  if (!input_exists(r.dir / "needle_decode.csv")) return;  // written only when --answer was given
  const CsvTable t = table(r, root, "needle_decode.csv", {"arm", "block", "keep", "budget", "answer_tokens",
                                                          "matched_prefix", "exact_match"});
  std::map<std::tuple<std::string, std::int64_t, double>, std::string> seen;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    DecodeRow d;
    d.arm = t.at(i, "arm");
    if (d.arm != "dense" && d.arm != "block" && d.arm != "token")
      throw UsageError(t.where(i) + ": column 'arm': " + shown_value(d.arm) + " (allowed: dense, block, token)");
    d.block = whole(t, i, "block", 0, r.context);
    d.keep = cell_number(t, i, "keep", 0, 1);
    if (!(d.keep > 0)) throw UsageError(t.where(i) + ": column 'keep': 0 (allowed: a fraction in (0, 1])");
    d.budget = whole(t, i, "budget", 0, r.context);
    d.answer_tokens = whole(t, i, "answer_tokens", 1, kMaxCount);
    d.matched_prefix = whole(t, i, "matched_prefix", 0, d.answer_tokens);
    d.exact = whole(t, i, "exact_match", 0, 1) == 1;
    if (d.exact != (d.matched_prefix == d.answer_tokens))
      throw UsageError(t.where(i) + ": exact_match " + (d.exact ? "1" : "0") + " with " + std::to_string(d.matched_prefix) +
                       " of " + std::to_string(d.answer_tokens) + " answer tokens matched: they disagree");
    once(seen, std::make_tuple(d.arm, d.block, d.keep), t, i);
    r.decodes.push_back(std::move(d));
  }
}

}  // namespace

std::string keep_text(double keep) {
  const double inv = 1 / keep;
  if (std::abs(inv - std::round(inv)) < 1e-9 * inv) return "1/" + fmt(std::round(inv));
  return fmt(keep);
}

std::string Run::rests_on() const {
  std::string s = model + ", prompt " + prompt + " (" + md::tokens(static_cast<double>(context)) + " tokens, last " +
                  std::to_string(queries) + " queries, " + std::to_string(layers.size()) + " layers captured";
  if (!name.empty()) s += "; run " + name;
  return s + ")";
}

bool is_attention_output(const fs::path& dir) {
  if (!input_exists(dir / "meta.json")) return false;
  try {
    const nlohmann::json j = read_json_input(dir / "meta.json", dir);
    return j.is_object() && j.contains("schema") && j["schema"] == kSchema;
  } catch (const UsageError&) {
    return false;
  }
}

std::vector<fs::path> find_runs(const fs::path& results_dir) {
  // A suite results directory (cases.csv) is never one bench_attention output: its meta.json is not read here.
  if (!input_exists(results_dir / "cases.csv") && is_attention_output(results_dir)) return {results_dir};
  const fs::path top = results_dir / "attention";
  if (input_exists(top / "meta.json")) return {top};
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(top, ec)) return out;
  for (fs::directory_iterator it(top, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2) && !it->is_symlink(e2) && input_exists(it->path() / "meta.json")) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  if (out.size() > kMaxRuns) out.resize(kMaxRuns);
  return out;
}

Run read_run(const fs::path& dir, const fs::path& root) {
  Run r;
  r.dir = dir;
  if (dir.filename() != "attention") r.name = dir.filename().string();
  read_meta(r, root);
  read_locality(r, root);
  read_entropy(r, root);
  read_selection(r, root);
  read_needles(r, root);
  read_decodes(r, root);
  return r;
}

}  // namespace kvf::report::attention
