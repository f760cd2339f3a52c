// File helpers the report tests share: a whole file as text, and a fresh scratch directory per process.
#pragma once
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
  const auto d = std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace kvf_test
