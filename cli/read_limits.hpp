// The flags that raise the limits on reading results (kvf/input.hpp), shared by every subcommand that
// reads files it did not write: report, gate, counters.
#pragma once
#include <memory>

#include <CLI/CLI.hpp>

#include "kvf/input.hpp"

namespace kvf::cli {

struct ReadLimitFlags {
  std::uint64_t file_mib = read_limits().max_file_bytes >> 20;
  std::size_t line_kib = read_limits().max_line_bytes >> 10;
  std::size_t field_kib = read_limits().max_field_bytes >> 10;
  bool follow_symlinks = false;
  // Sets the process-wide limits; call first in the subcommand's callback.
  void apply() const {
    ReadLimits l = read_limits();
    l.max_file_bytes = file_mib << 20;
    l.max_line_bytes = line_kib << 10;
    l.max_field_bytes = field_kib << 10;
    l.follow_symlinks = follow_symlinks;
    set_read_limits(l);
  }
};

inline std::shared_ptr<ReadLimitFlags> add_read_limit_flags(CLI::App* sub) {
  auto f = std::make_shared<ReadLimitFlags>();
  sub->add_option("--max-file-mib", f->file_mib, "Largest input file read, MiB (bigger is bad input, exit 2)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--max-line-kib", f->line_kib, "Longest CSV record read, KiB")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 22))
      ->capture_default_str();
  sub->add_option("--max-field-kib", f->field_kib, "Longest CSV field read, KiB")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 22))
      ->capture_default_str();
  sub->add_flag("--follow-symlinks", f->follow_symlinks,
                "Read files of a results directory that are symlinks to places outside it (refused by default)");
  return f;
}

}  // namespace kvf::cli
