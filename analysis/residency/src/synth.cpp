#include "kvf/residency/synth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvf/errors.hpp"

namespace kvf::residency {
namespace {

// Draws from std::mt19937_64 (its output sequence is fixed by the standard) through this file's own transforms:
// std::uniform_real_distribution and friends are implementation-defined, so the same seed would give other traces
// under libc++ or MSVC.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  double normal() {  // Box-Muller, one of the pair
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  std::int64_t tokens(const LogNormalTokens& d, std::int64_t max) {
    const double x = d.sigma == 0 ? d.median : d.median * std::exp(d.sigma * normal());
    return std::clamp<std::int64_t>(std::llround(std::min(x, 1e18)), 1, max);
  }

 private:
  std::mt19937_64 rng_;
};

// Zipf over ranks 0..n-1: P(r) proportional to 1 / (r + 1)^s, by inverse CDF.
class Zipf {
 public:
  Zipf(int n, double s) : cdf_(static_cast<std::size_t>(n)) {
    double total = 0;
    for (int r = 0; r < n; ++r) cdf_[static_cast<std::size_t>(r)] = total += std::pow(r + 1.0, -s);
  }
  int operator()(Draw& d) const {
    const double u = d.uniform() * cdf_.back();
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<int>(std::min<std::ptrdiff_t>(it - cdf_.begin(), std::ssize(cdf_) - 1));
  }

 private:
  std::vector<double> cdf_;
};

// Mooncake-style ids: a block with shared content (a system prompt's or a document's block) is interned by
// (parent id, content id), so the same content after the same prefix is the same id; a block of unique content
// (a message, a question, an output carried into the next turn) gets a fresh id. Ids count up from 0.
class Ids {
 public:
  static constexpr std::uint64_t kRoot = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t shared(std::uint64_t parent, std::uint64_t content) {
    const auto [it, fresh] = interned_.try_emplace(Key{parent, content}, next_);
    if (fresh) ++next_;
    return it->second;
  }
  std::uint64_t unique() { return next_++; }

 private:
  struct Key {
    std::uint64_t parent, content;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const {
      return std::hash<std::uint64_t>{}(k.parent * 0x9E3779B97F4A7C15ull ^ k.content);
    }
  };
  std::unordered_map<Key, std::uint64_t, Hash> interned_;
  std::uint64_t next_ = 0;
};

void need(bool ok, const char* field, double value, const std::string& allowed) {
  if (!ok) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    throw UsageError(std::string("synthetic trace: ") + field + " " + buf + ": expected " + allowed);
  }
}

void check_tokens(const LogNormalTokens& d, const char* field) {
  need(std::isfinite(d.median) && d.median >= 1, field, d.median, "a median of at least 1 token");
  need(std::isfinite(d.sigma) && d.sigma >= 0 && d.sigma <= 10, field, d.sigma, "a sigma in [0, 10]");
}

void check_spec(const SynthSpec& s) {
  const auto fraction = [](double v) { return v >= 0 && v <= 1; };  // false for NaN
  need(s.requests >= 0 && s.requests <= 10'000'000, "requests", double(s.requests), "0 to 10,000,000");
  need(std::isfinite(s.rate_per_s) && s.rate_per_s > 0, "rate_per_s", s.rate_per_s, "a finite rate above 0");
  need(s.block_tokens >= 1, "block_tokens", s.block_tokens, "at least 1");
  need(s.system_prompts >= 1 && s.system_prompts <= 1'000'000, "system_prompts", s.system_prompts, "1 to 1,000,000");
  need(s.system_prompt_blocks >= 0 && s.system_prompt_blocks <= 1'000'000, "system_prompt_blocks",
       s.system_prompt_blocks, "0 to 1,000,000");
  need(s.max_input_tokens > std::int64_t(s.system_prompt_blocks) * s.block_tokens, "max_input_tokens",
       double(s.max_input_tokens), "more than system_prompt_blocks * block_tokens (room for a message)");
  need(fraction(s.system_prompt_share), "system_prompt_share", s.system_prompt_share, "a fraction in [0, 1]");
  need(fraction(s.rag_fraction), "rag_fraction", s.rag_fraction, "a fraction in [0, 1]");
  need(fraction(s.session_continue), "session_continue", s.session_continue, "a fraction in [0, 1]");
  need(std::isfinite(s.turn_gap_mean) && s.turn_gap_mean >= 0, "turn_gap_mean", s.turn_gap_mean,
       "a finite mean of at least 0 requests");
  need(s.rag_documents >= 1 && s.rag_documents <= 10'000'000, "rag_documents", s.rag_documents, "1 to 10,000,000");
  need(s.rag_documents_per_request >= 1 && s.rag_documents_per_request <= s.rag_documents,
       "rag_documents_per_request", s.rag_documents_per_request, "1 to rag_documents");
  need(std::isfinite(s.rag_zipf) && s.rag_zipf >= 0, "rag_zipf", s.rag_zipf, "a finite exponent of at least 0");
  check_tokens(s.first_message, "first_message");
  check_tokens(s.next_message, "next_message");
  check_tokens(s.rag_document, "rag_document");
  check_tokens(s.rag_question, "rag_question");
  check_tokens(s.output, "output");
}

struct Session {
  std::vector<std::uint64_t> ids;
  std::int64_t input_length = 0;
  std::int64_t output_length = 0;
};

class Generator {
 public:
  explicit Generator(const SynthSpec& s)
      : s_(s), draw_(s.seed), zipf_(s.rag_documents, s.rag_zipf), bt_(s.block_tokens) {
    // Content ids: system prompt p's block k is p * S + k, then each document's blocks in pool order.
    std::uint64_t content = std::uint64_t(s.system_prompts) * std::uint64_t(s.system_prompt_blocks);
    for (int d = 0; d < s.rag_documents; ++d) {
      const std::int64_t blocks = (draw_.tokens(s.rag_document, s.max_input_tokens) + bt_ - 1) / bt_;
      documents_.push_back({content, blocks});
      content += static_cast<std::uint64_t>(blocks);
    }
  }

  Trace run() {
    Trace trace;
    trace.source = "synthetic(seed=" + std::to_string(s_.seed) + ")";
    const auto n = static_cast<std::size_t>(s_.requests);
    trace.requests.reserve(n);
    next_turn_.assign(n, kNone);
    double t_ms = 0;
    for (std::size_t i = 0; i < n; ++i) {
      t_ms += draw_.exponential(1000.0 / s_.rate_per_s);
      Request r;
      r.timestamp_ms = std::floor(t_ms);
      std::size_t session = next_turn_[i];
      if (session != kNone && !next_turn(sessions_[session], r)) {  // too long: the session ends, the slot is new
        sessions_[session] = {};
        session = kNone;
      }
      if (session == kNone) {
        if (draw_.uniform() < s_.rag_fraction) {
          rag(r);
        } else {
          first_turn(r);
          session = sessions_.size();
          sessions_.emplace_back();
        }
      }
      r.output_length = draw_.tokens(s_.output, s_.max_input_tokens);
      if (session != kNone) schedule(session, r, i);
      trace.requests.push_back(std::move(r));
    }
    return trace;
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  // A system prompt's blocks with probability system_prompt_share, else none.
  void system_prompt(Request& r) {
    if (s_.system_prompt_blocks == 0 || draw_.uniform() >= s_.system_prompt_share) return;
    const auto p = static_cast<std::uint64_t>(draw_.uniform() * s_.system_prompts);
    std::uint64_t parent = Ids::kRoot;
    for (int k = 0; k < s_.system_prompt_blocks; ++k)
      r.hash_ids.push_back(parent = ids_.shared(parent, p * std::uint64_t(s_.system_prompt_blocks) + k));
    r.input_length = std::int64_t(s_.system_prompt_blocks) * bt_;
  }

  // `tokens` more unique tokens after r's prompt: fresh ids for the blocks they start or finish. A partial last
  // block of r is rewritten (new content), so its id is replaced, as a prefix cache rehashes a block that grew.
  void extend_unique(Request& r, std::int64_t tokens) {
    const auto full = static_cast<std::size_t>(r.input_length / bt_);
    r.hash_ids.resize(full);
    r.input_length += tokens;
    const auto blocks = static_cast<std::size_t>((r.input_length + bt_ - 1) / bt_);
    while (r.hash_ids.size() < blocks) r.hash_ids.push_back(ids_.unique());
  }

  std::int64_t room(const Request& r) const { return s_.max_input_tokens - r.input_length; }

  void first_turn(Request& r) {
    system_prompt(r);
    extend_unique(r, std::min(draw_.tokens(s_.first_message, s_.max_input_tokens), room(r)));
  }

  // The previous prompt + its output + a new message, or false when that passes max_input_tokens.
  bool next_turn(const Session& s, Request& r) {
    const std::int64_t added = s.output_length + draw_.tokens(s_.next_message, s_.max_input_tokens);
    if (added > s_.max_input_tokens - s.input_length) return false;
    r.hash_ids = s.ids;
    r.input_length = s.input_length;
    extend_unique(r, added);
    return true;
  }

  void rag(Request& r) {
    system_prompt(r);
    std::vector<int> chosen;
    std::uint64_t parent = r.hash_ids.empty() ? Ids::kRoot : r.hash_ids.back();
    for (int k = 0; k < s_.rag_documents_per_request; ++k) {
      int d = zipf_(draw_);
      // Distinct documents per request: redraw a repeat (documents_per_request <= pool, so this ends).
      while (std::find(chosen.begin(), chosen.end(), d) != chosen.end()) d = zipf_(draw_);
      chosen.push_back(d);
      const Document& doc = documents_[static_cast<std::size_t>(d)];
      if (doc.blocks * bt_ >= room(r)) continue;  // leave a token for the question
      for (std::int64_t b = 0; b < doc.blocks; ++b)
        r.hash_ids.push_back(parent = ids_.shared(parent, doc.first_content + static_cast<std::uint64_t>(b)));
      r.input_length += doc.blocks * bt_;
    }
    extend_unique(r, std::min(draw_.tokens(s_.rag_question, s_.max_input_tokens), room(r)));
  }

  // Remembers the session's prompt and output and, with probability session_continue, books its next turn
  // 1 + floor(Exp(turn_gap_mean)) requests ahead (the next free slot; past the end, none).
  void schedule(std::size_t session, const Request& r, std::size_t i) {
    Session& s = sessions_[session];
    if (draw_.uniform() >= s_.session_continue) {
      s = {};  // ended: free its ids
      return;
    }
    s.ids = r.hash_ids;
    s.input_length = r.input_length;
    s.output_length = r.output_length;
    const double gap = 1 + std::floor(draw_.exponential(s_.turn_gap_mean));
    std::size_t slot = gap >= double(next_turn_.size()) ? next_turn_.size() : i + static_cast<std::size_t>(gap);
    while (slot < next_turn_.size() && next_turn_[slot] != kNone) ++slot;
    if (slot < next_turn_.size())
      next_turn_[slot] = session;
    else
      s = {};
  }

  struct Document {
    std::uint64_t first_content;
    std::int64_t blocks;
  };

  const SynthSpec& s_;
  Draw draw_;
  Zipf zipf_;
  std::int64_t bt_;
  Ids ids_;
  std::vector<Document> documents_;
  std::vector<Session> sessions_;
  std::vector<std::size_t> next_turn_;  // request slot -> the session whose turn it is, or kNone
};

}  // namespace

Trace generate_trace(const SynthSpec& spec) {
  check_spec(spec);
  return Generator(spec).run();
}

}  // namespace kvf::residency
