// The study environment's lookups and the helpers the arms share.
#include <algorithm>
#include <stdexcept>

#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/model_shapes.hpp"
#include "kvf/stats.hpp"

namespace kvf::frontier_study {

const md::ModelShape& Env::model(const std::string& name) const { return md::find_model(all, name); }

std::vector<std::string> Env::model_names(bool mla) const {
  std::vector<std::string> out;
  for (const auto* m : models)
    if (m->is_mla == mla && std::find(out.begin(), out.end(), m->name) == out.end()) out.push_back(m->name);
  return out;
}

const md::ModelShape* Env::first_gqa() const {
  for (const auto* m : models)
    if (!m->is_mla) return m;
  return nullptr;
}

fr::LayerWeights& Env::weights(const md::ModelShape& m) {
  auto& w = layer_weights[m.name];
  if (!w) w = std::make_shared<fr::LayerWeights>(fr::make_layer_weights(m, kSeed + 10));
  return *w;
}

const fr::DirectFile& Env::file() {
  if (!tier_file) tier_file = kvf::study::make_tier_file(file_dir, file_bytes, kSeed + 30);
  return *tier_file;
}

std::vector<std::string> texts(const std::vector<int>& v) {
  std::vector<std::string> out;
  for (int x : v) out.push_back(std::to_string(x));
  return out;
}

double est(const Env& env, double t, double setup_s, int modes) {
  const double sampling = env.quick ? kvf::kQuickBudgetS : kvf::StopRule{}.budget_s;
  return setup_s + modes * (2 * t + std::max(std::min(sampling, 1000 * t), 5 * t)) + 0.02;
}

std::size_t kv_page_bytes(const md::ModelShape& m, int T) {
  return std::size_t(fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token()));
}

std::vector<Param> page_columns(const md::ModelShape& m, int T, int P, int L) {
  const std::int64_t kvb = fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token());
  const std::int64_t fp8 = fr::resident_bytes(fr::Resident::kv_fp8, T, m.hidden, m.kv_values_per_token());
  return {{"pages", i2s(P)},
          {"rows", i2s(std::int64_t(T) * P)},
          {"layers", i2s(L)},
          {"kv_bytes_per_page", i2s(kvb * L)},
          {"kv_fp8_bytes_per_page", i2s(fp8 * L)}};
}

namespace {
kvf::Product with_launch_of(kvf::Product prod, const std::vector<std::string>& values) {
  return kvf::study::with_launch({std::move(prod)}, values).front();
}
}  // namespace

std::vector<kvf::Axis> launch_axes(std::vector<kvf::Axis> axes, const Env& env) {
  if (env.gpu) axes.push_back(kvf::study::launch_axis());
  return axes;
}

kvf::Grid launch_rows(const kvf::Grid& g) {
  const auto& both = kvf::study::launch_values();
  const std::vector<std::string> eager{both.front()};
  kvf::Grid out;
  for (const auto& prod : g) {
    const auto list = [&](const char* axis) {
      return std::find_if(prod.lists.begin(), prod.lists.end(), [&](const auto& l) { return l.first == axis; });
    };
    const auto tokens = list("tokens"), pages = list("pages");
    const bool small = tokens != prod.lists.end() && tokens->second.size() == 1 && std::stoll(tokens->second[0]) <= 128;
    const bool one_page = pages != prod.lists.end() &&
                          std::find(pages->second.begin(), pages->second.end(), "1") != pages->second.end();
    if (!small || !one_page) {
      out.push_back(with_launch_of(prod, eager));
      continue;
    }
    kvf::Product first = prod, rest = prod;
    const auto at = std::size_t(pages - prod.lists.begin());
    first.lists[at].second = {"1"};
    out.push_back(with_launch_of(first, both));
    std::erase(rest.lists[at].second, std::string("1"));
    if (!rest.lists[at].second.empty()) out.push_back(with_launch_of(rest, eager));
  }
  return out;
}

std::function<std::string(const kvf::Point&)> launch_named(std::string pattern) {
  return [pattern = std::move(pattern)](const kvf::Point& p) {
    return kvf::format_name(pattern, p) + kvf::study::launch_suffix(p);
  };
}

Buffer host_view(const void* p, std::size_t bytes) {
  Buffer b;
  b.ptr = const_cast<void*>(p);
  b.bytes = bytes;
  b.kind = MemKind::pageable_host;
  return b;
}

Buffer sub(const Buffer& b, std::size_t off, std::size_t bytes) {
  Buffer s = b;
  s.ptr = static_cast<char*>(b.ptr) + off;
  s.bytes = bytes;
  return s;
}

BufferHandle upload(Backend& be, const void* p, std::size_t bytes) {
  BufferHandle d(be, std::max<std::size_t>(bytes, 16), MemKind::device);
  if (bytes) be.copy(d.get(), host_view(p, bytes), bytes);
  return d;
}

void download(Backend& be, void* p, const BufferHandle& d, std::size_t bytes) { be.copy(host_view(p, bytes), d.get(), bytes); }

}  // namespace kvf::frontier_study
