/*
 * status.c -- who holds a lock: holders, hold counts, TTL, in one script
 * call (atomic snapshot). Understands the mutex and read-write layouts.
 * And who waits in a fair lock's queue (dlock_fair_waiters_query).
 *
 * The caller's dlock_status may be a shorter layout than this library's (a
 * program built against an older header; docs/abi.md): the snapshot is
 * taken into a whole struct and only the fields that fit in the caller's
 * size are handed over.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "etcd/etcd.h"

#define STATUS_MAGIC 0x444c5354u /* "DLST" */
#define ABI_SIZE_MAX 4096u       /* a larger size is garbage, not a struct */
/* Whether a caller's struct of `size` bytes holds the whole of `field`. */
#define HAS(size, field)                                                       \
  (offsetof(dlock_status, field) + sizeof(((dlock_status *)0)->field) <= (size))

/* The same for the holders pointer (sizeof of a pointer to a struct reads
 * as a mistake to clang-tidy). A caller that has it has n_holders. */
#define HAS_HOLDERS(size)                                                      \
  (offsetof(dlock_status, holders) + sizeof(dlock_holder *) <= (size))
_Static_assert(offsetof(dlock_status, n_holders) <
                   offsetof(dlock_status, holders),
               "n_holders comes first");

static void holders_free(dlock_holder *h, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(h[i].owner);
  free(h);
}

void dlock_status_clear_sized(dlock_status *st, size_t size) {
  if (!st || size < offsetof(dlock_status, locked) || size > ABI_SIZE_MAX)
    return;
  if (st->abi_magic == STATUS_MAGIC) {
    if (st->abi_size < size)
      size = st->abi_size; /* filled for a shorter layout */
    if (HAS_HOLDERS(size))
      holders_free(st->holders, st->n_holders);
  }
  memset(st, 0, size);
}

/* The snapshot of `name` into the whole struct *s (zeroed by the caller).
 * On failure *s holds nothing to free. */
static int status_fetch(dlock_client *c, const char *name, dlock_status *s) {
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL or empty");
  if (c->etcd)
    return dlock__etcd_status(c, name, s);
  const char *keys[1] = {name};
  redisReply *r = NULL;
  rc = dlock__eval(c, dlock__core_script(DLOCK__S_STATUS), 1, keys, NULL, 0,
                   NULL, NULL, &r);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    freeReplyObject(r);
    return dlock__fail(DLOCK_EPROTO, "unexpected status reply");
  }
  s->ttl_ms = r->element[0]->integer;
  s->locked = s->ttl_ms != -2;
  redisReply *kv = r->element[1];
  size_t pairs = kv->elements / 2;
  s->holders = dlock__calloc(pairs ? pairs : 1, sizeof *s->holders);
  if (!s->holders) {
    freeReplyObject(r);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < pairs; i++) {
    redisReply *k = kv->element[2 * i], *v = kv->element[2 * i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
      continue;
    if (strcmp(k->str, "mode") == 0) {
      size_t n = v->len < sizeof s->mode - 1 ? v->len : sizeof s->mode - 1;
      memcpy(s->mode, v->str, n);
      s->mode[n] = '\0';
      continue;
    }
    dlock_holder *h = &s->holders[s->n_holders];
    h->owner = dlock__strndup(k->str, k->len);
    if (!h->owner) {
      freeReplyObject(r);
      holders_free(s->holders, s->n_holders);
      s->holders = NULL;
      s->n_holders = 0;
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    h->count = strtoll(v->str, NULL, 10);
    s->n_holders++;
  }
  freeReplyObject(r);
  return 0;
}

/* Hands the fields of *s that fit in the caller's `size` bytes to *st; the
 * holders go with it or are freed here. */
static void status_hand_over(dlock_status *s, dlock_status *st, size_t size) {
  if (HAS(size, locked))
    st->locked = s->locked;
  if (HAS(size, ttl_ms))
    st->ttl_ms = s->ttl_ms;
  if (HAS(size, mode))
    memcpy(st->mode, s->mode, sizeof st->mode);
  if (HAS_HOLDERS(size)) {
    st->n_holders = s->n_holders;
    st->holders = s->holders;
  } else {
    holders_free(s->holders, s->n_holders);
  }
}

int dlock_status_query_sized(dlock_client *c, const char *name,
                             dlock_status *st, size_t size) {
  dlock__clear_error();
  if (!st)
    return dlock__fail(DLOCK_EINVAL, "st is NULL");
  if (size < offsetof(dlock_status, locked) || size > ABI_SIZE_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_status size %zu is not a struct size", size);
  memset(st, 0, size);
  st->abi_magic = STATUS_MAGIC;
  st->abi_size = (uint32_t)size;
  dlock_status s;
  memset(&s, 0, sizeof s);
  int rc = status_fetch(c, name, &s);
  if (rc == 0)
    status_hand_over(&s, st, size);
  return rc;
}

void dlock_fair_waiters_free(char **waiters, size_t n) {
  for (size_t i = 0; waiters && i < n; i++)
    free(waiters[i]);
  free(waiters);
}

/* The entries of an LRANGE reply as strings (*out, *n). 0 or ENOMEM. */
static int take_waiters(const redisReply *r, char ***out, size_t *n) {
  size_t m = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
  char **w = dlock__calloc(m ? m : 1, sizeof *w);
  if (!w)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; i < m; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_STRING)
      continue;
    if (!(w[k] = dlock__strndup(e->str, e->len))) {
      dlock_fair_waiters_free(w, k);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    k++;
  }
  if (k == 0) {
    free(w);
    w = NULL;
  }
  *out = w;
  *n = k;
  return 0;
}

int dlock_fair_waiters_query(dlock_client *c, const char *name, char ***waiters,
                             size_t *n) {
  dlock__clear_error();
  if (waiters)
    *waiters = NULL;
  if (n)
    *n = 0;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name || !waiters || !n)
    return dlock__fail(DLOCK_EINVAL, "NULL argument or empty lock name");
  if (c->etcd) /* every etcd mutex queues: its waiters in order */
    return dlock__etcd_waiters(c, name, waiters, n);
  dlock__sb k;
  dlock__sb_init(&k);
  dlock__prefix_name(&k, "redisson_lock_queue", name);
  if (k.oom) {
    dlock__sb_free(&k);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  const char *argv[4] = {"LRANGE", k.p, "0", "-1"};
  size_t lens[4] = {6, k.len, 1, 2};
  dlock__cmd cmd = {k.p, NULL, 4, argv, lens, 0};
  redisReply *r = NULL;
  rc = dlock__exec(c, &cmd, &r);
  if (rc == 0 && r)
    rc = take_waiters(r, waiters, n);
  if (r)
    freeReplyObject(r);
  dlock__sb_free(&k);
  return rc;
}
