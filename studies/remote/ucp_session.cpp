#include "ucp_session.hpp"

#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <ucs/config/global_opts.h>

#include "kvf/errors.hpp"

namespace kvf::remote {

namespace {

using Clock = std::chrono::steady_clock;

constexpr ucp_tag_t kControlTag = 0x6b7666;  // "kvf": the one tag of the control messages

std::string status_text(ucs_status_t s) { return ucs_status_string(s); }

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK) throw std::runtime_error(std::string(what) + ": " + status_text(s));
}

struct BlobHeader {
  std::uint64_t pool_base = 0, pool_bytes = 0, address_len = 0, rkey_len = 0;
};

}  // namespace

void UcpSession::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* s = static_cast<UcpSession*>(arg);
  if (ep == s->ep_) s->ep_error_ = status;  // not the endpoint connect() tried and closed
}

UcpSession::UcpSession(std::size_t pool_bytes, double timeout_s, PoolAlloc alloc)
    : pool_bytes_(pool_bytes), timeout_s_(timeout_s) {
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // WAKEUP: the holder sleeps on the worker's event fd between requests instead of spinning; on a machine with
  // fewer free cores than ranks a spinning holder delays the active messages TCP's put/get need it to serve.
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  const ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  check(st, "ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  check(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = pool_bytes_ + kControlBytes;
  if (alloc == PoolAlloc::user) {
    // Our own anonymous mapping, touched before registration: the first sample must not pay page faults.
    pool_ = ::mmap(nullptr, pool_bytes_ + kControlBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (pool_ == MAP_FAILED) {
      pool_ = nullptr;
      throw UsageError("--pool-mib " + std::to_string(pool_bytes_ >> 20) + ": cannot map the pool: " + std::strerror(errno));
    }
    mp.address = pool_;
  } else {
    // UCX allocates with the memory domain its peers can map (posix/sysv shared memory on one machine): the
    // single-copy path ucx_perftest measures, where user memory only has cma's process_vm_readv.
    mp.address = nullptr;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
  }
  const ucs_status_t mst = ucp_mem_map(context_, &mp, &memh_);
  if (mst != UCS_OK) {
    memh_ = nullptr;
    throw UsageError("--pool-mib " + std::to_string(pool_bytes_ >> 20) + ": ucp_mem_map: " + status_text(mst));
  }
  if (alloc == PoolAlloc::ucx) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    check(ucp_mem_query(memh_, &attr), "ucp_mem_query");
    pool_ = attr.address;
    owned_by_ucx_ = true;
    std::memset(pool_, 0, pool_bytes_ + kControlBytes);  // page faults now, not in the first sample
  }
}

UcpSession::~UcpSession() {
  if (peer_rkey_) ucp_rkey_destroy(peer_rkey_);
  if (ep_) {
    // Forced when the peer is gone (a graceful close would wait for it), where UCX allows it: with peer-failure
    // handling; without, the flush close below is bounded by the deadline instead.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = lost_ && peer_failure_handled_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(ep_, &p);
    if (UCS_PTR_IS_PTR(r)) {
      const auto deadline = Clock::now() + std::chrono::duration<double>(lost_ ? 1.0 : timeout_s_);
      while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
      if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
    }
  }
  if (memh_) ucp_mem_unmap(context_, memh_);
  if (pool_ && !owned_by_ucx_) ::munmap(pool_, pool_bytes_ + kControlBytes);
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

std::vector<char> UcpSession::pack() const {
  ucp_address_t* addr = nullptr;
  std::size_t addr_len = 0;
  check(ucp_worker_get_address(worker_, &addr, &addr_len), "ucp_worker_get_address");
  void* rkey = nullptr;
  std::size_t rkey_len = 0;
  const ucs_status_t st = ucp_rkey_pack(context_, memh_, &rkey, &rkey_len);
  if (st != UCS_OK) {
    ucp_worker_release_address(worker_, addr);
    check(st, "ucp_rkey_pack");
  }
  BlobHeader h{reinterpret_cast<std::uint64_t>(pool_), pool_bytes_, addr_len, rkey_len};
  std::vector<char> blob(sizeof h + addr_len + rkey_len);
  std::memcpy(blob.data(), &h, sizeof h);
  std::memcpy(blob.data() + sizeof h, addr, addr_len);
  std::memcpy(blob.data() + sizeof h + addr_len, rkey, rkey_len);
  ucp_rkey_buffer_release(rkey);
  ucp_worker_release_address(worker_, addr);
  return blob;
}

void UcpSession::connect(const std::vector<char>& blob) {
  BlobHeader h;
  if (blob.size() < sizeof h) throw std::runtime_error("peer address blob too short");
  std::memcpy(&h, blob.data(), sizeof h);
  if (blob.size() != sizeof h + h.address_len + h.rkey_len) throw std::runtime_error("peer address blob malformed");
  peer_base_ = h.pool_base;
  peer_pool_bytes_ = h.pool_bytes;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(blob.data() + sizeof h);
  // PEER first: a dead peer becomes an error on the endpoint, not a fatal error of the process. UCX's shared
  // memory transports have no peer-failure handler, so there the endpoint is made without it (the deadlines
  // find a dead peer instead). UCX's own error lines are silenced: an unreachable peer is our one line.
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcpSession::on_ep_error;
  ep.err_handler.arg = this;
  char level[64] = "warn";
  ucs_global_opts_get_value("LOG_LEVEL", level, sizeof level);
  ucs_global_opts_set_value("LOG_LEVEL", "fatal");
  ucs_status_t st = ucp_ep_create(worker_, &ep, &ep_);
  ucp_ep_params_t plain = ep;
  plain.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  plain.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  if (st == UCS_ERR_UNREACHABLE) {
    st = ucp_ep_create(worker_, &plain, &ep_);
    peer_failure_handled_ = false;
  } else if (const std::string with_handling = st == UCS_OK ? lanes_of(ep_) : "";
             st == UCS_OK && summarize_lanes(with_handling).find("; no RMA lane") != std::string::npos) {
    // Peer-failure handling can cost the fast path: UCX 1.13's shared memory has none, so on one machine PEER takes
    // TCP loopback (put/get as active messages: 0.7 against 29.6 GB/s here at 2 MiB). Where UCX without it puts
    // RMA on another transport, that one is measured (as ucx_perftest does) and deadlines find a dead peer.
    ucp_ep_h fast = nullptr;
    if (ucp_ep_create(worker_, &plain, &fast) == UCS_OK) {
      if (rma_on_another_transport(with_handling, lanes_of(fast))) {
        std::swap(ep_, fast);
        peer_failure_handled_ = false;
        passed_over_ = summarize_lanes(with_handling);
      }
      // UCX allows a forced close only on endpoints with peer-failure handling: the discarded one without it
      // is flushed closed (bounded).
      close_within(fast, !peer_failure_handled_);
    }
  }
  ucs_global_opts_set_value("LOG_LEVEL", level);
  if (st != UCS_OK) {
    ep_ = nullptr;
    throw UsageError(std::string("peer unreachable: ucp_ep_create: ") + status_text(st) +
                     " (UCX_TLS=" + (std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "unset") +
                     "; the ranks need a transport in common)");
  }
  check(ucp_ep_rkey_unpack(ep_, blob.data() + sizeof h + h.address_len, &peer_rkey_), "ucp_ep_rkey_unpack");
  find_transport();
}

void UcpSession::lose(const std::string& why) {
  lost_ = true;
  throw PeerLost(why);
}

void UcpSession::wait(void* r, const char* what, double timeout_s, bool sleep) {
  if (r == nullptr) return;
  if (UCS_PTR_IS_ERR(r)) lose(std::string(what) + ": " + status_text(UCS_PTR_STATUS(r)));
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int efd = -1;
  if (sleep && ucp_worker_get_efd(worker_, &efd) != UCS_OK) efd = -1;
  ucs_status_t st;
  // The holder sleeps only after kSpinS without work: while rank 0 samples a case its requests (over TCP, gets the
  // holder's progress serves) come back to back, and a wake-up per request had made TCP's hot rows slower than its
  // cold ones (6.1 against 3.5 ms for a page). ucx_perftest's server busy-polls throughout.
  constexpr double kSpinS = 0.02;
  auto busy_at = Clock::now();
  while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) {
    if (sleep) ++words()[1];  // the holder's heartbeat: it is waiting, alive
    const bool worked = ucp_worker_progress(worker_) != 0;
    if (worked) busy_at = Clock::now();
    if (!worked && efd >= 0 && Clock::now() - busy_at > std::chrono::duration<double>(kSpinS) &&
        ucp_worker_arm(worker_) == UCS_OK) {
      // Nothing pending and the worker armed: sleep until an event, at most 100 ms (the deadline is checked).
      pollfd pfd{efd, POLLIN, 0};
      ::poll(&pfd, 1, 100);
    }
    if (ep_error_ != UCS_OK || Clock::now() > deadline) {
      ucp_request_cancel(worker_, r);
      // The request stays UCX's until it completes (cancelled or not): released, not waited for.
      ucp_request_free(r);
      if (ep_error_ != UCS_OK) lose(std::string(what) + ": the peer endpoint failed: " + status_text(ep_error_));
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f", timeout_s);
      lose(std::string(what) + ": no completion within " + buf + " s (peer dead or hung; --peer-timeout)");
    }
  }
  ucp_request_free(r);
  if (st != UCS_OK) lose(std::string(what) + ": " + status_text(st));
}

void UcpSession::transfer(Op op, const std::vector<Descriptor>& ds) {
  if (lost_) throw PeerLost("the peer was lost earlier in this run");
  ucp_request_param_t p{};  // no callback: a request that is not done at once is freed and the flush waits for it
  for (const auto& d : ds) {
    void* r;
    if (op == Op::read)
      r = ucp_get_nbx(ep_, pool() + d.dst_off, static_cast<std::size_t>(d.len), peer_base_ + d.src_off, peer_rkey_, &p);
    else
      r = ucp_put_nbx(ep_, pool() + d.src_off, static_cast<std::size_t>(d.len), peer_base_ + d.dst_off, peer_rkey_, &p);
    if (UCS_PTR_IS_ERR(r)) lose(std::string(op == Op::read ? "ucp_get_nbx: " : "ucp_put_nbx: ") + status_text(UCS_PTR_STATUS(r)));
    if (r != nullptr) ucp_request_free(r);
  }
  wait(ucp_ep_flush_nbx(ep_, &p), "ucp_ep_flush_nbx", timeout_s_);
}

void UcpSession::set_stop(std::uint64_t why) {
  std::atomic_ref<std::uint64_t>(words()[0]).store(why, std::memory_order_seq_cst);
}

std::uint64_t UcpSession::own_word(int index) const {
  if (index < 0 || index >= kControlWords)
    throw std::logic_error("control word " + std::to_string(index) + " out of range");
  return std::atomic_ref<std::uint64_t>(words()[index]).load(std::memory_order_acquire);
}

void UcpSession::control_rma(bool put, int local, int remote, int n) {
  if (lost_) throw PeerLost("the peer was lost earlier in this run");
  ucp_request_param_t p{};
  const std::size_t len = 8 * static_cast<std::size_t>(n);
  const std::uint64_t at = peer_base_ + peer_pool_bytes_ + 8 * static_cast<std::uint64_t>(remote);
  void* r = put ? ucp_put_nbx(ep_, &words()[local], len, at, peer_rkey_, &p)
                : ucp_get_nbx(ep_, &words()[local], len, at, peer_rkey_, &p);
  if (UCS_PTR_IS_ERR(r))
    lose(std::string(put ? "ucp_put_nbx" : "ucp_get_nbx") + " of the control words: " + status_text(UCS_PTR_STATUS(r)));
  if (r != nullptr) ucp_request_free(r);
  wait(ucp_ep_flush_nbx(ep_, &p), "ucp_ep_flush_nbx", timeout_s_);
}

UcpSession::Words UcpSession::peer_words() {
  control_rma(false, 8, 0, 2);  // the peer's [0] stop and [1] heartbeat land in this rank's [8..9]
  return {words()[8], words()[9]};
}

void UcpSession::put_peer_word(int index, std::uint64_t value) {
  if (index < 0 || index >= kControlWords)
    throw std::logic_error("control word " + std::to_string(index) + " out of range");
  words()[index] = value;
  control_rma(true, index, index, 1);
}

std::vector<std::uint64_t> UcpSession::peer_words(int first, int n) {
  if (first < 0 || n < 0 || first + n > kControlWords)
    throw std::logic_error("control words " + std::to_string(first) + " + " + std::to_string(n) + " out of range");
  if (n == 0) return {};
  control_rma(false, first, first, n);
  return {&words()[first], &words()[first] + n};
}

void UcpSession::send(const Msg& m) {
  if (lost_) throw PeerLost("the peer was lost earlier in this run");
  if (!ep_) throw PeerLost("not connected to the peer");
  ucp_request_param_t p{};
  // The message is copied before the send returns or completes: waiting here keeps `m` alive long enough.
  wait(ucp_tag_send_nbx(ep_, &m, sizeof m, kControlTag, &p), "control message send", timeout_s_);
}

Msg UcpSession::receive(double timeout_s, bool sleep) {
  if (lost_) throw PeerLost("the peer was lost earlier in this run");
  Msg m;
  ucp_request_param_t p{};
  wait(ucp_tag_recv_nbx(worker_, &m, sizeof m, kControlTag, ~ucp_tag_t{0}, &p), "control message receive", timeout_s, sleep);
  m.text[sizeof m.text - 1] = '\0';
  return m;
}

bool UcpSession::has_cuda_memory() const {
  ucp_context_attr_t a{};
  a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &a) != UCS_OK) return false;
  return (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

std::string UcpSession::lanes_of(ucp_ep_h ep) {
  char* buf = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return {};
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string text(buf, len);
  std::free(buf);
  return text;
}

void UcpSession::close_within(ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* r = ucp_ep_close_nbx(ep, &p);
  if (!UCS_PTR_IS_PTR(r)) return;
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
  if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
}

void UcpSession::find_transport() {
  transport_ = summarize_lanes(lanes_of(ep_));
  const char* tls = std::getenv("UCX_TLS");
  transport_ += std::string("; UCX_TLS=") + (tls ? tls : "unset");
  if (!peer_failure_handled_) transport_ += "; no peer-failure handling on these transports (deadlines find a dead peer)";
  if (!passed_over_.empty())
    transport_ += "; with it UCX takes " + passed_over_.substr(0, passed_over_.find(';')) + " (no RMA lane)";
}

bool ucx_has_cuda_memory() {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h ctx = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  if (st != UCS_OK) return false;
  ucp_context_attr_t a{};
  a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  const bool cuda = ucp_context_query(ctx, &a) == UCS_OK && (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_cleanup(ctx);
  return cuda;
}

}  // namespace kvf::remote
