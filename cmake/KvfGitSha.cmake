# Script mode (cmake -P), run at every build by the harness's kvf_version target: writes version.cpp with the
# commit the binaries are built from. A sha taken at configure time stayed in every binary and meta.json until the
# next configure, so results of later commits claimed an older one. "-dirty": tracked files differ from that
# commit. "unknown": not built from a git checkout (or git refused it). configure_file rewrites the file only when
# its text changes, so an unchanged commit relinks nothing.
# In: KVF_SOURCE_DIR, KVF_VERSION_IN, KVF_VERSION_OUT, PROJECT_VERSION.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${KVF_SOURCE_DIR}
                OUTPUT_VARIABLE KVF_GIT_SHA RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(_rc OR NOT KVF_GIT_SHA)
  set(KVF_GIT_SHA unknown)
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${KVF_SOURCE_DIR}
                  OUTPUT_VARIABLE _changes RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc OR _changes)
    string(APPEND KVF_GIT_SHA -dirty)
  endif()
endif()
configure_file(${KVF_VERSION_IN} ${KVF_VERSION_OUT} @ONLY)
