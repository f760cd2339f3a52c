// Every `kvf` subcommand registers itself on the app through one of these functions; the list in
// kvf.cpp is the whole CLI at a glance. A subcommand's callback returns its exit code via
// kvf::cli::exit_with().
#pragma once
#include <CLI/CLI.hpp>

namespace kvf::cli {

void add_run(CLI::App& app);      // cmd_run.cpp      (foundation)
void add_gate(CLI::App& app);     // cmd_gate.cpp     (regression gate)
void add_metrics(CLI::App& app);  // cmd_metrics.cpp  (CUPTI metric sets, host API)
void add_counters(CLI::App& app); // cmd_counters.cpp (re-evaluate saved counter images)
void add_report(CLI::App& app);   // cmd_report.cpp   (report from results)
void add_model(CLI::App& app);    // cmd_model.cpp    (analytic model)
void add_residency(CLI::App& app); // cmd_residency.cpp (trace-driven KV residency, issue 17)
void add_attention(CLI::App& app); // cmd_attention.cpp (bench_attention's flags passed through, issue 19)

// Subcommand callbacks set the process exit code through this (CLI11 callbacks return void).
void exit_with(int code);
int pending_exit();

}  // namespace kvf::cli
