// Ranks 2.. of a many-to-one run: each reads one region of the holder's pool in a loop, from the handshake to the
// holder's stop flag, so that rank 0's rows are measured with N readers on one holder. They take no part in the
// control messages; the holder's heartbeat word tells them it is alive.
#include <algorithm>
#include <chrono>
#include <cstdio>

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
  try {
    if (!parse_own_flags(argc, argv, [&](StudyFlags& sf) {
          f.add_to(sf);
          sf.flag("--quick", f.quick, "");
        }))
      throw UsageError("bad flags");  // rank 0 says what is wrong
    Env env;
    env.quick = f.quick;
    (void)check_flags(f, env);  // the pool size and deadline; rank 0 says what is wrong with a flag
    s = std::make_unique<UcpSession>(env.pool_bytes, env.peer_timeout_s, env.pool_alloc);
    const auto blobs = mpi_exchange(s->pack(), s->timeout_s());
    s->connect(blobs[1]);
    const std::int64_t region = std::min<std::int64_t>({kReaderRegion, static_cast<std::int64_t>(env.pool_bytes)});
    const std::vector<Descriptor> ds{{0, 0, region, 0}};
    // The bytes read so far, published in the holder's word for this rank after every read (rank 0 states the
    // rate beside each row); ranks past the control area's words read unannounced.
    const int word = UcpSession::kReaderWord0 + p.rank;
    const bool announce = word < UcpSession::kControlWords;
    std::uint64_t bytes = 0;
    auto beat_at = std::chrono::steady_clock::now();
    std::uint64_t beat = 0;
    for (;;) {
      const auto w = s->peer_words();
      if (w.stop) break;
      const auto now = std::chrono::steady_clock::now();
      if (w.heartbeat != beat) beat = w.heartbeat, beat_at = now;
      if (now - beat_at > std::chrono::duration<double>(10 * s->timeout_s()))
        throw PeerLost("the holder's heartbeat stalled for " + std::to_string(static_cast<int>(10 * s->timeout_s())) + " s");
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
  const bool lost = s && s->peer_lost();
  if (!lost) mpi_finish();
  s.reset();
  return rc;
}

}  // namespace kvf::remote
