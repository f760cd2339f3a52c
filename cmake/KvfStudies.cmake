# The suite's studies, declared once: one `kvf_study(NAME "one-line doc")` per study in the top-level
# CMakeLists.txt, in the order a run takes them. NAME is the `study` column of cases.csv and names
# kernels/NAME, studies/NAME (its package, with the report plug-in in studies/NAME/report) and bench_NAME.
# From the list the build generates kvf/studies.hpp (target kvf_studies), which `kvf run` (--study, --help)
# and the report ("study X: no rows") read, and analysis/report generates the table of report plug-ins.

# kvf_study(NAME DOC): appends NAME to KVF_STUDIES and keeps DOC in KVF_STUDY_DOC_<NAME> (caller's scope).
function(kvf_study name doc)
  # The name becomes a C++ identifier (<name>_report(), the plug-in's entry) and part of file and target names.
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "kvf_study(${name}): a study name is lower case letters, digits and '_'")
  endif()
  if(name IN_LIST KVF_STUDIES)
    message(FATAL_ERROR "kvf_study(${name}): declared twice")
  endif()
  set(KVF_STUDIES ${KVF_STUDIES} ${name} PARENT_SCOPE)
  set(KVF_STUDY_DOC_${name} "${doc}" PARENT_SCOPE)
endfunction()

# A CMake string as the body of a C++ string literal.
function(kvf_cxx_string out text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# Writes <build>/generated/include/kvf/studies.hpp from KVF_STUDIES and defines the INTERFACE target
# kvf_studies that puts it on the include path.
function(kvf_generate_study_list)
  set(KVF_STUDY_ENTRIES "")
  foreach(study IN LISTS KVF_STUDIES)
    kvf_cxx_string(doc "${KVF_STUDY_DOC_${study}}")
    string(APPEND KVF_STUDY_ENTRIES "    StudyInfo{\"${study}\", \"${doc}\"},\n")
  endforeach()
  list(LENGTH KVF_STUDIES KVF_STUDY_COUNT)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/studies.hpp.in ${PROJECT_BINARY_DIR}/generated/include/kvf/studies.hpp @ONLY)
  add_library(kvf_studies INTERFACE)
  target_include_directories(kvf_studies INTERFACE ${PROJECT_BINARY_DIR}/generated/include)
endfunction()
