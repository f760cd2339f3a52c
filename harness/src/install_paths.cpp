#include "kvf/install_paths.hpp"

#include <unistd.h>

#include <cstdlib>
#include <system_error>

#include "kvf/errors.hpp"

// Baked in by harness/CMakeLists.txt from cmake/KvfInstall.cmake.
#if !defined(KVF_REL_BIN_TO_LIBEXEC) || !defined(KVF_REL_BIN_TO_DATA) || !defined(KVF_REL_LIBEXEC_TO_DATA) || \
    !defined(KVF_SOURCE_DATA_DIR) || !defined(KVF_BUILD_BIN_DIR) || !defined(KVF_LIBEXEC_NAME)
#error "install_paths.cpp needs the KVF_REL_* and KVF_*_DIR definitions of harness/CMakeLists.txt"
#endif

namespace kvf {

namespace fs = std::filesystem;

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Compares directories after resolving links and "..", so a build tree reached through a symlink still
// counts as the build tree; a path that cannot be resolved compares as written.
bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return (ea ? a : ca) == (eb ? b : cb);
}

}  // namespace

fs::path exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : exe.parent_path();
}

fs::path bench_path(const std::string& study) {
  const std::string file = "bench_" + study;
  const fs::path here = exe_dir() / file;
  const fs::path installed = (exe_dir() / KVF_REL_BIN_TO_LIBEXEC / file).lexically_normal();
  if (is_file(here)) return here;
  if (is_file(installed)) return installed;
  // Neither: name the file of the layout this binary is in (installed when its libexec directory exists).
  std::error_code ec;
  return fs::is_directory(installed.parent_path(), ec) ? installed : here;
}

std::vector<fs::path> data_file_candidates(const std::string& name) {
  if (const char* env = std::getenv(kDataDirEnv); env && *env) return {fs::path(env) / name};
  const fs::path dir = exe_dir();
  // A bench installed in <prefix>/libexec/kvfrontier, or kvf (or a bench of the build tree) in a bin directory.
  const bool in_libexec = dir.filename() == fs::path(KVF_LIBEXEC_NAME);
  std::vector<fs::path> out = {(dir / (in_libexec ? KVF_REL_LIBEXEC_TO_DATA : KVF_REL_BIN_TO_DATA) / name).lexically_normal()};
  // The source tree only for the binaries of the build tree it was configured with: an installed or copied
  // binary never reads a source checkout that may have moved on (or away).
  if (same_dir(dir, KVF_BUILD_BIN_DIR)) out.push_back(fs::path(KVF_SOURCE_DATA_DIR) / name);
  return out;
}

bool runnable(const std::string& program) {
  std::error_code ec;
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos)
    return fs::is_regular_file(program, ec) && ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  const std::string dirs = path && *path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const fs::path candidate = fs::path(colon > start ? dirs.substr(start, colon - start) : ".") / program;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

fs::path data_file(const std::string& name) {
  const auto tried = data_file_candidates(name);
  for (const auto& p : tried)
    if (is_file(p)) return p;
  std::string list;
  for (const auto& p : tried) list += (list.empty() ? "" : ", ") + p.string();
  const char* env = std::getenv(kDataDirEnv);
  throw UsageError("data file " + name + " not found (tried " + list + "); " +
                   (env && *env ? std::string("KVF_DATA_DIR is set: point it at the directory holding ") + name
                                : std::string("set KVF_DATA_DIR to the directory holding it (data/ of the source tree)")));
}

}  // namespace kvf
