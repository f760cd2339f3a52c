# Static checks of GPU code that run without a GPU, as ctest tests.
#
#   include(${PROJECT_SOURCE_DIR}/cmake/KvfPtxChecks.cmake)
#   kvf_add_ptx_check(NAME <test-name> SOURCE <file.cu> ARCH <sm_90>
#                     [INCLUDES <dir>...] [DEFINES <NAME[=VALUE]>...]
#                     [NO_SPILLS] [REQUIRE_V4_LOADS] [LABELS <label>...])
#
# Adds the ctest <test-name>, which compiles SOURCE's device code for ARCH with `nvcc -cubin -Xptxas -v`
# (so the test fails when the file does not compile for that architecture) and prints every
# function's registers, stack frame and spills. Options:
#   NO_SPILLS         fail when ptxas reports a non-zero "spill stores" or "spill loads" in any function.
#   REQUIRE_V4_LOADS  also emit PTX (--ptx, compute_XX) and fail unless it holds a 16-byte global load:
#                     ld.global[.qualifiers].v4.{b,u,s,f}32, .v2.{b,u,s,f}64, or wider (.v8, .v4.*64).
#                     The check is per file: put kernels that must vectorize in the file you check.
#   INCLUDES          include directories (relative paths are taken from the calling CMakeLists' source dir).
#   DEFINES           preprocessor definitions; KVF_HAVE_CUDA=1 and KVF_HAVE_NVTX=1 are always defined, as in
#                     the build.
#   LABELS            extra ctest labels; every check carries "cuda" and "ptx".
# The checker is tests/tools/kvf_ptx_check.sh (bash, grep, awk; run it by hand with --help). The test runs
# in the calling directory's binary dir; it keeps nothing.
#
# Each study registers its own kernels from tests/<study>/CMakeLists.txt, e.g. for kernels/access:
#   if(KVF_HAVE_CUDA)
#     include(${PROJECT_SOURCE_DIR}/cmake/KvfPtxChecks.cmake)
#     kvf_add_ptx_check(NAME cuda.ptx.access_gpu.sm_90 SOURCE ${PROJECT_SOURCE_DIR}/kernels/access/access_gpu.cu
#                       ARCH sm_90 INCLUDES ${PROJECT_SOURCE_DIR}/harness/include ${PROJECT_SOURCE_DIR}/kernels/access
#                       NO_SPILLS REQUIRE_V4_LOADS)
#   endif()
# Name checks "cuda.ptx.<file>.<arch>" so `ctest -R cuda` and `ctest -L ptx` select them.
# kvf_add_ptx_checks(PREFIX <name-prefix> SOURCE <file.cu> ARCHS <sm_80> <sm_90> ... [same options])
# registers one check per architecture, named <name-prefix>.<arch>.
include_guard(GLOBAL)

# CACHE INTERNAL: include_guard(GLOBAL) skips this file in later directories, whose scope would not
# see a normal variable set here.
get_filename_component(_kvf_ptx_script ${CMAKE_CURRENT_LIST_DIR}/../tests/tools/kvf_ptx_check.sh ABSOLUTE)
set(KVF_PTX_CHECK_SCRIPT ${_kvf_ptx_script} CACHE INTERNAL "checker script of kvf_add_ptx_check")

function(kvf_add_ptx_check)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "NO_SPILLS;REQUIRE_V4_LOADS" "NAME;SOURCE;ARCH" "INCLUDES;DEFINES;LABELS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kvf_add_ptx_check: unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  foreach(req NAME SOURCE ARCH)
    if(NOT ARG_${req})
      message(FATAL_ERROR "kvf_add_ptx_check: ${req} is required")
    endif()
  endforeach()
  if(NOT ARG_ARCH MATCHES "^sm_[0-9]+[af]?$")
    message(FATAL_ERROR "kvf_add_ptx_check(${ARG_NAME}): ARCH '${ARG_ARCH}': expected sm_<NN>, e.g. sm_90")
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "kvf_add_ptx_check(${ARG_NAME}): no CUDA compiler (call it only under if(KVF_HAVE_CUDA))")
  endif()
  get_filename_component(src ${ARG_SOURCE} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  if(NOT EXISTS ${src})
    message(FATAL_ERROR "kvf_add_ptx_check(${ARG_NAME}): SOURCE ${src} does not exist")
  endif()

  set(cmd bash ${KVF_PTX_CHECK_SCRIPT} --nvcc ${CMAKE_CUDA_COMPILER} --arch ${ARG_ARCH} --std 20)
  if(CMAKE_CUDA_HOST_COMPILER)
    list(APPEND cmd --ccbin ${CMAKE_CUDA_HOST_COMPILER})
  endif()
  if(ARG_NO_SPILLS)
    list(APPEND cmd --no-spills)
  endif()
  if(ARG_REQUIRE_V4_LOADS)
    list(APPEND cmd --require-v4-loads)
  endif()
  foreach(inc IN LISTS ARG_INCLUDES)
    get_filename_component(inc ${inc} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND cmd -I ${inc})
  endforeach()
  # Headers the build finds through imported targets: the toolkit (nvcc adds its own) and
  # nlohmann/json, CLI11, ... which live in the system include dirs here.
  foreach(def KVF_HAVE_CUDA=1 KVF_HAVE_NVTX=1 ${ARG_DEFINES})
    list(APPEND cmd -D ${def})
  endforeach()
  list(APPEND cmd ${src})

  add_test(NAME ${ARG_NAME} COMMAND ${cmd})
  set(labels cuda ptx ${ARG_LABELS})
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${labels}" TIMEOUT 900)
endfunction()

function(kvf_add_ptx_checks)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "NO_SPILLS;REQUIRE_V4_LOADS" "PREFIX;SOURCE" "ARCHS;INCLUDES;DEFINES;LABELS")
  if(NOT ARG_PREFIX OR NOT ARG_SOURCE OR NOT ARG_ARCHS)
    message(FATAL_ERROR "kvf_add_ptx_checks: PREFIX, SOURCE and ARCHS are required")
  endif()
  set(flags)
  if(ARG_NO_SPILLS)
    list(APPEND flags NO_SPILLS)
  endif()
  if(ARG_REQUIRE_V4_LOADS)
    list(APPEND flags REQUIRE_V4_LOADS)
  endif()
  foreach(arch IN LISTS ARG_ARCHS)
    kvf_add_ptx_check(NAME ${ARG_PREFIX}.${arch} SOURCE ${ARG_SOURCE} ARCH ${arch}
                      INCLUDES ${ARG_INCLUDES} DEFINES ${ARG_DEFINES} LABELS ${ARG_LABELS} ${flags})
  endforeach()
endfunction()
