// Small traces for the residency tests: requests given as hash-id lists, full blocks unless a length is given.
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "kvf/residency/simulate.hpp"
#include "kvf/residency/trace.hpp"

namespace kvf::residency::test {

inline Trace make_trace(const std::vector<std::vector<std::uint64_t>>& requests, int block_tokens,
                        const std::vector<std::int64_t>& lengths = {}) {
  Trace t;
  t.source = "test";
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Request r;
    r.hash_ids = requests[i];
    r.input_length = i < lengths.size() ? lengths[i] : static_cast<std::int64_t>(requests[i].size()) * block_tokens;
    t.requests.push_back(r);
  }
  return t;
}

inline Result run(const std::vector<std::vector<std::uint64_t>>& requests, std::string_view policy, Capacity cap,
                  int block_tokens = 4, const std::vector<std::int64_t>& lengths = {}) {
  return simulate(index_trace(make_trace(requests, block_tokens, lengths), block_tokens), policy, cap);
}

inline std::size_t hits(const Result& r) { return r.hits_hbm + r.hits_host; }

// Requests as root-to-node paths of a random prefix tree, as Mooncake's hashing gives: each request continues a
// random earlier path (or starts fresh) at a random depth and adds 0 to max_new new blocks.
inline std::vector<std::vector<std::uint64_t>> random_prefix_trace(std::mt19937_64& rng, int requests, int max_new,
                                                                   int fresh_percent) {
  std::vector<std::vector<std::uint64_t>> out;
  std::uint64_t next_id = 0;
  for (int i = 0; i < requests; ++i) {
    std::vector<std::uint64_t> path;
    if (!out.empty() && int(rng() % 100) >= fresh_percent) {
      const auto& base = out[rng() % out.size()];
      path.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
    }
    const int added = int(rng() % (max_new + 1));
    for (int k = 0; k < added || path.empty(); ++k) path.push_back(next_id++);
    out.push_back(path);
  }
  return out;
}

// The shared Mooncake synthetic trace, or an empty path when this checkout has none beside it.
inline std::filesystem::path shared_trace() {
  const std::filesystem::path p = KVF_RESIDENCY_TRACE;
  return std::filesystem::exists(p) ? p : std::filesystem::path{};
}

}  // namespace kvf::residency::test
