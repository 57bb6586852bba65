# libFuzzer harness for wire validation + the rewrite (pure code), built
# with clang straight from the library's pure sources rather than libxtq:
#   CC=clang cmake -S . -B build-fuzz -DXTQ_BUILD_FUZZ=ON
#   cmake --build build-fuzz --target xtq_fuzz_rewrite xtq_fuzz_gen_corpus
#   ctest --test-dir build-fuzz -L fuzz
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "XTQ_BUILD_FUZZ needs clang (configure with CC=clang); got ${CMAKE_C_COMPILER_ID}")
endif()

set(XTQ_FUZZ_SECONDS 60 CACHE STRING "Seconds the fuzz CTest entry runs the fuzzer")

set(xtq_fuzz_pure_sources
  ${PROJECT_SOURCE_DIR}/xtq/registry/registry.c
  ${PROJECT_SOURCE_DIR}/xtq/registry/rewrite.c
  ${PROJECT_SOURCE_DIR}/xtq/wire.c
  ${PROJECT_SOURCE_DIR}/xtq/error.c
  ${PROJECT_SOURCE_DIR}/xtq/log.c
  ${PROJECT_SOURCE_DIR}/xtq/param.c
  ${PROJECT_SOURCE_DIR}/xtq/util.c)
set(xtq_fuzz_includes ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/xtq
    ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_LIST_DIR})

add_executable(xtq_fuzz_rewrite ${CMAKE_CURRENT_LIST_DIR}/fuzz_target.c ${xtq_fuzz_pure_sources})
target_include_directories(xtq_fuzz_rewrite PRIVATE ${xtq_fuzz_includes})
target_compile_definitions(xtq_fuzz_rewrite PRIVATE _GNU_SOURCE)
target_compile_options(xtq_fuzz_rewrite PRIVATE -g -O1 -fno-omit-frame-pointer
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined ${XTQ_WARNINGS}
  -Wno-missing-prototypes)
target_link_options(xtq_fuzz_rewrite PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(xtq_fuzz_rewrite PRIVATE Threads::Threads)

# Seeds: valid messages of each kind plus one of each malformed case.
add_executable(xtq_fuzz_gen_corpus ${CMAKE_CURRENT_LIST_DIR}/gen_corpus.c
  ${PROJECT_SOURCE_DIR}/xtq/wire.c ${PROJECT_SOURCE_DIR}/xtq/cmd.c)
target_include_directories(xtq_fuzz_gen_corpus PRIVATE ${xtq_fuzz_includes})
target_compile_definitions(xtq_fuzz_gen_corpus PRIVATE _GNU_SOURCE)
target_compile_options(xtq_fuzz_gen_corpus PRIVATE ${XTQ_WARNINGS})

set(xtq_fuzz_seeds ${CMAKE_CURRENT_BINARY_DIR}/rewrite-seeds)
set(xtq_fuzz_work ${CMAKE_CURRENT_BINARY_DIR}/rewrite-corpus)

add_test(NAME fuzz.rewrite_seeds_gen COMMAND xtq_fuzz_gen_corpus ${xtq_fuzz_seeds})
set_tests_properties(fuzz.rewrite_seeds_gen PROPERTIES LABELS fuzz FIXTURES_SETUP xtq_fuzz_seeds)

# Every seed once: a quick regression check of the invariants.
add_test(NAME fuzz.rewrite_seeds COMMAND xtq_fuzz_rewrite -runs=0 ${xtq_fuzz_seeds})
set_tests_properties(fuzz.rewrite_seeds PROPERTIES LABELS fuzz FIXTURES_REQUIRED xtq_fuzz_seeds
                     TIMEOUT 60)

# Bounded fuzzing; new inputs accumulate in the work corpus between runs.
file(MAKE_DIRECTORY ${xtq_fuzz_work})
add_test(NAME fuzz.rewrite
         COMMAND xtq_fuzz_rewrite -max_total_time=${XTQ_FUZZ_SECONDS} -max_len=8192 -timeout=10
                 -print_final_stats=1 ${xtq_fuzz_work} ${xtq_fuzz_seeds})
set_tests_properties(fuzz.rewrite PROPERTIES LABELS fuzz FIXTURES_REQUIRED xtq_fuzz_seeds
                     TIMEOUT 600 ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
