#include "dump_input.hpp"

#include <algorithm>
#include <string>

#include "kvf/errors.hpp"

namespace kvf::attention {

namespace {

std::string tensor_name(std::uint32_t layer, const char* what) {
  return "layers." + std::to_string(layer) + "." + what;
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

AttentionDump::AttentionDump(const std::filesystem::path& file)
    : file_(std::make_unique<SafetensorsFile>(file)) {
  const auto& h = file_->header();
  for (const auto& t : h.tensors) {
    const std::string& n = t.name;
    if (n.rfind("layers.", 0) != 0 || n.size() < 10 || n.compare(n.size() - 2, 2, ".q") != 0) continue;
    const std::string digits = n.substr(7, n.size() - 9);
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    layers_.push_back(static_cast<std::uint32_t>(std::stoul(digits)));
  }
  if (layers_.empty())
    throw UsageError(file.string() + ": no layers.<l>.q tensor (a dump holds layers.<l>.q, .k, .v and optionally .probs "
                     "per captured layer: studies/attention/README.md)");
  std::sort(layers_.begin(), layers_.end());
  if (const auto it = h.metadata.find("causal"); it != h.metadata.end()) {
    if (it->second != "true" && it->second != "false")
      throw UsageError(file.string() + ": __metadata__ causal " + kvf::shown_value(it->second) + ": true or false");
    causal_ = it->second == "true";
  }
}

quality::LayerAttention AttentionDump::layer(std::uint32_t layer, Store& store) const {
  const std::string& path = file_->path();
  auto need = [&](const char* what, std::size_t rank) {
    const TensorView v = file_->view(tensor_name(layer, what));
    if (!v.info) throw UsageError(path + ": layer " + std::to_string(layer) + " has no " + tensor_name(layer, what));
    if (v.info->shape.size() != rank)
      throw UsageError(path + ": " + v.info->name + " has shape " + shape_text(v.info->shape) + ", expected " +
                       std::to_string(rank) + " dimensions");
    for (const auto d : v.info->shape)
      if (d < 1 || d > 0x7fffffff)
        throw UsageError(path + ": " + v.info->name + " has shape " + shape_text(v.info->shape) +
                         ": every dimension in [1, 2^31)");
    return v;
  };
  const TensorView q = need("q", 3), k = need("k", 3), v = need("v", 3);
  const auto& qs = q.info->shape;
  const auto& ks = k.info->shape;
  if (v.info->shape != ks || ks[2] != qs[2] || ks[0] < 1 || qs[0] % ks[0] != 0)
    throw UsageError(path + ": layer " + std::to_string(layer) + " shapes disagree: q " + shape_text(qs) + ", k " +
                     shape_text(ks) + ", v " + shape_text(v.info->shape) +
                     " (expected q [q_heads, M, d], k and v [kv_heads, C, d], q_heads a multiple of kv_heads)");
  store.q.resize(static_cast<std::size_t>(q.info->numel()));
  store.k.resize(static_cast<std::size_t>(k.info->numel()));
  store.v.resize(static_cast<std::size_t>(v.info->numel()));
  to_f32(q, store.q.data());
  to_f32(k, store.k.data());
  to_f32(v, store.v.data());
  store.probs.clear();
  if (const TensorView p = file_->view(tensor_name(layer, "probs")); p.info) {
    const std::vector<std::int64_t> want = {qs[0], qs[1], ks[1]};
    if (p.info->shape != want)
      throw UsageError(path + ": " + p.info->name + " has shape " + shape_text(p.info->shape) + ", expected " +
                       shape_text(want) + " [q_heads, M, C]");
    store.probs.resize(static_cast<std::size_t>(p.info->numel()));
    to_f32(p, store.probs.data());
  }
  quality::LayerAttention a;
  a.layer = layer;
  a.hq = static_cast<std::uint32_t>(qs[0]);
  a.rows = static_cast<std::uint32_t>(qs[1]);
  a.d = static_cast<std::uint32_t>(qs[2]);
  a.hkv = static_cast<std::uint32_t>(ks[0]);
  a.ctx = static_cast<std::uint32_t>(ks[1]);
  a.causal = causal_;
  a.q = store.q;
  a.k = store.k;
  a.v = store.v;
  a.probs = store.probs;
  return a;
}

}  // namespace kvf::attention
