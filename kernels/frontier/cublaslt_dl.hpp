// cuBLASLt, loaded on first use (dlopen) instead of linked: its static initializers cost about 0.4 s at every
// start of a process that links it (bench_frontier with a bad flag: 0.42 s linked, 0.02 s loading it lazily),
// which every CPU-only run, every bad command line and every test process paid. The functions keep cuBLASLt's
// names and types (decltype of the header's declarations), so a call reads as the library's.
#pragma once

#include <cublasLt.h>

#include <string>

namespace kvf::frontier::gpu {

struct CublasLt {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmul) Matmul;
  std::string path;  // the name dlopen loaded it by
};

// The library, loaded once (thread-safe): by soname (the executable's RUNPATH, LD_LIBRARY_PATH, ld.so.cache),
// then from the toolkit directory the build was configured with. Throws std::runtime_error with dlerror()'s
// reasons when neither loads, or naming the missing symbol; a failed load is tried again by the next call.
const CublasLt& cublaslt();

}  // namespace kvf::frontier::gpu
