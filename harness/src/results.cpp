#include "kvf/results.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/table.hpp"

namespace kvf {

namespace fs = std::filesystem;

namespace {

// Rows stay one line each (line breaks in a field become spaces): the readers take quoted line breaks,
// but line-oriented tools (grep, tail, wc -l) on results files should not have to.
std::string single_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string opt_number(const std::optional<double>& v) { return v ? csv_number(*v) : std::string{}; }

sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  return set;
}

// Held around every change to a results file. A termination signal waits for it (see
// guard_termination_signals), so the process dies between whole rows, never inside one; blocking the
// signals in the writing thread covers processes without the guard (kvf, tests).
std::recursive_mutex& write_mutex() {  // recursive: write_case holds it across write_atomically
  static std::recursive_mutex m;
  return m;
}
class WriteSection {
 public:
  WriteSection() {
    const sigset_t set = termination_signals();
    pthread_sigmask(SIG_BLOCK, &set, &old_);
    write_mutex().lock();
  }
  ~WriteSection() {
    write_mutex().unlock();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  WriteSection(const WriteSection&) = delete;
  WriteSection& operator=(const WriteSection&) = delete;

 private:
  sigset_t old_;
};

// The whole content to `path.tmp`, fsync, rename over `path`: a reader sees the old file or the new
// one. On any failure the .tmp is removed (a full disk left 0-byte meta.json.tmp files before).
void write_atomically(const fs::path& path, const std::string& content) {
  WriteSection hold;
  const std::string tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) {
    const int err = errno;
    // No room for another inode is a full disk; anything else (permissions, a directory in the way) is
    // a directory the user has to fix.
    if (err == ENOSPC || err == EDQUOT || err == EIO || err == EROFS) throw WriteError(path.string(), err);
    // The path the user named (the .tmp beside it is ours), and its directory when that is what is missing.
    throw UsageError(path.string() + ": cannot write" +
                     (err == ENOENT ? " (no directory " + path.parent_path().string() + ")" : std::string()) + ": " +
                     std::strerror(err));
  }
  auto fail = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw WriteError(path.string(), err);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError(tmp + ": not a regular file; remove it");
  }
  if (const int err = write_all(fd, content)) fail(err);
  // Some file systems (NFS, delayed allocation) report a full disk only at fsync or close.
  if (::fsync(fd) != 0 && errno != EINVAL) fail(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw WriteError(path.string(), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw WriteError(path.string(), err, " (renaming " + tmp + " over it)");
  }
}

}  // namespace

void set_param(std::vector<Param>& params, const std::string& name, std::string value) {
  for (auto& p : params)
    if (p.name == name) {
      p.value = std::move(value);
      return;
    }
  params.push_back({name, std::move(value)});
}

void write_file_atomically(const fs::path& path, const std::string& content) { write_atomically(path, content); }

void check_out_dir(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  if (ec) throw UsageError(flag + " " + dir.string() + ": " + ec.message());
  // The nearest part of the path that exists: the directory itself, or where create_directories would start.
  while (!fs::exists(at, ec) && at.has_relative_path()) at = at.parent_path();
  const bool self = at == fs::absolute(dir, ec);
  if (!fs::is_directory(at, ec))
    throw UsageError(flag + " " + dir.string() + ": " + at.string() + " is not a directory");
  if (::access(at.c_str(), W_OK | X_OK) != 0)
    throw UsageError(flag + " " + dir.string() + ": " + (self ? "the directory is not writable" :
                                                         "cannot create the directory (" + at.string() +
                                                             " is not writable)"));
}

void make_directory(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && fs::is_directory(dir, ec)) return;
  throw UsageError((what.empty() ? "" : what + " ") + dir.string() + ": cannot create the directory: " +
                   (ec ? ec.message() : std::string("a file is in the way")));
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string out_file_problem(const fs::path& file) {
  std::error_code ec;
  const auto st = fs::status(file, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    return std::string(fs::is_directory(st) ? "a directory" : "not a regular file") +
           " (allowed: a new or regular file in a writable directory)";
  const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) return parent.string() + " is not a directory";
  if (::access(parent.c_str(), W_OK | X_OK) != 0) return parent.string() + " is not writable";
  return {};
}

void check_out_file(const fs::path& file, const std::string& flag) {
  if (const std::string problem = out_file_problem(file); !problem.empty())
    throw UsageError(flag + " " + file.string() + ": " + problem);
}

std::string CeilingRef::label() const {
  std::string s = study;
  for (const auto& p : match) s += ":" + p.name + "=" + p.value;
  return s + ":" + metric;
}

std::optional<CeilingRef> CeilingRef::parse(const std::string& label) {
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const std::size_t colon = label.find(':', at);
    parts.push_back(label.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() < 2 || parts.front().empty() || (parts.back() != "gbps" && parts.back() != "tflops"))
    return std::nullopt;
  CeilingRef ref{parts.front(), {}, parts.back()};
  for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    ref.match.push_back({parts[i].substr(0, eq), parts[i].substr(eq + 1)});
  }
  return ref;
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
  WriteSection hold;
  ensure_param_columns(rec.params);
  const Summary& s = rec.summary;
  const bool measured = s.n > 0;
  auto num = [&](double v) { return measured ? csv_number(v) : std::string{}; };
  std::vector<std::string> row = {
      rec.study, rec.case_name, rec.backend, single_line(rec.device), rec.mode, std::to_string(s.n),
      num(s.median), num(s.mean), num(s.min), num(s.max), num(s.q1), num(s.q3), num(s.rel_stdev),
      csv_number(rec.bytes), csv_number(rec.flops), measured && rec.bytes > 0 ? csv_number(rec.gbps) : "",
      measured && rec.flops > 0 ? csv_number(rec.tflops) : "", opt_number(rec.pct_of_ceiling), rec.ceiling,
      opt_number(rec.ceiling_value), rec.verified, rec.stop_reason, std::to_string(rec.throttled_samples),
      single_line(rec.note)};
  row.resize(case_header_.size());
  for (const auto& p : rec.params) {
    const auto it = std::find(case_header_.begin(), case_header_.end(), p.name);
    row[static_cast<std::size_t>(it - case_header_.begin())] = single_line(p.value);
  }
  std::vector<std::vector<std::string>> sample_rows;
  sample_rows.reserve(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i)
    sample_rows.push_back({rec.study, rec.case_name, rec.mode, std::to_string(i), csv_number(samples[i].seconds),
                           csv_number(samples[i].clock_mhz), samples[i].throttled ? "1" : "0",
                           std::to_string(samples[i].repetition)});
  CsvAppender samples_out((dir_ / "samples.csv").string(), sample_columns());
  CsvAppender cases_out((dir_ / "cases.csv").string(), case_header_);
  // Samples first: a reader that finds the case row can always find its samples. When the case row
  // cannot be written its samples are cut off again, so neither file keeps a part of this case.
  const std::uint64_t samples_before = samples_out.size();
  samples_out.append_rows(sample_rows);
  try {
    cases_out.append(row);
  } catch (...) {
    samples_out.truncate_to(samples_before);
    throw;
  }
}

void ResultsDir::update_meta(const std::function<void(nlohmann::json&)>& edit) {
  const fs::path path = dir_ / "meta.json";
  nlohmann::json m = nlohmann::json::object();
  // Bounded like every reader (a FIFO or a huge file in its place is refused, never waited on).
  if (input_exists(path)) m = read_json_input(path, dir_);
  if (!m.is_object()) throw UsageError(path.string() + ": not a JSON object; use a new --out directory");
  try {
    edit(m);
  } catch (const nlohmann::json::exception& e) {  // e.g. "studies" holding a string
    throw UsageError(path.string() + ": unexpected content (" + e.what() + "); use a new --out directory");
  }
  write_atomically(path, m.dump(2) + "\n");
}

void guard_termination_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = termination_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      int sig = 0;
      while (sigwait(&set, &sig) != 0) {
      }
      // Wait for a write in progress to end, then die of the signal as if it had not been caught (the
      // exit status tells the parent which signal it was). The mutex is never released.
      write_mutex().lock();
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(sig, &dfl, nullptr);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
      _exit(128 + sig);
    }).detach();
  });
}

std::size_t ResultsDir::case_row_count() const {
  const fs::path path = dir_ / "cases.csv";
  return fs::exists(path) ? read_csv_table(path.string()).rows.size() : 0;
}

namespace {
// Rows [first, end) of cases.csv that ref_of names a ceiling for (nullopt: leave the row) are stated against the
// best matching ceiling row now in the file; the file is rewritten whole (atomically) where a value changed.
std::size_t restate_rows(const fs::path& path, std::size_t first,
                         const std::function<std::optional<CeilingRef>(const CsvTable&, std::size_t)>& ref_of) {
  WriteSection hold;
  if (!fs::exists(path)) return 0;
  CsvTable t = read_csv_table(path.string());
  const auto mode = t.column("mode"), be = t.column("backend"), dev = t.column("device");
  const auto pct = t.column("pct_of_ceiling"), value = t.column("ceiling_value");
  if (!mode || !pct || !value) return 0;
  std::size_t changed = 0;
  for (std::size_t r = first; r < t.rows.size(); ++r) {
    const auto ref = ref_of(t, r);
    if (!ref) continue;
    auto& row = t.rows[r];
    const auto rate = parse_number(t, r, ref->metric);
    const auto best = find_ceiling(t, *ref, row[*mode], be ? row[*be] : "", dev ? row[*dev] : "");
    if (!rate || !best || *best <= 0 || csv_number(*best) == row[*value]) continue;
    row[*value] = csv_number(*best);
    row[*pct] = csv_number(100.0 * *rate / *best);
    ++changed;
  }
  if (changed == 0) return 0;
  std::string content = csv_line(t.header);
  for (const auto& row : t.rows) content += csv_line(row);
  write_atomically(path, content);
  return changed;
}
}  // namespace

std::size_t ResultsDir::restate_ceilings(std::size_t first,
                                         const std::function<const CeilingRef*(const std::string&)>& ceiling_of) {
  return restate_rows(dir_ / "cases.csv", first, [&](const CsvTable& t, std::size_t r) -> std::optional<CeilingRef> {
    const CeilingRef* ref = t.column("case") ? ceiling_of(t.at(r, "case")) : nullptr;
    if (!ref || t.at(r, "ceiling_value").empty()) return std::nullopt;  // none found then: none is claimed now either
    return *ref;
  });
}

std::size_t ResultsDir::state_late_ceilings(const std::string& ceiling_study) {
  return restate_rows(dir_ / "cases.csv", 0, [&](const CsvTable& t, std::size_t r) -> std::optional<CeilingRef> {
    if (!t.column("ceiling") || t.at(r, "ceiling").empty() || !t.at(r, "ceiling_value").empty()) return std::nullopt;
    auto ref = CeilingRef::parse(t.at(r, "ceiling"));
    if (!ref || ref->study != ceiling_study) return std::nullopt;
    return ref;
  });
}

std::optional<double> find_ceiling(const fs::path& dir, const CeilingRef& ref, const std::string& mode,
                                   const std::string& backend, const std::string& device) {
  const fs::path path = dir / "cases.csv";
  if (!fs::exists(path)) return std::nullopt;
  return find_ceiling(read_csv_table(path.string()), ref, mode, backend, device);
}

std::optional<double> find_ceiling(const CsvTable& t, const CeilingRef& ref, const std::string& mode,
                                   const std::string& backend, const std::string& device) {
  const auto study = t.column("study"), md = t.column("mode"), metric = t.column(ref.metric);
  const auto be = t.column("backend"), dev = t.column("device");
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
    if ((be && !backend.empty() && row[*be] != backend) || (dev && !device.empty() && row[*dev] != device)) continue;
    bool ok = true;
    for (std::size_t i = 0; i < ref.match.size() && ok; ++i) ok = row[*cols[i]] == ref.match[i].value;
    if (!ok) continue;
    if (const auto v = parse_number(t, r, ref.metric); v && (!best || *v > *best)) best = v;
  }
  return best;
}

}  // namespace kvf
