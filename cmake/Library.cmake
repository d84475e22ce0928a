# libsluice as an installed library (docs/library.md): one archive, libsluice.a, holding the
# objects of sluice_embed and of every module it links (so a program links one library, as
# pkg-config expects), the public headers of include/sluice/, the CMake package `sluice` (target
# sluice::sluice) and sluice.pc. Everything is installed as component `dev` (the libsluice-dev
# package). Included from src/sluice/CMakeLists.txt once every module is defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The modules sluice_embed needs, walked through their link libraries (a static library's
# private dependencies are in its INTERFACE_LINK_LIBRARIES as $<LINK_ONLY:...>), and whatever
# outside them they link: sluice_* targets go into the archive, the rest become its usage
# requirements.
function(sluice_collect_modules target)
  get_property(seen GLOBAL PROPERTY SLUICE_LIBRARY_MODULES)
  if(target IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY SLUICE_LIBRARY_MODULES ${target})
  get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    list(APPEND deps ${direct})
  endif()
  foreach(dep IN LISTS deps)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
    if(dep STREQUAL "" OR dep MATCHES "-NOTFOUND$")
      continue()
    endif()
    if(dep MATCHES "^sluice_" AND TARGET ${dep})
      sluice_collect_modules(${dep})
    else()
      set_property(GLOBAL APPEND PROPERTY SLUICE_LIBRARY_EXTERNAL ${dep})
    endif()
  endforeach()
endfunction()

sluice_collect_modules(sluice_embed)
get_property(sluice_modules GLOBAL PROPERTY SLUICE_LIBRARY_MODULES)
get_property(sluice_external GLOBAL PROPERTY SLUICE_LIBRARY_EXTERNAL)
list(REMOVE_DUPLICATES sluice_external)
# Header-only dependencies are needed only to compile the modules, which are compiled already.
list(REMOVE_ITEM sluice_external Boost::headers nlohmann_json::nlohmann_json)

set(sluice_objects "")
foreach(module IN LISTS sluice_modules)
  get_target_property(type ${module} TYPE)
  if(type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "OBJECT_LIBRARY")
    list(APPEND sluice_objects $<TARGET_OBJECTS:${module}>)
  endif()
endforeach()

# The target `sluice` is the binary; the library is sluice_library, exported as sluice::sluice.
add_library(sluice_library STATIC ${sluice_objects})
set_target_properties(sluice_library PROPERTIES OUTPUT_NAME sluice EXPORT_NAME sluice
                                                LINKER_LANGUAGE CXX)
target_compile_features(sluice_library INTERFACE cxx_std_20)
target_include_directories(sluice_library INTERFACE
                           $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# The imported targets the modules' directories found are not visible here: find them again (the
# results are cached). hiredis comes from pkg-config under a name of this package's own, which
# sluiceConfig.cmake defines the same way.
find_package(OpenSSL REQUIRED)
find_package(CURL REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(sluice_hiredis REQUIRED IMPORTED_TARGET hiredis)

# Usage requirements and sluice.pc's Requires, from the external dependencies found above.
set(sluice_link "")
set(sluice_pc_requires "")
set(sluice_pc_libs "")
foreach(dep IN LISTS sluice_external)
  if(dep MATCHES "^absl::(.+)$")
    list(APPEND sluice_link ${dep})
    list(APPEND sluice_pc_requires "absl_${CMAKE_MATCH_1}")
  elseif(dep STREQUAL "yaml-cpp")
    list(APPEND sluice_link yaml-cpp)
    list(APPEND sluice_pc_requires yaml-cpp)
  elseif(dep STREQUAL "OpenSSL::Crypto")
    list(APPEND sluice_link OpenSSL::Crypto)
    list(APPEND sluice_pc_requires libcrypto)
  elseif(dep STREQUAL "OpenSSL::SSL")
    list(APPEND sluice_link OpenSSL::SSL)
    list(APPEND sluice_pc_requires libssl)
  elseif(dep STREQUAL "CURL::libcurl")
    list(APPEND sluice_link CURL::libcurl)
    list(APPEND sluice_pc_requires libcurl)
  elseif(dep STREQUAL "SQLite::SQLite3")
    list(APPEND sluice_link SQLite::SQLite3)
    list(APPEND sluice_pc_requires sqlite3)
  elseif(dep STREQUAL "PkgConfig::HIREDIS")
    list(APPEND sluice_link PkgConfig::sluice_hiredis)
    list(APPEND sluice_pc_requires hiredis)
  elseif(dep STREQUAL "Threads::Threads")
    list(APPEND sluice_link Threads::Threads)
    list(APPEND sluice_pc_libs -pthread)
  else()
    message(FATAL_ERROR "libsluice: no rule for the dependency ${dep} (cmake/Library.cmake)")
  endif()
endforeach()
target_link_libraries(sluice_library INTERFACE ${sluice_link})

install(TARGETS sluice_library EXPORT sluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")

set(sluice_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${sluice_cmake_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/sluiceConfig.cmake
                              INSTALL_DESTINATION ${sluice_cmake_dir})
# 0.x: a minor release may change the API (docs/library.md, Stability).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/sluiceConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sluiceConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${sluice_cmake_dir} COMPONENT dev)

# sluice.pc. libsluice is static only, so what it links is part of every link: its dependencies
# are in Requires (not Requires.private) for `pkg-config --libs sluice` to be enough. The prefix
# is found from the file's own place, so the package works wherever it is installed.
list(REMOVE_DUPLICATES sluice_pc_requires)
list(JOIN sluice_pc_requires ", " SLUICE_PC_REQUIRES)
list(JOIN sluice_pc_libs " " SLUICE_PC_LIBS)
set(sluice_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH SLUICE_PC_PREFIX_FROM_PCFILEDIR /root/${sluice_pc_dir} /root)
string(REGEX REPLACE "/$" "" SLUICE_PC_PREFIX_FROM_PCFILEDIR "${SLUICE_PC_PREFIX_FROM_PCFILEDIR}")
set(SLUICE_PC_LIBDIR ${CMAKE_INSTALL_LIBDIR})
set(SLUICE_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice.pc.in ${CMAKE_CURRENT_BINARY_DIR}/sluice.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sluice.pc DESTINATION ${sluice_pc_dir} COMPONENT dev)
