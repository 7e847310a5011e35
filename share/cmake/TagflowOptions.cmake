# SPDX-License-Identifier: Apache-2.0
# tagflow_option(NAME doc default): a tri-state AUTO/ON/OFF cache option TAGFLOW_USE_<NAME>.
# Also defines the INTERFACE targets tagflow_warnings (warnings for our own code) and
# tagflow_buildinfo (the generated tagflow/config.hpp).
function(tagflow_option name doc default)
  set(TAGFLOW_USE_${name} ${default} CACHE STRING "${doc} (AUTO|ON|OFF)")
  set_property(CACHE TAGFLOW_USE_${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${TAGFLOW_USE_${name}}" v)
  if(NOT v MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "TAGFLOW_USE_${name} must be AUTO, ON or OFF (got '${TAGFLOW_USE_${name}}')")
  endif()
  set(TAGFLOW_USE_${name} ${v} PARENT_SCOPE)
endfunction()

add_library(tagflow_warnings INTERFACE)
target_compile_options(tagflow_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wundef -Wnon-virtual-dtor>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wundef>
  $<$<BOOL:${TAGFLOW_WERROR}>:-Werror>)

add_library(tagflow_buildinfo INTERFACE)
target_include_directories(tagflow_buildinfo INTERFACE ${PROJECT_BINARY_DIR}/include)
