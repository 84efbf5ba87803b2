# add_subdirectories_with_cmakelists(): adds every direct child folder that has a CMakeLists.txt, so each
# app, bench and test folder is self-contained (no shared list to edit when one is added).
function(add_subdirectories_with_cmakelists)
  file(GLOB _children LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _children)
  foreach(_child ${_children})
    if(IS_DIRECTORY ${_child} AND EXISTS ${_child}/CMakeLists.txt)
      add_subdirectory(${_child})
    endif()
  endforeach()
endfunction()
