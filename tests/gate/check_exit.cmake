# Runs `kvf gate` and checks its exact exit code (1 and 2 must never be confused) and, optionally, that
# its output (stdout + stderr) matches a regular expression.
#   cmake -DKVF=<kvf> -DARGS="gate@@--baseline@@a@@--current@@b" -DEXPECT=1 [-DMATCH=<regex>] -P check_exit.cmake
# (arguments separated by "@@": a ';' inside add_test arguments does not reach the script intact)
string(REPLACE "@@" ";" ARGS "${ARGS}")
execute_process(COMMAND ${KVF} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "${EXPECT}")
  message(FATAL_ERROR "kvf ${ARGS}: exit code ${rc}, expected ${EXPECT}")
endif()
if(NOT MATCH STREQUAL "" AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "kvf ${ARGS}: output does not match '${MATCH}'")
endif()
