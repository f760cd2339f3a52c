// Ranks 2.. of a many-to-one run: each reads one region of the holder's pool in a loop, from the handshake to the
// holder's stop flag, so that rank 0's rows are measured with N readers on one holder. They take no part in the
// control messages; the holder's heartbeat word tells them it is alive. During a lockstep case (the holder's lock
// mode word is 1) a reader instead reads its own slot once per go round rank 0 gives and says it is done.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kvf/errors.hpp"
#include "mpi_boot.hpp"
#include "remote_study.hpp"

namespace kvf::remote {

namespace {

constexpr std::int64_t kReaderRegion = 2 << 20;  // one 16-token page of Llama-3.1-8B

}  // namespace

int reader_main(int argc, char** argv, const Place& p, const char* prog) {
  RemoteFlags f;
  std::unique_ptr<UcpSession> s;
  int rc = kExitOk;
  long reads = 0;
  std::uint64_t stop = 0;  // the holder's stop word as last read
  bool holder_gone = false;
  try {
    if (!parse_own_flags(argc, argv, [&](StudyFlags& sf) {
          f.add_to(sf);
          sf.flag("--quick", f.quick, "");
        }))
      throw UsageError("bad flags");  // rank 0 says what is wrong
    Env env;
    env.quick = f.quick;
    env.launched_ranks = p.size;
    (void)check_flags(f, env);  // the pool size and deadline; rank 0 says what is wrong with a flag
    s = std::make_unique<UcpSession>(env.pool_bytes, env.peer_timeout_s, env.pool_alloc);
    const auto blobs = mpi_exchange(s->pack(), s->start_timeout_s());
    s->connect(blobs[1]);
    // Test only (tests/remote/ranks.sh late_start): this reader starts reading this many seconds late; rank 0
    // waits for its first read before the first row, so no figure changes.
    if (const char* late = std::getenv("KVF_REMOTE_TEST_LATE_READ_S"))
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(late)));
    const std::int64_t region = std::min<std::int64_t>({kReaderRegion, static_cast<std::int64_t>(env.pool_bytes)});
    const std::vector<Descriptor> ds{{0, 0, region, 0}};
    // Test only (tests/remote/ranks.sh reader_verify): this rank reads another reader's slot in lockstep cases,
    // which fails that case's verify; it cannot make a figure wrong.
    const char* wrong = std::getenv("KVF_REMOTE_TEST_WRONG_SLOT");
    const bool wrong_slot = wrong && std::atoi(wrong) == p.rank;
    // The bytes read so far, published in the holder's word for this rank after every read (rank 0 states the
    // rate beside each row); ranks past the readers' words read unannounced (and take no part in lockstep cases:
    // rank 0 skips those with this many ranks).
    const int word = UcpSession::kReaderWord0 + p.rank;
    const bool announce = word < UcpSession::kLockDone0;
    std::uint64_t bytes = 0;
    auto beat_at = std::chrono::steady_clock::now();
    std::vector<std::uint64_t> seen{0, 0};  // this case's [kLockBytes], [kLockSeed]
    std::uint64_t beat = 0, round = 0, tag = ~std::uint64_t{0};
    for (;;) {
      const auto w = s->peer_words(0, UcpSession::kLockWords);
      if (w[0]) {
        stop = w[0];
        if (stop == UcpSession::kStopNoBarrier && p.rank < UcpSession::kMaxLockRanks) {
          try {
            s->put_peer_word(UcpSession::kLockDone0 + p.rank, UcpSession::kStopSeen);
          } catch (const PeerLost&) {
            // The holder stopped waiting for it (its deadline passed): nothing is lost, this rank leaves anyway.
          }
          s->peer_leaving();  // the holder frees its pool once the readers have said so: do not wait on it
        }
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (w[1] != beat) beat = w[1], beat_at = now;
      if (now - beat_at > std::chrono::duration<double>(10 * s->timeout_s())) {
        holder_gone = true;  // a UCX-mapped pool stays readable after its owner died: the gets alone do not say so
        throw PeerLost("the holder's heartbeat stalled for " +
                       std::to_string(static_cast<int>(10 * s->timeout_s())) + " s");
      }
      if (w[UcpSession::kLockMode] == 1 && p.rank < UcpSession::kMaxLockRanks) {
        const std::uint64_t go = w[UcpSession::kLockRound];
        if (go >> 16 <= round) {
          std::this_thread::yield();  // more ranks than cores: let rank 0 and the others run
          continue;
        }
        round = go >> 16;
        // The first round of a case: its bytes and seed again, from a get issued after the round was seen.
        const bool first = (go & 0xffff) != tag;
        tag = go & 0xffff;
        if (first) seen = s->peer_words(UcpSession::kLockBytes, 2);
        const auto lock_bytes = static_cast<std::int64_t>(seen[0]);
        const std::uint64_t seed = seen[1];
        // That round lands in zeroed memory and is compared: a read of the wrong slot, or one that moved nothing,
        // sets the done word's low bit (rank 0's verify names this rank).
        std::uint64_t bad = 0;
        if (lock_bytes > 0) {
          std::vector<Descriptor> slot{lock_slot(p.rank - 1, lock_bytes)};
          if (wrong_slot) slot[0].src_off = 0;  // rank 0's slot, compared as this rank's
          if (first) zero_runs(s->pool(), slot, false);
          s->transfer(Op::read, slot);
          if (first) bad = compare_runs(s->pool(), slot, false, seed).empty() ? 0 : 1;
        }
        s->put_peer_word(UcpSession::kLockDone0 + p.rank, round << 1 | bad);
        continue;
      }
      s->transfer(Op::read, ds);
      ++reads;
      bytes += static_cast<std::uint64_t>(region);
      if (announce) s->put_peer_word(word, bytes);
    }
  } catch (const UsageError&) {
    rc = kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (rank %d, reader): error after %ld reads: %s\n", prog, p.rank, reads, one_line(e.what()).c_str());
    rc = kExitFailure;
  }
  const bool lost = (s && s->peer_lost()) || holder_gone || stop == UcpSession::kStopNoBarrier;
  if (!lost) mpi_finish();
  s.reset();
  return rc;
}

}  // namespace kvf::remote
