#include "kvf/input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "kvf/errors.hpp"

namespace kvf {

namespace fs = std::filesystem;

namespace {

ReadLimits g_limits;

std::string number_text(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, p) : std::string("?");
}

}  // namespace

const char* file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symlink";
  return "not a regular file";
}

namespace {

// Refuses a path that resolves (through any symlink on the way) outside `root`.
void check_inside(const fs::path& path, const fs::path& root) {
  if (root.empty() || g_limits.follow_symlinks) return;
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) throw UsageError(path.string() + ": cannot resolve (" + ec.message() + ")");
  const fs::path real_root = fs::canonical(root, ec);
  if (ec) throw UsageError(root.string() + ": cannot resolve (" + ec.message() + ")");
  auto r = real_root.begin();
  auto p = real.begin();
  for (; r != real_root.end(); ++r, ++p)
    if (p == real.end() || *p != *r)
      throw UsageError(path.string() + ": a symlink to " + real.string() + ", outside " + root.string() +
                       " (refused; pass --follow-symlinks to read it)");
}

// Depth check before the tree is built: nlohmann's SAX parser is iterative, so a deep document costs
// no stack here, and the limit keeps every later recursive walk (dump, compare, ours) shallow.
struct DepthCheck : nlohmann::json_sax<nlohmann::json> {
  std::size_t depth = 0, limit = 0, max_string = 0;
  bool too_deep = false, too_long = false;
  std::string error;
  // A string is one field: a 17 MB device name would be copied into every label and chart of a report.
  bool text(const string_t& s) {
    if (s.size() > max_string) too_long = true;
    return !too_long;
  }
  bool open() {
    if (++depth > limit) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t& s) override { return text(s); }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t& s) override { return text(s); }
  bool end_object() override { --depth; return true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { --depth; return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = ex.what();
    return false;
  }
};

const char* type_name(const nlohmann::json& j) { return j.type_name(); }

const nlohmann::json* member(const nlohmann::json& obj, std::string_view key, const std::string& source,
                             const std::string& key_path) {
  if (!obj.is_object()) throw UsageError(source + ": expected an object holding '" + key_path + "'");
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

const ReadLimits& read_limits() { return g_limits; }
void set_read_limits(const ReadLimits& limits) { g_limits = limits; }

bool input_exists(const fs::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

namespace {

// Opens a regular file for reading, after the symlink check; the descriptor closes with the object.
struct InputFd {
  int fd = -1;
  std::uint64_t size = 0;
  InputFd(const fs::path& path, const fs::path& root) {
    const std::string name = path.string();
    if (!input_exists(path)) throw UsageError(name + ": no such file");
    check_inside(path, root);
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) throw UsageError(name + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw UsageError(name + ": cannot stat (" + std::strerror(err) + ")");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw UsageError(name + ": " + file_kind(st.st_mode) + ", expected a regular file");
    }
    size = static_cast<std::uint64_t>(st.st_size);
  }
  ~InputFd() { ::close(fd); }
  InputFd(const InputFd&) = delete;
  InputFd& operator=(const InputFd&) = delete;
};

// Up to `limit` + 1 bytes from the start of the file: one more than allowed tells "too big" apart.
std::string read_upto(const InputFd& in, std::uint64_t limit, const std::string& name) {
  std::string out;
  out.resize(static_cast<std::size_t>(std::min(in.size, limit + 1)));
  std::size_t have = 0;
  // The file may grow while we read (a run still writing): read what fstat saw, then check for more.
  for (;;) {
    if (have == out.size()) {
      if (out.size() >= limit + 1) break;
      out.resize(std::min<std::uint64_t>(limit + 1, out.size() + 65536));
    }
    const ssize_t n = ::read(in.fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw UsageError(name + ": read failed (" + std::strerror(errno) + ")");
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  out.resize(have);
  return out;
}

}  // namespace

std::string read_input_file(const fs::path& path, const fs::path& root) {
  const std::string name = path.string();
  const std::uint64_t limit = g_limits.max_file_bytes;
  const auto too_big = [&](std::uint64_t n) {
    return UsageError(name + ": " + std::to_string(n) + " bytes or more; at most " + std::to_string(limit) +
                      " are read (kvf report, gate and counters raise it with --max-file-mib)");
  };
  const InputFd in(path, root);
  if (in.size > limit) throw too_big(in.size);
  std::string out = read_upto(in, limit, name);
  if (out.size() > limit) throw too_big(out.size());
  return out;
}

std::string read_input_head(const fs::path& path, std::size_t bytes) {
  const InputFd in(path, {});
  std::string out = read_upto(in, bytes, path.string());
  if (out.size() > bytes) out.resize(bytes);
  return out;
}

nlohmann::json parse_json_input(std::string_view text, const std::string& source) {
  if (text.size() > g_limits.max_file_bytes)
    throw UsageError(source + ": " + std::to_string(text.size()) + " bytes; at most " +
                     std::to_string(g_limits.max_file_bytes) + " are read (raise with --max-file-mib)");
  DepthCheck check;
  check.limit = g_limits.max_json_depth;
  check.max_string = g_limits.max_field_bytes;
  const bool ok = nlohmann::json::sax_parse(text, &check);
  if (check.too_deep)
    throw UsageError(source + ": JSON nested more than " + std::to_string(check.limit) + " levels deep");
  if (check.too_long)
    throw UsageError(source + ": a JSON string longer than " + std::to_string(check.max_string) +
                     " bytes (raise with --max-field-kib)");
  if (!ok) throw UsageError(source + ": malformed JSON (" + check.error + ")");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(source + ": malformed JSON (" + e.what() + ")");
  }
}

nlohmann::json read_json_input(const fs::path& path, const fs::path& root) {
  return parse_json_input(read_input_file(path, root), path.string());
}

std::optional<std::string> json_string(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                       const std::string& key_path) {
  const nlohmann::json* v = member(obj, key, source, key_path);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw UsageError(source + ": key '" + key_path + "': expected a string, got " + type_name(*v));
  return v->get<std::string>();
}

std::optional<double> json_number(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                  const std::string& key_path, double lo, double hi) {
  const nlohmann::json* v = member(obj, key, source, key_path);
  if (!v) return std::nullopt;
  const std::string allowed = "a number in [" + number_text(lo) + ", " + number_text(hi) + "]";
  if (!v->is_number()) throw UsageError(source + ": key '" + key_path + "': expected " + allowed + ", got " + type_name(*v));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    throw UsageError(source + ": key '" + key_path + "': " + number_text(d) + " is not " + allowed);
  return d;
}

std::optional<std::int64_t> json_integer(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                         const std::string& key_path, std::int64_t lo, std::int64_t hi) {
  const nlohmann::json* v = member(obj, key, source, key_path);
  if (!v) return std::nullopt;
  const std::string what = source + ": key '" + key_path + "'";
  if (v->is_number_unsigned()) {
    const auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo)))
      throw UsageError(what + ": " + std::to_string(u) + " is not a whole number in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    return static_cast<std::int64_t>(u);
  }
  if (v->is_number_integer()) {
    const auto i = v->get<std::int64_t>();
    if (i < lo || i > hi)
      throw UsageError(what + ": " + std::to_string(i) + " is not a whole number in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    return i;
  }
  if (v->is_number_float()) return checked_integer(v->get<double>(), lo, hi, what);
  throw UsageError(what + ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], got " + type_name(*v));
}

std::int64_t checked_integer(double v, std::int64_t lo, std::int64_t hi, const std::string& what) {
  // 2^63 is the first double above every int64; (double)INT64_MAX rounds up to it, so compare against
  // it strictly rather than against (double)hi.
  constexpr double two63 = 9223372036854775808.0;
  const bool ok = std::isfinite(v) && v == std::floor(v) && v >= static_cast<double>(lo) && v < two63 &&
                  static_cast<std::int64_t>(v) <= hi;
  if (!ok)
    throw UsageError(what + ": '" + number_text(v) + "' is not a whole number in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return static_cast<std::int64_t>(v);
}

}  // namespace kvf
