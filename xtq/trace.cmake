# Stage tracing (XTQ_TRACE): see trace.h.
target_sources(xtq_obj PRIVATE ${CMAKE_CURRENT_LIST_DIR}/trace.c)
