#include <string>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"

#if defined(KVF_HAVE_CUDA)
#include "../cuda/cuda_backend_impl.hpp"
#endif

namespace kvf {

CudaProbe probe_cuda() {
#if defined(KVF_HAVE_CUDA)
  return probe_cuda_impl();
#else
  CudaProbe p;
  p.error = "this build has no CUDA backend (configured without CUDA: no nvcc found, or KVF_CUDA=OFF)";
  return p;
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view choice, std::string* note) {
  auto say = [&](std::string s) {
    if (note) *note = std::move(s);
  };
  if (choice == "cpu") {
    say("backend: cpu (requested)");
    return make_cpu_backend();
  }
  if (choice != "cuda" && choice != "auto")
    throw UsageError("--backend " + std::string(choice) + ": unknown backend; allowed: auto, cpu, cuda");
  const CudaProbe p = probe_cuda();
  if (p.usable) {
#if defined(KVF_HAVE_CUDA)
    auto be = make_cuda_backend(0);
    say("backend: cuda (" + std::string(choice == "auto" ? "auto: found " : "requested: ") + be->info().name + ")");
    return be;
#endif
  }
  if (choice == "cuda")
    throw UsageError("--backend cuda: no usable GPU: " + p.error +
                     "; check the NVIDIA driver (nvidia-smi) or run with --backend cpu");
  say("backend: cpu (auto: no usable GPU: " + p.error + ")");
  return make_cpu_backend();
}

}  // namespace kvf
