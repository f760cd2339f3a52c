// Model shapes from data/models.json, shared by the frontier and idleness studies and their report
// plug-ins: load once (bounded, typed reads: kvf/input.hpp), look a model up by name.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "models.hpp"

namespace kvf::models {

// Throws kvf::UsageError naming the file (and field) when the file is missing or malformed.
std::vector<ModelShape> load_models(const std::string& path);
// Throws kvf::UsageError("--models X: unknown model; known: a, b, c").
const ModelShape& find_model(const std::vector<ModelShape>& all, std::string_view name);
// <source dir>/data/models.json as baked in at compile time (KVF_SOURCE_DIR), else "data/models.json".
std::string default_models_path();

}  // namespace kvf::models
