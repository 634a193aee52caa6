# ctest: installs the build into a scratch prefix, then configures, builds and runs
# examples/consumer against it with find_package(gemmkit).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -P install_test.cmake
set(prefix ${BUILD_DIR}/install-test/prefix)
set(consumer ${BUILD_DIR}/install-test/consumer)
file(REMOVE_RECURSE ${BUILD_DIR}/install-test)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${consumer} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${consumer})
run(${consumer}/consumer)
