# SPDX-License-Identifier: Apache-2.0
# sluice_set_warnings(target): strict warnings for sluice's own code; errors in the developer build.
# Dependencies come in as SYSTEM (imported targets), so their headers do not trip these.
function(sluice_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE
      -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wold-style-cast
      -Wcast-align -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough
      # Designated initializers that leave defaulted members out are the idiom for typed config;
      # GCC 12 warns on them anyway.
      -Wno-missing-field-initializers
      # GCC 12's optimizer reports boost::optional inside Beast's parser as maybe-uninitialized
      # (a known false positive); the Debug build keeps the warning for our own code.
      $<$<AND:$<CXX_COMPILER_ID:GNU>,$<NOT:$<CONFIG:Debug>>>:-Wno-maybe-uninitialized>
      # GCC 12 at -O2 reports Asio's coroutine frames (awaitable_frame_base's operator new/delete,
      # its recycling allocator) as mismatched new/delete once server<gateway_store> is compiled
      # beside server<fs_store> (the ASan preset, RelWithDebInfo): a false positive in Asio's code.
      $<$<AND:$<CXX_COMPILER_ID:GNU>,$<NOT:$<CONFIG:Debug>>>:-Wno-mismatched-new-delete>)
    if(SLUICE_DEVELOPER)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
  endif()
endfunction()
