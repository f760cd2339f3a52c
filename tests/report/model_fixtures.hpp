// Round-number inputs of the model tests (test_model.cpp, test_remote_report.cpp): every expected number in them is
// worked out by hand from these.
#pragma once
#include "kvf/report.hpp"

namespace kvf::report::test {

// A round-number GPU: 1 TB/s, 100 TFLOP/s, 5 us per launch, 10 us per copy, 50 GB/s host link.
inline GpuSpec toy() {
  GpuSpec g;
  g.name = "toy";
  g.hbm_tbps = 1;
  g.bf16_tflops = 100;
  g.launch_us = 5;
  g.copy_fixed_us = 10;
  g.host_link_gbps = 50;
  g.nvlink_gbps = 0;
  return g;
}
// hidden 1024, 2 KV heads x 64: K/V GEMM output width 256, 256 K/V values per token per layer.
inline Shape small() {
  Shape m;
  m.name = "small";
  m.hidden = 1024;
  m.n_heads = 16;
  m.n_kv_heads = 2;
  m.head_dim = 64;
  m.layers = 4;
  m.intermediate = 4096;
  m.kv_values_per_token = 256;
  return m;
}

}  // namespace kvf::report::test
