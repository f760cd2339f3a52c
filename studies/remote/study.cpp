// bench_remote: KV pages between two ranks over UCX (UCP put/get on registered host memory), ranks placed by MPI.
//
// Run:   mpirun -np 2 build/bin/bench_remote [--quick] [--arms ceiling,granularity] [--out DIR]
//        (started without a launcher it starts itself under `mpirun -np 2` on this machine, or -np N with
//        --ranks N; kvf run --study remote [--remote.ranks N])
// Rank 0 runs the harness (flags, verify, samples, results); rank 1 holds the pool it reads and writes (holder.cpp);
// ranks 2.. read from the holder too (readers.cpp: many-to-one). MPI carries only the start, the ranks' places, one
// exchange of worker addresses and rkeys and the closing barrier (mpi_boot.cpp); everything else, the control
// messages included, runs over UCX.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <string>
#include <thread>
#include <vector>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/install_paths.hpp"
#include "mpi_boot.hpp"
#include "remote_study.hpp"

namespace kvf::remote {

namespace {

constexpr const char* kProg = "bench_remote";

// Connects this rank's session to the other's and checks that both planned the same transfers.
void handshake(UcpSession& s, const Place& p, std::uint64_t digest, std::size_t count) {
  const auto blobs = mpi_exchange(s.pack(), s.start_timeout_s());
  s.connect(blobs[p.rank == 0 ? 1 : 0]);  // rank 0 and the holder (rank 1); other ranks are readers.cpp's
  Msg hello;
  hello.kind = MsgKind::hello;
  hello.index = static_cast<std::uint32_t>(count);
  hello.value = digest;
  // Each side picks its endpoint's error handling alone (UcpSession::connect): they must agree, or the side that
  // kept peer-failure handling sees the other's discarded endpoint fail as its own.
  std::snprintf(hello.text, sizeof hello.text, "%s", s.peer_failure_handled() ? "peer" : "none");
  Msg r;
  try {
    s.send(hello);
    r = s.receive(s.start_timeout_s());
  } catch (const PeerLost& e) {
    throw UsageError(std::string("peer unreachable: no hello from rank ") + std::to_string(p.rank == 0 ? 1 : 0) +
                     " over UCX (" + s.transport() + "): " + e.what());
  }
  if (r.kind != MsgKind::hello || r.value != digest || r.index != count) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "flags differ between ranks: rank %d plans %zu transfers (digest %016llx), rank %d plans %u (digest "
                  "%016llx); start every rank with the same flags",
                  p.rank, count, static_cast<unsigned long long>(digest), p.rank == 0 ? 1 : 0, r.index,
                  static_cast<unsigned long long>(r.value));
    throw UsageError(buf);
  }
  if (std::string(r.text) != hello.text)
    throw UsageError(std::string("the ranks chose different UCP error handling: rank ") + std::to_string(p.rank) +
                     " " + hello.text + " (" + s.transport() + "), rank " + std::to_string(p.rank == 0 ? 1 : 0) + " " +
                     r.text + "; start both with the same UCX_TLS");
}

class RemoteStudy final : public Study {
 public:
  explicit RemoteStudy(const Place* place) : place_(place) {}
  std::string name() const override { return "remote"; }
  bool host_only() const override { return true; }
  void add_options(StudyFlags& flags) override {
    flags_.add_to(flags);
    flags.footer(
        "Ranks: mpirun -np 2 bench_remote ... (rank 0 measures and writes the rows, rank 1 holds the pool); "
        "started without an MPI launcher it runs itself under mpirun -np 2 on this machine (--ranks N: -np N). "
        "UCX_TLS picks the transport (shm, tcp, rc,sm,self, ...); every row names the one UCX used. "
        "studies/remote/README.md: two-node mpirun and srun recipes.");
  }

  std::vector<std::unique_ptr<Case>> cases(const StudyContext& ctx) override {
    env_.quick = ctx.quick;
    env_.readers = place_ ? place_->size - 1 : 1;
    env_.launched_ranks = place_ ? place_->size : 0;
    auto out = build_cases(flags_, env_);
    if (!place_) return out;  // listing: nothing connects
    session_ = std::make_unique<UcpSession>(env_.pool_bytes, env_.peer_timeout_s, env_.pool_alloc);
    // Test only (tests/remote/ranks.sh late_start): rank 0 joins the start this many seconds late, as a loaded
    // machine makes it; it cannot change a figure.
    if (const char* late = std::getenv("KVF_REMOTE_TEST_LATE_START_S"))
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(late)));
    handshake(*session_, *place_, plan_digest(out, env_), out.size());
    env_.session = session_.get();
    agreed_ = true;
    // The background readers connect on their own after the start: no many-to-one row before each has read (a
    // loaded machine gave a TCP run's first row readers_gbps 0). The holder waits as long for the first request.
    // A reader that never reads fails the many-to-one rows naming it (Env::lock_lost), and the run exits 1.
    try {
      wait_readers_reading(env_, session_->start_timeout_s(), "since the start");
    } catch (const PeerLost&) {
    }
    std::fprintf(stderr, "%s: rank 0 on %s, holder rank 1; transport %s\n", kProg, place_->host.c_str(),
                 session_->transport().c_str());
    for (auto& c : out)
      if (auto* t = dynamic_cast<TransferCase*>(c.get())) {
        c->note = "transport " + session_->transport();
        if (t->lockstep)
          c->note += "; many-to-one in lockstep: rank 0 and " + std::to_string(env_.readers - 1) +
                     " more rank(s) each read their own region at one go signal; a sample is go -> all done";
        else if (env_.readers > 1)
          c->note += "; many-to-one: " + std::to_string(env_.readers - 1) +
                     " more rank(s) read 2 MiB regions of the holder in a loop throughout";
      }
    if (!flags_.no_perftest) run_perftest(out);
    return out;
  }

  // ucx_perftest beside the largest ceiling region of each op (ucp_get for read, ucp_put_bw for write); its figure
  // goes into that row's note with the row's ratio to it.
  void run_perftest(std::vector<std::unique_ptr<Case>>& cases) {
    for (const Op op : {Op::read, Op::write}) {
      TransferCase* largest = nullptr;
      for (auto& c : cases)
        if (auto* t = dynamic_cast<TransferCase*>(c.get()); t && t->op == op && c->name.rfind("ceiling/", 0) == 0)
          if (!largest || t->bytes > largest->bytes) largest = t;
      if (!largest) continue;
      const int port = 20000 + static_cast<int>(::getpid() % 20000);
      Msg m;
      m.kind = MsgKind::perftest;
      m.value = static_cast<std::uint64_t>(port);
      session_->send(m);
      const Msg a = session_->receive(session_->timeout_s());
      const std::string text = a.text;
      if (text.rfind("host:", 0) != 0) {
        largest->perftest.why = "the holder could not start the server: " + text;
        continue;
      }
      largest->perftest = perftest_client(text.substr(5), port, op == Op::read ? "ucp_get" : "ucp_put_bw",
                                          static_cast<long long>(largest->bytes), 3 * session_->timeout_s() + 30);
      if (largest->perftest.gbps)
        std::fprintf(stderr, "%s: %s: %.2f GB/s\n", kProg, largest->perftest.command.c_str(), *largest->perftest.gbps);
    }
  }

  // After the run: the holder is told to stop; MPI is finished only when the holder is alive to finish too.
  int finish(int rc) {
    bool alive = !session_ || !session_->peer_lost();
    // A reader lost during the last many-to-one row: seen here, or it would hold every rank at the closing barrier.
    if (agreed_ && alive && env_.lock_lost.empty()) {
      try {
        wait_readers_reading(env_, session_->timeout_s(), "during the last row");
      } catch (const PeerLost&) {
        // env_.lock_lost names it.
      }
    }
    // A reader that stopped answering would hold every rank at the closing barrier for its 30 s.
    const bool reader_lost = !env_.lock_lost.empty();
    if (agreed_ && alive) {
      try {
        Msg done;
        done.kind = MsgKind::done;
        done.value = reader_lost ? static_cast<std::uint64_t>(env_.lock_lost_rank) : 0;
        session_->send(done);
      } catch (const PeerLost& e) {
        alive = false;
      }
    }
    if (session_ && !alive)
      std::fprintf(stderr, "%s: error: the holder (rank 1) was lost during the run; the rows finished before it are kept\n",
                   kProg);
    if (reader_lost)
      std::fprintf(stderr, "%s: error: a background reader was lost during the run (%s); the rows finished before it "
                   "are kept\n", kProg, env_.lock_lost.c_str());
    session_.reset();
    if (alive && !reader_lost) mpi_finish();
    return reader_lost && rc == kExitOk ? kExitFailure : rc;
  }

 private:
  const Place* place_;
  RemoteFlags flags_;
  Env env_;
  std::unique_ptr<UcpSession> session_;
  bool agreed_ = false;  // the handshake passed: the holder serves until told done
};

int holder_main(int argc, char** argv, const Place& p) {
  RemoteFlags f;
  bool no_cold = false;  // the harness's --no-cold: no flush buffer
  std::unique_ptr<Backend> flusher;
  std::unique_ptr<UcpSession> s;
  int rc = kExitOk;
  int lost_reader = 0;  // the reader rank 0 said stopped answering: nobody waits for it at the barrier
  try {
    // The harness's flags (--out DIR, --budget S, ...) are rank 0's business, and so is saying what is wrong.
    if (!parse_own_flags(argc, argv, [&](StudyFlags& sf) {
          f.add_to(sf);
          sf.flag("--quick", f.quick, "");
          sf.flag("--no-cold", no_cold, "");
        }))
      throw UsageError("bad flags");
    Env env;
    env.quick = f.quick;
    env.readers = p.size - 1;
    env.launched_ranks = p.size;
    auto cases = build_cases(f, env);  // a refused flag: rank 0 refuses it too and says so
    // The flush buffer is written now, inside the start's wait, not at the first cold sample.
    if (!no_cold && std::any_of(cases.begin(), cases.end(), [](const auto& c) { return c->cold; })) {
      flusher = make_cpu_backend();
      flusher->flush_caches();
    }
    s = std::make_unique<UcpSession>(env.pool_bytes, env.peer_timeout_s, env.pool_alloc);
    handshake(*s, p, plan_digest(cases, env), cases.size());
    env.session = s.get();
    rc = serve_holder(*s, cases, kProg, &lost_reader, flusher.get());
  } catch (const UsageError&) {
    rc = kExitUsage;  // bad flags, an unreachable peer, flags that differ: rank 0 says the same in its one line
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (rank 1, holder): error: %s\n", kProg, one_line(e.what()).c_str());
    rc = kExitFailure;
  }
  // The background readers (ranks 2..) read until this flag: set on every way out, then MPI_Finalize keeps the
  // pool mapped until they have seen it and finished too.
  // No rank meets at the barrier when one is gone (rank 0, or a reader rank 0 named): the stop word says so and the
  // holder keeps its pool until the other readers have seen it.
  const bool lost = (s && s->peer_lost()) || lost_reader;
  if (s && lost) stop_readers_without_barrier(*s, p.size, lost_reader, kProg);
  else if (s) s->set_stop();
  if (!lost) mpi_finish([&s] {
      if (s) s->progress();
    });
  s.reset();
  return rc;
}

// What a command line asks for before any rank starts: --help and --list run in this process alone.
enum class Listing { none, list, help };
Listing listing_only(int argc, char** argv) {
  Listing l = Listing::none;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") return Listing::help;
    if (a == "--list" || a.rfind("--list=", 0) == 0) l = Listing::list;
  }
  return l;
}

// Bad flags are found before mpirun starts any rank: the plan (--list) is made in a child process with its output
// held back, and a usage error there is the run's one line and exit 2 (the ranks had started first, and the line
// came between mpirun's and a PMIx error's). 0 when the plan was made (or could not be tried: the ranks check again).
constexpr std::chrono::seconds kPlanCheckTimeout{60};
int refuse_bad_flags_before_launch(int argc, char** argv) {
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return 0;
  }
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    // --list right after the program: appended last, a final flag missing its value would take it as that value.
    static char list[] = "--list";
    std::vector<char*> args = {argv[0], list};
    args.insert(args.end(), argv + 1, argv + argc);
    args.push_back(nullptr);
    RemoteStudy study(nullptr);
    const int rc = kvf::bench_main(argc + 1, args.data(), study);
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(fds[1]);
  // A plan is made in well under a second; one that hangs (a stuck probe) must not hold the run: after the
  // deadline the child is killed and the ranks check the flags themselves.
  const auto deadline = std::chrono::steady_clock::now() + kPlanCheckTimeout;
  std::string said;
  char buf[4096];
  bool timed_out = false;
  for (;;) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  // The child stays in this process group, so a Ctrl-C stops it and whatever it started; the timeout kills the
  // child itself (a probe it started and left hanging would be orphaned: rather that than a child Ctrl-C misses).
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    std::fprintf(stderr, "%s: note: the flag check before launch took over %lld s; the ranks check the flags\n", kProg,
                 static_cast<long long>(kPlanCheckTimeout.count()));
    return 0;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != kvf::kExitUsage) return 0;
  std::fputs(said.c_str(), stderr);
  return kvf::kExitUsage;
}

}  // namespace
}  // namespace kvf::remote

int main(int argc, char** argv) {
  using namespace kvf::remote;
  if (const Listing l = listing_only(argc, argv); l != Listing::none) {
    // The plan of a run that would start its ranks with mpirun (kvf run's --list pass): without mpirun the study
    // cannot start, said now (exit 127, as a command that is not found) rather than after the other studies ran.
    if (l == Listing::list && !under_mpi_launcher() && !kvf::runnable("mpirun")) {
      std::fprintf(stderr, "%s: error: mpirun not found on PATH: install openmpi-bin (or start the ranks with srun)\n",
                   kProg);
      return 127;
    }
    RemoteStudy study(nullptr);
    return kvf::bench_main(argc, argv, study);
  }
  try {
    if (!under_mpi_launcher()) {
      if (const int rc = refuse_bad_flags_before_launch(argc, argv)) return rc;
      return self_launch(argc, argv, ranks_to_launch(argc, argv), kProg);
    }
    const Place p = mpi_start(&argc, &argv);
    try {
      join_netns_from_env();
    } catch (const kvf::UsageError& e) {
      std::fprintf(stderr, "%s: error: %s\n", kProg, kvf::one_line(e.what()).c_str());
      record_exit(p.rank, kvf::kExitUsage);
      return kvf::kExitUsage;
    }
    if (p.size < 2) {
      if (p.rank == 0)
        std::fprintf(stderr,
                     "%s: error: %d rank started; the remote study needs at least 2 (rank 0 measures, rank 1 holds "
                     "the pool, ranks 2.. read from it too): mpirun -np 2 %s ...\n",
                     kProg, p.size, kProg);
      record_exit(p.rank, kvf::kExitUsage);
      mpi_finish();
      return kvf::kExitUsage;
    }
    if (p.rank != 0) {
      const int rc = p.rank == 1 ? holder_main(argc, argv, p) : reader_main(argc, argv, p, kProg);
      record_exit(p.rank, rc);
      return rc;
    }
    reopen_progress_pipe();
    RemoteStudy study(&p);
    const int rc = study.finish(kvf::bench_main(argc, argv, study));
    record_exit(0, rc);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProg, kvf::one_line(e.what()).c_str());
    return kvf::kExitFailure;
  }
}
