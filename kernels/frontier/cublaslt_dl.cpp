#include "cublaslt_dl.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#if !defined(KVF_CUBLASLT_SONAME) || !defined(KVF_CUBLASLT_DIR)
#error "KVF_CUBLASLT_SONAME and KVF_CUBLASLT_DIR come from kernels/frontier/CMakeLists.txt"
#endif

namespace kvf::frontier::gpu {
namespace {

template <class F>
void bind(void* lib, const std::string& path, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw std::runtime_error("cuBLASLt: " + path + " has no symbol " + name);
}

CublasLt load() {
  CublasLt lt{};
  const std::string soname = KVF_CUBLASLT_SONAME, dir = KVF_CUBLASLT_DIR;
  std::string errors;
  void* lib = nullptr;
  for (const std::string& name : {soname, dir.empty() ? std::string() : dir + "/" + soname}) {
    if (name.empty()) continue;
    if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      lt.path = name;
      break;
    }
    const char* e = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : name.c_str());
  }
  if (!lib) throw std::runtime_error("cuBLASLt not available: " + errors);
  bind(lib, lt.path, "cublasLtCreate", lt.Create);
  bind(lib, lt.path, "cublasLtDestroy", lt.Destroy);
  bind(lib, lt.path, "cublasLtGetStatusName", lt.GetStatusName);
  bind(lib, lt.path, "cublasLtGetStatusString", lt.GetStatusString);
  bind(lib, lt.path, "cublasLtMatmulDescCreate", lt.MatmulDescCreate);
  bind(lib, lt.path, "cublasLtMatmulDescDestroy", lt.MatmulDescDestroy);
  bind(lib, lt.path, "cublasLtMatmulDescSetAttribute", lt.MatmulDescSetAttribute);
  bind(lib, lt.path, "cublasLtMatrixLayoutCreate", lt.MatrixLayoutCreate);
  bind(lib, lt.path, "cublasLtMatrixLayoutDestroy", lt.MatrixLayoutDestroy);
  bind(lib, lt.path, "cublasLtMatmulPreferenceCreate", lt.MatmulPreferenceCreate);
  bind(lib, lt.path, "cublasLtMatmulPreferenceDestroy", lt.MatmulPreferenceDestroy);
  bind(lib, lt.path, "cublasLtMatmulPreferenceSetAttribute", lt.MatmulPreferenceSetAttribute);
  bind(lib, lt.path, "cublasLtMatmulAlgoGetHeuristic", lt.MatmulAlgoGetHeuristic);
  bind(lib, lt.path, "cublasLtMatmul", lt.Matmul);
  return lt;  // never dlclosed: handles made from it may outlive any owner we could give it
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt lt = load();
  return lt;
}

}  // namespace kvf::frontier::gpu
