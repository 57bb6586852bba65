# The install tree works for an outside project (find_package and pkg-config).
# Runs after the build; sanitized builds skip it (the consumer is not sanitized).
if(XTQ_SANITIZE STREQUAL "")
  add_test(NAME install.consumer
           COMMAND ${PROJECT_SOURCE_DIR}/tests/install/check_install.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  set_tests_properties(install.consumer PROPERTIES LABELS unit TIMEOUT 300)
endif()
