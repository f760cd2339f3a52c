// The forms a KV block can be kept in (issue 17; README "Forms"). A block is bf16 K/V when attention reads it;
// kept in another form it takes fewer bytes (or, for X of a GQA model, more) and costs a restore before use:
// a dequantize pass for quantized K/V, a recompute of K/V from the layer inputs X for the X forms.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::residency {

enum class Form : std::uint8_t { kv = 0, kv_int8, kv_int4, x, x_int8, x_int4 };
inline constexpr std::size_t kForms = 6;
inline constexpr std::array<Form, kForms> kAllForms = {Form::kv,    Form::kv_int8, Form::kv_int4,
                                                       Form::x,     Form::x_int8,  Form::x_int4};

// As flags and columns spell it: kv, kv-int8, kv-int4, x, x-int8, x-int4.
std::string_view form_name(Form f);
// For people: "bf16 K/V", "int8 K/V", "int4 K/V", "bf16 X", "int8 X", "int4 X".
std::string form_description(Form f);
// The column-name spelling: kv, kv_int8, ... (CSV headers take no '-').
std::string form_column(Form f);
// UsageError "<flag> <value>: expected one of kv, kv-int8, ..." for anything else.
Form parse_form(std::string_view text, std::string_view flag);
// A comma-separated list of distinct forms, or "none" (empty). UsageError naming the flag for an empty item,
// an unknown form or a repeat.
std::vector<Form> parse_forms(std::string_view text, std::string_view flag);
// Checks that every form of `compress_to` is reachable from `entry` (the form blocks enter HBM in): the same
// family with fewer bits. K/V cannot become X later (a block's X exists only while it is prefilled) and X cannot
// become K/V without the recompute a use pays anyway. UsageError naming `flag` and why otherwise.
void check_compress_to(Form entry, const std::vector<Form>& compress_to, std::string_view flag);
// True for the X forms (restored by a recompute through the K/V projections), false for the K/V forms.
constexpr bool is_x_form(Form f) { return f == Form::x || f == Form::x_int8 || f == Form::x_int4; }
// Bits per value: 16, 8 or 4.
constexpr int form_bits(Form f) {
  return f == Form::kv || f == Form::x ? 16 : f == Form::kv_int8 || f == Form::x_int8 ? 8 : 4;
}

}  // namespace kvf::residency
