#include "kvf/residency/forms.hpp"

#include "kvf/errors.hpp"

namespace kvf::residency {
namespace {

std::string all_names() {
  std::string s;
  for (Form f : kAllForms) s += (s.empty() ? "" : ", ") + std::string(form_name(f));
  return s;
}

}  // namespace

std::string_view form_name(Form f) {
  switch (f) {
    case Form::kv: return "kv";
    case Form::kv_int8: return "kv-int8";
    case Form::kv_int4: return "kv-int4";
    case Form::x: return "x";
    case Form::x_int8: return "x-int8";
    case Form::x_int4: return "x-int4";
  }
  return "?";
}

std::string form_description(Form f) {
  return (form_bits(f) == 16 ? std::string("bf16") : "int" + std::to_string(form_bits(f))) + (is_x_form(f) ? " X" : " K/V");
}

std::string form_column(Form f) {
  std::string s(form_name(f));
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

Form parse_form(std::string_view text, std::string_view flag) {
  for (Form f : kAllForms)
    if (form_name(f) == text) return f;
  throw UsageError(std::string(flag) + " " + shown_value(text) + ": expected one of " + all_names());
}

std::vector<Form> parse_forms(std::string_view text, std::string_view flag) {
  std::vector<Form> out;
  if (text == "none") return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item.empty())
      throw UsageError(std::string(flag) + " " + shown_value(text) + ": an empty item; expected forms among " +
                       all_names() + ", comma-separated, or none");
    const Form f = parse_form(item, flag);
    for (Form g : out)
      if (g == f) throw UsageError(std::string(flag) + " " + shown_value(text) + ": " + std::string(item) + " twice");
    out.push_back(f);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

void check_compress_to(Form entry, const std::vector<Form>& compress_to, std::string_view flag) {
  for (const Form f : compress_to) {
    const std::string what = std::string(flag) + " " + std::string(form_name(f)) + " with blocks entering as " +
                             std::string(form_name(entry)) + ": ";
    if (is_x_form(f) && !is_x_form(entry))
      throw UsageError(what + "K/V cannot be turned into X later (a block's X exists only while it is prefilled); "
                              "keep blocks as X from the start (--form " + std::string(form_name(f)) + ")");
    if (!is_x_form(f) && is_x_form(entry))
      throw UsageError(what + "X becomes K/V only by the recompute every use pays; compress X to fewer bits (x-int8, x-int4)");
    if (form_bits(f) >= form_bits(entry))
      throw UsageError(what + "not smaller: compress only to fewer bits of the same family");
  }
}

}  // namespace kvf::residency
