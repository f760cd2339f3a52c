#include "kvf/file_dir_flag.hpp"

#include "kvf/errors.hpp"

namespace kvf::study {

namespace {
const char* kWanted = "a writable directory on a local disk whose file system takes O_DIRECT (not tmpfs)";
}

void add_file_dir_option(kvf::StudyFlags& flags, std::string& dir, const std::string& used_by) {
  flags.text(kFileDirFlag, dir,
             "directory on local disk for the O_DIRECT tier file of " + used_by + " (default " +
                 std::string(kFileDirDefault) + ")");
}

std::string file_dir_message(const kvf::frontier::DirectFileError& e) {
  return std::string(kFileDirFlag) + " " + kvf::shown_value(e.dir()) + ": " + e.problem() + "; allowed: " + kWanted;
}

void check_file_dir_flag(const std::string& dir) {
  if (dir.empty()) kvf::bad_flag(kFileDirFlag, dir, kWanted);
  try {
    kvf::frontier::check_file_dir(dir);
  } catch (const kvf::frontier::DirectFileError& e) {
    throw kvf::UsageError(file_dir_message(e));
  }
}

std::unique_ptr<kvf::frontier::DirectFile> make_tier_file(const std::string& dir, std::size_t bytes,
                                                          std::uint64_t seed) {
  try {
    return std::make_unique<kvf::frontier::DirectFile>(dir, bytes, seed);
  } catch (const kvf::frontier::DirectFileError& e) {
    throw kvf::UsageError(file_dir_message(e));
  }
}

}  // namespace kvf::study
