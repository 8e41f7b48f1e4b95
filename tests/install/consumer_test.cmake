# Driven by the install.consumer test (cmake -P). Every step must succeed.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${ARGN}")
endfunction()

file(REMOVE_RECURSE ${SLUICE_WORK_DIR})
set(prefix ${SLUICE_WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --install ${SLUICE_BUILD_DIR} --prefix ${prefix})
if(EXISTS ${prefix}/include/sluice/../../src OR NOT EXISTS ${prefix}/include/sluice/path.hpp)
  message(FATAL_ERROR "installed headers are not where they belong")
endif()
step(${CMAKE_COMMAND} -S ${SLUICE_CONSUMER_SOURCE} -B ${SLUICE_WORK_DIR}/build -G ${SLUICE_GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${SLUICE_CXX_COMPILER}
     "-DCMAKE_CXX_FLAGS=${SLUICE_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SLUICE_EXE_LINKER_FLAGS}")
step(${CMAKE_COMMAND} --build ${SLUICE_WORK_DIR}/build)
step(${SLUICE_WORK_DIR}/build/consumer)
