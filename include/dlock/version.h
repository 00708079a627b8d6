/* dlock version: defined here once. CMake parses these lines; dlock_version()
 * reports the value the library was built with. */
#ifndef DLOCK_VERSION_H
#define DLOCK_VERSION_H

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 3
#define DLOCK_VERSION_PATCH 0

#define DLOCK_VERSION_NUMBER                                                   \
  (DLOCK_VERSION_MAJOR * 10000 + DLOCK_VERSION_MINOR * 100 +                   \
   DLOCK_VERSION_PATCH)

/* The ABI generation: the library's SONAME is libdlock.so.<this>. Raised by
 * exactly one for every change that breaks programs built against the
 * previous release (a field moved or resized in a caller-allocated struct, a
 * call removed or its signature changed); never for additions (docs/abi.md).
 * It is not the major version: 0 was the 0.1 series; 1 starts with 0.2.0,
 * whose dlock_config and dlock_status begin with a layout record. */
#define DLOCK_SOVERSION 1

#endif
