// MPI's whole part in the remote study: start the ranks, tell each its place, exchange one blob per rank (UCP
// worker address, packed rkey, pool base and size), and finish (one bounded barrier, then MPI_Finalize). Nothing
// else travels over MPI.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kvf::remote {

// Whether an MPI launcher (mpirun, srun with PMI/PMIx) started this process.
bool under_mpi_launcher();

struct Place {
  int rank = 0, size = 1;
  std::string host;
};
Place mpi_start(int* argc, char*** argv);
// Every rank's blob, in rank order (MPI_Iallgather of the sizes, then MPI_Iallgatherv); UsageError ("peer
// unreachable") when another rank has not joined within timeout_s.
std::vector<std::vector<char>> mpi_exchange(const std::vector<char>& mine, double timeout_s);
// Rank 0 under self_launch from `kvf run`: kvf's progress pipe, reopened (KVF_REMOTE_PROGRESS_PATH) and handed
// to the harness as KVF_PROGRESS_FD, so kvf run counts this bench's rows as it does any other's.
void reopen_progress_pipe();
// KVF_REMOTE_NETNS=NAME: after MPI has started (its own sockets stay where they are), this rank joins the network
// namespace /var/run/netns/NAME, so UCX sees that namespace's interfaces only (tests/remote/netns.sh: two ranks on
// the two ends of a veth pair). UsageError when it cannot.
void join_netns_from_env();
// MPI_Finalize: only when every rank is alive and will call it too (it waits for them).
// An MPI_Ibarrier first (progress() called while it is open, at most 30 s), so that no rank leaves while another
// still needs it.
void mpi_finish(const std::function<void()>& progress = {});

// Starts this program again under `mpirun -np <ranks> --oversubscribe --enable-recovery` on this machine (as root
// with --allow-run-as-root) and returns the run's exit code (the ranks' own, see record_exit); 2 with one line
// when mpirun is not installed.
int self_launch(int argc, char** argv, int ranks, const std::string& prog);
// Under self_launch: this rank's exit code, for the launcher (KVF_REMOTE_EXIT_FILE); nothing otherwise.
void record_exit(int rank, int rc);

}  // namespace kvf::remote
