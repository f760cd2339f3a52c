// The remote study in the report (issue 18): the remote tier's figures fitted from its rows (a transfer of a page
// from a peer: fixed + descriptors x per-descriptor + bytes / bandwidth, the calibration every model of a fetch
// from a peer reads), a section (wire ceiling, descriptor granularity against one descriptor per page, the fit),
// the granularity claim (rule 6), and the rows' model terms.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;

const char* kClaim6 = "A KV page moved as one descriptor per layer is slower than as one descriptor";
const char* kRule6 =
    "Remote granularity rows of 16-token pages in page-first pools (one reader), per op and mode (cold, hot): the "
    "per-layer row against the one-descriptor row of the same op, mode and model, median ratio with its bootstrap "
    "interval. Supported iff the interval lies above 1 for every pair measured; refuted iff it lies below 1 for every "
    "pair; not established when no pair shows a sign; mixed otherwise. A pair that cannot be formed is named as not "
    "available and left out of the count. The transport each row names is printed with "
    "it: the answer belongs to that transport (shared memory copies a 64 KiB descriptor in about the time it takes "
    "to post one; an RDMA NIC does not).";

// "transport <how UCX moved it>; ..." at the start of every measured row's note (studies/remote/study.cpp).
// Who allocated the pools is part of it (pool_alloc, in rows since 2026-11-29): on one machine UCX's shared-memory
// lanes reach only pools UCX allocated, so the same lanes listed moved user pools by cma, 3x to 30x slower.
std::string transport_of(const CaseRow& r) {
  const std::string key = "transport ";
  if (r.note.rfind(key, 0) != 0) return "?";
  const auto end = r.note.find(';');
  const std::string alloc = r.param("pool_alloc");
  return r.note.substr(key.size(), end == std::string::npos ? std::string::npos : end - key.size()) +
         (alloc.empty() ? std::string() : ", pools allocated by " + alloc);
}
// The note after the transport: readers, p99 and p99.9, the ratio to ucx_perftest.
std::string note_after_transport(const CaseRow& r) {
  const auto semi = r.note.find(';');
  if (r.note.rfind("transport ", 0) != 0 || semi == std::string::npos) return r.note;
  std::size_t from = semi + 1;
  while (from < r.note.size() && r.note[from] == ' ') ++from;
  return r.note.substr(from);
}
// The arm: the case name's first part (ceiling/read/64MiB): the remote rows carry no arm column.
std::string arm_of(const CaseRow& r) { return r.case_name.substr(0, r.case_name.find('/')); }
bool one_reader(const CaseRow& r) { return r.num("readers").value_or(1) <= 1; }

// Measured rows of an arm and op that moved bytes (skipped GPU rows have none).
std::vector<const CaseRow*> remote_rows(const ResultSet& rs, const std::string& arm, const std::string& op = {}) {
  std::vector<const CaseRow*> out;
  for (const auto* r : rs.rows("remote"))
    if (arm_of(*r) == arm && (op.empty() || r->param("op") == op) && r->bytes && *r->bytes > 0 && *r->median_s > 0 &&
        r->num("descriptors"))
      out.push_back(r);
  return out;
}

// The remote tier as t = fixed + descriptors x per_descriptor + bytes / bandwidth, least relative squares over the read
// rows of one transport (the one most rows name) with one reader: a decode rank pulling a page is the fetch every
// model of a peer asks for. Needs 2 sizes; the per-descriptor term needs 2 descriptor counts, else it is 0.
struct RemoteFit {
  double fixed_s = 0, per_descriptor_s = 0, bytes_per_s = 0;
  std::size_t rows = 0, sizes = 0, descriptor_counts = 0;
  std::string transport, said;  // said: what was clamped or left out
  std::string mode;             // of the rows fitted: cold where the run has cold rows
};

// Least squares of relative error over (descriptors, bytes, seconds): t = fixed + descriptors x c + bytes x b
// with the terms asked for (the others 0). Returns {fixed, c, b}, or nullopt when the normal equations are singular.
std::optional<std::array<double, 3>> weighted_fit(const std::vector<std::array<double, 3>>& pts, bool with_fixed,
                                                  bool with_desc) {
  std::vector<int> cols;
  if (with_fixed) cols.push_back(0);
  if (with_desc) cols.push_back(1);
  cols.push_back(2);
  const std::size_t k = cols.size();
  double a[3][4] = {};  // normal equations, augmented
  for (const auto& p : pts) {
    const double x[3] = {1, p[0], p[1]}, w = 1 / (p[2] * p[2]);
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < k; ++j) a[i][j] += w * x[cols[i]] * x[cols[j]];
      a[i][k] += w * x[cols[i]] * p[2];
    }
  }
  for (std::size_t i = 0; i < k; ++i) {  // Gauss-Jordan with partial pivoting
    std::size_t piv = i;
    for (std::size_t r = i + 1; r < k; ++r)
      if (std::fabs(a[r][i]) > std::fabs(a[piv][i])) piv = r;
    if (std::fabs(a[piv][i]) < 1e-300) return std::nullopt;
    std::swap(a[i], a[piv]);
    for (std::size_t r = 0; r < k; ++r) {
      if (r == i) continue;
      const double m = a[r][i] / a[i][i];
      for (std::size_t j = i; j <= k; ++j) a[r][j] -= m * a[i][j];
    }
  }
  std::array<double, 3> out{};
  for (std::size_t i = 0; i < k; ++i) out[cols[i]] = a[i][k] / a[i][i];
  return out;
}

// mode: the rows' mode; empty: the cold rows where the run has them (among the one-reader rows when there are any),
// since a peer's KV pool outgrows its LLC and a hot row's bytes come from the holder's cache (a 2 MiB page read 4x
// faster hot than cold over shared memory on one machine).
// max_bytes > 0: the rows that move at most that (a hot fit of what the holder's LLC can hold).
std::optional<RemoteFit> fit_remote(const ResultSet& rs, std::string mode = {}, double max_bytes = 0) {
  std::vector<const CaseRow*> all, pool;
  for (const char* arm : {"ceiling", "granularity"})
    for (const auto* r : remote_rows(rs, arm, "read"))
      if (!(max_bytes > 0) || *r->bytes <= max_bytes) all.push_back(r);
  const bool any_alone = std::any_of(all.begin(), all.end(), [](const CaseRow* r) { return one_reader(*r); });
  if (mode.empty())
    mode = std::any_of(all.begin(), all.end(), [&](const CaseRow* r) {
             return r->mode == "cold" && (one_reader(*r) || !any_alone);
           }) ? "cold" : "hot";
  for (const auto* r : all)
    if (r->mode == mode) pool.push_back(r);
  std::vector<const CaseRow*> alone;
  for (const auto* r : pool)
    if (one_reader(*r)) alone.push_back(r);
  RemoteFit f;
  f.mode = mode;
  if (alone.empty() && !pool.empty()) {
    alone = pool;
    f.said = "; every read row ran under other readers' load (many-to-one): the fit is of a loaded holder";
  }
  std::map<std::string, std::size_t> count;
  for (const auto* r : alone) ++count[transport_of(*r)];
  if (count.empty()) return std::nullopt;
  f.transport = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  if (count.size() > 1) f.said += "; rows of other transports left out";
  std::vector<std::array<double, 3>> pts;  // descriptors, bytes, seconds
  std::set<double> sizes, descs;
  for (const auto* r : alone)
    if (transport_of(*r) == f.transport) {
      pts.push_back({*r->num("descriptors"), *r->bytes, *r->median_s});
      sizes.insert(*r->bytes);
      descs.insert(pts.back()[0]);
    }
  f.rows = pts.size();
  f.sizes = sizes.size();
  f.descriptor_counts = descs.size();
  // Weighted by 1 / t^2 (relative error): the rows span 32 KiB to 64 MiB, and plain least squares would fit the
  // largest region and miss the page-sized transfers the model is asked about by several times. A term that
  // fits at or below 0 (a descriptor that saves time, a negative fixed cost) is dropped and the rest refitted.
  bool with_fixed = true, with_desc = descs.size() >= 2;
  std::optional<std::array<double, 3>> c;
  for (int tries = 0; tries < 3; ++tries) {
    c = weighted_fit(pts, with_fixed, with_desc);
    if (!c || !((*c)[2] > 0)) return std::nullopt;
    if (with_desc && !((*c)[1] > 0)) {
      f.said += "; the per-descriptor term fitted at " + us_text((*c)[1]) + ", taken as 0";
      with_desc = false;
    } else if (with_fixed && (*c)[0] < 0) {
      f.said += "; the intercept fitted at " + us_text((*c)[0]) + ", taken as 0";
      with_fixed = false;
    } else {
      break;
    }
  }
  if (sizes.size() < 2 || (with_fixed && (*c)[0] < 0) || (with_desc && !((*c)[1] > 0))) return std::nullopt;
  const double fixed = (*c)[0], per_desc = (*c)[1], per_byte = (*c)[2];
  f.fixed_s = fixed;
  f.per_descriptor_s = per_desc;
  f.bytes_per_s = 1 / per_byte;
  return f;
}

// Whether every UCX transport named ("sysv/memory(am am_bw) posix/memory cma/memory(rma_bw)") moves bytes between
// processes of one machine: a tier fitted on those is not a fetch over a network.
bool on_host_only(const std::string& transports) {
  static const std::set<std::string> on_host = {"self", "sysv", "posix", "cma", "knem", "xpmem", "cuda_copy",
                                                "cuda_ipc", "gdr_copy", "rocm_copy", "rocm_ipc"};
  std::string words;  // the lane lists, "(am am_bw)", left out: they name protocols, not transports
  int depth = 0;
  for (const char ch : transports) {
    if (ch == '(') ++depth;
    if (depth == 0) words += ch;
    if (ch == ')' && depth > 0) --depth, words += ' ';
  }
  std::istringstream in(words);
  std::string t;
  bool any = false;
  while (in >> t) {
    const auto slash = t.find('/');
    const std::string name = t.substr(0, slash), device = slash == std::string::npos ? "" : t.substr(slash + 1);
    if (!on_host.count(name) && !(name == "tcp" && device == "lo")) return false;  // tcp over loopback: one machine
    any = true;
  }
  return any;
}

std::vector<Calibrated> calibrate_remote(const ResultSet& rs) {
  const auto f = fit_remote(rs);
  if (!f) return {};
  const std::string over = std::to_string(f->rows) + " " + f->mode + " remote read rows (" +
                           std::to_string(f->sizes) + " sizes, " + std::to_string(f->descriptor_counts) +
                           " descriptor counts; transport " + f->transport + ") in " + rs.dir + f->said +
                           (on_host_only(f->transport)
                                ? "; on-host transports only (ranks on one machine), not a network: a peer "
                                  "behind a NIC moves at that link's rate and latency"
                                : "");
  return {{"remote_gbps", f->bytes_per_s / 1e9,
           fmt(f->bytes_per_s / 1e9) + " GB/s, fit t = fixed + descriptors x per-descriptor + n/B (relative error) over " + over},
          {"remote_fixed_us", f->fixed_s * 1e6, fmt(f->fixed_s * 1e6) + " us per transfer, the same fit"},
          {"remote_descriptor_us", f->per_descriptor_s * 1e6,
           fmt(f->per_descriptor_s * 1e6) + " us per descriptor, the same fit"}};
}

// The one-descriptor row a granularity row is compared with: same op, model and page size (page_first: the only
// layout a page moves as one descriptor from).
const CaseRow* page_row(const std::vector<const CaseRow*>& rows, const CaseRow& r) {
  for (const auto* c : rows)
    if (c->param("granularity") == "page" && c->param("op") == r.param("op") && c->param("model") == r.param("model") &&
        c->param("tokens") == r.param("tokens") && c->param("readers") == r.param("readers") && c->mode == r.mode)
      return c;
  return nullptr;
}

// The lockstep rows of one directory: the signalling-only row (lockstep_bytes 0) and the data rows, which moved
// readers x lockstep_bytes per sample. A directory with a run appended holds each case twice: the report core scores
// the first of repeats that agree and none where they differ (load.cpp), so a data row and the signalling row it is
// stated with are both of the first run.
const CaseRow* lock_signal(const ResultSet& rs, const std::string& readers) {
  for (const auto* r : rs.rows("remote"))
    if (arm_of(*r) == "lockstep" && r->param("lockstep_bytes") == "0" && r->param("readers") == readers &&
        r->median_s && *r->median_s > 0)
      return r;
  return nullptr;
}

// Many-to-one in lockstep against one reader: each data row's rate in all beside the ceiling row of the same region
// and op in the same run (measured beside continuous readers when the run had more than 2 ranks: its note says).
std::string lockstep_table(const ResultSet& rs) {
  std::string out;
  for (const auto* r : remote_rows(rs, "lockstep")) {
    const auto region = r->num("lockstep_bytes");
    if (!region || *region <= 0) continue;
    const CaseRow* one = nullptr;
    for (const auto* c : remote_rows(rs, "ceiling", "read"))
      if (c->bytes && *c->bytes == *region && c->mode == r->mode) one = c;
    const CaseRow* sig = lock_signal(rs, r->param("readers"));
    out += row({lbl(rs), bytes(*region), txt(r->param("readers")), us(r->median_s), r->gbps ? rate(*r->gbps) : "-",
                one && one->gbps ? rate(*one->gbps) : "-",
                one && one->gbps && r->gbps ? fmt(*r->gbps / *one->gbps) : "-", sig ? us(sig->median_s) : "-"});
  }
  return out;
}

std::string section_remote(ReportContext& cx) {
  std::string ceil, gran, fits, lock;
  Plot p{"remote_granularity", "One KV page as N descriptors", "descriptors per page", "transfer time (us)",
         true, true, {}, {}};
  std::map<std::string, Line> lines;
  std::set<std::string> transports;
  for (const auto& rs : cx.sets) {
    for (const auto* r : remote_rows(rs, "ceiling")) {
      transports.insert(transport_of(*r));
      ceil += row({lbl(rs), txt(r->param("op")), bytes(*r->bytes), txt(r->mode),
                   r->param("readers").empty() ? "1" : txt(r->param("readers")),
                   us(r->median_s), r->gbps ? rate(*r->gbps) : "-", txt(note_after_transport(*r))});
    }
    const auto g = remote_rows(rs, "granularity");
    for (const auto* r : g) {
      transports.insert(transport_of(*r));
      const CaseRow* page = page_row(g, *r);
      const std::string vs = !page ? "-" : page == r ? "1" : median_ratio(*r, *page).text();
      gran += row({lbl(rs), txt(r->param("op")), txt(r->mode), txt(r->param("tokens")), txt(r->param("layout")),
                   txt(r->param("granularity")), txt(r->param("descriptors")),
                   bytes(r->num("descriptor_bytes").value_or(0)), us(r->median_s), vs});
      auto& l = lines[rs.label + '\x1f' + r->param("op") + '\x1f' + r->mode + '\x1f' + r->param("tokens") + '\x1f' +
                      r->param("layout")];
      l.key = {{"device", rs.label}, {"op", r->param("op")}, {"mode", r->mode}, {"tokens", r->param("tokens")},
               {"layout", r->param("layout")}};
      l.pts.emplace_back(*r->num("descriptors"), *r->median_s * 1e6);
    }
    lock += lockstep_table(rs);
    if (const auto f = fit_remote(rs))
      fits += "- " + lbl(rs) + ": " + us_text(f->fixed_s) + " per transfer + " + us_text(f->per_descriptor_s) +
              " per descriptor + bytes / " + rate(f->bytes_per_s / 1e9) + " (" + std::to_string(f->rows) +
              " " + f->mode + " read rows, transport " + txt(f->transport) + txt(f->said) + ")\n";
  }
  for (auto& [k, l] : lines) {
    std::sort(l.pts.begin(), l.pts.end());
    p.lines.push_back(l);
  }
  std::string s = "A page moved between ranks over UCX one-sided get (read: a decode rank pulls) and put (write: a "
                  "prefill rank pushes), host memory on both sides (studies/remote/README.md). Transports: ";
  bool first = true;
  for (const auto& t : transports) s += (first ? "" : "; ") + txt(t), first = false;
  s += ".\n\n";
  if (!fits.empty())
    s += "The remote tier as fitted (t = fixed + descriptors x per-descriptor + bytes / bandwidth; what the frontier "
         "action table's `fetch_peer` and `kvf model` use with `--calibrate`):\n" + fits + "\n";
  s += cx.chart(p);
  if (!gran.empty())
    s += fold("Granularity: one page as 1 .. N descriptors, against one descriptor (median ratio, bootstrap interval)",
              header({"device", "op", "mode", "tokens", "layout", "granularity", "descriptors", "descriptor", "median",
                      "vs one descriptor"}) + gran) + "\n";
  if (!ceil.empty())
    s += fold("Wire ceiling: one region in one operation (ucx_perftest on the same pair, same run, in the note)",
              header({"device", "op", "region", "mode", "readers", "median", "rate", "note"}) + ceil) + "\n";
  if (!lock.empty())
    s += fold("Many-to-one in lockstep: every reader pulls its own region of one holder at one go signal; a sample is "
              "go -> all done (rate in all = readers x region / median), beside one reader's ceiling row of the same "
              "region in the same run (with 3 or more ranks that row ran beside the continuous readers)",
              header({"device", "region", "readers", "median (us)", "rate in all", "one reader (ceiling row)",
                      "in all / one reader", "signalling alone (us)"}) + lock) + "\n";
  return s;
}

std::vector<Verdict> claim6(const ResultSet& rs) {
  Verdict v{kClaim6, rs.label, "not measured", "", kRule6};
  const auto g = remote_rows(rs, "granularity");
  std::size_t slower = 0, faster = 0, none = 0, missing = 0;
  std::string figs;
  // Every per-layer row of the claim's shape, measured or not: a pair that cannot be formed (a row without a median,
  // a one-descriptor row missing) is named, never dropped from the figures in silence.
  for (const auto& row : rs.cases) {
    const CaseRow* r = &row;
    if (r->study != "remote" || !r->invalid.empty() || arm_of(*r) != "granularity" ||
        r->param("granularity") != "layer" || r->param("tokens") != "16" || r->param("layout") != "page_first" ||
        !one_reader(*r))
      continue;
    const bool measured = std::find(g.begin(), g.end(), r) != g.end();
    const CaseRow* page = measured ? page_row(g, *r) : nullptr;
    if (!page) {
      ++missing;
      figs += (figs.empty() ? "" : "; ") + r->param("op") + " " + r->mode + ": not available (" +
              (measured ? "no measured one-descriptor row of its op, mode and model"
                        : "the per-layer row has no median") +
              ")";
      continue;
    }
    const Ratio q = median_ratio(*r, *page);
    (q.a_slower() ? slower : q.a_faster() ? faster : none) += 1;
    figs += (figs.empty() ? "" : "; ") + r->param("op") + " " + r->mode + ": per layer / per page " + q.text() + " (" +
            r->param("descriptors") + " descriptors, " + transport_of(*r) + ")";
  }
  if (slower + faster + none == 0) {
    v.figures = g.empty() ? "no remote granularity rows"
                          : "no per-layer row of a 16-token page-first page with its one-descriptor row" +
                                (missing ? ": " + figs : std::string());
    return {v};
  }
  v.figures = figs;
  const std::size_t n = slower + faster + none;
  v.verdict = slower == n ? "supported" : faster == n ? "refuted" : slower + faster == 0 ? "not established" : "mixed";
  return {v};
}

// The remote figures a row is predicted with: the calibrated ones (the cold rows' fit where the run has cold rows), or
// for a hot row that fits the LLC the run's own fit of its hot rows that do (its bytes may come from the holder's
// cache: the cold figure predicted them 3-4x too slow; a hot row larger than the LLC moves from DRAM, as a cold one,
// and a fit over both sizes predicted it 3.7x too fast). The LLC is the directory's (a GPU run's is its L2, of a
// size with a CPU's L3). nullopt: none, said in p; `which` gets what the prediction's line adds about the figures,
// and `hot_fit` (where given) the run's hot fit when that is what the figures are.
std::optional<GpuSpec> remote_terms(Predictor& p, std::string& which, std::optional<RemoteFit>* hot_fit = nullptr) {
  const ResultSet* rs = p.run_index ? &p.run_index->run() : nullptr;
  const double llc = rs ? static_cast<double>(rs->llc_bytes) : 0;
  if (p.r.mode == "hot" && rs && !(llc > 0 && p.bytes > llc)) {
    if (const auto cal = fit_remote(*rs); cal && cal->mode == "cold") {
      const auto hot = fit_remote(*rs, "hot", llc);
      if (!hot) {
        p.none("a hot row, and the run's hot read rows give no fit of their own (the calibrated figure is of its cold "
               "rows)");
        return std::nullopt;
      }
      GpuSpec g = p.g;
      g.remote_gbps = hot->bytes_per_s / 1e9;
      g.remote_fixed_us = hot->fixed_s * 1e6;
      g.remote_descriptor_us = hot->per_descriptor_s * 1e6;
      which = "; hot: the run's fit of its hot read rows" + std::string(llc > 0 ? " up to the LLC" : "") + " (" +
              rate(g.remote_gbps) + "; the calibrated figure is of its cold rows)";
      if (hot_fit) *hot_fit = hot;
      return g;
    }
  }
  if (p.g.remote_gbps <= 0) {
    p.none("no remote figure (no remote read rows of 2 sizes in this directory to fit it)");
    return std::nullopt;
  }
  if (p.r.mode == "hot" && llc > 0 && p.bytes > llc) which = "; hot, larger than the LLC: the calibrated figure";
  return p.g;
}

// Lockstep: the readers in parallel with no contention at the holder: the signalling alone (this run's row) + one
// reader's fitted transfer of its region. Measured above it is what the holder's sharing costs.
std::optional<double> predict_lockstep(Predictor& p) {
  const auto region = p.r.num("lockstep_bytes");
  if (!region || *region <= 0)
    return p.none("lockstep signalling alone: no transfer to model (stated beside the data rows)");
  std::string which;
  const auto g = remote_terms(p, which);
  if (!g) return std::nullopt;
  const CaseRow* sig = p.alone_row("remote", {{"lockstep_bytes", "0"}, {"readers", p.r.param("readers")}});
  if (!sig || !sig->median_s || !(*sig->median_s > 0)) return p.none("no lockstep signalling row in this run");
  p.say("lockstep, no contention at the holder: signalling alone (" + us_text(*sig->median_s) +
        ", this run) + one reader's fixed + 1 descriptor + region / bandwidth; predicted / measured below 1: the "
        "holder's sharing" + which);
  return *sig->median_s + remote_s(*g, *region, 1);
}

std::optional<double> predict_transfer(Predictor& p) {
  std::string which;
  std::optional<RemoteFit> hot_fit;
  const auto g = remote_terms(p, which, &hot_fit);
  if (!g) return std::nullopt;
  const auto d = p.r.num("descriptors");
  if (!d || *d < 1) return p.none("the row has no descriptors column");
  // A row among those the fit was made from (a one-reader read of the fit's transport and mode, and under the hot
  // fit no larger than the LLC): its ratio restates the fit, it does not test it.
  bool in_sample = false;
  if (const ResultSet* rs = p.run_index ? &p.run_index->run() : nullptr;
      rs && p.r.param("op") != "write" && one_reader(p.r)) {
    const auto fit = hot_fit ? hot_fit : fit_remote(*rs);
    in_sample = fit && fit->mode == p.r.mode && fit->transport == transport_of(p.r);
  }
  p.say("remote: fixed + " + fmt(*d) + (*d == 1 ? " descriptor" : " descriptors") +
        " x per-descriptor + bytes / bandwidth" + (p.r.param("op") == "write" ? " (fitted on reads)" : "") +
        (one_reader(p.r) ? "" : " (this row ran beside other readers)") + which +
        (in_sample ? "; in-sample: the fit is of this run's read rows, this one among them" : ""));
  return remote_s(*g, p.bytes, *d);
}

}  // namespace

StudyReport remote_report() {
  StudyReport s;
  s.study = "remote";
  Section sec{"Remote tier: KV pages between ranks", section_remote};
  sec.present = [](const ReportContext& cx) {
    for (const auto& rs : cx.sets)
      if (!rs.rows("remote").empty()) return true;
    return false;
  };
  s.sections = {sec};
  s.verdicts = {{6, kClaim6, claim6, nullptr}};
  s.arm_column = "op";  // no arm column: every term dispatches on the case name's arm itself
  s.terms = {{{}, [](Predictor& p) {
                const std::string arm = arm_of(p.r);
                if (arm == "ceiling" || arm == "granularity") return predict_transfer(p);
                if (arm == "lockstep") return predict_lockstep(p);
                return p.none("remote arm '" + arm + "' has no model term");
              }}};
  s.calibration = {{"remote_gbps", 0, calibrate_remote,
                    "the remote figure is never a spec: it is fitted on the directory's remote read rows"}};
  return s;
}

}  // namespace kvf::report
