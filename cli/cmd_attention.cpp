// `kvf attention ARGS...`: bench_attention (studies/attention/README.md, issue 19) with ARGS as given: a real
// model's attention captured by the forward pass (CPU or GPU), or a user's dump, and what block and token selection keep of
// it. kvf finds the binary as it finds every bench (beside it in the build tree, or installed).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/install_paths.hpp"

namespace kvf::cli {

void add_attention(CLI::App& app) {
  auto* sub = app.add_subcommand("attention",
                                 "Attention quality of a model checkpoint or your own capture (bench_attention: "
                                 "sink/local mass, entropy per layer, what block and token selection keep); "
                                 "`kvf attention --help` lists its flags");
  // Every argument is bench_attention's, --help included.
  sub->prefix_command();
  sub->set_help_flag();
  sub->allow_extras();
  sub->callback([sub] {
    const std::string bench = kvf::bench_path("attention").string();
    if (::access(bench.c_str(), X_OK) != 0)
      throw UsageError("kvf attention: not available in this build (" + bench + " is missing)");
    std::vector<std::string> args = {bench};
    for (const auto& a : sub->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bench.c_str(), argv.data());
    throw std::runtime_error("kvf attention: cannot run " + bench + ": " + std::strerror(errno));
  });
}

}  // namespace kvf::cli
