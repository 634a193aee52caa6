# Turns device-code files into one C++ source of string constants, so the library carries
# its kernels as text for NVRTC. Regenerated whenever a kernel file changes.
set(GEMMKIT_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_kernels_script.cmake)

function(gemmkit_embed_kernels out_var)
  set(output ${CMAKE_CURRENT_BINARY_DIR}/generated/kernel_files.cpp)
  set(inputs "")
  foreach(file IN LISTS ARGN)
    list(APPEND inputs ${CMAKE_CURRENT_SOURCE_DIR}/${file})
  endforeach()
  string(REPLACE ";" "|" joined "${inputs}")
  add_custom_command(OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${output} "-DINPUTS=${joined}" -P ${GEMMKIT_EMBED_SCRIPT}
    DEPENDS ${inputs} ${GEMMKIT_EMBED_SCRIPT}
    COMMENT "Embedding kernel sources"
    VERBATIM)
  set(${out_var} ${output} PARENT_SCOPE)
endfunction()
