# Lookup tables, rewrite, command builders and the wire format: pure,
# white-box (INTERNAL) runners.
xtq_add_runner(registry LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_registry.c INTERNAL)
xtq_add_runner(wire LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wire.c INTERNAL)
