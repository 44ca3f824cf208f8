# runtime/syncmath.cmake — library dd_syncmath: fragmentation plans, the fragment owner's merge
# (RDA / weighted average + outer Nesterov) and payload quantization. Included by
# runtime/CMakeLists.txt. Uses only backend ops (dd_kernels) and the wire types (dd_messages).
add_library(dd_syncmath STATIC
  ${CMAKE_CURRENT_LIST_DIR}/fragments.cpp
  ${CMAKE_CURRENT_LIST_DIR}/merge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize.cpp)
target_include_directories(dd_syncmath PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(dd_syncmath PUBLIC dd_kernels dd_messages PRIVATE dd_options)
