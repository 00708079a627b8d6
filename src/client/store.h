/*
 * store.h -- the store ops table: how the client and the kinds reach a
 * store other than Redis (etcd://) without including its layer, which sits
 * above them (docs/design.md, "The layers of src/"). The etcd layer fills
 * one in (etcd/etcd_ops.c); the public constructor (api/client_new.c) hands
 * it to dlock__client_new, which sets c->store for an etcd:// URL. A Redis
 * client's c->store is NULL: every call below is made only when it is not.
 *
 * Each entry is the store's side of the public call or client stage named
 * beside it; the caller has done what its comment there says (argument
 * checks, dlock__client_check) before it dispatches. etcd/etcd_int.h says
 * what the etcd store's entries do.
 */
#ifndef DLOCK_STORE_H
#define DLOCK_STORE_H

#include <stddef.h>

#include "net/net.h"

struct dlock__mutex_ops;

typedef struct dlock__store_ops {
  /* ---- the client (client.c, clientinfo.c) ---- */
  /* dlock__client_new, once the URL and the identity are done: 0, or a
   * code with nothing left to undo but the identity. */
  int (*client_start)(dlock_client *c);
  /* dlock_client_free (not in a fork child). */
  void (*client_stop)(dlock_client *c);
  /* The memory (the last reference went); forked: in a fork child. */
  void (*client_release)(dlock_client *c, int forked);
  /* dlock_client_info_query: the owner's info key. 1, 0 or a code. */
  int (*client_info)(dlock_client *c, const char *owner,
                     dlock_client_info *info);

  /* ---- the mutex (mutex.c) ---- */
  /* dlock__mutex_create: 0 when the kind of ops exists on this store, else
   * a code; then, once registered, the object's own state. */
  int (*kind_check)(dlock_client *c, const struct dlock__mutex_ops *ops,
                    const char *name);
  int (*mutex_attach)(dlock_mutex *m);
  void (*mutex_detach)(dlock_mutex *m); /* dlock_mutex_free */
  int (*acquire)(dlock_mutex *m, long long wait_ms, long long lease_ms);
  int (*release)(dlock_mutex *m);
  int (*force_unlock)(dlock_mutex *m);
  int (*is_locked)(dlock_mutex *m);
  int (*is_held)(dlock_mutex *m);
  int (*hold_count)(dlock_mutex *m);
  int (*ttl)(dlock_mutex *m, long long *ttl_ms);

  /* ---- expirable permits (permits.c): the store's own object, whose
   * first member is a dlock__chobj as the Redis object's ---- */
  int (*permits_new)(dlock_client *c, const char *name, dlock_permits **out);
  void (*permits_free)(dlock_permits *p);
  int (*permits_acquire)(dlock_permits *p, long long wait_ms,
                         long long lease_ms,
                         char id_out[DLOCK_PERMIT_ID_LEN + 1]);
  int (*permits_release)(dlock_permits *p, const char *id);
  int (*permits_update_lease)(dlock_permits *p, const char *id,
                              long long lease_ms);
  int (*permits_available)(dlock_permits *p, long long *n);
  /* only_new: dlock_permits_try_set_permits, else _set_permits. */
  int (*permits_set)(dlock_permits *p, long long permits, int only_new);
  int (*permits_list)(dlock_permits *p, dlock_permit **out, size_t *n,
                      long long *available);

  /* ---- the counting semaphore (sem.c): the store's own object, whose
   * first member is a dlock__chobj as the Redis object's. wait: wait_ms as
   * dlock_sem_timedwait; DLOCK_EBUSY and DLOCK_ETIMEDOUT come back without
   * a message (sem.c words them) ---- */
  int (*sem_new)(dlock_client *c, const char *name, dlock_sem **out);
  void (*sem_free)(dlock_sem *s);
  int (*sem_init)(dlock_sem *s, long long permits);
  int (*sem_wait)(dlock_sem *s, long long wait_ms);
  int (*sem_post)(dlock_sem *s);
  int (*sem_value)(dlock_sem *s, long long *v);
} dlock__store_ops;

#endif
