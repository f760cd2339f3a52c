// kvf run's child processes (the bench binaries): fork + exec, signals passed on, stdout/stderr captured or
// relayed line by line, and the bench's per-case progress lines (KVF_PROGRESS_FD, harness/src/progress_fd.cpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kvf::cli {

// How one child runs. Without a capture or a relay a stream is inherited (the child writes to kvf's own).
struct ProcessIo {
  std::string* out = nullptr;  // all of the child's stdout
  std::string* err = nullptr;  // all of the child's stderr
  // Each whole line of the child's stdout (fd 1) or stderr (fd 2), without its line break; a relay lets kvf
  // keep its progress line on a terminal apart from what the bench prints.
  std::function<void(int fd, const std::string& line)> relay;
  // Each line the child writes to the fd named by KVF_PROGRESS_FD (set in its environment when given).
  std::function<void(const std::string& line)> progress;
  std::function<void()> tick;      // about every 250 ms while the child runs (redraws a progress line)
  std::vector<std::string> env;    // "NAME=value" added to (or replacing in) the child's environment
  double limit_s = 0;              // > 0: SIGTERM after this many seconds (SIGKILL 60 s later)
  bool* timed_out = nullptr;       // set when limit_s stopped it
};

// Runs args (args[0] a path); returns the exit code (128+signal when killed). Throws std::runtime_error when
// the child cannot be started. The child gets SIGTERM when kvf dies (PR_SET_PDEATHSIG).
int run_process(const std::vector<std::string>& args, const ProcessIo& io = {});

// SIGINT, SIGTERM and SIGHUP to kvf are passed on to the running child; kvf then stops after it.
void install_forwarding();
// The forwarded signal that came (0: none).
int stop_signal();
// After a forwarded signal: one line saying so (and where the finished rows are), the shell's exit code.
int stopped_by_signal(const std::string& out);

}  // namespace kvf::cli
