# xtq_info: version, libfabric providers, agents, topology, parameters.
add_executable(xtq_info ${CMAKE_CURRENT_LIST_DIR}/xtq_info.c)
target_compile_options(xtq_info PRIVATE ${XTQ_WARNINGS})
target_link_libraries(xtq_info PRIVATE xtq PkgConfig::FABRIC PkgConfig::HWLOC)
install(TARGETS xtq_info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
