#include "mpi_boot.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "kvf/errors.hpp"

namespace kvf::remote {

bool under_mpi_launcher() {
  // OpenMPI's mpirun, Slurm's srun (PMI-2 and PMIx), and MPICH/Hydra.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}

Place mpi_start(int* argc, char*** argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init failed");
  // Errors come back as codes, so a failed exchange is our one line rather than MPI's abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Place p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  p.host.assign(host, static_cast<std::size_t>(len));
  return p;
}

namespace {

// MPI collectives have no timeout: the non-blocking form, tested until a deadline, keeps a rank that never joins
// (it refused its flags, or died) from hanging this one.
void wait_request(MPI_Request& r, double timeout_s, const char* what) {
  const double deadline = MPI_Wtime() + timeout_s;
  int done = 0;
  while (!done) {
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
    if (!done && MPI_Wtime() > deadline)
      throw UsageError(std::string("peer unreachable: the other rank did not join ") + what + " within " +
                       std::to_string(static_cast<int>(timeout_s)) +
                       " s (the start waits --peer-timeout or 30 s, the longer)");
  }
}

}  // namespace

std::vector<std::vector<char>> mpi_exchange(const std::vector<char>& mine, double timeout_s) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Request r;
  if (MPI_Iallgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD, &r) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Iallgather of the address sizes failed");
  wait_request(r, timeout_s, "the address exchange");
  int total = 0;
  for (int i = 0; i < size; ++i) displs[static_cast<std::size_t>(i)] = total, total += counts[static_cast<std::size_t>(i)];
  std::vector<char> all(static_cast<std::size_t>(total));
  if (MPI_Iallgatherv(mine.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD, &r) !=
      MPI_SUCCESS)
    throw std::runtime_error("MPI_Iallgatherv of the addresses failed");
  wait_request(r, timeout_s, "the address exchange");
  std::vector<std::vector<char>> out;
  for (int i = 0; i < size; ++i)
    out.emplace_back(all.begin() + displs[static_cast<std::size_t>(i)],
                     all.begin() + displs[static_cast<std::size_t>(i)] + counts[static_cast<std::size_t>(i)]);
  return out;
}

void mpi_finish(const std::function<void()>& progress) {
  // Every rank meets here before MPI_Finalize; the holder keeps its UCX worker going meanwhile, since a
  // background reader's last TCP get needs the holder's progress to complete. Bounded: 30 s.
  MPI_Request r;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &r) == MPI_SUCCESS) {
    const double deadline = MPI_Wtime() + 30;
    int done = 0;
    while (!done && MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && MPI_Wtime() < deadline)
      if (progress) progress();
  }
  MPI_Finalize();
}

void reopen_progress_pipe() {
  const char* path = std::getenv("KVF_REMOTE_PROGRESS_PATH");
  if (!path || !*path) return;
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 3) ::setenv("KVF_PROGRESS_FD", std::to_string(fd).c_str(), 1);
}

void join_netns_from_env() {
  const char* name = std::getenv("KVF_REMOTE_NETNS");
  if (!name || !*name) return;
  const std::string path = std::string("/var/run/netns/") + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError("KVF_REMOTE_NETNS=" + std::string(name) + ": " + path + ": " + std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw UsageError("KVF_REMOTE_NETNS=" + std::string(name) + ": setns: " + std::strerror(err));
  // UCX lists network devices from /sys/class/net: a sysfs mounted in this namespace shows its own (what
  // `ip netns exec` does), in a mount namespace of this process only.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 ||
      ::umount2("/sys", MNT_DETACH) != 0 || ::mount(name, "/sys", "sysfs", 0, nullptr) != 0)
    throw UsageError("KVF_REMOTE_NETNS=" + std::string(name) + ": cannot mount this namespace's /sys: " +
                     std::strerror(errno));
}

void record_exit(int rank, int rc) {
  const char* path = std::getenv("KVF_REMOTE_EXIT_FILE");
  if (!path || !*path) return;
  const int fd = ::open(path, O_WRONLY | O_APPEND);
  if (fd < 0) return;
  char line[64];
  const int n = std::snprintf(line, sizeof line, "%d %d\n", rank, rc);
  if (n > 0) (void)!::write(fd, line, static_cast<std::size_t>(n));  // one short O_APPEND write: whole lines
  ::close(fd);
}

namespace {

// The run's exit code from the ranks' records: the first rank's non-zero code, else 0; a rank without a record
// (killed) makes it mpirun's code, or 1.
int exit_from_records(const std::string& path, int ranks, int mpirun_rc, const std::string& prog) {
  std::vector<int> rc(static_cast<std::size_t>(ranks), -1);
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    int r = 0, c = 0;
    while (std::fscanf(f, "%d %d", &r, &c) == 2)
      if (r >= 0 && r < ranks) rc[static_cast<std::size_t>(r)] = c;
    std::fclose(f);
  }
  for (int r = 0; r < ranks; ++r)
    if (rc[static_cast<std::size_t>(r)] < 0) {
      std::fprintf(stderr, "%s: rank %d ended without an exit status (killed, or it crashed)\n", prog.c_str(), r);
      return mpirun_rc ? mpirun_rc : kExitFailure;
    }
  for (int c : rc)
    if (c != 0) return c;
  return mpirun_rc;
}

}  // namespace

int self_launch(int argc, char** argv, int ranks, const std::string& prog) {
  char path[] = "/tmp/kvf-remote-exit-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::close(fd);
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks)};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  // One machine by definition: more ranks than free cores is allowed (a 2-core VM runs both), and mpirun's
  // multi-line help texts are left out (-q): each rank says what went wrong in its own line.
  args.insert(args.end(), {"--oversubscribe", "-q"});
  // A rank that dies must not take the other down before it has said so and kept its rows; mpirun then exits 0
  // whatever the ranks did, so each rank records its own exit code in a file this launcher reads.
  args.insert(args.end(), {"--enable-recovery", "-x", std::string("KVF_REMOTE_EXIT_FILE=") + path});
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  args.push_back(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]));
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::string shown;
  for (const auto& a : args) shown += (shown.empty() ? "" : " ") + a;
  std::fprintf(stderr, "%s: not started by an MPI launcher; starting %d ranks on this machine: %s\n", prog.c_str(), ranks,
               shown.c_str());
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // kvf run's progress pipe (KVF_PROGRESS_FD) does not survive mpirun's launch; rank 0 reopens it through
    // /proc, and no rank takes the number, which in a rank may name another file.
    if (const char* fd_text = std::getenv("KVF_PROGRESS_FD"); fd_text && *fd_text) {
      const std::string path = "/proc/" + std::to_string(::getppid()) + "/fd/" + fd_text;
      ::setenv("KVF_REMOTE_PROGRESS_PATH", path.c_str(), 1);
      ::unsetenv("KVF_PROGRESS_FD");
    }
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::execvp(cargs[0], cargs.data());
    std::fprintf(stderr, "%s: error: mpirun not found on PATH: install openmpi-bin (or start the ranks with srun)\n",
                 prog.c_str());
    ::_exit(kExitUsage);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return kExitFailure;
  const int mpirun_rc = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailure;
  const int rc = mpirun_rc == kExitUsage && WIFEXITED(status) ? kExitUsage : exit_from_records(path, ranks, mpirun_rc, prog);
  ::unlink(path);
  return rc;
}

}  // namespace kvf::remote
