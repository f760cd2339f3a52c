// A seeded synthetic trace generator for the residency simulator (issue 17): shared system prompts, multi-turn
// sessions with a reuse distance in requests, and RAG over a Zipf-popular document pool, with Mooncake-style prefix
// ids (README "Synthetic traces" states the model and the defaults' statistics).
#pragma once
#include <cstdint>

#include "kvf/residency/trace.hpp"

namespace kvf::residency {

// A length in tokens: round(median * exp(sigma * z)), z standard normal, clamped to [1, max_input_tokens].
// sigma 0 gives exactly `median`.
struct LogNormalTokens {
  double median = 0;
  double sigma = 0;
};

struct SynthSpec {
  std::uint64_t seed = 1;
  std::int64_t requests = 4000;
  double rate_per_s = 4;  // Poisson arrivals; timestamps are whole milliseconds
  int block_tokens = kMooncakeBlockTokens;
  std::int64_t max_input_tokens = 131072;  // no prompt is longer; a session ends rather than exceed it

  // Shared system prompts: a new chat session or a RAG request starts with one of `system_prompts` prompts
  // (chosen uniformly) with probability `system_prompt_share`; each prompt is `system_prompt_blocks` full blocks.
  int system_prompts = 4;
  int system_prompt_blocks = 4;
  double system_prompt_share = 0.8;

  // Request kinds: a request slot not taken by a session's next turn is a RAG request with probability
  // `rag_fraction`, else the first turn of a new chat session.
  double rag_fraction = 0.3;

  // Multi-turn sessions: after each turn the session goes on with probability `session_continue`; its next turn
  // comes 1 + floor(X) requests later, X exponential with mean `turn_gap_mean` requests (the next free slot if
  // another turn holds that one; a turn past the end of the trace is dropped). The next prompt is the previous
  // prompt + the previous output + a new message.
  double session_continue = 0.8;
  double turn_gap_mean = 400;  // 100 s at 4 requests/s: a user reading and typing
  LogNormalTokens first_message{6000, 1.0};  // a chat session's first user message (after any system prompt)
  LogNormalTokens next_message{400, 1.0};    // each later turn's user message

  // RAG: system prompt (as above) + `rag_documents_per_request` distinct documents drawn Zipf(`rag_zipf`) by
  // popularity rank from a pool of `rag_documents`, in draw order, + a unique question. A document is
  // ceil(length / block_tokens) full blocks, its length drawn once per document.
  int rag_documents = 10000;
  int rag_documents_per_request = 4;
  double rag_zipf = 1.0;
  LogNormalTokens rag_document{1536, 0.5};
  LogNormalTokens rag_question{200, 0.8};

  LogNormalTokens output{300, 0.8};  // generated tokens per request (also what the next turn carries)
};

// The trace for `spec` (source "synthetic(seed=N)"), the same for the same spec and seed wherever doubles are IEEE
// and libm's log, log1p, exp, pow, cos and sqrt round alike: the random numbers come from std::mt19937_64, whose
// output the standard fixes, through this file's own distributions (std:: distributions differ between standard
// libraries). Ids: a block's id is interned from (parent id, content id), numbered 0, 1, ... in order of first
// appearance, so equal prefixes give equal ids and index_trace finds no prefix violation. Every request has
// exactly ceil(input_length / block_tokens) ids. A value outside its range is UsageError naming the field.
Trace generate_trace(const SynthSpec& spec);

}  // namespace kvf::residency
