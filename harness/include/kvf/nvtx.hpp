// Named NVTX ranges around every measured region so nsys/ncu timelines show the case name.
// Compiled out without CUDA (KVF_HAVE_NVTX undefined).
#pragma once
#include <string>

#if defined(KVF_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace kvf {

class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) {
#if defined(KVF_HAVE_NVTX)
    nvtxRangePushA(name.c_str());
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#if defined(KVF_HAVE_NVTX)
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace kvf
