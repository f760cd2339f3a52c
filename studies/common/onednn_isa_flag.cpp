#include "kvf/onednn_isa_flag.hpp"

#include <stdexcept>

#include "gemm_onednn.hpp"
#include "kvf/errors.hpp"

namespace kvf::study {

namespace {
std::string allowed() {
  std::string a;
  for (const auto& n : kvf::frontier::onednn_isa_names()) a += (a.empty() ? "" : ", ") + n;
  return a;
}
}  // namespace

void add_onednn_isa_option(kvf::StudyFlags& flags, std::string& isa) {
  flags.text(kOnednnIsaFlag, isa,
             "CPU: the highest ISA oneDNN's matmuls may use, " + allowed() +
                 " (default: the best this CPU has; each row's note names the kernel that ran)");
}

void apply_onednn_isa_flag(const std::string& isa, bool given) {
  if (!given) return;
  static std::string applied;  // cases() may be asked twice in one process; oneDNN takes a cap only once
  if (!applied.empty() && applied == isa) return;
  if (isa.empty()) kvf::bad_flag(kOnednnIsaFlag, isa, "allowed " + allowed());
  try {
    kvf::frontier::set_onednn_max_isa(isa);
  } catch (const std::invalid_argument&) {
    kvf::bad_flag(kOnednnIsaFlag, isa, "unknown ISA; allowed " + allowed());
  } catch (const std::runtime_error& e) {
    throw kvf::UsageError(std::string(kOnednnIsaFlag) + " " + kvf::shown_value(isa) + ": " + e.what());
  }
  applied = isa;
}

}  // namespace kvf::study
