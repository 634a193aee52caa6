# Third-party libraries the build needs beyond the CUDA toolkit, found where a user of
# `pip install .` has them as well as where a distribution installed them.
#
# nlohmann_json (header only, the bench reports' JSON): the CMake package where one is installed
# (Debian: nlohmann-json3-dev), else the headers of the PyPI package nlohmann-json, which
# pyproject.toml lists among the build requirements, found through the Python interpreter.
set(GEMMKIT_NLOHMANN_JSON_MIN 3.10)
find_package(nlohmann_json ${GEMMKIT_NLOHMANN_JSON_MIN} QUIET)

# Sets ${out} to the include directory of the nlohmann-json Python package, or to "" where the
# interpreter has no such package or its version is below the minimum. find_spec locates the
# package without importing it: its __init__ imports importlib_resources, which need not be there.
function(gemmkit_python_nlohmann_json out)
  set(${out} "" PARENT_SCOPE)
  find_package(Python 3.9 QUIET COMPONENTS Interpreter)
  if(NOT Python_Interpreter_FOUND)
    return()
  endif()
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import importlib.util; s = importlib.util.find_spec('nlohmann_json'); print(list(s.submodule_search_locations)[0] if s else '')"
    OUTPUT_VARIABLE package_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
  set(header "${package_dir}/include/nlohmann/detail/abi_macros.hpp")
  if(NOT status EQUAL 0 OR package_dir STREQUAL "" OR NOT EXISTS "${header}")
    return()
  endif()
  foreach(part MAJOR MINOR PATCH)
    file(STRINGS "${header}" line REGEX "^#define NLOHMANN_JSON_VERSION_${part} +[0-9]+")
    string(REGEX MATCH "VERSION_${part} +([0-9]+)" line "${line}")
    list(APPEND version "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN version "." version)
  if(version VERSION_LESS GEMMKIT_NLOHMANN_JSON_MIN)
    message(STATUS "nlohmann_json: ${package_dir} has version ${version}, below ${GEMMKIT_NLOHMANN_JSON_MIN}")
    return()
  endif()
  message(STATUS "nlohmann_json: ${version}, the headers of the Python package in ${package_dir}")
  set(${out} "${package_dir}/include" PARENT_SCOPE)
endfunction()

if(NOT nlohmann_json_FOUND)
  gemmkit_python_nlohmann_json(nlohmann_json_include)
  if(nlohmann_json_include STREQUAL "")
    message(FATAL_ERROR
      "nlohmann_json ${GEMMKIT_NLOHMANN_JSON_MIN} or newer was not found, neither as a CMake package nor as the "
      "Python package nlohmann-json. Install one of them: `python3 -m pip install nlohmann-json` (for the "
      "python3 that CMake finds, or set Python_EXECUTABLE), or the distribution's package (Debian, Ubuntu: "
      "nlohmann-json3-dev), or point CMake at an installation with -Dnlohmann_json_DIR=...")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE "${nlohmann_json_include}")
endif()
