/* dlock version: defined here once. CMake parses these lines; dlock_version()
 * reports the value the library was built with. */
#ifndef DLOCK_VERSION_H
#define DLOCK_VERSION_H

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0

#define DLOCK_VERSION_NUMBER                                                   \
  (DLOCK_VERSION_MAJOR * 10000 + DLOCK_VERSION_MINOR * 100 +                   \
   DLOCK_VERSION_PATCH)

#endif
