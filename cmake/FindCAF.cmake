# FindCAF.cmake — locate the C++ Actor Framework 0.17 (Debian's libcaf-dev ships no CMake config).
#
# Reads CAF_VERSION from caf/config.hpp and defines imported targets:
#   CAF::core     (needs Threads)
#   CAF::io       (needs CAF::core)
#   CAF::openssl  (needs CAF::io and OpenSSL)
# Result variables: CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR.
include(FindPackageHandleStandardArgs)
find_package(Threads REQUIRED)

find_path(CAF_INCLUDE_DIR caf/config.hpp)
find_library(CAF_CORE_LIBRARY NAMES caf_core)
find_library(CAF_IO_LIBRARY NAMES caf_io)
find_library(CAF_OPENSSL_LIBRARY NAMES caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_ver_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_ver_num "${_caf_ver_line}")
  math(EXPR _caf_major "${_caf_ver_num} / 10000")
  math(EXPR _caf_minor "(${_caf_ver_num} / 100) % 100")
  math(EXPR _caf_patch "${_caf_ver_num} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND AND NOT TARGET CAF::core)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io UNKNOWN IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
  if(CAF_OPENSSL_LIBRARY)
    find_package(OpenSSL QUIET)
    if(OpenSSL_FOUND)
      add_library(CAF::openssl UNKNOWN IMPORTED)
      set_target_properties(CAF::openssl PROPERTIES
        IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
        INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")
    endif()
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
