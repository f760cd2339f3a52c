// Model shapes from data/models.json, shared by the frontier and idleness studies and their report
// plug-ins: load once (bounded, typed reads: kvf/input.hpp), look a model up by name or alias.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "kvf/names.hpp"
#include "models.hpp"

namespace kvf::models {

// Throws kvf::UsageError naming the file (and field) when the file is missing or malformed.
std::vector<ModelShape> load_models(const std::string& path);
// The model `name` names: its canonical name, an alias or its Hugging Face id, case-blind (kvf/names.hpp).
// Throws kvf::UsageError("<flag> X: unknown model; known: a, b, c") or, for an alias two models declare,
// "<flag> X: ambiguous model alias, names 2: a, b (give one of them)".
const ModelShape& find_model(const std::vector<ModelShape>& all, std::string_view name,
                             const std::string& flag = "--models");
// Each model's canonical name with its aliases and Hugging Face id, for kvf::resolve_name.
std::vector<NamedEntry> name_table(const std::vector<ModelShape>& all);
// models.json where kvf::data_file finds it (KVF_DATA_DIR, the install prefix, the build's source tree);
// UsageError naming the paths tried when it is nowhere.
std::string default_models_path();

}  // namespace kvf::models
