/*
 * abi_v0.c -- the four calls whose structs changed layout in 0.2, kept
 * under their 0.1 names with the 0.1 layout. Frozen: never edited again.
 *
 * 0.2 put a layout record (abi_magic, abi_size) in front of dlock_config and
 * dlock_status, and dlock.h now reaches dlock_config_init, dlock_client_new,
 * dlock_status_query and dlock_status_clear through inline wrappers over the
 * *_sized calls. The plain symbols stay exported and keep meaning what they
 * meant in 0.1, so an object compiled against the 0.1 header and linked with
 * this library (a stale copy of the header, a prebuilt static library, a
 * binding that declares the 0.1 prototypes itself) runs correctly instead of
 * having the 0.2 layout written over its shorter struct. A program linked
 * against the 0.1 library itself is refused by the loader instead (SONAME
 * libdlock.so.0, now libdlock.so.1). tests/abi runs a program built against
 * the saved 0.1 header (tests/abi/0.1/) through these. docs/abi.md.
 */
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "etcd/etcd.h"

/* dlock_config and dlock_status exactly as dlock.h 0.1 declared them. */
typedef struct config_v0 {
  const char *url;
  int connect_timeout_ms;
  int command_timeout_ms;
  int retry_attempts;
  int retry_interval_ms;
  int watchdog_timeout_ms;
  int pool_size;
  int lazy_connect;
  void (*on_lock_lost)(const char *name, void *arg);
  void *on_lock_lost_arg;
  int subscription_linger_ms;
  int multiplex;
} config_v0;

typedef struct status_v0 {
  int locked;
  long long ttl_ms;
  char mode[8];
  size_t n_holders;
  dlock_holder *holders;
} status_v0;

/* The 0.1 fields, which dlock_config still has under the same names. */
#define CONFIG_V0_FIELDS(X)                                                    \
  X(url)                                                                       \
  X(connect_timeout_ms)                                                        \
  X(command_timeout_ms)                                                        \
  X(retry_attempts)                                                            \
  X(retry_interval_ms)                                                         \
  X(watchdog_timeout_ms)                                                       \
  X(pool_size)                                                                 \
  X(lazy_connect)                                                              \
  X(on_lock_lost)                                                              \
  X(on_lock_lost_arg)                                                          \
  X(subscription_linger_ms)                                                    \
  X(multiplex)

DLOCK_API void dlock_config_init(config_v0 *cfg);
DLOCK_API int dlock_client_new(const config_v0 *cfg, dlock_client **out);
DLOCK_API int dlock_status_query(dlock_client *c, const char *name,
                                 status_v0 *st);
DLOCK_API void dlock_status_clear(status_v0 *st);

void dlock_config_init(config_v0 *cfg) {
  if (!cfg)
    return;
  dlock_config d;
  dlock_config_init_sized(&d, sizeof d);
  memset(cfg, 0, sizeof *cfg);
#define TO_V0(f) cfg->f = d.f;
  CONFIG_V0_FIELDS(TO_V0)
#undef TO_V0
}

int dlock_client_new(const config_v0 *cfg, dlock_client **out) {
  dlock_config d;
  dlock_config_init_sized(&d, sizeof d);
  if (cfg) {
#define FROM_V0(f) d.f = cfg->f;
    CONFIG_V0_FIELDS(FROM_V0)
#undef FROM_V0
  }
  return dlock_client_new_sized(cfg ? &d : NULL, sizeof d, out);
}

int dlock_status_query(dlock_client *c, const char *name, status_v0 *st) {
  if (!st)
    return dlock_status_query_sized(c, name, NULL, sizeof(dlock_status));
  dlock_status s;
  int rc = dlock_status_query_sized(c, name, &s, sizeof s);
  memset(st, 0, sizeof *st);
  st->locked = s.locked;
  st->ttl_ms = s.ttl_ms;
  memcpy(st->mode, s.mode, sizeof st->mode);
  st->n_holders = s.n_holders;
  st->holders = s.holders; /* handed over: dlock_status_clear frees them */
  return rc;
}

void dlock_status_clear(status_v0 *st) {
  if (!st)
    return;
  for (size_t i = 0; i < st->n_holders; i++)
    free(st->holders[i].owner);
  free(st->holders);
  memset(st, 0, sizeof *st);
}
