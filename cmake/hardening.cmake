# Build options for hardening (docs/hardening.md):
#   TEENY_WERROR    warnings are errors (CI builds; both g++ and clang build warning-free)
#   TEENY_SANITIZE  AddressSanitizer + UndefinedBehaviorSanitizer on everything, any report fatal
#   TEENY_FUZZ      clang only: the libFuzzer targets in fuzz/, the libraries instrumented for them;
#                   implies TEENY_SANITIZE
# Included before any target is defined, so the flags reach every library, test and tool.
option(TEENY_WERROR "Treat compiler warnings as errors" OFF)
option(TEENY_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(TEENY_FUZZ "Build the libFuzzer targets in fuzz/ (clang; implies TEENY_SANITIZE)" OFF)

if(TEENY_WERROR)
  add_compile_options(-Werror)
endif()

if(TEENY_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TEENY_FUZZ needs clang (libFuzzer): configure with CXX=clang++")
  endif()
  set(TEENY_SANITIZE ON)
  # Coverage instrumentation for libFuzzer; only the fuzz targets link libFuzzer itself
  # (-fsanitize=fuzzer, fuzz/CMakeLists.txt), so teeny and the tests still have their own main.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(TEENY_SANITIZE)
  # -fno-sanitize-recover: a UBSan report aborts, so a test or fuzz run fails on it.
  set(TEENY_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options(${TEENY_SANITIZE_FLAGS})
  add_link_options(${TEENY_SANITIZE_FLAGS})
endif()
