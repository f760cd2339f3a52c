// RFC 4180 CSV reading over a bounded, already-read file (kvf/input.hpp): one pass, every record and
// field checked against ReadLimits as it grows, so a hostile file costs at most max_file_bytes.
#include "kvf/table.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf {

namespace {

bool is_trim(char c) { return c == ' ' || c == '\t'; }

// Splits `text` into records of fields. Calls on_record(fields, first_line) for each complete record
// (ended by a line break); returns the start line of a last record that had no line end (torn), or 0.
template <class OnRecord>
std::size_t split_records(std::string_view text, const std::string& path, OnRecord&& on_record) {
  const ReadLimits& lim = read_limits();
  std::vector<std::string> fields;
  std::string cur;
  std::size_t line = 1, record_line = 1, record_start = 0;
  bool quoted = false, was_quoted = false, after_quote = false;
  auto where = [&] { return path + ":" + std::to_string(record_line); };
  auto end_field = [&] {
    if (!was_quoted && !cur.empty() && (is_trim(cur.front()) || is_trim(cur.back()))) {
      // unquoted fields are trimmed, as the writer quotes fields with edge spaces
      std::size_t b = 0, e = cur.size();
      while (b < e && is_trim(cur[b])) ++b;
      while (e > b && is_trim(cur[e - 1])) --e;
      cur = cur.substr(b, e - b);
    }
    fields.push_back(std::move(cur));
    cur.clear();
    was_quoted = after_quote = false;
    if (fields.size() > kMaxCsvColumns)
      throw UsageError(where() + ": more than " + std::to_string(kMaxCsvColumns) + " fields in a record");
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i - record_start >= lim.max_line_bytes)
      throw UsageError(where() + ": record longer than " + std::to_string(lim.max_line_bytes) +
                       " bytes (raise with --max-line-kib)");
    if (c == '\n') ++line;
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cur.push_back('"');
          ++i;
        } else {
          quoted = false;
          after_quote = true;
        }
      } else {
        cur.push_back(c);
      }
    } else if (c == ',') {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] != '\n') cur.push_back(c);  // a lone CR is data
      if (c == '\r') continue;
      // An empty line is no record (a blank line at the end of a hand-edited file).
      if (!(fields.empty() && cur.empty() && !was_quoted)) {
        end_field();
        on_record(fields, record_line);
        fields.clear();
      }
      record_line = line;
      record_start = i + 1;
    } else if (after_quote) {
      if (!is_trim(c))
        throw UsageError(where() + ": character '" + std::string(1, c) + "' after a closing quote (RFC 4180)");
    } else if (c == '"' && !was_quoted && cur.find_first_not_of(" \t") == std::string::npos) {
      cur.clear();
      quoted = was_quoted = true;
    } else {
      cur.push_back(c);  // a quote inside an unquoted field is data, as most writers mean it
    }
    if (cur.size() > lim.max_field_bytes)
      throw UsageError(where() + ": field " + std::to_string(fields.size() + 1) + " longer than " +
                       std::to_string(lim.max_field_bytes) + " bytes (raise with --max-field-kib)");
  }
  // A quote still open after swallowing line breaks is a stray quote (it would eat every later row),
  // not the cut end of a row: a torn row lost its tail, it did not gain lines.
  if (quoted && line > record_line)
    throw UsageError(where() + ": a quoted field opened here never closes");
  const bool pending = quoted || was_quoted || !cur.empty() || !fields.empty();
  return pending ? record_line : 0;
}

}  // namespace

std::optional<std::size_t> CsvTable::column(const std::string& name) const {
  if (!index.empty()) {
    const auto it = index.find(name);
    return it == index.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  }
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  return std::nullopt;
}

std::size_t CsvTable::require_column(const std::string& name) const {
  if (auto c = column(name)) return *c;
  throw UsageError(path + ": missing column '" + name + "'");
}

const std::string& CsvTable::at(std::size_t row, const std::string& name) const {
  return rows.at(row).at(require_column(name));
}

std::string CsvTable::where(std::size_t row) const { return path + ":" + std::to_string(line.at(row)); }

CsvTable parse_csv_text(std::string_view text, const std::string& path) {
  CsvTable t;
  t.path = path;
  bool have_header = false;
  const std::size_t torn = split_records(text, path, [&](std::vector<std::string>& fields, std::size_t at) {
    if (!have_header) {
      std::unordered_set<std::string> seen;
      for (const auto& h : fields) {
        if (h.empty()) throw UsageError(path + ":1: empty column name in header");
        if (!seen.insert(h).second) throw UsageError(path + ":1: duplicate column '" + h + "'");
      }
      t.header = std::move(fields);
      for (std::size_t i = 0; i < t.header.size(); ++i) t.index.emplace(t.header[i], i);
      have_header = true;
      fields.reserve(t.header.size());
      return;
    }
    if (fields.size() != t.header.size())
      throw UsageError(path + ":" + std::to_string(at) + ": " + std::to_string(fields.size()) + " fields, the header has " +
                       std::to_string(t.header.size()));
    t.rows.push_back(std::move(fields));
    t.line.push_back(at);
    fields = {};
    fields.reserve(t.header.size());
  });
  if (torn && !have_header) {
    // A header without its line end is still the header of an empty table.
    CsvTable h = parse_csv_text(std::string(text) + "\n", path);
    h.torn.reset();
    return h;
  }
  if (!have_header) throw UsageError(path + ":1: empty file, expected a header row");
  if (torn)
    t.torn = path + ":" + std::to_string(torn) +
             ": torn last row (no line end: an interrupted or full-disk write?), left out";
  return t;
}

CsvTable read_csv_table(const std::string& path, const std::filesystem::path& root) {
  return parse_csv_text(read_input_file(path, root), path);
}

std::optional<double> parse_number(const CsvTable& t, std::size_t row, const std::string& column) {
  const std::string& s = t.at(row, column);
  if (s.empty() || s == "nan" || s == "NaN") return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc{} && p == s.data() + s.size() && !std::isfinite(v)))
    throw UsageError(t.where(row) + ": column '" + column + "': '" + s + "' is not a finite number");
  if (ec != std::errc{} || p != s.data() + s.size() || std::isnan(v))
    throw UsageError(t.where(row) + ": column '" + column + "': '" + s + "' is not a number");
  return v;
}

std::optional<long long> parse_integer(const CsvTable& t, std::size_t row, const std::string& column, long long lo,
                                       long long hi) {
  const std::string what = t.where(row) + ": column '" + column + "'";
  const std::string& s = t.at(row, column);
  if (s == "nan" || s == "NaN")  // the missing value of a measurement; a count is never missing that way
    throw UsageError(what + ": '" + s + "' is not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const auto v = parse_number(t, row, column);
  if (!v) return std::nullopt;
  return checked_integer(*v, lo, hi, what);
}

}  // namespace kvf
