/*
 * etcd.h -- the etcd store's seam: the ops table the client and the kinds
 * reach it through (etcd_ops.c; client/store.h: they sit below this layer
 * and do not include this header), and the calls the api layer makes into
 * it. Nothing here is API; nothing here names libcurl or json-c (those stay
 * behind etcd_int.h, in the etcd_*.c files).
 *
 * An etcd:// client (url.c, dlock__url.etcd) is a dlock_client whose
 * c->etcd is set. It shares with the Redis store: the client object and its
 * config, identity and counters, the hold registry (holds.c: one record per
 * (client, name, thread), reentrancy counted locally), the engine's
 * decisions (engine.c: local deadlines, re-entry, the unlock's count and
 * answer, pending releases, wait verdicts, expiry), loss reports
 * (dlock__lost_report -> on_lock_lost through callout.c), the wait budget
 * (wait.c), cancellation (dlock_client_cancel_waits: its pipe), error codes
 * and messages. It has its own: transport (etcd_http.c: the v3 JSON
 * gateway over libcurl's multi interface, driven by poll), JSON and key
 * layout (etcd_json.c), the session lease and its thread (etcd_lease.c:
 * keepalives, deadlines, the holders' own-key watches, clean-up), the lock
 * recipe (etcd_lock.c), permits (etcd_permits.c), the semaphore
 * (etcd_sem.c) and status (etcd_status.c).
 * docs/etcd.md and docs/design.md ("The etcd store") say which is which.
 *
 * Every public call that reaches a Redis-only path on an etcd client
 * answers DLOCK_ENOTSUP naming the alternative (dlock__etcd_notsup), never a
 * silent degradation; dlock__exec refuses too, as a last guard.
 */
#ifndef DLOCK_ETCD_H
#define DLOCK_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "kinds/kinds.h"

typedef struct dlock__etcd dlock__etcd;

/* The etcd store's ops table (etcd_ops.c; client/store.h): what the client
 * and the kinds reach an etcd:// client's store through. */
extern const dlock__store_ops dlock__etcd_store;

/* ---- the client (etcd_client.c) ----------------------------------------- */

/* 1 if the client's last request reached an etcd member (stats). */
int dlock__etcd_connected(dlock_client *c);

/* ---- status (etcd_status.c) --------------------------------------------- */

/* The snapshot of lock `name` into the whole struct *s (zeroed): locked,
 * ttl_ms (the holder's lease TTL left, whole seconds; -1 no lease), one
 * holder. */
int dlock__etcd_status(dlock_client *c, const char *name, dlock_status *s);
/* The waiters behind the holder, in order (dlock_fair_waiters_query). */
int dlock__etcd_waiters(dlock_client *c, const char *name, char ***waiters,
                        size_t *n);
/* dlock_lock_names_query on etcd: the lock names under the prefix. */
int dlock__etcd_names(dlock_client *c, const char *pattern, char ***names,
                      size_t *n);

#endif
