// A small synthetic model shape for the decode and prefill tests (weights are synthetic anyway).
#pragma once
#include "models.hpp"

namespace kvf::test {
inline kvf::models::ModelShape tiny_shape(int hidden = 1024, int heads = 8, int kv = 2, int d = 128, int inter = 3584,
                                          bool bias = false) {
  kvf::models::ModelShape m;
  m.name = "test";
  m.hidden = hidden;
  m.n_heads = heads;
  m.n_kv_heads = kv;
  m.head_dim = d;
  m.layers = 4;
  m.intermediate = inter;
  m.vocab = 512;
  m.rope_theta = 500000;
  m.qkv_bias = bias;
  return m;
}
}  // namespace kvf::test
