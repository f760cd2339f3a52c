// safetensors (issue 19): the header reader on the input as a whole file image (length, JSON header, data
// buffer), then every float tensor widened from the image, so ASan sees any byte the checks let through
// outside the input; the same bytes through a real file (SafetensorsFile: open, fstat, mmap).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_common.hpp"
#include "kvf/attention/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  using namespace kvf::attention;
  fuzz::init_limits();
  // The image in its own allocation of exactly `size` bytes: a read past the end is an ASan report.
  const std::vector<std::uint8_t> image(data, data + size);
  fuzz::expect_usage_errors([&] {
    const SafetensorsHeader h = parse_safetensors_header(image.data(), image.size(), image.size(), "fuzz.safetensors");
    fuzz::require(8 + h.header_bytes + h.data_bytes == size, "header and data add up to the file");
    std::vector<const TensorInfo*> by_offset;
    for (const auto& t : h.tensors) {
      fuzz::require(t.end <= h.data_bytes && t.begin <= t.end, "tensor inside the data buffer", t.name);
      fuzz::require(t.end - t.begin == std::uint64_t(t.numel()) * dtype_bytes(t.dtype), "span = numel x dtype", t.name);
      if (t.end > t.begin) by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    std::uint64_t prev_end = 0;
    for (const auto* t : by_offset) {
      fuzz::require(t->begin >= prev_end, "no overlap", t->name);
      prev_end = t->end;
    }
    for (const auto& t : h.tensors) {
      if (t.dtype != Dtype::bf16 && t.dtype != Dtype::f16 && t.dtype != Dtype::f32) continue;
      TensorView v{&t, image.data() + 8 + h.header_bytes + t.begin, "fuzz.safetensors"};
      std::vector<float> out(std::size_t(std::min<std::int64_t>(t.numel(), 1 << 16)));
      to_f32(v, out.data(), 0, std::int64_t(out.size()));
    }
  });
  // The file path: the same verdict (UsageError or not) through open + mmap.
  static const auto file = fuzz::scratch_dir("safetensors") / "model.safetensors";
  fuzz::write_file(file, fuzz::text(data, size));
  fuzz::expect_usage_errors([&] {
    const SafetensorsFile f(file);
    for (const auto& t : f.header().tensors) fuzz::require(f.view(t.name).info == &t, "view finds its tensor", t.name);
  });
  return 0;
}
