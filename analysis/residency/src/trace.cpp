#include "kvf/residency/trace.hpp"

#include <limits>
#include <unordered_map>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"

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

}  // namespace

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
    Request r = parse_line(line, where);
    // ceil without overflow: input_length is at most 2^63 - 1.
    const std::int64_t expected = r.input_length / block_tokens + (r.input_length % block_tokens != 0 ? 1 : 0);
    if (static_cast<std::uint64_t>(expected) != r.hash_ids.size())
      trace.warnings.push_back(where + ": request " + std::to_string(trace.requests.size()) + " has " +
                               std::to_string(r.hash_ids.size()) + " hash_ids, but input_length " +
                               std::to_string(r.input_length) + " at " + std::to_string(block_tokens) +
                               " tokens per block needs " + std::to_string(expected));
    trace.requests.push_back(std::move(r));
  }
  return trace;
}

Trace read_mooncake_jsonl(const std::filesystem::path& path, int block_tokens) {
  return parse_mooncake_jsonl(read_input_file(path), path.string(), block_tokens);
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
