// fork + exec of a bench binary, with kvf's signals passed on and its output read through pipes in one
// poll loop (stdout, stderr, the progress fd), so the time limit, the relay and the progress line share a clock.
#include "run_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace kvf::cli {

namespace {

// A signal to kvf is passed on to the bench it is running (the bench finishes the row it is writing and
// dies of it); kvf then stops instead of starting the next study. Without this, a kill of kvf's own pid
// left the bench running and writing for the rest of its study.
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_child = 0;  // the running bench's pid (pid_t is an int on Linux), 0 when none
constexpr std::array kForwarded = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig) {
  g_signal = sig;
  const pid_t child = g_child;
  if (child > 0) ::kill(child, sig);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// One pipe from the child: its write end goes to the child, the read end stays here (non-blocking).
struct Channel {
  int fd_child = -1;  // 1, 2, or -1 for the progress fd (kept at its own number)
  int rd = -1, wr = -1;
  std::string line;   // a line not yet ended
  std::string* all = nullptr;
  std::function<void(const std::string&)> on_line;
};

void open_channel(Channel& c) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  c.rd = p[0];
  c.wr = p[1];
  ::fcntl(c.rd, F_SETFL, ::fcntl(c.rd, F_GETFL) | O_NONBLOCK);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Reads what is there; false once the pipe is at its end (or broken).
bool drain(Channel& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.rd, buf, sizeof buf);
    if (n > 0) {
      if (c.all) c.all->append(buf, static_cast<std::size_t>(n));
      if (c.on_line) {
        c.line.append(buf, static_cast<std::size_t>(n));
        std::size_t nl;
        while ((nl = c.line.find('\n')) != std::string::npos) {
          c.on_line(c.line.substr(0, nl));
          c.line.erase(0, nl + 1);
        }
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    if (c.on_line && !c.line.empty()) c.on_line(c.line);  // a last line without its line break
    c.line.clear();
    return false;
  }
}

// The child's environment: kvf's own, with io.env's names replaced or added.
std::vector<std::string> child_env(const std::vector<std::string>& add) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& a : add) replaced = replaced || a.substr(0, a.find('=')) == name;
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), add.begin(), add.end());
  return env;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

void install_forwarding() {
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid, poll and read return EINTR and the loops look again
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
}

int stop_signal() { return g_signal; }

int stopped_by_signal(const std::string& out) {
  const int sig = g_signal;
  std::fprintf(stderr, "kvf run: stopped by %s%s\n", signal_name(sig),
               out.empty() ? "" : ("; the finished rows are in " + out).c_str());
  return 128 + sig;
}

int run_process(const std::vector<std::string>& args, const ProcessIo& io) {
  std::vector<Channel> chans;
  if (io.out || io.relay) chans.push_back({1, -1, -1, {}, io.out, nullptr});
  if (io.err || io.relay) chans.push_back({2, -1, -1, {}, io.err, nullptr});
  if (io.progress) chans.push_back({-1, -1, -1, {}, nullptr, io.progress});
  if (io.relay)
    for (auto& c : chans)
      if (c.fd_child > 0) c.on_line = [&io, fd = c.fd_child](const std::string& l) { io.relay(fd, l); };
  auto close_all = [&chans] {
    for (auto& c : chans) close_fd(c.rd), close_fd(c.wr);
  };
  std::vector<std::string> add = io.env;
  try {
    for (auto& c : chans) open_channel(c);
  } catch (...) {
    close_all();
    throw;
  }
  for (const auto& c : chans)
    if (c.fd_child < 0) add.push_back("KVF_PROGRESS_FD=" + std::to_string(c.wr));
  const std::vector<std::string> env = child_env(add);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int errfd[2] = {-1, -1};  // the child's exec errno; closed by a successful exec (O_CLOEXEC)
  if (::pipe2(errfd, O_CLOEXEC) != 0) {
    const int err = errno;
    close_all();
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(err));
  }
  // Forwarded signals wait until g_child names the new process, so none falls between fork and that.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. Default dispositions before unblocking: a
    // forwarded signal arriving now must kill this child, not run kvf's handler in it.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : kForwarded) ::sigaction(sig, &dfl, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // kvf died before prctl took effect
    for (const auto& c : chans) {
      const bool ok = c.fd_child > 0 ? ::dup2(c.wr, c.fd_child) >= 0 : ::fcntl(c.wr, F_SETFD, 0) == 0;
      if (!ok) {
        const int err = errno;
        (void)!::write(errfd[1], &err, sizeof err);
        ::_exit(127);
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(errfd[1], &err, sizeof err);
    ::_exit(127);
  }
  const int fork_err = errno;
  if (pid > 0) g_child = pid;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);  // a signal that came meanwhile is forwarded now
  // Another thread of kvf (OpenMP's, from the backend probe) may have taken one before g_child was set.
  if (pid > 0 && g_signal) ::kill(pid, g_signal);
  ::close(errfd[1]);
  for (auto& c : chans) close_fd(c.wr);
  if (pid < 0) {
    ::close(errfd[0]);
    close_all();
    throw std::runtime_error(args[0] + ": cannot start: " + std::strerror(fork_err));
  }
  int exec_err = 0;
  ssize_t n;
  while ((n = ::read(errfd[0], &exec_err, sizeof exec_err)) < 0 && errno == EINTR) {
  }
  ::close(errfd[0]);
  if (n == static_cast<ssize_t>(sizeof exec_err)) {
    close_all();
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    throw std::runtime_error(args[0] + ": cannot start: " + std::strerror(exec_err));
  }

  // One loop until the child has exited and its pipes are read: a process the bench started (dd) may hold a
  // pipe open after the bench is gone, so the child's exit, not the pipes' end, ends the loop.
  const auto started = std::chrono::steady_clock::now();
  auto last_tick = started;
  bool termed = false, reaped = false;
  int status = 0;
  for (;;) {
    std::vector<pollfd> pfd;
    for (const auto& c : chans)
      if (c.rd >= 0) pfd.push_back({c.rd, POLLIN, 0});
    if (!pfd.empty()) {
      (void)::poll(pfd.data(), pfd.size(), 100);
    } else if (!reaped) {
      ::usleep(50000);
    }
    for (auto& c : chans)
      if (c.rd >= 0 && !drain(c)) close_fd(c.rd);
    if (reaped) break;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR && errno != EAGAIN)) {
      reaped = true;  // one more pass reads what the child wrote last
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    const double ran = std::chrono::duration<double>(now - started).count();
    if (io.limit_s > 0 && !termed && ran > io.limit_s) {
      ::kill(pid, SIGTERM);
      termed = true;
      if (io.timed_out) *io.timed_out = true;
    } else if (termed && ran > io.limit_s + 60) {
      ::kill(pid, SIGKILL);
    }
    if (io.tick && now - last_tick >= std::chrono::milliseconds(250)) {
      last_tick = now;
      io.tick();
    }
  }
  g_child = 0;
  close_all();
  return exit_code(status);
}

}  // namespace kvf::cli
