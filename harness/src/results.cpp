#include "kvf/results.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <system_error>

#include "kvf/errors.hpp"
#include "kvf/table.hpp"

namespace kvf {

namespace fs = std::filesystem;

namespace {

// A field may not carry a line break: libfccp reads one record per line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string opt_number(const std::optional<double>& v) { return v ? csv_number(*v) : std::string{}; }

void write_atomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw UsageError(tmp.string() + ": cannot write: " + std::strerror(errno));
    out << content;
    out.flush();
    if (!out) throw std::runtime_error(tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": rename failed: " + ec.message());
}

}  // namespace

std::string CeilingRef::label() const {
  std::string s = study;
  for (const auto& p : match) s += ":" + p.name + "=" + p.value;
  return s + ":" + metric;
}

ResultsDir::ResultsDir(fs::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw UsageError("--out " + dir_.string() + ": cannot create the results directory" +
                     (ec ? ": " + ec.message() : std::string{}));
  if (::access(dir_.c_str(), W_OK) != 0)
    throw UsageError("--out " + dir_.string() + ": directory is not writable");
  if (!fs::exists(dir_ / "meta.json")) {
    update_meta([](nlohmann::json& m) {
      m["suite"] = "kvfrontier";
      m["suite_version"] = suite_version();
      m["git_sha"] = git_sha();
    });
  }
  const auto have = read_csv_header((dir_ / "cases.csv").string());
  case_header_ = have.empty() ? case_columns() : have;
  if (!have.empty() && !std::equal(case_columns().begin(), case_columns().end(), have.begin(),
                                   have.begin() + std::min(have.size(), case_columns().size())))
    throw UsageError((dir_ / "cases.csv").string() +
                     ": not a kvfrontier cases.csv of this suite version (columns differ); use a new --out directory");
}

void ResultsDir::ensure_param_columns(const std::vector<Param>& params) {
  std::vector<std::string> add;
  for (const auto& p : params)
    if (std::find(case_header_.begin(), case_header_.end(), p.name) == case_header_.end() &&
        std::find(add.begin(), add.end(), p.name) == add.end())
      add.push_back(p.name);
  if (add.empty()) return;
  const fs::path path = dir_ / "cases.csv";
  std::vector<std::string> wider = case_header_;
  wider.insert(wider.end(), add.begin(), add.end());
  std::string content = csv_line(wider);
  if (fs::exists(path) && fs::file_size(path) > 0) {
    const CsvTable t = read_csv_table(path.string());
    for (const auto& row : t.rows) {
      std::vector<std::string> r = row;
      r.resize(wider.size());
      content += csv_line(r);
    }
  }
  write_atomically(path, content);
  case_header_ = std::move(wider);
}

void ResultsDir::write_case(const CaseRecord& rec, std::span<const Sample> samples) {
  for (const auto& p : rec.params)
    if (std::find(case_columns().begin(), case_columns().end(), p.name) != case_columns().end())
      throw std::logic_error("parameter name '" + p.name + "' clashes with a fixed column of cases.csv");
  ensure_param_columns(rec.params);
  const Summary& s = rec.summary;
  const bool measured = s.n > 0;
  auto num = [&](double v) { return measured ? csv_number(v) : std::string{}; };
  std::vector<std::string> row = {
      rec.study, rec.case_name, rec.backend, one_line(rec.device), rec.mode, std::to_string(s.n),
      num(s.median), num(s.mean), num(s.min), num(s.max), num(s.q1), num(s.q3), num(s.rel_stdev),
      csv_number(rec.bytes), csv_number(rec.flops), measured && rec.bytes > 0 ? csv_number(rec.gbps) : "",
      measured && rec.flops > 0 ? csv_number(rec.tflops) : "", opt_number(rec.pct_of_ceiling), rec.ceiling,
      opt_number(rec.ceiling_value), rec.verified, rec.stop_reason, std::to_string(rec.throttled_samples),
      one_line(rec.note)};
  row.resize(case_header_.size());
  for (const auto& p : rec.params) {
    const auto it = std::find(case_header_.begin(), case_header_.end(), p.name);
    row[static_cast<std::size_t>(it - case_header_.begin())] = one_line(p.value);
  }
  // samples first: a reader that finds the case row can always find its samples.
  {
    CsvAppender out((dir_ / "samples.csv").string(), sample_columns());
    for (std::size_t i = 0; i < samples.size(); ++i)
      out.append({rec.study, rec.case_name, rec.mode, std::to_string(i), csv_number(samples[i].seconds),
                  csv_number(samples[i].clock_mhz), samples[i].throttled ? "1" : "0"});
  }
  CsvAppender cases((dir_ / "cases.csv").string(), case_header_);
  cases.append(row);
}

void ResultsDir::update_meta(const std::function<void(nlohmann::json&)>& edit) {
  const fs::path path = dir_ / "meta.json";
  nlohmann::json m = nlohmann::json::object();
  if (fs::exists(path)) {
    std::ifstream in(path);
    try {
      m = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(path.string() + ": not valid JSON (" + e.what() + "); use a new --out directory");
    }
  }
  edit(m);
  write_atomically(path, m.dump(2) + "\n");
}

std::optional<double> find_ceiling(const fs::path& dir, const CeilingRef& ref, const std::string& mode) {
  const fs::path path = dir / "cases.csv";
  if (!fs::exists(path)) return std::nullopt;
  const CsvTable t = read_csv_table(path.string());
  const auto study = t.column("study"), md = t.column("mode"), metric = t.column(ref.metric);
  if (!study || !md || !metric) return std::nullopt;
  std::vector<std::optional<std::size_t>> cols;
  for (const auto& p : ref.match) {
    cols.push_back(t.column(p.name));
    if (!cols.back()) return std::nullopt;
  }
  std::optional<double> best;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    if (row[*study] != ref.study || row[*md] != mode) continue;
    bool ok = true;
    for (std::size_t i = 0; i < ref.match.size() && ok; ++i) ok = row[*cols[i]] == ref.match[i].value;
    if (!ok) continue;
    if (const auto v = parse_number(t, r, ref.metric); v && (!best || *v > *best)) best = v;
  }
  return best;
}

}  // namespace kvf
