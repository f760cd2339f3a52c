// The inputs and the fp64 reference of one kv head's decode attention with a bf16 query and e4m3 K/V, shared by
// the host emulations of the GPU's fp8 kernels (test_attn_fp8_packed.cpp: the CUDA-core token loop;
// test_attn_fp8_mma.cpp: the tensor-core one). Error metric: max |out - ref| / max |ref|, the verify step's.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "access.hpp"

namespace kvf::access::fp8_test {

// A uniformly drawn e4m3 code other than NaN (0x7F, 0xFF): subnormals and +-448 included.
inline std::uint8_t e4m3_random(std::mt19937_64& rng) {
  for (;;) {
    const auto b = static_cast<std::uint8_t>(rng());
    if ((b & 0x7Fu) != 0x7Fu) return b;
  }
}

struct Inputs {
  int heads = 0, d = 0, n = 0;
  std::vector<float> q;               // [heads][d], bf16 values
  std::vector<std::uint8_t> k, v;     // [n][d] e4m3
};

// The study's fill pattern, the query scaled by q_mul (then rounded to bf16), K/V by kv_mul.
inline Inputs make_inputs(int heads, int d, int n, float q_mul, float kv_mul, std::uint64_t seed) {
  Inputs in{heads, d, n, std::vector<float>(static_cast<std::size_t>(heads) * d), {}, {}};
  in.k.resize(static_cast<std::size_t>(n) * d);
  in.v.resize(in.k.size());
  for (std::size_t i = 0; i < in.q.size(); ++i) in.q[i] = bf16_to_f32(f32_to_bf16(pattern_unit(seed * 3 + 1, i) * q_mul));
  for (std::size_t i = 0; i < in.k.size(); ++i) {
    in.k[i] = f32_to_e4m3(pattern_unit(seed * 3 + 2, i) * kv_mul);
    in.v[i] = f32_to_e4m3(pattern_unit(seed * 3 + 3, i) * kv_mul);
  }
  return in;
}

// softmax(q K^T / sqrt(d)) V per query head, in fp64: [heads][d].
inline std::vector<std::vector<double>> reference(const Inputs& in) {
  std::vector<std::vector<double>> out(in.heads, std::vector<double>(in.d, 0.0));
  for (int g = 0; g < in.heads; ++g) {
    std::vector<double> s(static_cast<std::size_t>(in.n));
    double smax = -1e300;
    for (int t = 0; t < in.n; ++t) {
      double x = 0.0;
      for (int j = 0; j < in.d; ++j)
        x += static_cast<double>(in.q[g * in.d + j]) * e4m3_to_f32(in.k[static_cast<std::size_t>(t) * in.d + j]);
      s[t] = x / std::sqrt(static_cast<double>(in.d));
      smax = std::fmax(smax, s[t]);
    }
    double den = 0.0;
    for (int t = 0; t < in.n; ++t) {
      const double w = std::exp(s[t] - smax);
      den += w;
      for (int j = 0; j < in.d; ++j) out[g][j] += w * e4m3_to_f32(in.v[static_cast<std::size_t>(t) * in.d + j]);
    }
    for (int j = 0; j < in.d; ++j) out[g][j] /= den;
  }
  return out;
}

// max |out - ref| / max |ref| over every head and dim.
inline double rel_error(const std::vector<std::vector<float>>& out, const std::vector<std::vector<double>>& ref) {
  double max_err = 0.0, max_ref = 0.0;
  for (std::size_t g = 0; g < ref.size(); ++g)
    for (std::size_t j = 0; j < ref[g].size(); ++j) {
      max_err = std::fmax(max_err, std::fabs(out[g][j] - ref[g][j]));
      max_ref = std::fmax(max_ref, std::fabs(ref[g][j]));
    }
  return max_err / max_ref;
}

}  // namespace kvf::access::fp8_test
