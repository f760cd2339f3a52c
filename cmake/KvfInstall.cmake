# Install layout (GNUInstallDirs): kvf in bin/, the bench binaries in libexec/kvfrontier/, the data files in
# share/kvfrontier/. libexec, not lib/kvfrontier: the benches are programs that only kvf runs, which is what
# the FHS (3.0) gives libexec for; lib/ holds libraries. Binaries find each other and the data by paths
# relative to their own location (harness/src/install_paths.cpp), so a prefix can be copied or moved whole.
include(GNUInstallDirs)
# Installed binaries find the shared libraries they linked against outside the system directories (CUDA's
# runtime in /usr/local/cuda/lib64) without LD_LIBRARY_PATH.
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

set(KVF_INSTALL_LIBEXECDIR ${CMAKE_INSTALL_LIBEXECDIR}/kvfrontier)
set(KVF_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/kvfrontier)
# The data files every binary may read at run time: model shapes (frontier, idleness, report, kvf model) and
# GPU spec sheets (report, kvf model).
set(KVF_DATA_FILES ${CMAKE_SOURCE_DIR}/data/models.json ${CMAKE_SOURCE_DIR}/data/gpus.json)

# out = the path from directory `from` to directory `to`, both relative to the prefix (or absolute).
function(kvf_relative_dir out from to)
  foreach(v from to)
    if(NOT IS_ABSOLUTE "${${v}}")
      set(${v} "/${${v}}")
    endif()
  endforeach()
  file(RELATIVE_PATH rel "${from}" "${to}")
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()
kvf_relative_dir(KVF_REL_BIN_TO_LIBEXEC ${CMAKE_INSTALL_BINDIR} ${KVF_INSTALL_LIBEXECDIR})
kvf_relative_dir(KVF_REL_BIN_TO_DATA ${CMAKE_INSTALL_BINDIR} ${KVF_INSTALL_DATADIR})
kvf_relative_dir(KVF_REL_LIBEXEC_TO_DATA ${KVF_INSTALL_LIBEXECDIR} ${KVF_INSTALL_DATADIR})

# Called once every target exists (end of the top-level CMakeLists.txt).
function(kvf_install_rules)
  install(TARGETS kvf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  foreach(study IN LISTS KVF_STUDIES)
    if(TARGET bench_${study})
      install(TARGETS bench_${study} RUNTIME DESTINATION ${KVF_INSTALL_LIBEXECDIR})
    endif()
  endforeach()
  # bench_attention is run by hand as often as through `kvf attention` (which finds it beside kvf): on the PATH.
  if(TARGET bench_attention)
    install(TARGETS bench_attention RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
  install(FILES ${KVF_DATA_FILES} DESTINATION ${KVF_INSTALL_DATADIR})
endfunction()
