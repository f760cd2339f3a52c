// The endpoint lanes bench_remote reads from ucp_ep_print_info (UCX 1.13), on listings UCX printed on this kind of
// machine: which transport a row names, and when connect() takes the endpoint without peer-failure handling.
#include <gtest/gtest.h>

#include "ucp_lanes.hpp"

namespace kvf::remote {
namespace {

// UCX_TLS unset, one machine: with UCP_ERR_HANDLING_MODE_PEER only TCP loopback is left, and it has no RMA lane.
const std::string kPeerTcp =
    "#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
    "#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup\n"
    "#\n#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)\n"
    "#                  rma_bw: mds rndv_rkey_size 9\n#\n";
// The same pair without error handling: shared memory, put/get over cma.
const std::string kPlainShm =
    "#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
    "#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0\n"
    "#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]\n"
    "#                 lane[2]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] rma_bw#0\n"
    "#                  rma_bw: mds [2] rndv_rkey_size 19\n#\n";
// UCX_TLS=tcp without error handling: TCP again, with RMA lanes of its own.
const std::string kPlainTcp =
    "#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0\n"
    "#                 lane[1]:  2:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] rma_bw#1 wireup\n";

// UCX_TLS=sysv,posix (no cma): the lanes are listed bare, and only the protocol lines say that posix and sysv carry
// put/get (a mapped-memory copy, 35 GB/s in a hot run): no "no RMA lane" claim (found by review).
const std::string kShmBareRma =
    "#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0\n"
    "#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]\n"
    "#\n#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)\n"
    "#                  get[0]: 0..<bcopy>..(inf)\n"
    "#                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)\n"
    "#                  get[1]: 0..<bcopy>..(inf)\n#\n#                  rma_bw: mds #\n";

TEST(UcpLanes, ProtocolLinesMakeABareLaneAnRmaLane) {
  EXPECT_EQ(summarize_lanes(kShmBareRma), "sysv/memory(am am_bw put get) posix/memory(put get)");
  const auto lanes = parse_lanes(kShmBareRma);
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_TRUE(lanes[0].rma);
  EXPECT_TRUE(lanes[1].rma);
}

TEST(UcpLanes, SummarizesTransportsAndRoles) {
  EXPECT_EQ(summarize_lanes(kPlainShm), "sysv/memory(am am_bw) posix/memory cma/memory(rma_bw)");
  EXPECT_EQ(summarize_lanes(kPeerTcp),
            "tcp/lo(am am_bw keepalive wireup); no RMA lane: put/get run as active messages the holder's progress "
            "serves");
  EXPECT_EQ(summarize_lanes(kPlainTcp), "tcp/lo(rma_bw am am_bw) tcp/eth0(rma_bw wireup)");
  EXPECT_EQ(summarize_lanes("# no lanes\n"), "unknown (ucp_ep_print_info listed no lanes)");
  const auto lanes = parse_lanes(kPlainShm);
  ASSERT_EQ(lanes.size(), 3u);
  EXPECT_FALSE(lanes[0].rma);
  EXPECT_TRUE(lanes[2].rma);
  EXPECT_EQ(lanes[2].tl_dev, "cma/memory");
}

// Taken without handling only where that moves put/get onto another transport (shm on one machine), not where it is
// TCP either way (UCX_TLS=tcp keeps peer-failure handling).
TEST(UcpLanes, PlainEndpointOnlyWhenItsRmaIsOnAnotherTransport) {
  EXPECT_TRUE(rma_on_another_transport(kPeerTcp, kPlainShm));
  EXPECT_FALSE(rma_on_another_transport(kPeerTcp, kPlainTcp));
  EXPECT_FALSE(rma_on_another_transport(kPeerTcp, kPeerTcp));
  EXPECT_FALSE(rma_on_another_transport(kPlainShm, kPlainShm));
}

}  // namespace
}  // namespace kvf::remote
