# apps/cntk-shim: the shim's tests (label coll) and the trainer's (label
# train), all also integration so the README's test command runs them.
# Sources live beside the app in apps/cntk-shim/tests/.
if(NOT TARGET xtq_shim OR NOT MPIEXEC_EXECUTABLE)
  return()
endif()
set(shim_tests ${PROJECT_SOURCE_DIR}/apps/cntk-shim/tests)
get_property(XTQ_SHIM_BACKENDS GLOBAL PROPERTY XTQ_SHIM_BACKENDS)
# Sanitizer builds: Open MPI keeps memory until exit.
# Full stacks, so frames of libmpi match even below unloaded MCA plugins.
set(shim_lsan "LSAN_OPTIONS=suppressions=${shim_tests}/lsan.supp:fast_unwind_on_malloc=0")

add_executable(test_shim ${shim_tests}/test_shim.c)
target_compile_options(test_shim PRIVATE ${XTQ_WARNINGS} -Wno-missing-prototypes)
target_link_libraries(test_shim PRIVATE xtq_shim xtq_test_harness)
if(XTQ_HAVE_CUDA)
  target_compile_definitions(test_shim PRIVATE XTQ_SHIM_TEST_CUDA=1)
  target_link_libraries(test_shim PRIVATE CUDA::cudart_static)
endif()
# Every case for every back-end of the build: shim.<case>[.<backend>][.npN]
# (the mpi back-end's names carry no suffix).
xtq_test_cases_of(shim_cases ${shim_tests}/test_shim.c)
foreach(be IN LISTS XTQ_SHIM_BACKENDS)
  set(sfx "")
  if(NOT be STREQUAL "mpi")
    set(sfx ".${be}")
  endif()
  set(env "${shim_lsan};XTQ_SHIM_BACKEND=${be}")
  foreach(c IN LISTS shim_cases)
    add_test(NAME shim.${c}${sfx} COMMAND test_shim ${c})
    set_tests_properties(shim.${c}${sfx} PROPERTIES LABELS "coll;integration"
                         SKIP_RETURN_CODE 77 TIMEOUT 120 ENVIRONMENT "${env}")
    foreach(np 2 3)
      add_test(NAME shim.${c}${sfx}.np${np}
               COMMAND ${XTQ_MPIRUN} -np ${np} -x LSAN_OPTIONS -x XTQ_SHIM_BACKEND
                       $<TARGET_FILE:test_shim> ${c})
      set_tests_properties(shim.${c}${sfx}.np${np} PROPERTIES LABELS "coll;integration"
                           SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE
                           ENVIRONMENT "${env}")
    endforeach()
  endforeach()
endforeach()

# The nccl back-end reduces device buffers only: its device case, one GPU
# per rank (SKIPs without a GPU; CI lists it as unavailable in bad_calls).
if(XTQ_HAVE_CUDA)
  set(env "${shim_lsan};XTQ_SHIM_BACKEND=nccl")
  add_test(NAME shim.device_staged.nccl COMMAND test_shim device_staged)
  add_test(NAME shim.device_staged.nccl.np2
           COMMAND ${XTQ_MPIRUN} -np 2 -x LSAN_OPTIONS -x XTQ_SHIM_BACKEND
                   $<TARGET_FILE:test_shim> device_staged)
  set_tests_properties(shim.device_staged.nccl shim.device_staged.nccl.np2 PROPERTIES
                       LABELS "coll;integration" SKIP_RETURN_CODE 77 TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${env}")
endif()

# The aggregation benchmark runs (a smoke test; it asserts no speed).
add_test(NAME shim.bench_smoke.np2
         COMMAND ${XTQ_MPIRUN} -np 2 -x LSAN_OPTIONS $<TARGET_FILE:xtq_shim_bench> --modes mpi
                 --iters 20 --warmup 2 --sizes 4K,256K)
set_tests_properties(shim.bench_smoke.np2 PROPERTIES LABELS "coll;integration" TIMEOUT 120
                     RUN_SERIAL TRUE ENVIRONMENT "${shim_lsan}"
                     PASS_REGULAR_EXPRESSION "mpi +mlp +940584")

if(NOT TARGET xtq_train)
  return()
endif()
# The trainer on a small IDX set the test writes itself: 1 rank and 2
# ranks agree, it learns, and corrupt or missing files stop every rank
# with the file's name and what to install.
string(REPLACE ";" " " shim_mpirun "${XTQ_MPIRUN}")
foreach(be IN LISTS XTQ_SHIM_BACKENDS)
  set(name train.ci)
  if(NOT be STREQUAL "mpi")
    set(name train.ci.${be})
  endif()
  add_test(NAME ${name} COMMAND bash ${shim_tests}/train_ci.sh $<TARGET_FILE_DIR:xtq_train>)
  set_tests_properties(${name} PROPERTIES LABELS "train;integration" TIMEOUT 600 RUN_SERIAL TRUE
                       ENVIRONMENT
                       "XTQ_MPIRUN=${shim_mpirun} -x LSAN_OPTIONS -x XTQ_SHIM_BACKEND;${shim_lsan};XTQ_SHIM_BACKEND=${be}")
endforeach()

# The PyTorch DDP hook against DDP's own gloo (SKIPs without python3-torch).
# Not in sanitizer builds: an instrumented libxtq_shim cannot be loaded
# into an uninstrumented python3.
if(NOT XTQ_SANITIZE STREQUAL "")
  return()
endif()
# One per back-end: train.ddp_hook (mpi), train.ddp_hook.<backend>.
find_program(XTQ_SYSTEM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
foreach(be IN LISTS XTQ_SHIM_BACKENDS)
  set(name train.ddp_hook)
  if(NOT be STREQUAL "mpi")
    set(name train.ddp_hook.${be})
  endif()
  add_test(NAME ${name} COMMAND bash ${shim_tests}/ddp_ci.sh $<TARGET_FILE_DIR:xtq_train>)
  set_tests_properties(${name} PROPERTIES LABELS "train;integration" TIMEOUT 600
                       RUN_SERIAL TRUE SKIP_RETURN_CODE 77
                       ENVIRONMENT
                       "XTQ_MPIRUN=${shim_mpirun} -x XTQ_SHIM_BACKEND;PYTHON3=${XTQ_SYSTEM_PYTHON3};XTQ_SHIM_BACKEND=${be}")
endforeach()
