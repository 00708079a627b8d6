/*
 * status.c -- who holds a lock: holders, hold counts, TTL, in one script
 * call (atomic snapshot). Understands the mutex and read-write layouts.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void dlock_status_clear(dlock_status *st) {
  if (!st)
    return;
  for (size_t i = 0; i < st->n_holders; i++)
    free(st->holders[i].owner);
  free(st->holders);
  memset(st, 0, sizeof *st);
}

int dlock_status_query(dlock_client *c, const char *name, dlock_status *st) {
  dlock__clear_error();
  if (!st)
    return dlock__fail(DLOCK_EINVAL, "st is NULL");
  memset(st, 0, sizeof *st);
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL or empty");
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
  st->ttl_ms = r->element[0]->integer;
  st->locked = st->ttl_ms != -2;
  redisReply *kv = r->element[1];
  size_t pairs = kv->elements / 2;
  st->holders = dlock__calloc(pairs ? pairs : 1, sizeof *st->holders);
  if (!st->holders) {
    freeReplyObject(r);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < pairs; i++) {
    redisReply *k = kv->element[2 * i], *v = kv->element[2 * i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
      continue;
    if (strcmp(k->str, "mode") == 0) {
      size_t n = v->len < sizeof st->mode - 1 ? v->len : sizeof st->mode - 1;
      memcpy(st->mode, v->str, n);
      st->mode[n] = '\0';
      continue;
    }
    dlock_holder *h = &st->holders[st->n_holders];
    h->owner = dlock__strndup(k->str, k->len);
    if (!h->owner) {
      freeReplyObject(r);
      dlock_status_clear(st);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    h->count = strtoll(v->str, NULL, 10);
    st->n_holders++;
  }
  freeReplyObject(r);
  return 0;
}
