// Holds one stream's queued work until another stream reaches a point, entirely on the device: close(s)
// enqueues a one-thread kernel on s that spins until a device word reaches this gate's next ticket; open(t)
// enqueues a one-thread kernel on t that stores the ticket. Work queued on s behind close() starts when t's work
// reaches open(), not when the host finishes queueing it (a co-run background queued ahead of the timed step
// would otherwise run while the host is still enqueueing it and be done before the step starts, as seen on an
// H100). The spinner gives up after timeout_s (read from %globaltimer), like the backend's blocking kernel, so
// a missing open() delays, never hangs; timed_out() says whether it did. The harness knows no study: any case
// that runs work beside its timed region can gate it.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

namespace kvf {

class StreamGate {
 public:
  explicit StreamGate(double timeout_s = 10.0);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  // Loads both kernels in the context of stream s (launches each once, synchronizes s). Call for every stream
  // the gate will use before any close(): with lazy module loading (CUDA 12+) the first launch of a kernel can
  // wait for the kernels already running in its context, so a first open() behind a spinning close() waited out
  // the whole timeout on an H100.
  void warm(cudaStream_t s);
  void close(cudaStream_t s);
  void open(cudaStream_t t);
  // Whether any wait gave up: a blocking copy of the device word, so call it after s has been synchronized.
  bool timed_out() const;

 private:
  unsigned* word_ = nullptr;  // device: [0] the last ticket opened, [1] how many waits gave up
  unsigned ticket_ = 0;
  unsigned long long timeout_ns_ = 0;
};

}  // namespace kvf
#endif
