# xtq_info: version, libfabric providers, agents, topology, parameters.
add_executable(xtq_info ${CMAKE_CURRENT_LIST_DIR}/xtq_info.c)
target_compile_options(xtq_info PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_info PRIVATE xtq PkgConfig::FABRIC PkgConfig::HWLOC)
install(TARGETS xtq_info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(XTQ_BUILD_TESTS)
  add_test(NAME tools.xtq_info_params_match_readme
           COMMAND bash -c "diff <($<TARGET_FILE:xtq_info> --params-markdown) <(grep '^| XTQ_' ${PROJECT_SOURCE_DIR}/README.md)")
  add_test(NAME tools.xtq_info_runs COMMAND xtq_info)
  set_tests_properties(tools.xtq_info_params_match_readme tools.xtq_info_runs
                       PROPERTIES LABELS unit TIMEOUT 60)
endif()
