// What a study declares its own flags on (Study::add_options): a handle to the bench's command line.
// Values are kept as text, as the studies always kept them: each study parses and range-checks its flags in
// cases(), where an empty or malformed value is one clear line naming the flag.
//
// CLI11 stays behind it (harness/src/bench_flags.cpp is the one harness unit that includes it): a unit that
// includes CLI11 2.1 compiles about 10 s longer (its global validators and option templates, on the 2-core AMD
// EPYC CI machines, GCC -O2 and clang with ASan alike), and every bench binary compiled its own copy.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kvf {

// Every named option of `app` and of its subcommands that takes a value refuses one that is a flag: a flag
// given without its value takes the next word ("--contexts --parts attention"), and the line says so rather
// than judge "--parts" as a context. A bench's command line (the harness's flags and its study's) is checked so.
void refuse_flags_as_values(CLI::App& app);

class StudyFlags {
 public:
  StudyFlags() = default;  // no command line (yet): nothing is given, nothing may be declared
  explicit StudyFlags(CLI::App& app) : app_(&app) {}

  // --name VALUE
  void text(const std::string& name, std::string& value, const std::string& help);
  // --name A,B,C (comma-separated; repeating the flag adds to the list)
  void list(const std::string& name, std::vector<std::string>& values, const std::string& help);
  // --name (no value)
  void flag(const std::string& name, bool& on, const std::string& help);
  // Text printed after the flags in --help.
  void footer(const std::string& text);

  // After parsing (in cases()): whether the flag was on the command line. A flag given with an empty value is
  // given: the study refuses it, never takes it for "not given".
  bool given(const std::string& name) const;

 private:
  CLI::App* app_ = nullptr;
};

// A helper process's view of the bench's command line (the remote study's holder and reader ranks): the flags
// `declare` names are parsed, every other one is left to the main process. False when one of them is malformed
// or --help was asked: the main process, parsing the same line, says why.
bool parse_own_flags(int argc, char** argv, const std::function<void(StudyFlags&)>& declare);

}  // namespace kvf
