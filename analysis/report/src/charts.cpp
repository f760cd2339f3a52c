// Charts: the plug-ins' Plot specs -> NAME.dat + NAME.gp (every text quoted for gnuplot), and gnuplot run on
// them; every report file is written fresh (write_new_file).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "internal.hpp"

extern char** environ;

namespace kvf::report::detail {

bool has_points(const Plot& p) {
  for (const auto& l : p.lines)
    if (!l.pts.empty()) return true;
  return false;
}

namespace {

// Chart names become file names and gnuplot `set output` strings: the report makes them up itself
// ("gather", "frontier_map_2"); anything else is a bug, refused before a file is named after it.
bool safe_stem(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

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

namespace {

// A comment line of a .gp or .dat file: gnuplot ignores it, but the files are handed to users to run and
// read, so it holds no line break and no backquote either.
std::string comment_text(const std::string& s) {
  std::string t = printable_text(s, kMaxChartText);
  std::replace(t.begin(), t.end(), '`', '?');
  return t;
}

}  // namespace

// Every text in a .gp file is a single-quoted gnuplot_quote string or a number the report formatted; the
// data reach gnuplot only through the .dat file (numbers, and label fields through gnuplot_data_label).
void write_plot(const Plot& p, const fs::path& dir) {
  if (!safe_stem(p.name)) throw std::logic_error("chart name '" + p.name + "' is not a plain file stem");
  std::string dat;
  std::ostringstream plot;
  int idx = 0;
  for (const auto& l : p.lines) {
    if (l.pts.empty()) continue;
    dat += "# " + comment_text(l.title) + "\n";
    for (std::size_t i = 0; i < l.pts.size(); ++i) {
      dat += fmt(l.pts[i].first) + " " + fmt(l.pts[i].second);
      if (!l.labels.empty()) {  // appended piecewise: " " + std::string&& trips GCC 12's -Wrestrict false positive
        dat += ' ';
        dat += gnuplot_data_label(i < l.labels.size() ? l.labels[i] : std::string());
      }
      dat += "\n";
    }
    dat += "\n\n";
    plot << (idx ? ", \\\n     " : "plot ") << "'" << p.name << ".dat' index " << idx
         << (l.labels.empty() ? " using 1:2 with " + l.style : " using 1:2:3 with labels " + l.style) << " title "
         << gnuplot_quote(l.title);
    ++idx;
  }
  std::ostringstream gp;
  gp << "# kvf report: " << comment_text(p.title) << "\n"
     << "set terminal svg size 960,720 noenhanced font 'Helvetica,12' background rgb 'white'\n"
     << "set output '" << p.name << ".svg'\n"
     << "set title " << gnuplot_quote(p.title) << "\n"
     << "set xlabel " << gnuplot_quote(p.xlabel) << "\nset ylabel " << gnuplot_quote(p.ylabel) << "\n"
     << "set grid\nset key below left Left reverse\n";
  if (p.logx) gp << "set logscale x " << p.logx_base << "\n";
  if (p.logy) gp << "set logscale y\n";
  for (const auto& e : p.extra) gp << e << "\n";
  gp << plot.str() << "\n"
     << "set terminal pngcairo size 960,720 noenhanced font 'Helvetica,10' background rgb 'white'\n"
     << "set output '" << p.name << ".png'\n"
     << "replot\nset output\n";
  write_new_file(dir / (p.name + ".dat"), dat);
  write_new_file(dir / (p.name + ".gp"), gp.str());
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
