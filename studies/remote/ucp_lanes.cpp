// The lanes of a UCP endpoint, read from ucp_ep_print_info's text (UCX 1.13's ucp_ep_query has no transport field):
// no UCX here, so tests/remote checks it on listings UCX printed.
#include "ucp_lanes.hpp"

#include <algorithm>
#include <sstream>

namespace kvf::remote {

// A lane line of ucp_ep_print_info (UCX 1.13):
//   "#   lane[2]:  2:cma/memory.0 md[2]   -> md[2]/cma/sysdev[255] rma_bw#0"
// gives {"cma/memory", "rma_bw"}: the transport/device and the roles after the remote md, '#n' dropped.
std::vector<Lane> parse_lanes(const std::string& info) {
  std::istringstream in(info);
  std::string line;
  std::vector<Lane> lanes;
  while (std::getline(in, line)) {
    const auto lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    std::istringstream words(line.substr(line.find(':', lane) + 1));
    Lane l;
    std::string w;
    words >> l.tl_dev;  // "2:cma/memory.0"
    if (const auto c = l.tl_dev.find(':'); c != std::string::npos) l.tl_dev = l.tl_dev.substr(c + 1);
    if (const auto d = l.tl_dev.rfind('.'); d != std::string::npos) l.tl_dev = l.tl_dev.substr(0, d);
    bool after_arrow = false, after_md = false;
    while (words >> w) {
      if (w == "->") after_arrow = true;
      else if (after_arrow && !after_md) after_md = true;  // the remote md/transport/sysdev word
      else if (after_md) {
        if (const auto h = w.find('#'); h != std::string::npos) w = w.substr(0, h);
        l.rma = l.rma || w.rfind("rma", 0) == 0;
        l.roles += (l.roles.empty() ? "" : " ") + w;
      }
    }
    lanes.push_back(l);
  }
  return lanes;
}

std::string summarize_lanes(const std::string& info) {
  std::string out;
  bool rma = false;
  for (const auto& l : parse_lanes(info)) {
    out += (out.empty() ? "" : " ") + l.tl_dev + (l.roles.empty() ? "" : "(" + l.roles + ")");
    rma = rma || l.rma;
  }
  if (out.empty()) return "unknown (ucp_ep_print_info listed no lanes)";
  if (!rma) out += "; no RMA lane: put/get run as active messages the holder's progress serves";
  return out;
}

bool rma_on_another_transport(const std::string& with_handling, const std::string& without) {
  const auto transport = [](const Lane& l) { return l.tl_dev.substr(0, l.tl_dev.find('/')); };
  const auto peer = parse_lanes(with_handling);
  for (const auto& l : parse_lanes(without))
    if (l.rma && std::none_of(peer.begin(), peer.end(), [&](const Lane& p) { return transport(p) == transport(l); }))
      return true;
  return false;
}

}  // namespace kvf::remote
