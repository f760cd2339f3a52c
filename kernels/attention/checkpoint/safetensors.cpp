#include "kvf/attention/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kvf/bf16.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf::attention {

namespace {

struct DtypeEntry {
  const char* name;
  Dtype dtype;
  std::size_t bytes;
};
constexpr DtypeEntry kDtypes[] = {
    {"BF16", Dtype::bf16, 2}, {"F16", Dtype::f16, 2},   {"F32", Dtype::f32, 4},   {"F64", Dtype::f64, 8},
    {"I8", Dtype::i8, 1},     {"U8", Dtype::u8, 1},     {"I16", Dtype::i16, 2},   {"U16", Dtype::u16, 2},
    {"I32", Dtype::i32, 4},   {"U32", Dtype::u32, 4},   {"I64", Dtype::i64, 8},   {"U64", Dtype::u64, 8},
    {"BOOL", Dtype::boolean, 1}, {"F8_E4M3", Dtype::f8_e4m3, 1}, {"F8_E5M2", Dtype::f8_e5m2, 1}};

const DtypeEntry& entry(Dtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e;
  return kDtypes[0];
}

// Per dimension and per tensor: far above any model (a 405B model's largest tensor has ~2^31 elements), far
// below where the byte count could wrap.
constexpr std::int64_t kMaxElements = std::int64_t(1) << 48;

std::string tensor_where(const std::string& file, const std::string& name) {
  return file + ": tensor '" + shown_value(name) + "'";
}

std::uint64_t offset_value(const nlohmann::json& v, const std::string& where, const char* which) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    throw UsageError(where + ": data_offsets " + which + " is not a non-negative whole number (" + v.dump() + ")");
  return v.get<std::uint64_t>();
}

TensorInfo parse_tensor(const std::string& name, const nlohmann::json& t, const std::string& file) {
  const std::string where = tensor_where(file, name);
  if (!t.is_object()) throw UsageError(where + ": expected an object {dtype, shape, data_offsets}, got " + t.type_name());
  TensorInfo info;
  info.name = name;
  const auto ds = json_string(t, "dtype", file, name + ".dtype");
  if (!ds) throw UsageError(where + ": no dtype");
  bool known = false;
  for (const auto& e : kDtypes)
    if (*ds == e.name) {
      info.dtype = e.dtype;
      known = true;
    }
  if (!known) {
    std::string allowed;
    for (const auto& e : kDtypes) allowed += std::string(allowed.empty() ? "" : ", ") + e.name;
    throw UsageError(where + ": dtype '" + shown_value(*ds) + "' is not a safetensors dtype (" + allowed + ")");
  }
  const auto sh = t.find("shape");
  if (sh == t.end() || !sh->is_array()) throw UsageError(where + ": shape is missing or not an array");
  if (sh->size() > 8) throw UsageError(where + ": shape has " + std::to_string(sh->size()) + " dimensions, at most 8");
  std::int64_t n = 1;
  for (const auto& d : *sh) {
    const bool whole = d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0);
    if (!whole || d.get<std::uint64_t>() > std::uint64_t(kMaxElements))
      throw UsageError(where + ": shape " + sh->dump() + " holds a dimension that is not a whole number in [0, 2^48]");
    const auto di = d.get<std::int64_t>();
    if (di != 0 && n > kMaxElements / di)
      throw UsageError(where + ": shape " + sh->dump() + " has more than 2^48 elements");
    n *= di;
    info.shape.push_back(di);
  }
  const auto off = t.find("data_offsets");
  if (off == t.end() || !off->is_array() || off->size() != 2)
    throw UsageError(where + ": data_offsets is missing or not [begin, end]");
  info.begin = offset_value((*off)[0], where, "begin");
  info.end = offset_value((*off)[1], where, "end");
  if (info.end < info.begin)
    throw UsageError(where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                     "] end before begin");
  const std::uint64_t want = std::uint64_t(n) * entry(info.dtype).bytes;
  if (info.end - info.begin != want)
    throw UsageError(where + ": data_offsets span " + std::to_string(info.end - info.begin) + " bytes, but " +
                     *ds + " " + sh->dump() + " needs " + std::to_string(want));
  for (const auto& k : t.items())
    if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
      throw UsageError(where + ": unknown key '" + shown_value(k.key()) + "' (dtype, shape, data_offsets)");
  return info;
}

}  // namespace

const char* dtype_name(Dtype d) { return entry(d).name; }
std::size_t dtype_bytes(Dtype d) { return entry(d).bytes; }

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                                   [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(const std::uint8_t* image, std::size_t image_bytes, std::uint64_t file_bytes,
                                           const std::string& file) {
  if (file_bytes < 8 || image_bytes < 8)
    throw UsageError(file + ": " + std::to_string(file_bytes) + " bytes, too short for a safetensors file (8-byte header length first)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | image[i];  // little-endian whatever the host
  SafetensorsHeader h;
  h.header_bytes = n;
  if (n > kMaxHeaderBytes)
    throw UsageError(file + ": header length " + std::to_string(n) + " bytes, above the format's limit of " +
                     std::to_string(kMaxHeaderBytes) + " (not a safetensors file, or a corrupt one)");
  if (n < 2 || n > file_bytes - 8)
    throw UsageError(file + ": header length " + std::to_string(n) + " bytes, but the file holds " +
                     std::to_string(file_bytes - 8) + " after the 8-byte length (truncated file?)");
  if (image_bytes < 8 + n) throw UsageError(file + ": header cut short (" + std::to_string(image_bytes) + " bytes read)");
  h.data_bytes = file_bytes - 8 - n;
  const std::string_view text(reinterpret_cast<const char*>(image + 8), std::size_t(n));
  const nlohmann::json j = parse_json_input(text, file + " (header)");
  if (!j.is_object()) throw UsageError(file + ": header is JSON " + j.type_name() + ", expected an object");
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw UsageError(file + ": __metadata__ is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw UsageError(file + ": __metadata__ '" + shown_value(mk) + "' is " + mv.type_name() + ", expected a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_tensor(key, value, file));
  }
  // Inside the data buffer, then no overlap: by begin, each must start at or after the end of the one before
  // (zero-sized tensors occupy nothing).
  for (const auto& t : h.tensors)
    if (t.end > h.data_bytes)
      throw UsageError(tensor_where(file, t.name) + ": data_offsets end " + std::to_string(t.end) +
                       " is past the data buffer (" + std::to_string(h.data_bytes) + " bytes after the header; truncated file?)");
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      throw UsageError(tensor_where(file, by_offset[i]->name) + ": data_offsets [" + std::to_string(by_offset[i]->begin) +
                       ", " + std::to_string(by_offset[i]->end) + ") overlap tensor '" +
                       shown_value(by_offset[i - 1]->name) + "' [" + std::to_string(by_offset[i - 1]->begin) + ", " +
                       std::to_string(by_offset[i - 1]->end) + ")");
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return h;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // Subnormal: normalize.
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while (!(man & 0x400u));
    return f32_from_bits(sign | (std::uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13));
  }
  return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

void to_f32(const TensorView& v, float* out, std::int64_t first, std::int64_t n) {
  const std::uint8_t* p = v.data + std::size_t(first) * dtype_bytes(v.info->dtype);
  switch (v.info->dtype) {
    case Dtype::bf16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      return;
    case Dtype::f16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = f16_to_f32(b);
      }
      return;
    case Dtype::f32:
      // A zero-element tensor is legal and its caller's buffer may then be null: memcpy(nullptr, p, 0) is UB.
      if (n > 0) std::memcpy(out, p, std::size_t(n) * 4);
      return;
    default:
      throw UsageError(tensor_where(v.file, v.info->name) + ": dtype " + dtype_name(v.info->dtype) +
                       "; a model's weights must be BF16, F16 or F32");
  }
}

void to_f32(const TensorView& v, float* out) { to_f32(v, out, 0, v.info->numel()); }

void to_bf16(const TensorView& v, std::uint16_t* out, std::int64_t first, std::int64_t n) {
  if (v.info->dtype == Dtype::bf16) {
    if (n > 0) std::memcpy(out, v.data + std::size_t(first) * 2, std::size_t(n) * 2);
    return;
  }
  constexpr std::int64_t kBlock = 4096;
  float buf[kBlock];
  for (std::int64_t i = 0; i < n; i += kBlock) {
    const std::int64_t m = std::min(kBlock, n - i);
    to_f32(v, buf, first + i, m);
    for (std::int64_t j = 0; j < m; ++j) out[i + j] = f32_to_bf16(buf[j]);
  }
}

void to_bf16(const TensorView& v, std::uint16_t* out) { to_bf16(v, out, 0, v.info->numel()); }

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path.string()) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw UsageError(path_ + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    const std::string kind = stat_ok ? file_kind(st.st_mode) : "cannot stat";
    ::close(fd);
    throw UsageError(path_ + ": " + kind + ", expected a regular safetensors file");
  }
  size_ = std::uint64_t(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw UsageError(path_ + ": cannot map " + std::to_string(size_) + " bytes (" + std::strerror(err) + ")");
    }
    map_ = static_cast<const std::uint8_t*>(m);
  }
  ::close(fd);  // the mapping stays valid
  try {
    header_ = parse_safetensors_header(map_, std::size_t(size_), size_, path_);
  } catch (...) {
    if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
}

TensorView SafetensorsFile::view(std::string_view name) const {
  TensorView v;
  v.info = header_.find(name);
  if (v.info) v.data = map_ + 8 + header_.header_bytes + v.info->begin;
  v.file = path_;
  return v;
}

}  // namespace kvf::attention
