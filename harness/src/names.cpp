#include "kvf/names.hpp"

#include <map>

#include "kvf/errors.hpp"

namespace kvf {

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

namespace {

std::string joined(const std::vector<NamedEntry>& all, const std::vector<std::size_t>& which) {
  std::string s;
  for (std::size_t i : which) s += (s.empty() ? "" : ", ") + all[i].name;
  return s;
}

}  // namespace

std::size_t resolve_name(const std::vector<NamedEntry>& all, std::string_view given, const std::string& flag,
                         const std::string& what) {
  const std::string g = lower_ascii(given);
  // Canonical names first: an alias never shadows an entry's own name (name_conflict refuses that anyway).
  for (std::size_t i = 0; i < all.size(); ++i)
    if (lower_ascii(all[i].name) == g) return i;
  std::vector<std::size_t> hits;
  for (std::size_t i = 0; i < all.size(); ++i)
    for (const auto& a : all[i].aliases)
      if (lower_ascii(a) == g) {
        hits.push_back(i);
        break;
      }
  const std::string shown = flag + " " + shown_value(given);
  if (hits.size() == 1) return hits.front();
  if (hits.size() > 1)
    throw UsageError(shown + ": ambiguous " + what + " alias, names " + std::to_string(hits.size()) + ": " +
                     joined(all, hits) + " (give one of them)");
  std::vector<std::size_t> every(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) every[i] = i;
  throw UsageError(shown + ": unknown " + what + "; known: " + joined(all, every) +
                   " (case-blind; aliases in the data file)");
}

std::string name_conflict(const std::vector<NamedEntry>& all) {
  std::map<std::string, std::size_t> canonical;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto [it, fresh] = canonical.emplace(lower_ascii(all[i].name), i);
    if (!fresh) return "'" + all[i].name + "' and '" + all[it->second].name + "' are one name (case-blind)";
  }
  for (const auto& e : all)
    for (const auto& a : e.aliases) {
      if (a.empty()) return "'" + e.name + "' has an empty alias";
      const auto it = canonical.find(lower_ascii(a));
      if (it != canonical.end() && all[it->second].name != e.name)
        return "alias '" + a + "' of '" + e.name + "' is the name of '" + all[it->second].name + "'";
    }
  return "";
}

}  // namespace kvf
