// One rank's UCX state: context, worker, the registered pool, the endpoint to the peer and the peer's rkey.
// Every wait is a progress loop with a deadline: a dead or hung peer is PeerLost after timeout_s, never a hang.
#pragma once
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv_descriptors.hpp"
#include "ucp_lanes.hpp"

namespace kvf::remote {

// The peer is gone, or did not answer within the deadline. Ends the run (rows finished so far are kept).
struct PeerLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the initiator asks of the holder, and the holder's answer (tagged UCP messages: the control path runs over
// UCX too; MPI only exchanged addresses and rkeys).
enum class MsgKind : std::uint32_t { hello = 1, prepare = 2, check = 3, answer = 4, done = 5, perftest = 6, flush = 7 };
struct Msg {
  MsgKind kind = MsgKind::hello;
  std::uint32_t index = 0;  // the transfer (plan index), or the hello's plan count
  std::uint64_t value = 0;  // pattern seed, or the hello's plan digest, or a port
  char text[240] = {};      // an answer's mismatch or refusal, empty when all is well
};

enum class Op { read, write };
// Who allocates the pool: UCX (ucp_mem_map with UCP_MEM_MAP_ALLOCATE) or this program (mmap, then registered).
enum class PoolAlloc { ucx, user };  // read: the initiator gets from the holder; write: it puts into the holder

// Whether the installed UCX registers CUDA memory (a context of its own, ucp_context_query memory types).
bool ucx_has_cuda_memory();

class UcpSession {
 public:
  UcpSession(std::size_t pool_bytes, double timeout_s, PoolAlloc alloc);
  ~UcpSession();
  UcpSession(const UcpSession&) = delete;
  UcpSession& operator=(const UcpSession&) = delete;

  // The blob a peer needs: worker address, packed rkey of the pool, pool base and size.
  std::vector<char> pack() const;
  // Connects to the peer whose pack() this is; throws UsageError when its pool is smaller than ours.
  void connect(const std::vector<char>& peer_blob);

  std::byte* pool() const { return static_cast<std::byte*>(pool_); }
  std::size_t pool_bytes() const { return pool_bytes_; }

  // The descriptors as one batch of UCP RMA operations (read: get from the peer's src_off into our dst_off;
  // write: put our src_off into the peer's dst_off), then an endpoint flush: back when every byte has arrived.
  void transfer(Op op, const std::vector<Descriptor>& ds);

  // The control words after the pool (not part of any transfer): a stop flag and a heartbeat the holder keeps
  // (many-to-one: background readers stop on the flag and call the holder lost when the heartbeat stalls).
  // kStopNoBarrier: a rank is gone (rank 0, or a reader that stopped answering), so no rank meets at the closing
  // barrier (it would wait for the lost one); each reader that sees it puts kStopSeen in its lockstep done word.
  static constexpr std::uint64_t kStopDone = 1, kStopNoBarrier = 2, kStopSeen = ~std::uint64_t{0};
  void set_stop(std::uint64_t why = kStopDone);
  // This rank's own control word `index` as a peer last put it.
  std::uint64_t own_word(int index) const;
  void progress() { ucp_worker_progress(worker_); }
  struct Words {
    std::uint64_t stop = 0, heartbeat = 0;
  };
  Words peer_words();  // one get of the peer's control words, flushed
  // Many-to-one: background reader rank r publishes the bytes it has read so far in the holder's control word
  // kReaderWord0 + r, so rank 0 can state the holder's other traffic beside each of its rows.
  static constexpr int kReaderWord0 = 64;
  static constexpr int kControlWords = 512;  // 4 KiB after the pool: [0] stop, [1] heartbeat, [8..] gets land
  // Many-to-one in lockstep (the lockstep arm): rank 0 writes the holder's [kLockMode] 1 (0: the readers read
  // continuously), [kLockBytes] and [kLockSeed] for a case, then a new [kLockRound] per sample: round << 16 | the
  // case's tag (lock_go_word; consecutive lockstep cases have different tags), so that a reader knows a round
  // opens a new case and reads that case's bytes and seed again after it (one get need not read its words in
  // order); each reader rank r reads its slot once per round and puts round << 1 | (its first read of the case
  // failed its compare) into [kLockDone0 + r]. Readers' byte words stop below kLockDone0.
  static constexpr int kLockRound = 16, kLockBytes = 17, kLockSeed = 18, kLockMode = 19, kLockWords = 20;
  static constexpr int kLockDone0 = 288;
  static constexpr int kMaxLockRanks = kControlWords - kLockDone0;
  static constexpr std::uint64_t lock_go_word(std::uint64_t round, std::uint64_t case_tag) {
    return round << 16 | (case_tag & 0xffff);
  }
  // Puts value into the peer's control word `index` (from this rank's own copy of that word), flushed.
  void put_peer_word(int index, std::uint64_t value);
  // The peer's control words [first, first + n), landing in this rank's own copies of them, flushed.
  std::vector<std::uint64_t> peer_words(int first, int n);

  void send(const Msg& m);
  // PeerLost after timeout_s. sleep: wait on the worker's event fd when idle (the holder) instead of spinning.
  Msg receive(double timeout_s, bool sleep = false);

  // "<transport>/<device>" of the endpoint's RMA lanes as ucp_ep_print_info names them (e.g. "cma/memory",
  // "tcp/lo"), with UCX_TLS as set; empty before connect().
  const std::string& transport() const { return transport_; }
  // Whether this UCX registers CUDA memory (ucp_context_query memory types).
  bool has_cuda_memory() const;
  bool peer_lost() const { return lost_; }
  // The peer is leaving (its stop word said so): from here on the endpoint closes within 1 s, as for a lost peer.
  void peer_leaving() { lost_ = true; }
  bool peer_failure_handled() const { return peer_failure_handled_; }
  double timeout_s() const { return timeout_s_; }
  // The start (address exchange and hello) waits at least kStartWaitS: rank 0 sets up the harness before it joins
  // and the holder does not, so on a loaded machine a --peer-timeout of 1 s gave up on a rank that was only late.
  static constexpr double kStartWaitS = 30;
  double start_timeout_s() const { return timeout_s_ > kStartWaitS ? timeout_s_ : kStartWaitS; }

 private:
  void wait(void* request, const char* what, double timeout_s, bool sleep = false);
  void find_transport();
  std::string lanes_of(ucp_ep_h ep);  // ucp_ep_print_info's text
  void close_within(ucp_ep_h ep, bool force);  // bounded: 1 s of progress
  [[noreturn]] void lose(const std::string& why);
  // One put (or get) of n control words between this rank's words [local, local + n) and the peer's
  // [remote, remote + n), flushed.
  void control_rma(bool put, int local, int remote, int n);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  void* pool_ = nullptr;
  std::size_t pool_bytes_ = 0;
  static constexpr std::size_t kControlBytes = kControlWords * 8;
  std::uint64_t* words() const { return reinterpret_cast<std::uint64_t*>(pool() + pool_bytes_); }
  ucp_ep_h ep_ = nullptr;
  ucp_rkey_h peer_rkey_ = nullptr;
  std::uint64_t peer_base_ = 0;
  std::size_t peer_pool_bytes_ = 0;
  double timeout_s_ = 10;
  std::string transport_;
  bool lost_ = false;
  bool owned_by_ucx_ = false;  // ucp_mem_unmap frees it
  bool peer_failure_handled_ = true;  // the endpoint was made with UCP_ERR_HANDLING_MODE_PEER
  std::string passed_over_;  // the lanes the PEER endpoint had, where connect() took the faster one without it
  ucs_status_t ep_error_ = UCS_OK;
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
};

}  // namespace kvf::remote
