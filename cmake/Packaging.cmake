# Installation in the FHS layout and the Debian packages CPack builds from it (scripts/package;
# docs/packaging.md describes the result). Included at the end of the top-level CMakeLists.txt,
# after every install() rule, because CPack packages the components defined by then.
#
# Two components, one package each:
#   sluice  the service: /usr/bin/sluice, /etc/sluice/sluice.yaml, the systemd unit, the man page
#           and the documentation (these rules, below)
#   dev     libsluice-dev: the static libraries, headers, CMake package and pkg-config file, whose
#           install() rules live beside the libraries in src/sluice/ (COMPONENT dev)
# A component that has no install rule yet is not packaged.
#
# The package expects CMAKE_INSTALL_PREFIX=/usr (scripts/package configures it so): with that
# prefix GNUInstallDirs puts the configuration in /etc rather than /usr/etc.

include(GNUInstallDirs)

set(SLUICE_PACKAGING_DIR "${PROJECT_SOURCE_DIR}/packaging")
set(SLUICE_PACKAGING_BINARY_DIR "${PROJECT_BINARY_DIR}/packaging")
# Relative to the prefix: /usr/lib/systemd/system with /usr (a path systemd reads on every
# Debian 12 system, merged /usr or not).
set(SLUICE_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit is installed (relative to CMAKE_INSTALL_PREFIX or absolute)")
# The Debian revision: the package's version is <project version>-<revision>. Raise it for a
# package-only change (a maintainer script, the default configuration) of the same sluice.
set(SLUICE_DEB_REVISION 1 CACHE STRING "Debian revision of the sluice packages")
set(SLUICE_PACKAGE_MAINTAINER "sluice maintainers <sluice@example.org>" CACHE STRING
    "Maintainer field of the Debian packages")
# The packages libsluice-dev's headers include from (docs/dependencies.md), as Depends.
set(SLUICE_DEV_PACKAGE_DEPENDS
    libabsl-dev
    libyaml-cpp-dev
    nlohmann-json3-dev
    libboost-dev
    libhiredis-dev
    libcurl4-openssl-dev
    libssl-dev
    libsqlite3-dev
    # sluiceConfig.cmake finds hiredis through pkg-config, and sluice.pc needs it; neither cmake
    # nor libhiredis-dev depends on it.
    "pkgconf | pkg-config")

# --- component sluice ----------------------------------------------------------------------------

# Debian ships man pages and its changelog compressed with gzip -9n (-n: no name or time stamp in
# the header, so the same input gives the same package).
find_program(SLUICE_GZIP gzip REQUIRED)
function(sluice_gzip target source output)
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" -E copy "${source}" "${output}.tmp"
    COMMAND "${SLUICE_GZIP}" -9nf "${output}.tmp"
    COMMAND "${CMAKE_COMMAND}" -E rename "${output}.tmp.gz" "${output}"
    DEPENDS "${source}"
    COMMENT "Compressing ${source}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS "${output}")
endfunction()
sluice_gzip(sluice_man_page "${SLUICE_PACKAGING_DIR}/sluice.1"
            "${SLUICE_PACKAGING_BINARY_DIR}/sluice.1.gz")
sluice_gzip(sluice_debian_changelog "${SLUICE_PACKAGING_DIR}/debian/changelog"
            "${SLUICE_PACKAGING_BINARY_DIR}/changelog.Debian.gz")

set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

install(TARGETS sluice RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT sluice)
install(FILES "${SLUICE_PACKAGING_DIR}/sluice.yaml"
        DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/sluice" COMPONENT sluice)
install(FILES "${SLUICE_PACKAGING_DIR}/systemd/sluice.service"
        DESTINATION "${SLUICE_SYSTEMD_UNIT_DIR}" COMPONENT sluice)
install(FILES "${SLUICE_PACKAGING_BINARY_DIR}/sluice.1.gz"
        DESTINATION "${CMAKE_INSTALL_MANDIR}/man1" COMPONENT sluice)
# The unit's Documentation= names ${docdir}/operations.md: the docs are installed flat, as the
# links between them (operations.md -> http.md) expect, and uncompressed so that link works.
file(GLOB SLUICE_DOCS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/docs/*.md")
install(FILES "${PROJECT_SOURCE_DIR}/README.md" ${SLUICE_DOCS} "${PROJECT_SOURCE_DIR}/docs/openapi.yaml"
        DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT sluice)
install(FILES "${PROJECT_SOURCE_DIR}/examples/sluice.yaml"
        DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples" COMPONENT sluice)

# Every package carries /usr/share/doc/<package>/copyright and changelog.Debian.gz, and its own
# lintian overrides. libsluice-dev gets them only when the libraries' install rules made the
# component dev: these files alone are no package.
get_cmake_property(sluice_components COMPONENTS)
set(sluice_packages sluice)
if("dev" IN_LIST sluice_components)
  list(APPEND sluice_packages libsluice-dev)
endif()
foreach(package IN LISTS sluice_packages)
  if(package STREQUAL "sluice")
    set(component sluice)
  else()
    set(component dev)
  endif()
  install(FILES "${SLUICE_PACKAGING_DIR}/debian/copyright"
                "${SLUICE_PACKAGING_BINARY_DIR}/changelog.Debian.gz"
          DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/doc/${package}" COMPONENT ${component})
  install(FILES "${SLUICE_PACKAGING_DIR}/debian/${package}.lintian-overrides"
          DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides" RENAME ${package}
          COMPONENT ${component})
endforeach()

# --- CPack ---------------------------------------------------------------------------------------

set(CPACK_COMPONENTS_ALL "")
foreach(component IN LISTS sluice_components)
  if(component STREQUAL "sluice" OR component STREQUAL "dev")
    list(APPEND CPACK_COMPONENTS_ALL "${component}")
  else()
    message(WARNING "install() rules of component \"${component}\" are in no Debian package "
                    "(cmake/Packaging.cmake packages the components sluice and dev)")
  endif()
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VENDOR "sluice")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_STRIP_FILES ON)  # CMake strips executables, never static libraries
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<revision>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE "${SLUICE_DEB_REVISION}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${SLUICE_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# dpkg-shlibdeps turns the libraries the binary links into Depends (libabsl, libyaml-cpp, ...).
# It reads the installed binary, so the package must be built without sanitizers.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_SLUICE_PACKAGE_NAME sluice)
set(CPACK_DEBIAN_SLUICE_PACKAGE_SECTION net)
# postinst creates the sluice user with adduser. libnghttp2-14 1.52.0-1+deb12u3 and later carry
# the fixes for HTTP/2 rapid reset (CVE-2023-44487) and CONTINUATION floods (CVE-2024-28182)
# that the gRPC listener relies on; shlibdeps alone would accept an older 1.52.
set(CPACK_DEBIAN_SLUICE_PACKAGE_DEPENDS "adduser, libnghttp2-14 (>= 1.52.0-1+deb12u3)")
set(CPACK_DEBIAN_SLUICE_DESCRIPTION
    "rate limiter and quota service for HTTP APIs
sluice decides, for an HTTP gateway or an application, whether a request is
allowed: rate limits (60 requests a minute), daily and monthly quotas by plan
(in the plan's time zone) and quota alerts by webhook, Slack or email, once per
threshold and period. A denied request consumes nothing.
.
This package holds the sluice server with its systemd unit and a default
configuration that listens on the loopback interface only and keeps its
counters in /var/lib/sluice.")
file(CONFIGURE OUTPUT "${SLUICE_PACKAGING_BINARY_DIR}/conffiles"
     CONTENT "${CMAKE_INSTALL_FULL_SYSCONFDIR}/sluice/sluice.yaml\n")
set(CPACK_DEBIAN_SLUICE_PACKAGE_CONTROL_EXTRA
    "${SLUICE_PACKAGING_BINARY_DIR}/conffiles"
    "${SLUICE_PACKAGING_DIR}/debian/postinst"
    "${SLUICE_PACKAGING_DIR}/debian/prerm"
    "${SLUICE_PACKAGING_DIR}/debian/postrm")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libsluice-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
list(JOIN SLUICE_DEV_PACKAGE_DEPENDS ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "C++ library of the sluice rate limiter (development files)
libsluice is the C++20 library the sluice service is built on: plans, calendar
windows, all-or-nothing decisions, the memory and Redis stores, alert delivery
and the HTTP server.
.
This package holds the static libraries, the headers, the CMake package and the
pkg-config file.")

# Run by cpack once the components are installed in its staging directory, before the packages are
# made. It checks what is better checked when a package is made than at every configure: the first
# entry of packaging/debian/changelog is this version (lintian compares the two) and the prefix is
# /usr. Then it drops the sections of the stripped binaries that only name the compiler (.comment,
# .note), as dh_strip does for Debian's own packages.
set(CPACK_SLUICE_CHANGELOG "${SLUICE_PACKAGING_DIR}/debian/changelog")
set(CPACK_SLUICE_DEB_VERSION "${PROJECT_VERSION}-${SLUICE_DEB_REVISION}")
file(CONFIGURE OUTPUT "${SLUICE_PACKAGING_BINARY_DIR}/pre-package.cmake" @ONLY CONTENT [=[
file(READ "${CPACK_SLUICE_CHANGELOG}" first_entry LIMIT 200)
string(REGEX MATCH "^[^\n]*" first_entry "${first_entry}")
string(FIND "${first_entry}" "sluice (${CPACK_SLUICE_DEB_VERSION}) " at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "packaging/debian/changelog begins with \"${first_entry}\": add an entry "
                      "for ${CPACK_SLUICE_DEB_VERSION} (the package's version) on top")
endif()
if(NOT CPACK_PACKAGING_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "the Debian package needs CMAKE_INSTALL_PREFIX=/usr, not "
                      "\"${CPACK_PACKAGING_INSTALL_PREFIX}\" (scripts/package configures it so)")
endif()
file(GLOB programs "${CPACK_TEMPORARY_DIRECTORY}/*/usr/bin/*")
foreach(program IN LISTS programs)
  execute_process(COMMAND "${CPACK_OBJCOPY_EXECUTABLE}" --remove-section=.comment
                          --remove-section=.note "${program}"
                  COMMAND_ERROR_IS_FATAL ANY)
endforeach()
]=])
set(CPACK_PRE_BUILD_SCRIPTS "${SLUICE_PACKAGING_BINARY_DIR}/pre-package.cmake")

include(CPack)
