// Rank 1, the holder: owns the pool rank 0 reads from and writes into. It prepares each transfer (pattern into
// the runs rank 0 will read, zeros into the runs rank 0 will write), compares what rank 0 wrote, and keeps its
// worker progressing in between (TCP carries put/get as active messages the holder must serve).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "remote_study.hpp"

namespace kvf::remote {

namespace {

const TransferCase* find_case(const std::vector<std::unique_ptr<Case>>& cases, std::uint32_t index) {
  for (const auto& c : cases)
    if (const auto* t = dynamic_cast<const TransferCase*>(c.get()); t && t->index == static_cast<int>(index)) return t;
  return nullptr;
}

void answer(UcpSession& s, const std::string& text) {
  Msg a;
  a.kind = MsgKind::answer;
  std::snprintf(a.text, sizeof a.text, "%s", text.c_str());
  s.send(a);
}

}  // namespace

int serve_holder(UcpSession& s, const std::vector<std::unique_ptr<Case>>& cases, const std::string& prog,
                 int* lost_reader, Backend* flusher) {
  // Rank 0 may spend a whole case between two requests (its --budget, a slow verify): the holder waits ten
  // deadlines before it calls rank 0 lost.
  const double idle_s = 10 * s.timeout_s();
  // Before its first request rank 0 waits up to the start's wait for the background readers' first reads.
  double wait_s = s.start_timeout_s() + idle_s;
  int served = 0;
  try {
    for (;;) {
      const Msg m = s.receive(wait_s, true);
      wait_s = idle_s;
      if (m.kind == MsgKind::done) {
        *lost_reader = static_cast<int>(m.value);
        return kExitOk;
      }
      if (m.kind == MsgKind::perftest) {
        // The server side of ucx_perftest: started, announced with this host's name, waited for (bounded).
        std::string why;
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        if (perftest_server_start(static_cast<int>(m.value), 3 * s.timeout_s() + 30, &why)) {
          answer(s, std::string("host:") + host);
          perftest_server_wait();
        } else {
          answer(s, why);
        }
        continue;
      }
      if (m.kind == MsgKind::flush) {
        // Before a cold sample: this rank's caches flushed as the harness flushes rank 0's (2x its LLC read, up to
        // the flush cap). The buffer was written before the start: a flush here reads it and no more, so the
        // holder's pause in serving (TCP readers' gets wait for its progress) stays a flush's read.
        if (!flusher) {
          answer(s, "the holder planned no cold case (its flags differ from rank 0's?)");
          continue;
        }
        try {
          flusher->flush_caches();
          answer(s, "");
        } catch (const std::exception& e) {
          answer(s, e.what());
        }
        continue;
      }
      const TransferCase* t = find_case(cases, m.index);
      if (!t) {
        answer(s, "no transfer " + std::to_string(m.index) + " in the holder's list");
        continue;
      }
      if (m.kind == MsgKind::prepare) {
        if (t->lockstep) fill_runs(s.pool(), t->lock_slots, true, m.value);  // every reader's slot, rank 0's too
        else if (t->op == Op::read) fill_runs(s.pool(), t->descriptors, true, m.value);
        else zero_runs(s.pool(), t->descriptors, false);
        answer(s, "");
      } else if (m.kind == MsgKind::check) {
        answer(s, compare_runs(s.pool(), t->descriptors, false, m.value));
      } else {
        answer(s, "unexpected message kind " + std::to_string(static_cast<int>(m.kind)));
      }
      ++served;
    }
  } catch (const PeerLost& e) {
    std::fprintf(stderr, "%s (rank 1, holder): error: rank 0 lost after %d requests: %s\n", prog.c_str(), served,
                 e.what());
    return kExitFailure;
  }
}

void stop_readers_without_barrier(UcpSession& s, int ranks, int lost_reader, const char* prog) {
  s.set_stop(UcpSession::kStopNoBarrier);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.timeout_s());
  for (int r = 2; r < std::min(ranks, UcpSession::kMaxLockRanks);) {
    if (r == lost_reader || s.own_word(UcpSession::kLockDone0 + r) == UcpSession::kStopSeen) {
      ++r;
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {  // another reader gone too: it finds the pool gone
      std::fprintf(stderr, "%s (rank 1, holder): reader rank %d did not acknowledge the stop within %.0f s\n", prog,
                   r, s.timeout_s());
      return;
    }
    s.progress();  // over TCP a reader's gets need the holder's progress
    std::this_thread::yield();
  }
}

}  // namespace kvf::remote
