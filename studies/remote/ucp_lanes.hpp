// The lanes of a UCP endpoint as ucp_ep_print_info lists them (pure string code: tests/remote runs it without UCX).
#pragma once
#include <string>
#include <vector>

namespace kvf::remote {

// The lanes ucp_ep_print_info lists, shortened: "cma/memory(rma_bw) sysv/memory(am am_bw)", and for an endpoint
// with no RMA lane, that put/get run over active messages.
std::string summarize_lanes(const std::string& ep_info);
struct Lane {
  std::string tl_dev, roles;  // "cma/memory", "rma_bw"
  bool rma = false;           // a role of put/get
};
std::vector<Lane> parse_lanes(const std::string& ep_info);
// Whether the endpoint listed in `without` (no peer-failure handling) has an RMA lane on a transport that the one
// listed in `with_handling` does not use (UCX_TLS unset on one machine: cma where PEER took TCP loopback).
bool rma_on_another_transport(const std::string& with_handling, const std::string& without);

}  // namespace kvf::remote
