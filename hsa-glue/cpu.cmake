# The agent table (every kind) and the CPU agent, which is always built.
target_sources(xtq_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/agent.c ${CMAKE_CURRENT_LIST_DIR}/cpu_agent.c)
