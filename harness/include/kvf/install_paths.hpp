// Where kvf finds its bench binaries and every binary its data files, in the build tree and installed
// (cmake/KvfInstall.cmake: <prefix>/bin/kvf, <prefix>/libexec/kvfrontier/bench_*, <prefix>/share/kvfrontier/).
// Paths are relative to the running binary, so an installed prefix can be copied or moved whole.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kvf {

// The environment variable naming a directory that holds the data files; when set it wins over every
// other place (and is the only one tried, so a wrong value is reported, never silently bypassed).
inline constexpr const char* kDataDirEnv = "KVF_DATA_DIR";

// Directory of the running executable (/proc/self/exe); "." when it cannot be read.
std::filesystem::path exe_dir();

// The bench binary of `study`: next to the running binary (the build tree puts every executable in
// build/bin) or, installed, in <exe>/../libexec/kvfrontier. When neither exists, the path of the layout
// the running binary is in, so the caller's "missing" message names the file that should be there.
std::filesystem::path bench_path(const std::string& study);
// Whether `program` would run as execvp runs it: a path (with a '/') to an executable regular file, or a name found
// executable in a directory of PATH.
bool runnable(const std::string& program);

// Data file `name` (models.json, gpus.json): $KVF_DATA_DIR/name when KVF_DATA_DIR is set; else
// <exe>/../share/kvfrontier/name (kvf) or <exe>/../../share/kvfrontier/name (a bench in libexec); else, only
// for a binary running from the build tree it was built in, <source>/data/name. Throws UsageError naming
// every path tried when none exists.
std::filesystem::path data_file(const std::string& name);

// The places data_file(name) looks, in order (for messages and tests).
std::vector<std::filesystem::path> data_file_candidates(const std::string& name);

}  // namespace kvf
