# Precompiled headers, for build time (CI's 20-minute budget builds the suite twice on 2 cores).
# nlohmann/json.hpp reaches nearly every translation unit through kvf/backend.hpp and alone costs about 3 s of
# compile time per unit at -O3 (measured on the 2-core AMD EPYC CI machines: 2.9 s for a unit that only
# includes it, of ~6 s for a typical unit); gtest/gtest.h costs 1.6 s per test unit. Each target with three or
# more C++ units compiles them once into its own precompiled header (same flags and definitions as its units).
# CUDA units (nvcc) and the kernel libraries (their units switch ISA with #pragma GCC target) are left alone.
# CLI11 is not precompiled: most of its cost is code generated for its global validators in every unit, which a
# precompiled header does not save, and forcing it into units that do not use it would cost more.
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

function(kvf_precompile_headers)
  kvf_collect_targets(${CMAKE_SOURCE_DIR} targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$" OR t MATCHES "^kvf_kernels_")
      continue()
    endif()
    get_target_property(sources ${t} SOURCES)
    set(units 0)
    foreach(s IN LISTS sources)
      if(s MATCHES "\\.cpp$")
        math(EXPR units "${units} + 1")
      endif()
    endforeach()
    if(units LESS 3)
      continue()
    endif()
    set(headers <nlohmann/json.hpp> <string> <vector> <map> <functional> <algorithm> <memory>)
    if(t MATCHES "^test_|_tests$")
      list(APPEND headers <gtest/gtest.h>)
    endif()
    set(cxx_only)
    foreach(h IN LISTS headers)
      list(APPEND cxx_only "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
    endforeach()
    target_precompile_headers(${t} PRIVATE ${cxx_only})
  endforeach()
endfunction()
