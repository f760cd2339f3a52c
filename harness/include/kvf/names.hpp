// Names the user types for things in the data files (models in data/models.json, GPUs in data/gpus.json):
// matched case-blind against each entry's canonical name and its documented aliases (a model's Hugging Face
// id among them). An alias that two entries declare (a bare "H100": SXM or PCIe) is refused with the
// candidates instead of silently meaning one of them.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvf {

struct NamedEntry {
  std::string name;                  // canonical: what rows and reports record
  std::vector<std::string> aliases;  // other spellings that name this entry
};

// Lower case (ASCII), for case-blind comparisons.
std::string lower_ascii(std::string_view s);

// Index of the entry `given` names: a canonical name (case-blind) first, else an alias (case-blind).
// Throws UsageError, one line, "<flag> <given>: ..." with `what` ("model", "GPU"):
//   unknown:   "<flag> x: unknown <what>; known: A, B, C"
//   ambiguous: "<flag> h100: ambiguous <what> alias, names 2: H100 SXM, H100 PCIe (give one of them)"
std::size_t resolve_name(const std::vector<NamedEntry>& all, std::string_view given, const std::string& flag,
                         const std::string& what);

// Entries whose canonical name equals another's, or whose alias is another entry's canonical name
// (case-blind): the one-line problem, or "" when the set is consistent. Loaders refuse such a file.
std::string name_conflict(const std::vector<NamedEntry>& all);

}  // namespace kvf
