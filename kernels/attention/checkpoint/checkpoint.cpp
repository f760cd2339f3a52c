// Checkpoint directories and token-id files (kvf/attention/checkpoint.hpp).

#include "kvf/attention/checkpoint.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf::attention {

namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// A shard named by the index must be a plain file name inside the directory: the index is untrusted, and
// "../../etc/passwd" or an absolute path would read outside it.
void check_shard_name(const std::string& name, const std::string& index) {
  const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos;
  if (!plain)
    throw UsageError(index + ": weight_map names file '" + shown_value(name) +
                     "'; shards must be plain file names inside the model directory");
}

}  // namespace

std::string layer_tensor(int layer, std::string_view suffix) {
  return "model.layers." + std::to_string(layer) + "." + std::string(suffix);
}

Checkpoint::Checkpoint(const fs::path& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(dir.string() + ": not a directory (expected a Hugging Face model directory)");
  config_ = read_hf_config(dir);
  const fs::path index = dir / "model.safetensors.index.json", single = dir / "model.safetensors";
  if (input_exists(index)) {
    const std::string src = index.string();
    const nlohmann::json j = read_json_input(index);
    const auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (!j.is_object() || wm == j.end() || !wm->is_object() || wm->empty())
      throw UsageError(src + ": no weight_map (an object from tensor name to shard file)");
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string())
        throw UsageError(src + ": weight_map '" + shown_value(tensor) + "' is " + file.type_name() + ", expected a file name");
      const std::string f = file.get<std::string>();
      check_shard_name(f, src);
      auto it = by_file.find(f);
      if (it == by_file.end()) {
        if (!input_exists(dir / f)) throw UsageError(src + ": weight_map names '" + shown_value(f) + "', which is not in " + dir.string());
        files_.push_back(std::make_unique<SafetensorsFile>(dir / f));
        it = by_file.emplace(f, files_.back().get()).first;
      }
      if (!it->second->header().find(tensor))
        throw UsageError(src + ": weight_map puts tensor '" + shown_value(tensor) + "' in " + f + ", whose header does not hold it");
      where_.emplace(tensor, it->second);
    }
  } else if (input_exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& t : files_.back()->header().tensors) where_.emplace(t.name, files_.back().get());
  } else {
    throw UsageError(dir.string() + ": neither model.safetensors nor model.safetensors.index.json (only safetensors "
                     "checkpoints are read; convert .bin/.pth ones with transformers' save_pretrained)");
  }
}

bool Checkpoint::has(const std::string& name) const { return where_.count(name) != 0; }

TensorView Checkpoint::tensor(const std::string& name, const std::vector<std::int64_t>& shape) const {
  const auto it = where_.find(name);
  if (it == where_.end())
    throw UsageError(dir_.string() + ": tensor '" + name + "' is not in the checkpoint (" + config_.architecture +
                     " needs it)");
  TensorView v = it->second->view(name);
  if (v.info->shape != shape)
    throw UsageError(v.file + ": tensor '" + name + "' has shape " + shape_text(v.info->shape) + ", config.json implies " +
                     shape_text(shape));
  if (v.info->dtype != Dtype::bf16 && v.info->dtype != Dtype::f16 && v.info->dtype != Dtype::f32)
    throw UsageError(v.file + ": tensor '" + name + "' is " + dtype_name(v.info->dtype) +
                     "; a model's weights must be BF16, F16 or F32 (quantized checkpoints are not read)");
  return v;
}

std::uint64_t Checkpoint::mapped_bytes() const {
  std::uint64_t b = 0;
  for (const auto& f : files_) b += f->size();
  return b;
}

double Checkpoint::weight_bytes_per_param() const {
  const std::string name = layer_tensor(0, "self_attn.q_proj.weight");
  const auto it = where_.find(name);
  if (it == where_.end()) throw UsageError(dir_.string() + ": tensor '" + name + "' is not in the checkpoint");
  return double(dtype_bytes(it->second->header().find(name)->dtype));
}

std::vector<std::int32_t> parse_token_ids(const nlohmann::json& j, int vocab_size, const std::string& src) {
  if (!j.is_array())
    throw UsageError(src + ": expected a JSON array of token ids, got " + std::string(j.type_name()) +
                     " (write tokenizer(text)[\"input_ids\"], a flat list)");
  if (j.empty()) throw UsageError(src + ": no token ids (an empty array)");
  std::vector<std::int32_t> ids;
  ids.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& v = j[i];
    const bool whole = v.is_number_unsigned() || v.is_number_integer();
    if (!whole || v.get<std::int64_t>() < 0 || (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT32_MAX)))
      throw UsageError(src + ": position " + std::to_string(i) + ": " + shown_value(v.dump()) +
                       " is not a token id (a whole number in [0, " + std::to_string(vocab_size) + "))");
    const std::int64_t id = v.get<std::int64_t>();
    if (id >= vocab_size)
      throw UsageError(src + ": position " + std::to_string(i) + ": token id " + std::to_string(id) +
                       " is not below the vocabulary size " + std::to_string(vocab_size) +
                       " (a token file from another model's tokenizer?)");
    ids.push_back(std::int32_t(id));
  }
  return ids;
}

std::vector<std::int32_t> read_token_ids(const fs::path& file, int vocab_size) {
  return parse_token_ids(read_json_input(file), vocab_size, file.string());
}

}  // namespace kvf::attention
