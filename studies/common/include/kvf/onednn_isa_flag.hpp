// The --onednn-max-isa flag of the studies whose CPU arms run oneDNN matmuls (frontier, idleness): cap the ISA
// oneDNN dispatches to, so one machine compares its kernels (AMX against AVX-512-BF16 against AVX2) in the
// same binary; each row's note names the kernel that ran.
#pragma once
#include <string>

#include "kvf/study_flags.hpp"


namespace kvf::study {

inline constexpr const char* kOnednnIsaFlag = "--onednn-max-isa";

void add_onednn_isa_option(kvf::StudyFlags& flags, std::string& isa);
// Applies the cap once per process, before any product is planned; an empty value (the flag absent) leaves
// oneDNN's own choice. kvf::UsageError with one line for a name it does not know or a cap oneDNN refuses.
void apply_onednn_isa_flag(const std::string& isa, bool given);

}  // namespace kvf::study
