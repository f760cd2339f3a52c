// The progress protocol between `kvf run` and a bench: where the environment names KVF_PROGRESS_FD (a pipe
// kvf opened), the bench writes one JSON line per finished (case, mode) run there, and kvf draws one
// whole-run progress line and its summary from them. Without the variable nothing is written.
#pragma once
#include "kvf/results.hpp"

namespace kvf::bench {

// One line: {"study","case","mode","status","seconds","note"}. status: "ok" (measured), "skipped" (cannot run
// here), "not_run" (an earlier verify failure or bad input stopped the study), "verify_failed" or "failed";
// seconds: wall time since the previous line (the first: since the process started), setup included.
// A failed write turns the protocol off for the rest of the run; the results files do not depend on it.
void progress_case_done(const CaseRecord& rec);

// The status word progress_case_done writes for a record (exposed for its test).
const char* progress_status(const CaseRecord& rec);

}  // namespace kvf::bench
