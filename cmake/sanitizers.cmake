# CTRUN_SANITIZE=address,undefined or thread (see the Makefile's asan/tsan targets).
if(CTRUN_SANITIZE)
  add_compile_options(-fsanitize=${CTRUN_SANITIZE} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${CTRUN_SANITIZE})
  message(STATUS "ctrun: sanitizers: ${CTRUN_SANITIZE}")
endif()
