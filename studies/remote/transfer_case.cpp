// The timed case: one page (or region) moved by rank 0 with UCP put or get, verified at the receiver first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kvf/errors.hpp"
#include "kvf/stats.hpp"
#include "remote_study.hpp"

namespace kvf::remote {

namespace {

// Plain decimals in the unit a person reads (no e-notation in a note).
std::string seconds_text(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

UcpSession& session_of(const Env& env) {
  if (!env.session) throw std::logic_error("remote case run without a connected peer");
  return *env.session;
}

// One request to the holder about this case (prepare its runs, check what it received) and its answer, waited for
// at most the peer timeout.
Msg ask(UcpSession& s, MsgKind kind, std::int64_t index, std::uint64_t seed) {
  Msg m;
  m.kind = kind;
  m.index = static_cast<std::uint32_t>(index);
  m.value = seed;
  s.send(m);
  return s.receive(s.timeout_s());
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

TransferCase::TransferCase(Env& env, Op o, std::vector<Descriptor> ds, std::int64_t moved)
    : op(o), descriptors(std::move(ds)), env_(env) {
  bytes = static_cast<double>(moved);
  // Cold and hot: before each cold sample the holder flushes its caches (a flush request, answered when done)
  // and the harness then flushes this rank's, so the bytes leave and land in DRAM as a peer's pool larger than its
  // LLC would have them; hot samples move the same region again. (Lockstep cases are hot only: lockstep_case.)
  est_seconds = 0.2 + 2 * (env.quick ? 0.1 : 0.5) + static_cast<double>(descriptors.size()) * 2e-6;
}

Descriptor lock_slot(int slot, std::int64_t bytes) { return {slot * bytes, 0, bytes, slot * bytes}; }

namespace {

// Each background reader's byte count, from the holder's words the readers announce in (ranks 2.. up to the
// last word before the lockstep done words).
std::vector<std::uint64_t> reader_words(const Env& env) {
  const int first = UcpSession::kReaderWord0 + 2;
  return session_of(env).peer_words(first, std::min(env.readers - 1, UcpSession::kLockDone0 - first));
}

}  // namespace

std::uint64_t TransferCase::readers_bytes() {
  std::uint64_t sum = 0;
  for (const auto w : reader_words(env_)) sum += w;
  return sum;
}

void TransferCase::setup(Backend&) {
  UcpSession& s = session_of(env_);
  seed = 0x6b7600000000ull + static_cast<std::uint64_t>(index);
  // The sender's runs get the pattern, the receiver's are zeroed: a transfer that moved nothing fails verify.
  if (op == Op::write) fill_runs(s.pool(), descriptors, true, seed);
  else zero_runs(s.pool(), descriptors, false);
  const Msg a = ask(s, MsgKind::prepare, index, seed);
  if (a.kind != MsgKind::answer || a.text[0] != '\0')
    throw std::runtime_error(std::string("the holder could not prepare ") + name + ": " + a.text);
  if (lockstep) {
    lock_tag_ = ++env_.lock_cases;
    // The readers leave their continuous loop for go rounds; bytes and seed before the mode and the first round
    // (each put is flushed: a reader that gets them after seeing this case's first round reads them whole).
    s.put_peer_word(UcpSession::kLockBytes, static_cast<std::uint64_t>(lock_bytes));
    s.put_peer_word(UcpSession::kLockSeed, seed);
    s.put_peer_word(UcpSession::kLockMode, 1);
  } else if (env_.readers > 1) {
    readers_mark_ = readers_bytes(), mark_s_ = now_s();
  }
}

// Each mode's samples are many-to-one only if every reader still reads: seen before them (a reader lost during the
// cold samples fails the hot ones). The read it waits for falls inside the mode's window of readers_gbps (marked at
// setup and after each mode), so a short window states a rate of at least one read, never a false 0.
void TransferCase::before_measure(Backend&, const std::string& mode) {
  cold_mode_ = mode == "cold";
  if (lockstep || env_.readers <= 1) return;
  wait_readers_reading(env_, session_of(env_).timeout_s(), "since the last row");
}

void wait_readers_reading(Env& env, double wait_s, const std::string& when) {
  if (env.readers <= 1) return;
  if (!env.lock_lost.empty()) throw PeerLost(env.lock_lost + " (earlier in this run): many-to-one needs every reader");
  // Growth while rank 0 waits, not since it last looked: a reader killed during the last row has more bytes than
  // at that row's start, and none since.
  const auto base = reader_words(env);
  const int n = static_cast<int>(base.size());
  const double t0 = now_s();
  for (;;) {
    // The clock first, then the words: a rank 0 descheduled past the deadline still reads them once more.
    const bool late = now_s() - t0 > wait_s;
    const auto words = reader_words(env);
    int idle = -1;
    for (int i = 0; i < n && idle < 0; ++i)
      if (words[static_cast<std::size_t>(i)] <= base[static_cast<std::size_t>(i)]) idle = i + 2;
    if (idle < 0) return;
    if (late) {
      env.lock_lost_rank = idle;
      env.lock_lost = "reader rank " + std::to_string(idle) + " read nothing " + when + " within " +
                      std::to_string(static_cast<int>(wait_s)) + " s";
      throw PeerLost(env.lock_lost);
    }
    std::this_thread::yield();  // more ranks than cores: let the readers run
  }
}

void TransferCase::teardown(Backend&) {
  if (!lockstep || !env_.session || env_.session->peer_lost()) return;
  try {
    env_.session->put_peer_word(UcpSession::kLockMode, 0);
  } catch (const PeerLost&) {
    // The holder died after this case's last sample: the session is marked lost and the next case says so.
  }
}

std::string TransferCase::lock_round() {
  UcpSession& s = session_of(env_);
  if (!env_.lock_lost.empty()) throw PeerLost(env_.lock_lost + " (earlier in this run): no lockstep without it");
  const std::uint64_t round = ++env_.lock_round;
  const int first = UcpSession::kLockDone0 + 2, n = env_.readers - 1;
  s.put_peer_word(UcpSession::kLockRound, UcpSession::lock_go_word(round, lock_tag_));
  if (lock_bytes > 0) s.transfer(op, descriptors);
  const double t0 = now_s();
  for (;;) {
    const auto done = s.peer_words(first, n);
    int behind = -1;
    for (int i = 0; i < n && behind < 0; ++i)
      if ((done[i] >> 1) < round) behind = i + 2;
    if (behind < 0) {
      std::string bad;
      for (int i = 0; i < n; ++i)
        if (done[i] & 1) bad += (bad.empty() ? "rank " : ", rank ") + std::to_string(i + 2);
      return bad;
    }
    // A reader that died or hangs: the run ends as a lost peer (rows finished so far are kept).
    if (now_s() - t0 > s.timeout_s()) {
      env_.lock_lost_rank = behind;
      env_.lock_lost = "reader rank " + std::to_string(behind) + " did not finish go round " + std::to_string(round) +
                       " within " + std::to_string(static_cast<int>(s.timeout_s())) + " s";
      throw PeerLost(env_.lock_lost);
    }
    std::this_thread::yield();  // more ranks than cores: let the readers run
  }
}

void TransferCase::verify(Backend&) {
  UcpSession& s = session_of(env_);
  if (lockstep) {
    // One go round: every reader's first read of this seed is compared where it landed (readers.cpp).
    if (const std::string bad = lock_round(); !bad.empty())
      throw VerifyError(bad + " read bytes that differ from the holder's pattern in its slot");
    if (lock_bytes == 0) return;
  } else {
    s.transfer(op, descriptors);
  }
  if (op == Op::read) {
    if (const auto bad = compare_runs(s.pool(), descriptors, false, seed); !bad.empty())
      throw VerifyError("rank 0 read " + name + ": " + bad);
    return;
  }
  const Msg a = ask(s, MsgKind::check, index, seed);
  if (a.kind != MsgKind::answer) throw std::runtime_error("the holder answered a check with message kind " +
                                                          std::to_string(static_cast<int>(a.kind)));
  if (a.text[0] != '\0') throw VerifyError("the holder (rank 1) received " + name + ": " + a.text);
}

void TransferCase::before_sample(Backend&) {
  if (!cold_mode_) return;
  UcpSession& s = session_of(env_);
  const Msg a = ask(s, MsgKind::flush, index, 0);
  if (a.kind != MsgKind::answer || a.text[0] != '\0')
    throw std::runtime_error(std::string("the holder could not flush its caches: ") + a.text);
}

void TransferCase::run(Backend&) {
  const auto t0 = std::chrono::steady_clock::now();
  if (lockstep) (void)lock_round();
  else env_.session->transfer(op, descriptors);
  seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The tail from this mode's samples: the last s.n run() times are the harness's samples (the ones before them
// were its warm-up). Under 1000 samples p99.9 is interpolated next to the maximum, and the note says so.
std::string TransferCase::after_measure(Backend&, const Summary& s, const std::string& mode) {
  const std::size_t n = std::min(s.n, seconds_.size());
  if (n == 0) return {};
  std::vector<double> tail(seconds_.end() - static_cast<std::ptrdiff_t>(n), seconds_.end());
  std::sort(tail.begin(), tail.end());
  std::string vs;
  if (mode == "cold") {
    vs = "; cold: the holder's caches, then this rank's, flushed before each sample";
  } else if (perftest.gbps && s.median > 0) {  // ucx_perftest moves one region again and again: the hot row's peer
    char buf[160];
    std::snprintf(buf, sizeof buf, "; %.2f of ucx_perftest's %.2f GB/s on the same pair in this run (%s)",
                  bytes / s.median / 1e9 / *perftest.gbps, *perftest.gbps, perftest.command.c_str());
    vs += buf;
  } else if (!perftest.why.empty()) {
    vs += "; ucx_perftest: " + perftest.why;
  }
  if (lockstep) {
    char buf[200];
    if (lock_bytes == 0) {
      env_.lock_signal_s = s.median;
      std::snprintf(buf, sizeof buf, "; signalling alone: go word, %d done words, no reads", env_.readers - 1);
    } else if (env_.lock_signal_s > 0) {
      std::snprintf(buf, sizeof buf, "; of which signalling alone (lockstep/signal) %s, median in this run",
                    seconds_text(env_.lock_signal_s).c_str());
    } else {
      buf[0] = '\0';
    }
    vs += buf;
  } else if (env_.readers > 1) {
    // The holder's other traffic over this mode's window (verify, before_measure's wait and warm-up included: the
    // readers never pause), beside this rank's own rate: what the holder served in all.
    const std::uint64_t b = readers_bytes();
    const double t = now_s(), gbps = t > mark_s_ ? static_cast<double>(b - readers_mark_) / (t - mark_s_) / 1e9 : 0;
    readers_mark_ = b, mark_s_ = t;
    char rate[48], all[48];
    std::snprintf(rate, sizeof rate, "%.3f", gbps);
    std::snprintf(all, sizeof all, "%.2f", gbps + (s.median > 0 ? bytes / s.median / 1e9 : 0));
    set_param(params, "readers_gbps", rate);
    vs += "; the " + std::to_string(env_.readers - 1) + " other reader(s) read " + rate +
          " GB/s from the holder meanwhile (readers_gbps; with this rank's median " + all + " GB/s in all)";
  }
  return "p99 " + seconds_text(quantile_sorted(tail, 0.99)) + ", p99.9 " + seconds_text(quantile_sorted(tail, 0.999)) + " of " +
         std::to_string(n) + " samples" + (n < 1000 ? " (under 1000 samples p99.9 sits next to the maximum: --min-samples 1000)" : "") + vs;
}

}  // namespace kvf::remote
