// Charts: the plug-ins' Plot specs -> NAME.dat + NAME.gp (every text quoted for gnuplot), and gnuplot run on
// them; every report file is written fresh (write_new_file).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "internal.hpp"

extern char** environ;

namespace kvf::report::detail {

bool has_points(const Plot& p) {
  for (const auto& l : p.lines)
    if (l.ref == Line::Ref::none && !l.pts.empty()) return true;
  return false;
}

// Chart names become file names and gnuplot `set output` strings: the report makes them up itself
// ("gather", "frontier_map_2"); anything else is a bug, refused before a file is named after it.
bool safe_stem(const std::string& name) {
  if (name.empty() || name.size() > kMaxChartName) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// Writes a new file at `path`. Whatever is there is removed first (unlink removes a symlink, not its
// target) and the file is created with O_EXCL | O_NOFOLLOW: the default report directory lies inside a
// results directory someone else may have made, and a symlink planted as report/report.md must not make the
// report overwrite the file it points to. A write failure (ENOSPC, EIO) is not bad input: runtime_error, exit 1.
void write_new_file(const fs::path& path, const std::string& text) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot create (" + std::strerror(errno) + ")");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(path.c_str());
      throw std::runtime_error(path.string() + ": cannot write (" + std::strerror(err) + ")");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw std::runtime_error(path.string() + ": cannot write (" + std::strerror(err) + ")");
  }
}

// Every text in a .gp file is a single-quoted gnuplot_quote string or a number the report formatted; the
// data reach gnuplot only through the .dat file (numbers, and label fields through gnuplot_data_label).
void write_plot(const Plot& p, const fs::path& dir) {
  const ChartFiles f = chart_files(p);
  write_new_file(dir / (p.name + ".dat"), f.dat);
  write_new_file(dir / (p.name + ".gp"), f.gp);
}

// Runs gnuplot in `dir` on `gp`; output to gnuplot.log. Returns "" or why it failed.
std::string run_gnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& gp) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawn_file_actions_addopen(&fa, 1, "gnuplot.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> args = {gnuplot, gp};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, gnuplot.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return gnuplot + ": cannot run (" + std::strerror(rc) + ")";
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return gnuplot + " " + gp + ": killed by a signal";
  if (WEXITSTATUS(status) == 127) return gnuplot + ": not found";
  if (WEXITSTATUS(status) != 0) return gnuplot + " " + gp + ": exit " + std::to_string(WEXITSTATUS(status)) + " (see gnuplot.log)";
  return "";
}

}  // namespace kvf::report::detail
