# Precompiled headers, for build time (CI's 20-minute budget builds the suite twice on 2 cores).
# nlohmann/json.hpp reaches nearly every translation unit through kvf/backend.hpp and alone costs about 3 s of
# compile time per unit at -O3 (measured on the 2-core AMD EPYC CI machines: 2.9 s for a unit that only
# includes it, of ~6 s for a typical unit); gtest/gtest.h costs 1.6 s per test unit. A target whose flags match
# a linked library's header reuses it, whatever its size; otherwise a target with three or more C++ units (unity
# units where it is a unity build) compiles its own (same flags and definitions as its units).
# CUDA units (nvcc) and the kernel libraries (kvf_kernel_library: their units switch ISA with #pragma GCC target,
# and they compile at -O3 where the rest compiles at -O2) are left alone.
# CLI11 is not precompiled: most of its cost is code generated for its global validators in every unit, which a
# precompiled header does not save, and forcing it into units that do not use it would cost more.
# A target compiled with the same flags as a library it links reuses that library's precompiled header
# (REUSE_FROM): building one costs about a unit's worth of compile time, and most library and bench targets
# differ from kvf_harness only in their sources (CI time). Only from a linked library, because REUSE_FROM makes
# the target depend on the whole owner (test executables sharing one would drag each other into a partial build
# such as scripts/untrusted's). The tests share the header of kvf_test_pch (tests/CMakeLists.txt, property
# KVF_PCH_ANCHOR), a one-unit library that needs nothing a test does not need already. "Same flags" is judged conservatively from what CMake knows at configure time:
# the target's own options, definitions, standard and PIC, its directory's definitions and the interface options
# and definitions of everything it links, as written (generator expressions unexpanded): two targets share only
# when all of it is the same text, so GCC and clang (which rejects a header built with other flags) both accept
# the reuse.
# -DKVF_PCH_DEBUG=ON prints each target's signature text at configure time.
# KVF_PCH=OFF turns it off (e.g. with ccache, which cannot cache units built with a precompiled header).

function(kvf_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    kvf_collect_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# The interface compile options and definitions of `libs` and of what they link in turn, into `out`.
function(kvf_interface_flags libs seen out)
  set(flags)
  foreach(lib IN LISTS libs)
    if(NOT TARGET ${lib})
      # A file or a plain name adds no compile flag, nor does $<LINK_ONLY:...>; any other generator expression
      # might, so it is kept as text.
      if(lib MATCHES "\\$<" AND NOT lib MATCHES "^\\$<LINK_ONLY:[^$]*>$")
        list(APPEND flags "lib:${lib}")
      endif()
      continue()
    endif()
    if(lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    foreach(prop INTERFACE_COMPILE_OPTIONS INTERFACE_COMPILE_DEFINITIONS INTERFACE_COMPILE_FEATURES)
      get_target_property(v ${lib} ${prop})
      if(v)
        list(APPEND flags "${lib}:${prop}:${v}")
      endif()
    endforeach()
    get_target_property(next ${lib} INTERFACE_LINK_LIBRARIES)
    if(next)
      kvf_interface_flags("${next}" "${seen}" more)
      list(APPEND flags ${more})
    endif()
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

# A text that is the same for two targets only when their C++ units compile with the same flags.
function(kvf_flag_signature t out)
  set(sig)
  foreach(prop COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FEATURES CXX_STANDARD CXX_EXTENSIONS
               POSITION_INDEPENDENT_CODE)
    get_target_property(v ${t} ${prop})
    list(APPEND sig "${prop}=${v}")
  endforeach()
  get_target_property(dir ${t} SOURCE_DIR)
  get_property(dir_defs DIRECTORY ${dir} PROPERTY COMPILE_DEFINITIONS)
  list(APPEND sig "dir_defs=${dir_defs}")
  get_target_property(libs ${t} LINK_LIBRARIES)
  if(libs)
    kvf_interface_flags("${libs}" "" iface)
    list(SORT iface)
    list(REMOVE_DUPLICATES iface)
    list(APPEND sig ${iface})
  endif()
  if(KVF_PCH_DEBUG)
    message(STATUS "pch sig ${t}: ${sig}")
  endif()
  string(MD5 sig "${sig}")
  set(${out} ${sig} PARENT_SCOPE)
endfunction()

# Every target `libs` link, directly or through their interface, into `out`.
function(kvf_link_closure libs seen out)
  foreach(lib IN LISTS libs)
    if(NOT TARGET ${lib} OR lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    get_target_property(next ${lib} INTERFACE_LINK_LIBRARIES)
    get_target_property(type ${lib} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(own ${lib} LINK_LIBRARIES)
      if(own)
        list(APPEND next ${own})
      endif()
    endif()
    if(next)
      kvf_link_closure("${next}" "${seen}" seen)
    endif()
  endforeach()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(kvf_precompile_headers)
  kvf_collect_targets(${CMAKE_SOURCE_DIR} targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    get_target_property(kernel ${t} KVF_KERNEL)
    if(kernel)
      continue()
    endif()
    get_target_property(sources ${t} SOURCES)
    set(units 0)
    foreach(s IN LISTS sources)
      if(s MATCHES "\\.cpp$")
        math(EXPR units "${units} + 1")
      endif()
    endforeach()
    if(units EQUAL 0)
      continue()
    endif()
    # A unity build compiles ceil(sources / batch) units: a header of its own pays off from three of them.
    get_target_property(unity ${t} UNITY_BUILD)
    if(unity)
      get_target_property(batch ${t} UNITY_BUILD_BATCH_SIZE)
      if(batch GREATER 0)
        math(EXPR units "(${units} + ${batch} - 1) / ${batch}")
      endif()
    endif()
    get_target_property(anchor ${t} KVF_PCH_ANCHOR)
    set(headers <nlohmann/json.hpp> <string> <vector> <map> <functional> <algorithm> <memory>)
    if(t MATCHES "^test_|_tests$" OR t STREQUAL "kvf_test_pch")
      list(APPEND headers <gtest/gtest.h>)
    endif()
    kvf_flag_signature(${t} sig)
    string(MD5 key "${sig};${headers}")
    # Only from a library the target links anyway: REUSE_FROM makes the target depend on the whole owner,
    # and a build of a few targets (scripts/untrusted's) must not build another one for its header.
    get_target_property(libs ${t} LINK_LIBRARIES)
    set(closure)
    if(libs)
      kvf_link_closure("${libs}" "" closure)
    endif()
    set(owner)
    foreach(o IN LISTS _kvf_pch_owners_${key})
      set(extra)
      get_target_property(o_anchor ${o} KVF_PCH_ANCHOR)
      if(o_anchor)  # an anchor (tests/CMakeLists.txt) qualifies when it needs nothing the target does not
        get_target_property(o_libs ${o} LINK_LIBRARIES)
        kvf_link_closure("${o_libs}" "" o_closure)
        foreach(l IN LISTS o_closure)
          if(NOT l IN_LIST closure)
            list(APPEND extra ${l})
          endif()
        endforeach()
      endif()
      if(o IN_LIST closure OR (o_anchor AND NOT extra))
        set(owner ${o})
        break()
      endif()
    endforeach()
    if(owner)  # reusing costs nothing, whatever the number of units
      target_precompile_headers(${t} REUSE_FROM ${owner})
      continue()
    endif()
    if(units LESS 3 AND NOT anchor)
      continue()
    endif()
    list(APPEND _kvf_pch_owners_${key} ${t})
    set(cxx_only)
    foreach(h IN LISTS headers)
      list(APPEND cxx_only "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
    endforeach()
    target_precompile_headers(${t} PRIVATE ${cxx_only})
  endforeach()
endfunction()
