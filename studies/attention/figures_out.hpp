// The quality figures of every layer of one run gathered as CSV rows, then written beside a meta.json
// (studies/attention/README.md "What it writes"): shared by a checkpoint's forward pass and a user's dump.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/attention/quality.hpp"

namespace kvf::attention {

class FigureFiles {
 public:
  void add(const quality::LayerFigures& lf);
  // Writes the CSV files and meta.json (`meta` plus the entropy boundary at `threshold` and the budgets left out)
  // into `dir`, made when absent; needle.csv only with needles.
  void write(const std::filesystem::path& dir, nlohmann::json meta, double threshold, bool needles) const;
  std::size_t layers() const { return per_layer_.size(); }

 private:
  std::vector<std::vector<std::string>> loc_, ent_, layer_rows_, sel_, ndl_;
  std::vector<quality::LayerEntropy> per_layer_;
  nlohmann::json skipped_ = nlohmann::json::array();
};

}  // namespace kvf::attention
