/*
 * th_kind.h -- one interface over every blocking lock kind that holds a
 * name (plain, fair, fenced and spin mutex; the read and the write side of
 * a read-write lock), so a case body runs on each kind: the rules of
 * safety round 4 are enforced where every kind passes (issue 43), and the
 * proof is one body run per kind.
 */
#ifndef TH_KIND_H
#define TH_KIND_H

#include <stdint.h>

#include "dlock.h"
#include "th.h"

enum {
  TH_K_MUTEX,
  TH_K_FAIR,
  TH_K_FENCED,
  TH_K_SPIN,
  TH_K_READ,
  TH_K_WRITE,
  TH_K_KINDS
};
/* "mutex", "fair", "fenced", "spin", "read", "write". */
const char *th_kind_name(int kind);

typedef struct th_holder {
  int kind;
  dlock_mutex *m;
  dlock_rwlock *rw;
} th_holder;

/* An object of kind on client c for name (fails the case on error). */
th_holder th_holder_new(dlock_client *c, int kind, const char *name);
void th_holder_free(th_holder *h);
/* timedlock (the side of h's kind) with wait_ms and lease_ms. */
int th_holder_lock(th_holder *h, long long wait_ms, long long lease_ms);
/* What another client tries: a try-lock of the side that excludes h's
 * (the write side for a reader, the read side for a writer). */
int th_holder_try_excluded(th_holder *h);
int th_holder_unlock(th_holder *h);
/* The local deadline's remaining ms (dlock_mutex_validity /
 * dlock_rwlock_validity), or the call's code. */
int th_holder_validity(th_holder *h, long long *ms);
/* The holders' counts in lock hash `name` (the rwlock's "mode" aside):
 * 0 when the key is gone. */
long long th_count_of(th_redis *r, const char *name);

#endif
