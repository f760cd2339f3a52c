// File helpers the report tests share: a whole file as text, a fresh scratch directory per process, a fixture copy
// with one file replaced.
#pragma once
#include <vector>
#include <algorithm>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvf_test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// <tmp>/<prefix>_<pid>/<name>, emptied.
inline std::filesystem::path tmpdir(const std::string& prefix, const std::string& name) {
  // Each prefix's directory of this process goes when it exits.
  struct Roots {
    std::vector<std::filesystem::path> paths;
    ~Roots() {
      std::error_code ec;
      for (const auto& p : paths) std::filesystem::remove_all(p, ec);
    }
  };
  static Roots roots;
  const auto root = std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()));
  if (std::find(roots.paths.begin(), roots.paths.end(), root) == roots.paths.end()) roots.paths.push_back(root);
  const auto d = root / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A copy of `fixture` in `dir` whose file `rel` (a path inside it) holds `text`: a bad input in a good directory.
inline std::filesystem::path copy_with(const std::filesystem::path& fixture, const std::filesystem::path& dir,
                                       const std::filesystem::path& rel, const std::string& text) {
  std::filesystem::copy(fixture, dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / rel, std::ios::binary | std::ios::trunc) << text;
  return dir;
}

}  // namespace kvf_test
