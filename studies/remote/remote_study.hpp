// The remote study's shared declarations: the flags both ranks parse, the environment the arms expand over, the
// transfer case rank 0 times, and the arm list. Both ranks build the same case list from the same flags; rank 0
// measures it through the harness, rank 1 (the holder) serves it: it fills the pages rank 0 reads and compares
// the pages rank 0 writes (holder.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv_descriptors.hpp"
#include "kvf/arms.hpp"
#include "kvf/study.hpp"
#include "models.hpp"
#include "perftest.hpp"
#include "ucp_session.hpp"

namespace kvf::remote {

// The study's own flags, as typed (checked in check_flags).
struct RemoteFlags {
  std::vector<std::string> arms, ops, sizes, models, tokens, layouts, granularities;
  std::string pool_mib, peer_timeout, pool_alloc, ranks;
  bool no_perftest = false;
  bool quick = false;  // the harness's --quick, which the holder parses itself
  void add_to(StudyFlags& f);
};

struct Env {
  bool quick = false;
  std::size_t pool_bytes = 0;
  double peer_timeout_s = 10;
  PoolAlloc pool_alloc = PoolAlloc::ucx;
  std::vector<models::ModelShape> all_models;
  UcpSession* session = nullptr;  // absent while listing: nothing is connected, nothing runs
  std::string transport_note;     // what UCX picked, said on every row
  int next_index = 0;             // the transfer's place in the case list: the holder finds it by this
  int readers = 1;                // ranks reading from the holder: rank 0 and the background readers (ranks 2..)
  int launched_ranks = 0;         // the MPI world's size; 0 while listing (--ranks then plans for its count)
  double lock_signal_s = 0;       // the lockstep arm's signalling-only median in this run (0: not measured)
  std::uint64_t lock_round = 0;   // the last go round rank 0 gave: rounds only grow, over every lockstep case
  std::string lock_lost;          // a reader that missed a round's deadline: later lockstep cases fail at once
  int lock_lost_rank = 0;         // its rank (rank 0 tells the holder, which tells the other readers)
  std::uint64_t lock_cases = 0;   // lockstep cases set up so far: each one's tag in the go word differs from the last
};

// Many-to-one rows say every background reader reads throughout: each reader that announces its bytes must read
// again while rank 0 waits, within wait_s (`when` says since what, for the message). One that has not is a lost
// reader: PeerLost naming it, Env::lock_lost set (this row and the later many-to-one ones fail naming it, and at the
// end rank 0 tells the holder, so no rank waits for it at the closing barrier). No-op with one reader.
void wait_readers_reading(Env& env, double wait_s, const std::string& when);

// The lockstep arm's slots: reader s (rank 0 is slot 0, rank r >= 2 slot r - 1) reads bytes from the holder's
// offset s * bytes into its own offset 0, the pattern indexed from s * bytes (a read of the wrong slot fails).
Descriptor lock_slot(int slot, std::int64_t bytes);

// The flags checked into user lists and env (UsageError: one line naming the flag).
UserLists check_flags(const RemoteFlags& f, Env& env);
// --ranks N (or --ranks=N) as typed on the command line: the count bench_remote starts itself with when no MPI
// launcher started it, 2 when absent or not a whole number in 2..kMaxRanks (rank 0 then refuses it in one line).
constexpr int kMaxRanks = 64;
int ranks_to_launch(int argc, char** argv);

// One page (or one region) moved from one rank to the other, timed at rank 0.
class TransferCase final : public Case {
 public:
  TransferCase(Env& env, Op op, std::vector<Descriptor> ds, std::int64_t moved);
  int index = 0;
  Op op = Op::read;
  std::uint64_t seed = 0;
  std::vector<Descriptor> descriptors;

  void setup(Backend&) override;
  bool has_verify() const override { return true; }
  void verify(Backend&) override;
  void before_measure(Backend&, const std::string& mode) override;
  void before_sample(Backend&) override;
  void run(Backend&) override;
  std::string after_measure(Backend&, const Summary& s, const std::string& mode) override;

  PerftestResult perftest;  // ucx_perftest on the same pair, for the largest ceiling region of this op

  // Many-to-one in lockstep (the lockstep arm): at one go signal every reader reads lock_bytes of its own slot
  // (rank 0: `descriptors`, slot 0); a sample is go -> every reader done, so bytes = readers x lock_bytes.
  // lock_bytes 0: the signalling alone (no reads), the protocol's own cost, stated beside the data rows.
  bool lockstep = false;
  std::int64_t lock_bytes = 0;
  std::vector<Descriptor> lock_slots;  // the holder's fill: every reader's slot
  void teardown(Backend&) override;

 private:
  // One lockstep sample: the go word, rank 0's own read, then every reader's done word; returns the readers
  // whose first read of this case's seed failed its compare ("rank 2, rank 3"), empty when none did.
  std::string lock_round();

  // The bytes the background readers (ranks 2..) have published in the holder's control words, summed.
  std::uint64_t readers_bytes();
  Env& env_;
  std::vector<double> seconds_;  // every run()'s own time: the tail percentiles read the mode's last n of them
  // Many-to-one: the readers' byte count and the time when this case's window began (setup, then each mode).
  std::uint64_t readers_mark_ = 0;
  double mark_s_ = 0;
  std::uint64_t lock_tag_ = 0;  // this lockstep case's tag in the go word (Env::lock_cases when it was set up)
  bool cold_mode_ = false;      // the samples of this mode flush the holder's caches first
};

std::vector<Arm<Env>> remote_arms();
// Every case of the flags, in order, each with its index (both ranks call this with the same flags).
std::vector<std::unique_ptr<Case>> build_cases(const RemoteFlags& f, Env& env);
// A digest of the case list (names, bytes, descriptors, pool size): ranks with different flags differ here.
std::uint64_t plan_digest(const std::vector<std::unique_ptr<Case>>& cases, const Env& env);

struct Place;
// Ranks 2.. (many-to-one): read a region of the holder's pool in a loop until the holder's stop flag, beside
// rank 0's measurement (readers.cpp).
int reader_main(int argc, char** argv, const Place& p, const char* prog);

// The holder's side of the run (rank 1): serves fill, check and flush requests until rank 0 says done. lost_reader:
// the reader rank (2..) rank 0's done named as stopped answering, 0 if none: then no rank meets at MPI_Finalize.
// flusher: flushes this rank's caches before rank 0's cold samples (made, and its buffer written, before the start).
int serve_holder(UcpSession& s, const std::vector<std::unique_ptr<Case>>& cases, const std::string& prog,
                 int* lost_reader, Backend* flusher);
// When a rank is gone (rank 0, or the reader lost_reader, 0 if none): the stop word says "no barrier", and the holder
// keeps its pool served until every other reader with a done word has seen it (bounded by the peer timeout, one
// line naming a reader that did not), so none of them waits at the closing barrier for the lost rank.
void stop_readers_without_barrier(UcpSession& s, int ranks, int lost_reader, const char* prog);

}  // namespace kvf::remote
