#include "fuzz_common.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "kvf/input.hpp"
#include "kvf/report.hpp"

namespace kvf::fuzz {

namespace fs = std::filesystem;

void require(bool ok, const char* what, const std::string& detail) {
  if (ok) return;
  std::fprintf(stderr, "kvf fuzz: property violated: %s\n%s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

void init_limits() {
  static const bool done = [] {
    const char* cli = std::getenv("KVF_FUZZ_CLI_LIMITS");
    if (!(cli && std::string(cli) == "1")) {
      ReadLimits l = read_limits();
      l.max_file_bytes = 1u << 20;  // libFuzzer inputs stay far below; companions are < 8 KiB
      l.max_line_bytes = 16u << 10;
      l.max_field_bytes = 4u << 10;
      set_read_limits(l);  // max_json_depth stays the CLI's 64
    }
    return true;
  }();
  (void)done;
}

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    std::string base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* t = std::getenv("TMPDIR");
      base = t && *t ? t : "/tmp";
    }
    std::string tmpl = base + "/kvf-fuzz-XXXXXX";
    require(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp", tmpl);
    dir = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

const fs::path& scratch() {
  static Scratch s;  // destroyed at exit: the directory goes with it
  return s.dir;
}

fs::path scratch_dir(const std::string& sub) {
  const fs::path d = scratch() / sub;
  std::error_code ec;
  fs::create_directories(d, ec);
  require(!ec, "create scratch directory", d.string() + ": " + ec.message());
  return d;
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  require(f != nullptr, "open scratch file", path.string());
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  require(std::fclose(f) == 0 && ok, "write scratch file", path.string());
}

void remove_file(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

const std::string& companion(const std::string& rel) {
  static std::map<std::string, std::string> cache;
  auto it = cache.find(rel);
  if (it != cache.end()) return it->second;
  const char* env = std::getenv("KVF_FUZZ_COMPANIONS");
  const fs::path p = fs::path(env && *env ? env : KVF_FUZZ_COMPANIONS) / rel;
  std::ifstream in(p, std::ios::binary);
  require(static_cast<bool>(in), "companion file missing", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return cache.emplace(rel, ss.str()).first->second;
}

fs::path results_dir(const std::string& sub, const std::vector<std::pair<std::string, std::string>>& companions,
                     const std::string& name, std::string_view input) {
  static std::map<std::string, bool> made;
  const fs::path d = scratch_dir(sub);
  if (!made[sub]) {
    for (const auto& [file, rel] : companions) write_file(d / file, companion(rel));
    made[sub] = true;
  }
  write_file(d / name, input);
  return d;
}

namespace {

bool has_control(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

}  // namespace

void check_escapers(const std::string& s) {
  using namespace kvf::report;
  const std::string p = printable_text(s, kMaxCellText);
  require(!has_control(p), "printable_text left a control character", p);

  const std::string q = gnuplot_quote(s);
  require(q.size() >= 2 && q.front() == '\'' && q.back() == '\'', "gnuplot_quote: not a '...' string", q);
  require(q.find('`') == std::string::npos, "gnuplot_quote: backquote", q);
  // gnuplot reads '' right after the opening quote as an empty string: the rest would be code
  require(q.size() == 2 || q[1] != '\'', "gnuplot_quote: '' right after the opening quote", q);
  require(!has_control(q), "gnuplot_quote: control character (line break)", q);
  for (std::size_t i = 1; i + 1 < q.size(); ++i) {  // a ' inside is always doubled: the string cannot end early
    if (q[i] != '\'') continue;
    require(i + 2 < q.size() && q[i + 1] == '\'', "gnuplot_quote: lone quote inside", q);
    ++i;
  }

  const std::string l = gnuplot_data_label(s);  // a "..." field
  require(l.size() >= 2 && l.front() == '"' && l.back() == '"', "gnuplot_data_label: not a \"...\" field", l);
  require(l.find_first_of("\"#\\`", 1) == l.size() - 1 && !has_control(l),
          "gnuplot_data_label: \" # \\ ` or control character inside", l);

  const std::string h = html_escape(s);
  require(h.find_first_of("<>\"'") == std::string::npos, "html_escape: < > \" or ' left", h);
  for (std::size_t i = h.find('&'); i != std::string::npos; i = h.find('&', i + 1))
    require(h.find(';', i) != std::string::npos && h.find(';', i) - i <= 8, "html_escape: bare &", h);

  const std::string m = md_text(s);
  require(!has_control(m), "md_text: control character (line break)", m);
}

void check_report(const kvf::report::ResultSet& rs) {
  using namespace kvf::report;
  for (const std::string* s : {&rs.device, &rs.backend, &rs.label}) check_escapers(*s);
  const fs::path out = scratch_dir("report-out");
  ReportOptions o;
  o.out_dir = out.string();
  o.charts = false;  // never run gnuplot from a fuzzer
  expect_usage_errors([&] {
    const ReportResult r = write_report({rs}, o);
    for (const auto& f : r.files) {
      if (fs::path(f).extension() != ".gp") continue;
      std::ifstream in(f, std::ios::binary);
      std::string line;
      std::size_t n = 0;
      while (std::getline(in, line)) {
        ++n;
        require(line.find('`') == std::string::npos, "a .gp file holds a backquote", f + ":" + std::to_string(n) + ": " + line);
        const auto start = line.find_first_not_of(" \t");
        if (start == std::string::npos) continue;
        const std::string_view head = std::string_view(line).substr(start);
        require(!(head.starts_with("!") || head.starts_with("system") || head.starts_with("shell")),
                "a .gp line starts a shell command", f + ":" + std::to_string(n) + ": " + line);
      }
    }
  });
  // Nothing of this run is kept: the next input starts from an empty report directory.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) fs::remove(e.path(), ec);
}

}  // namespace kvf::fuzz
