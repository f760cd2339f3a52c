#include "figures_out.hpp"

#include "kvf/csv.hpp"
#include "kvf/results.hpp"

namespace kvf::attention {

namespace {

std::string num(double v) { return kvf::csv_number(v); }
std::string u(std::uint64_t v) { return std::to_string(v); }

void write_csv(const std::filesystem::path& p, const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows) {
  std::string s = kvf::csv_line(header);
  for (const auto& r : rows) s += kvf::csv_line(r);
  kvf::write_file_atomically(p, s);
}

}  // namespace

void FigureFiles::add(const quality::LayerFigures& lf) {
  namespace q = quality;
  for (const auto& r : lf.locality) loc_.push_back({u(r.layer), u(r.head), u(r.sink), u(r.window), num(r.mass)});
  for (const auto& r : lf.entropy) ent_.push_back({u(r.layer), u(r.head), num(r.nats), num(r.normalized)});
  per_layer_.push_back(lf.layer_entropy);
  layer_rows_.push_back({u(lf.layer_entropy.layer), num(lf.layer_entropy.nats), num(lf.layer_entropy.normalized)});
  for (const auto& r : lf.selection.rows)
    sel_.push_back({u(r.layer), u(r.head), q::to_string(r.arm), u(r.block), num(r.keep), u(r.budget), num(r.recall),
                    num(r.out_error)});
  for (const auto& r : lf.selection.needles)
    ndl_.push_back({u(r.layer), u(r.head), u(r.pos), u(r.len), num(r.depth_pct), q::to_string(r.arm), u(r.block),
                    num(r.keep), u(r.budget), num(r.mass), num(r.kept_mass), num(r.all_kept)});
  // The same sweep at the same context leaves the same budgets out in every layer: said once.
  if (per_layer_.size() == 1)
    for (const auto& s : lf.selection.skipped) skipped_.push_back({{"block", s.block}, {"keep", s.keep}, {"why", s.why}});
}

void FigureFiles::write(const std::filesystem::path& dir, nlohmann::json meta, double threshold, bool needles) const {
  make_directory(dir, "--out");
  write_csv(dir / "locality.csv", {"layer", "head", "sink", "window", "mass"}, loc_);
  write_csv(dir / "entropy.csv", {"layer", "head", "nats", "normalized"}, ent_);
  write_csv(dir / "layer_entropy.csv", {"layer", "nats", "normalized"}, layer_rows_);
  write_csv(dir / "selection.csv", {"layer", "head", "arm", "block", "keep", "budget", "recall", "out_error"}, sel_);
  if (needles)
    write_csv(dir / "needle.csv", {"layer", "head", "pos", "len", "depth_pct", "arm", "block", "keep", "budget", "mass",
                                   "kept_mass", "all_kept"}, ndl_);
  const auto b = quality::entropy_boundary(per_layer_, threshold);
  meta["schema"] = "kvfrontier attention quality v1";
  // Provenance, as every results directory has it: which build wrote these figures, and when.
  meta["suite_version"] = kvf::suite_version();
  meta["git_sha"] = kvf::git_sha();
  meta["written_utc"] = kvf::utc_now();
  meta["entropy_boundary"] = {{"threshold", threshold}, {"first_below", b.first_below},
                              {"largest_drop", b.largest_drop}, {"drop", b.drop}};
  meta["skipped_budgets"] = skipped_;
  kvf::write_file_atomically(dir / "meta.json", meta.dump(2) + "\n");
}

}  // namespace kvf::attention
