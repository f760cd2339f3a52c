#include "kvf/residency/trace.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/results.hpp"
#include "kvf/table.hpp"

namespace kvf::residency {
namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

void check_block_tokens(int block_tokens) {
  if (block_tokens < 1)
    throw UsageError("block tokens " + std::to_string(block_tokens) + ": expected a whole number of at least 1");
}

std::int64_t required_integer(const nlohmann::json& obj, std::string_view key, const std::string& where) {
  const auto v = json_integer(obj, key, where, std::string(key), 0, kMaxInt);
  if (!v) throw UsageError(where + ": missing key '" + std::string(key) + "'");
  return *v;
}

std::vector<std::uint64_t> hash_ids_of(const nlohmann::json& obj, const std::string& where) {
  const auto it = obj.find("hash_ids");
  if (it == obj.end() || it->is_null()) throw UsageError(where + ": missing key 'hash_ids'");
  if (!it->is_array()) throw UsageError(where + ": key 'hash_ids': expected an array of whole numbers");
  std::vector<std::uint64_t> ids;
  ids.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& v = (*it)[i];
    const std::string what = where + ": key 'hash_ids[" + std::to_string(i) + "]'";
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(kMaxInt))
        throw UsageError(what + ": " + std::to_string(u) + " is not a whole number in [0, " + std::to_string(kMaxInt) +
                         "]");
      ids.push_back(u);
    } else if (v.is_number()) {  // negative or fractional: checked_integer names the value and the range
      ids.push_back(static_cast<std::uint64_t>(checked_integer(v.get<double>(), 0, kMaxInt, what)));
    } else {
      throw UsageError(what + ": expected a whole number in [0, " + std::to_string(kMaxInt) + "]");
    }
  }
  return ids;
}

Request parse_line(std::string_view line, const std::string& where) {
  const nlohmann::json obj = parse_json_input(line, where);
  if (!obj.is_object()) throw UsageError(where + ": expected one JSON object per line");
  Request r;
  const auto ts = json_number(obj, "timestamp", where, "timestamp", 0, std::numeric_limits<double>::max());
  if (!ts) throw UsageError(where + ": missing key 'timestamp'");
  r.timestamp_ms = *ts;
  r.input_length = required_integer(obj, "input_length", where);
  r.output_length = required_integer(obj, "output_length", where);
  r.hash_ids = hash_ids_of(obj, where);
  return r;
}

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

std::string number_text(double v) {
  char buf[32];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back equal
  return std::string(buf, p);
}

// ceil(input_length / block_tokens) without overflow: input_length is at most 2^63 - 1.
std::int64_t blocks_needed(std::int64_t input_length, std::int64_t block_tokens) {
  return input_length / block_tokens + (input_length % block_tokens != 0 ? 1 : 0);
}

// Appends r, with a warning when its id count differs from ceil(input_length / block_tokens). The replay goes in
// file order and knows no clock, so a request before its predecessor is refused rather than replayed out of order.
void add_request(Trace& trace, Request r, const std::string& where, int block_tokens) {
  if (!trace.requests.empty() && r.timestamp_ms < trace.requests.back().timestamp_ms)
    throw UsageError(where + ": timestamp " + number_text(r.timestamp_ms) + " ms is before the previous request's " +
                     number_text(trace.requests.back().timestamp_ms) +
                     " ms (allowed: requests in arrival order, timestamps never decreasing)");
  const std::int64_t expected = blocks_needed(r.input_length, block_tokens);
  if (static_cast<std::uint64_t>(expected) != r.hash_ids.size()) {
    ++trace.length_mismatches;
    trace.warnings.push_back(where + ": request " + std::to_string(trace.requests.size()) + " has " +
                             std::to_string(r.hash_ids.size()) + " hash_ids, but input_length " +
                             std::to_string(r.input_length) + " at " + std::to_string(block_tokens) +
                             " tokens per block needs " + std::to_string(expected));
  }
  trace.requests.push_back(std::move(r));
}

// "12 0 7": ids separated by runs of spaces (or tabs); each in [0, 2^63).
std::vector<std::uint64_t> block_ids_of(std::string_view field, const std::string& where) {
  std::vector<std::uint64_t> ids;
  std::size_t i = 0;
  while (true) {
    i = field.find_first_not_of(" \t", i);
    if (i == std::string_view::npos) break;
    std::size_t end = field.find_first_of(" \t", i);
    if (end == std::string_view::npos) end = field.size();
    const std::string_view tok = field.substr(i, end - i);
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc{} || p != tok.data() + tok.size() || v > static_cast<std::uint64_t>(kMaxInt))
      throw UsageError(where + ": column 'block_ids': id " + std::to_string(ids.size()) + " '" + shown_value(tok) +
                       "' is not a whole number in [0, " + std::to_string(kMaxInt) + "]");
    ids.push_back(v);
    i = end;
  }
  return ids;
}

// The text both writers share per request, checked so that what is written reads back.
void check_writable(const Trace& trace, std::size_t i) {
  const Request& r = trace.requests[i];
  const std::string what = trace.source + ": request " + std::to_string(i);
  if (!std::isfinite(r.timestamp_ms) || r.timestamp_ms < 0)
    throw UsageError(what + ": timestamp " + number_text(r.timestamp_ms) + " ms: expected a finite number >= 0");
  if (r.input_length < 0 || r.output_length < 0)
    throw UsageError(what + ": negative input_length or output_length");
  for (const std::uint64_t id : r.hash_ids)
    if (id > static_cast<std::uint64_t>(kMaxInt))
      throw UsageError(what + ": id " + std::to_string(id) + " is not in [0, " + std::to_string(kMaxInt) + "]");
}

std::string joined_ids(const std::vector<std::uint64_t>& ids, const char* sep) {
  std::string s;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    if (j) s += sep;
    s += std::to_string(ids[j]);
  }
  return s;
}

}  // namespace

std::optional<int> likely_block_tokens(const Trace& trace) {
  std::optional<int> best;
  std::size_t best_matches = 0;
  for (int bt = 1; bt <= (1 << 20); bt *= 2) {
    std::size_t matches = 0;
    for (const Request& r : trace.requests)
      matches += static_cast<std::uint64_t>(blocks_needed(r.input_length, bt)) == r.hash_ids.size();
    if (matches > best_matches) best = bt, best_matches = matches;
  }
  if (best_matches * 2 <= trace.requests.size()) return std::nullopt;
  return best;
}

std::int64_t block_tokens_of(std::int64_t input_length, std::size_t index, int block_tokens) {
  const std::int64_t start = static_cast<std::int64_t>(index) * block_tokens;
  if (start >= input_length) return 0;
  return std::min<std::int64_t>(block_tokens, input_length - start);
}

Trace parse_mooncake_jsonl(std::string_view text, const std::string& source, int block_tokens) {
  check_block_tokens(block_tokens);
  Trace trace;
  trace.source = source;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_no;
    if (blank(line)) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    add_request(trace, parse_line(line, where), where, block_tokens);
  }
  return trace;
}

Trace read_mooncake_jsonl(const std::filesystem::path& path, int block_tokens) {
  return parse_mooncake_jsonl(read_input_file(path), path.string(), block_tokens);
}

Trace parse_trace_csv(std::string_view text, const std::string& source, int block_tokens) {
  check_block_tokens(block_tokens);
  // The header's columns first: a file that is no trace at all (/etc/passwd) is named as such, not by the field
  // count of some later line.
  const std::string_view header = text.substr(0, text.find('\n'));
  for (const char* c : {"timestamp_ms", "input_length", "output_length", "block_ids"})
    if (header.find_first_not_of(" \t\r") != std::string_view::npos && header.find(c) == std::string_view::npos)
      throw UsageError(source + ": missing column '" + c + "'");  // an empty file is parse_csv_text's to name
  const CsvTable t = parse_csv_text(text, source);
  for (const char* c : {"timestamp_ms", "input_length", "output_length", "block_ids"}) t.require_column(c);
  Trace trace;
  trace.source = source;
  for (std::size_t row = 0; row < t.rows.size(); ++row) {
    const std::string where = t.where(row);
    const auto required = [&](const char* column) -> const std::string& {
      const std::string& v = t.at(row, column);
      if (v.empty()) throw UsageError(where + ": column '" + column + "' is empty");
      return v;
    };
    Request r;
    required("timestamp_ms");
    r.timestamp_ms = *parse_number(t, row, "timestamp_ms");
    if (r.timestamp_ms < 0)
      throw UsageError(where + ": column 'timestamp_ms': '" + t.at(row, "timestamp_ms") + "' is below 0");
    required("input_length");
    r.input_length = *parse_integer(t, row, "input_length", 0, kMaxInt);
    required("output_length");
    r.output_length = *parse_integer(t, row, "output_length", 0, kMaxInt);
    r.hash_ids = block_ids_of(t.at(row, "block_ids"), where);
    add_request(trace, std::move(r), where, block_tokens);
  }
  if (t.torn) trace.warnings.push_back(*t.torn);
  return trace;
}

Trace read_trace(const std::filesystem::path& path, int block_tokens) {
  const std::string text = read_input_file(path);
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_mooncake_jsonl(text, path.string(), block_tokens);
  return parse_trace_csv(text, path.string(), block_tokens);
}

void write_mooncake_jsonl(const Trace& trace, const std::filesystem::path& path) {
  std::string out;
  for (std::size_t i = 0; i < trace.requests.size(); ++i) {
    check_writable(trace, i);
    const Request& r = trace.requests[i];
    out += "{\"timestamp\": " + number_text(r.timestamp_ms) + ", \"input_length\": " + std::to_string(r.input_length) +
           ", \"output_length\": " + std::to_string(r.output_length) + ", \"hash_ids\": [" +
           joined_ids(r.hash_ids, ", ") + "]}\n";
  }
  write_file_atomically(path, out);
}

void write_trace_csv(const Trace& trace, const std::filesystem::path& path) {
  std::string out = "timestamp_ms,input_length,output_length,block_ids\n";
  for (std::size_t i = 0; i < trace.requests.size(); ++i) {
    check_writable(trace, i);
    const Request& r = trace.requests[i];
    out += number_text(r.timestamp_ms) + "," + std::to_string(r.input_length) + "," +
           std::to_string(r.output_length) + "," + joined_ids(r.hash_ids, " ") + "\n";
  }
  write_file_atomically(path, out);
}

IndexedTrace index_trace(const Trace& trace, int block_tokens) {
  check_block_tokens(block_tokens);
  IndexedTrace out;
  out.block_tokens = block_tokens;
  std::size_t total = 0;
  for (const Request& r : trace.requests) total += r.hash_ids.size();
  out.blocks.reserve(total);
  out.offsets.reserve(trace.requests.size() + 1);
  out.offsets.push_back(0);
  out.input_length.reserve(trace.requests.size());
  std::unordered_map<std::uint64_t, BlockId> dense;
  dense.reserve(total);
  constexpr BlockId kNoParent = std::numeric_limits<BlockId>::max();
  std::vector<BlockId> parent;  // dense id -> its parent where first seen
  for (std::size_t ri = 0; ri < trace.requests.size(); ++ri) {
    const Request& r = trace.requests[ri];
    BlockId prev = kNoParent;
    for (std::size_t j = 0; j < r.hash_ids.size(); ++j) {
      const auto [it, fresh] = dense.try_emplace(r.hash_ids[j], static_cast<BlockId>(out.original_ids.size()));
      if (fresh) {
        if (out.original_ids.size() >= kNoParent)
          throw UsageError(trace.source + ": more than " + std::to_string(kNoParent - 1) + " distinct blocks");
        out.original_ids.push_back(r.hash_ids[j]);
        parent.push_back(prev);
      } else if (parent[it->second] != prev) {
        const auto name = [&](BlockId b) { return b == kNoParent ? "nothing" : std::to_string(out.original_ids[b]); };
        if (out.prefix_violations++ == 0)
          out.first_prefix_violation = "request " + std::to_string(ri) + ": block id " + std::to_string(r.hash_ids[j]) +
                                       " at position " + std::to_string(j) + " follows " + name(prev) +
                                       ", where it first followed " + name(parent[it->second]);
      }
      out.blocks.push_back(it->second);
      prev = it->second;
    }
    out.offsets.push_back(out.blocks.size());
    out.input_length.push_back(r.input_length);
    out.max_request_blocks = std::max(out.max_request_blocks, r.hash_ids.size());
  }
  out.distinct = out.original_ids.size();
  return out;
}

}  // namespace kvf::residency
