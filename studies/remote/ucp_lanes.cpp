// The lanes of a UCP endpoint, read from ucp_ep_print_info's text (UCX 1.13's ucp_ep_query has no transport field):
// no UCX here, so tests/remote checks it on listings UCX printed.
#include "ucp_lanes.hpp"

#include <algorithm>
#include <sstream>

namespace kvf::remote {

// A lane line of ucp_ep_print_info (UCX 1.13):
//   "#   lane[2]:  2:cma/memory.0 md[2]   -> md[2]/cma/sysdev[255] rma_bw#0"
// gives {"cma/memory", "rma_bw"}: the transport/device and the roles after the remote md, '#n' dropped.
// A lane with no role words after its remote md can still carry put/get: UCX 1.13 lists the sysv and posix
// lanes bare and names them only in the protocol lines below ("#   put[1]: 0..<short>..4294967296..<bcopy>..(inf)",
// "#   get[1]: 0..<bcopy>..(inf)"), whose index is the lane's. Those lanes are RMA lanes too ("put get").
std::vector<Lane> parse_lanes(const std::string& info) {
  std::istringstream in(info);
  std::string line;
  std::vector<Lane> lanes;
  std::vector<std::pair<std::size_t, std::string>> protocol;  // (lane index, "put" or "get")
  while (std::getline(in, line)) {
    for (const char* op : {"put[", "get["}) {
      const auto at = line.find(op);
      if (at == std::string::npos || line.find("lane[") != std::string::npos) continue;
      const std::size_t close = line.find(']', at);
      const std::string digits = line.substr(at + 4, close == std::string::npos ? 0 : close - at - 4);
      if (!digits.empty() && digits.size() < 4 && digits.find_first_not_of("0123456789") == std::string::npos)
        protocol.emplace_back(std::stoul(digits), std::string(op, 3));
    }
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
  for (const auto& [index, op] : protocol) {
    if (index >= lanes.size()) continue;
    Lane& l = lanes[index];
    // A lane already named rma_bw says so; another gets the operations it carries.
    if (l.roles.find("rma") == std::string::npos && l.roles.find(op) == std::string::npos)
      l.roles += (l.roles.empty() ? "" : " ") + op;
    l.rma = true;
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
