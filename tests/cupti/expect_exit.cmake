# cmake -DEXPECT=<code> -DCMD="prog|arg|arg" -P expect_exit.cmake: runs the command, fails unless it exits <code>.
string(REPLACE "|" ";" _cmd "${CMD}")
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(NOT "${_rc}" STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${_rc}: ${CMD}")
endif()
