// The --file-dir flag of the studies that read the O_DIRECT file tier (frontier: file, file_page, overlap;
// idleness: corun's bg_file). The kernel (kernels/frontier/transfer.hpp) says what is wrong with a directory in
// its own terms (DirectFileError); this is the one place that turns it into the flag's line.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvf/study_flags.hpp"
#include "transfer.hpp"


namespace kvf::study {

inline constexpr const char* kFileDirFlag = "--file-dir";
inline constexpr const char* kFileDirDefault = "/var/tmp";

// Adds --file-dir to `app`, stored in `dir` (which keeps its default when the flag is absent); `used_by` names
// what reads the file ("the file tier arms").
void add_file_dir_option(kvf::StudyFlags& flags, std::string& dir, const std::string& used_by);

// The flag's one line for a directory the tier cannot use: "--file-dir DIR: PROBLEM; allowed: ...".
std::string file_dir_message(const kvf::frontier::DirectFileError& e);

// Checks the directory (writable, a file system that takes O_DIRECT); kvf::UsageError with file_dir_message
// otherwise, and for an empty value.
void check_file_dir_flag(const std::string& dir);

// The tier file of `bytes` in `dir` (kvf::frontier::DirectFile); a file that cannot be made there is bad input,
// kvf::UsageError with file_dir_message.
std::unique_ptr<kvf::frontier::DirectFile> make_tier_file(const std::string& dir, std::size_t bytes,
                                                          std::uint64_t seed);

}  // namespace kvf::study
