// ucx_perftest (ucx-utils) on the same pair of ranks in the same run: the wire ceiling as UCX's own tool measures
// it, beside this study's ceiling rows. The holder runs the server, rank 0 the client.
#pragma once
#include <optional>
#include <string>

namespace kvf::remote {

struct PerftestResult {
  std::optional<double> gbps;  // the client's overall bandwidth
  std::string command;         // as run
  std::string why;             // when there is no figure
};

// Rank 0: `ucx_perftest HOST -p PORT -t TEST -s BYTES -n ITERS`, retried while the server is not listening yet,
// each try bounded by timeout_s.
PerftestResult perftest_client(const std::string& host, int port, const std::string& test, long long bytes,
                               double timeout_s);
// The holder: starts the server (one test, then it exits); waits at most timeout_s for it. False when it
// cannot be started (not installed).
bool perftest_server_start(int port, double timeout_s, std::string* why);
void perftest_server_wait();

}  // namespace kvf::remote
