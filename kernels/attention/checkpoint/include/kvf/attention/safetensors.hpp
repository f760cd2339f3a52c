// safetensors files (Hugging Face's weight format), read without trusting them: a checkpoint directory is
// downloaded from a hub, copied between boxes, or written by a user's own script.
//
// Layout: 8 bytes little-endian N, then N bytes of JSON (the header), then the data buffer. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the data buffer;
// "__metadata__" (string to string) is the one other key. Every promise of the header is checked before any
// tensor is read: N against the file size and kMaxHeaderBytes, each dtype known, each shape's element count
// (overflow-checked) times the dtype's size equal to end - begin, each [begin, end) inside the data buffer,
// no two tensors overlapping. Gaps between tensors are allowed (they misread nothing). A lie is a
// kvf::UsageError, one line naming the file, the tensor and what is wrong (exit 2).
//
// The file is memory-mapped read-only (MAP_PRIVATE, PROT_READ): a checkpoint is larger than memory can hold
// twice, and a forward pass that takes one layer at a time touches one layer's pages at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::attention {

// The format's own bound (the Rust safetensors crate refuses headers above 100,000,000 bytes).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Every dtype the format names, so a header can be checked whole; a forward pass reads bf16, f16 and f32.
enum class Dtype { bf16, f16, f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, boolean, f8_e4m3, f8_e5m2 };
const char* dtype_name(Dtype d);  // the header's spelling: "BF16", "F16", ...
std::size_t dtype_bytes(Dtype d);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::f32;
  std::vector<std::int64_t> shape;  // [] is a scalar (one element)
  std::uint64_t begin = 0, end = 0;  // [begin, end) in the data buffer
  std::int64_t numel() const;
};

// The checked header of one file. Tensors sorted by name.
struct SafetensorsHeader {
  std::uint64_t header_bytes = 0;  // N
  std::uint64_t data_bytes = 0;    // file size - 8 - N
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  const TensorInfo* find(std::string_view name) const;
};

// Parses and checks the start of a file: `image` holds at least the first 8 + N bytes (or the whole file
// when shorter), `file_bytes` is the file's size. `file` names it in messages. Pure: no I/O (the fuzz
// target's entry point).
SafetensorsHeader parse_safetensors_header(const std::uint8_t* image, std::size_t image_bytes, std::uint64_t file_bytes,
                                           const std::string& file);

// A tensor's bytes inside a mapped file. Not aligned: the format promises no alignment, so readers copy
// (to_f32, to_bf16) rather than cast.
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::uint8_t* data = nullptr;
  std::string file;
};
// Widen (bf16, f16) or copy (f32) a view's `n` elements starting at element `first` into out;
// UsageError for another dtype (naming the file, the tensor and the dtypes a model may use).
void to_f32(const TensorView& v, float* out, std::int64_t first, std::int64_t n);
void to_f32(const TensorView& v, float* out);
// bf16 bits of every element (bf16 copied, f16 and f32 rounded to nearest even); the range form: `n` elements
// from element `first` into out.
void to_bf16(const TensorView& v, std::uint16_t* out);
void to_bf16(const TensorView& v, std::uint16_t* out, std::int64_t first, std::int64_t n);
float f16_to_f32(std::uint16_t h);

// One memory-mapped file with its checked header.
class SafetensorsFile {
 public:
  // Regular files only (opened O_NONBLOCK, then fstat, as kvf/input.hpp does); symlinks are followed: a
  // Hugging Face cache's snapshot directory links every file into ../../blobs/.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // nullptr view (info == nullptr) when absent.
  TensorView view(std::string_view name) const;

 private:
  std::string path_;
  const std::uint8_t* map_ = nullptr;
  std::uint64_t size_ = 0;
  SafetensorsHeader header_;
};

}  // namespace kvf::attention
