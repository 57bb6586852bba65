# The paper's Fig. 6 program on the public API (tests/integration runs it).
add_executable(fig6 ${CMAKE_CURRENT_LIST_DIR}/fig6.c)
target_compile_options(fig6 PRIVATE ${XTQ_WARNINGS})
target_link_libraries(fig6 PRIVATE xtq)
