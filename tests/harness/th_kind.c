/*
 * th_kind.c -- the lock kinds of th_kind.h behind one interface.
 */
#include "th_kind.h"

#include <stdlib.h>
#include <string.h>

static const char *const g_names[TH_K_KINDS] = {"mutex", "fair", "fenced",
                                                "spin",  "read", "write"};

const char *th_kind_name(int kind) {
  return kind >= 0 && kind < TH_K_KINDS ? g_names[kind] : "?";
}

th_holder th_holder_new(dlock_client *c, int kind, const char *name) {
  th_holder h = {kind, NULL, NULL};
  switch (kind) {
  case TH_K_MUTEX:
    CHECK_OK(dlock_mutex_new(c, name, &h.m));
    break;
  case TH_K_FAIR:
    CHECK_OK(dlock_mutex_new_fair(c, name, &h.m));
    break;
  case TH_K_FENCED:
    CHECK_OK(dlock_mutex_new_fenced(c, name, &h.m));
    break;
  case TH_K_SPIN:
    CHECK_OK(dlock_mutex_new_spin(c, name, &h.m));
    break;
  default:
    CHECK_OK(dlock_rwlock_new(c, name, &h.rw));
    break;
  }
  return h;
}

void th_holder_free(th_holder *h) {
  dlock_mutex_free(h->m);
  dlock_rwlock_free(h->rw);
  h->m = NULL;
  h->rw = NULL;
}

int th_holder_lock(th_holder *h, long long wait_ms, long long lease_ms) {
  if (h->m)
    return dlock_mutex_timedlock(h->m, wait_ms, lease_ms);
  if (h->kind == TH_K_READ)
    return dlock_rwlock_timedrdlock(h->rw, wait_ms, lease_ms);
  return dlock_rwlock_timedwrlock(h->rw, wait_ms, lease_ms);
}

int th_holder_try_excluded(th_holder *h) {
  if (h->m)
    return dlock_mutex_trylock(h->m);
  if (h->kind == TH_K_READ)
    return dlock_rwlock_trywrlock(h->rw);
  return dlock_rwlock_tryrdlock(h->rw);
}

int th_holder_unlock(th_holder *h) {
  return h->m ? dlock_mutex_unlock(h->m) : dlock_rwlock_unlock(h->rw);
}

int th_holder_validity(th_holder *h, long long *ms) {
  return h->m ? dlock_mutex_validity(h->m, ms)
              : dlock_rwlock_validity(h->rw, ms);
}

long long th_count_of(th_redis *r, const char *name) {
  redisReply *x = th_cmd(r, "HGETALL %s", name);
  long long n = 0;
  for (size_t i = 0; x->type == REDIS_REPLY_ARRAY && i + 1 < x->elements;
       i += 2)
    if (strcmp(x->element[i]->str, "mode") != 0)
      n += atoll(x->element[i + 1]->str);
  freeReplyObject(x);
  return n;
}
