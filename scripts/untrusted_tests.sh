# Sourced by scripts/untrusted and scripts/test: which ctest tests the sanitizer phase runs (names, as regexes).
# The readers (Input, Units, input.hostile_results), bad command lines of kvf and bench_stream (cli_flags, badinput,
# BadInput, kvf), the gate, the report and model (escaping, types, ranges; ReportResidency and ReportAttention: the
# residency replay's and bench_attention's files beside a results directory), the writers (full disk, signals), the
# fuzz corpus replay.
KVF_UNTRUSTED_TESTS='^((Input|Units|input|cli_flags|badinput|BadInput|FrontierBenchCli|kvf|gate_cli|Gate[A-Za-z]*|Mwu|report_cli|Report|ReportResidency|ReportAttention|Untrusted|Model|Actions|Verdicts|Predict|Crossover|Calibrate|Specs|TextSafety|Csv|Results|Writer|Signals|FullDisk|StopRule|Stats)[._/]|fuzz_.*_replay$)'
# Of those, the ones that need the access, frontier, idleness, remote and attention benches, which the sanitizer
# build leaves out (they read only their own command line and models.json, whose reader kvf links too): the default
# build runs them.
KVF_UNTRUSTED_TESTS_NOT_HERE='^(cli_flags\.(access|frontier|idleness|remote)\.|cli_flags\.kvf\.run_(study|pass)_flag_|cli_flags\.kvf\.run_default_list_|cli_flags\.kvf\.attention_|badinput\.idleness\.|FrontierBenchCli)'
