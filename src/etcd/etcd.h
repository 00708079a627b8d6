/*
 * etcd.h -- the etcd store's seam: the calls the rest of the library makes
 * into it. Nothing here is API; nothing here names libcurl or json-c (those
 * stay behind etcd_int.h, in the etcd_*.c files).
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
struct dlock__mutex_ops;

/* The etcd store's ops table (etcd_ops.c; client/store.h): what the client
 * and the kinds reach an etcd:// client's store through. */
extern const dlock__store_ops dlock__etcd_store;

/* ---- the client (etcd_client.c) ----------------------------------------- */

/* Starts the etcd side of client c (c->url parsed as etcd://, identity
 * done): checks the config (watchdog_timeout_ms whole seconds >= 2 s, no
 * sync_replicas), the registry, the cancel pipe, the transport, and unless
 * lazy_connect the session lease (authenticating first): 0, or DLOCK_EINVAL
 * / DLOCK_ENOTSUP / DLOCK_ECONN / DLOCK_EAUTH / DLOCK_EPROTO / DLOCK_ETLS /
 * DLOCK_ENOMEM with nothing left to undo but the identity. */
int dlock__etcd_client_start(dlock_client *c);
/* dlock_client_free: stops the lease thread (the session lease is revoked,
 * so the client's keys go at once). Not in a fork child. */
void dlock__etcd_client_stop(dlock_client *c);
/* The memory (the last reference went); forked: in a fork child. */
void dlock__etcd_client_release(dlock_client *c, int forked);
/* 1 if the client's last request reached an etcd member (stats). */
int dlock__etcd_connected(dlock_client *c);

/* dlock__mutex_create: 0 when the kind of ops exists on etcd (the mutex,
 * fair -- every etcd mutex is FIFO --, fenced, spin), else DLOCK_ENOTSUP
 * (read-write locks). */
int dlock__etcd_kind_check(dlock_client *c, const struct dlock__mutex_ops *ops,
                           const char *name);

/* ---- the mutex (etcd_lock.c): the public calls' etcd side -------------- */

int dlock__etcd_mutex_attach(dlock_mutex *m);  /* dlock__mutex_create */
void dlock__etcd_mutex_detach(dlock_mutex *m); /* dlock_mutex_free */
int dlock__etcd_acquire(dlock_mutex *m, long long wait_ms, long long lease_ms);
int dlock__etcd_release(dlock_mutex *m);
int dlock__etcd_force_unlock(dlock_mutex *m);
int dlock__etcd_is_locked(dlock_mutex *m);
int dlock__etcd_is_held(dlock_mutex *m);
int dlock__etcd_hold_count(dlock_mutex *m);
int dlock__etcd_ttl(dlock_mutex *m, long long *ttl_ms);

/* ---- status (etcd_status.c) --------------------------------------------- */

/* The snapshot of lock `name` into the whole struct *s (zeroed): locked,
 * ttl_ms (the holder's lease TTL left, whole seconds; -1 no lease), one
 * holder. */
int dlock__etcd_status(dlock_client *c, const char *name, dlock_status *s);
/* The waiters behind the holder, in order (dlock_fair_waiters_query). */
int dlock__etcd_waiters(dlock_client *c, const char *name, char ***waiters,
                        size_t *n);
/* dlock_client_info_query: the client's info key. 1, 0 or a code. */
int dlock__etcd_client_info(dlock_client *c, const char *owner,
                            dlock_client_info *info);
/* dlock_lock_names_query on etcd: the lock names under the prefix. */
int dlock__etcd_names(dlock_client *c, const char *pattern, char ***names,
                      size_t *n);

/* ---- expirable permits (etcd_permits.c) --------------------------------
 * A dlock_permits of an etcd client is a dlock__etcd_permits whose first
 * member is a dlock__chobj, as the Redis object's (permits.c reads only
 * that member before it dispatches). */
int dlock__etcd_permits_new(dlock_client *c, const char *name,
                            dlock_permits **out);
int dlock__etcd_permits_is(const dlock_permits *p); /* an etcd object */
void dlock__etcd_permits_free(dlock_permits *p);
int dlock__etcd_permits_acquire(dlock_permits *p, long long wait_ms,
                                long long lease_ms,
                                char id_out[DLOCK_PERMIT_ID_LEN + 1]);
int dlock__etcd_permits_release(dlock_permits *p, const char *id);
int dlock__etcd_permits_update_lease(dlock_permits *p, const char *id,
                                     long long lease_ms);
int dlock__etcd_permits_available(dlock_permits *p, long long *n);
int dlock__etcd_permits_set(dlock_permits *p, long long permits, int only_new);
int dlock__etcd_permits_list(dlock_permits *p, dlock_permit **out, size_t *n,
                             long long *available);

/* ---- the counting semaphore (etcd_sem.c) --------------------------------
 * A dlock_sem of an etcd client is an object of etcd_sem.c whose first
 * member is a dlock__chobj, as the Redis object's (sem.c checks it, then
 * dispatches on dlock__etcd_sem_is). wait: wait_ms as dlock_sem_timedwait;
 * DLOCK_EBUSY and DLOCK_ETIMEDOUT come back without a message (sem.c words
 * them, as it does the Redis store's). */
int dlock__etcd_sem_new(dlock_client *c, const char *name, dlock_sem **out);
int dlock__etcd_sem_is(const dlock_sem *s); /* an etcd object */
void dlock__etcd_sem_free(dlock_sem *s);
int dlock__etcd_sem_init(dlock_sem *s, long long permits);
int dlock__etcd_sem_wait(dlock_sem *s, long long wait_ms);
int dlock__etcd_sem_post(dlock_sem *s);
int dlock__etcd_sem_value(dlock_sem *s, long long *v);

#endif
