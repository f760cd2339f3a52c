// Request traces for the residency simulator (issue 17): the Mooncake JSONL format, and the trace indexed for
// replay (block ids remapped to 0..distinct-1 so policies keep per-block state in flat arrays, not hash maps).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::residency {

// Mooncake's published prefix-block size; the trace format names no block size, so the user states it.
inline constexpr int kMooncakeBlockTokens = 512;

struct Request {
  double timestamp_ms = 0;         // arrival, from the start of the trace
  std::int64_t input_length = 0;   // prompt tokens
  std::int64_t output_length = 0;  // generated tokens
  std::vector<std::uint64_t> hash_ids;  // one per block of the prompt, in order; an id names the block with its prefix
};

struct Trace {
  std::string source;  // the file name, for messages
  std::vector<Request> requests;
  // Requests whose hash_ids do not match ceil(input_length / block_tokens), one line each, for the caller to
  // print: the trace is still replayed (prefill tokens follow input_length, see block_tokens_of below).
  std::vector<std::string> warnings;
  std::size_t length_mismatches = 0;  // requests among the warnings: hash_ids against input_length
};

// One JSON object per line: {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [id, ...]}.
// Lines holding only white space are skipped. A line that is not such an object (bad JSON, a missing key, a
// negative or fractional number, an id outside [0, 2^63), a timestamp before the previous request's) throws
// UsageError("<source>:<line>: ...").
// block_tokens (>= 1, else UsageError) only serves the hash_ids/input_length consistency warning.
Trace parse_mooncake_jsonl(std::string_view text, const std::string& source, int block_tokens);
// The same from a file, read through the harness's input limits (kvf/input.hpp: regular files, size cap).
Trace read_mooncake_jsonl(const std::filesystem::path& path, int block_tokens);

// The suite's own trace format for users' traces: CSV with the header
// `timestamp_ms,input_length,output_length,block_ids`, block_ids a space-separated list of ids in [0, 2^63) with
// the same meaning as Mooncake's hash_ids (README "Traces"). Other columns are ignored. Read through the
// harness's CSV reader (kvf/table.hpp: RFC 4180, file:line errors, input limits); a malformed row (or one whose
// timestamp is before the previous row's) throws
// UsageError("<source>:<line>: column '<name>': ..."); a torn last row and an ids/length mismatch are warnings.
Trace parse_trace_csv(std::string_view text, const std::string& source, int block_tokens);

// Either format from a file, chosen by content: a first non-blank character '{' is Mooncake JSONL, anything else
// the suite's CSV (whose header then must name the four columns).
Trace read_trace(const std::filesystem::path& path, int block_tokens);

// Writers, each atomic (the whole text to "<path>.tmp", fsync, rename over path; on failure the .tmp is removed
// and kvf::WriteError thrown), so a generated trace can be saved and replayed. A request with a negative or
// non-finite timestamp, a negative length, or an id of 2^63 or more is UsageError: the readers would refuse it.
void write_mooncake_jsonl(const Trace& trace, const std::filesystem::path& path);
void write_trace_csv(const Trace& trace, const std::filesystem::path& path);

// The power of two from 1 to 2^20 tokens per block whose ceil(input_length / it) matches the most requests' id
// counts, where it matches more than half of them (a trace states no block size); nullopt otherwise.
std::optional<int> likely_block_tokens(const Trace& trace);

// Tokens of block `index` of a prompt of `input_length` tokens: block_tokens for full blocks, the remainder for
// the last partial one, 0 for ids beyond the prompt (a trace with more ids than its length needs).
std::int64_t block_tokens_of(std::int64_t input_length, std::size_t index, int block_tokens);

using BlockId = std::uint32_t;

// The trace as the simulator replays it: dense block ids, all requests' blocks in one array.
struct IndexedTrace {
  int block_tokens = kMooncakeBlockTokens;
  std::vector<BlockId> blocks;              // request r's blocks: blocks[offsets[r], offsets[r + 1])
  std::vector<std::size_t> offsets;         // size requests + 1
  std::vector<std::int64_t> input_length;   // per request
  std::vector<std::uint64_t> original_ids;  // dense id -> the trace's hash id
  std::size_t distinct = 0;                 // distinct blocks
  std::size_t max_request_blocks = 0;       // the most blocks one request references
  // Prefix consistency, as Mooncake's hashing guarantees: every id has the same parent (the id before it in its
  // request, or none) wherever it occurs. The oracle's bound (README) needs it; a violation is counted, the
  // first one described, and the replay still runs.
  std::size_t prefix_violations = 0;
  std::string first_prefix_violation;

  std::size_t requests() const { return input_length.size(); }
  std::size_t references() const { return blocks.size(); }
  std::span<const BlockId> request(std::size_t r) const {
    return {blocks.data() + offsets[r], offsets[r + 1] - offsets[r]};
  }
};

// block_tokens >= 1, else UsageError. More than 2^32 - 1 distinct blocks is UsageError.
IndexedTrace index_trace(const Trace& trace, int block_tokens);

}  // namespace kvf::residency
