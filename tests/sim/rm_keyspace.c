/*
 * rm_keyspace.c -- the Redis model's keyspace (rm_int.h): a chained hash
 * table of objects by key (FNV-1a: deterministic), and expiry on access.
 *
 * EXPIRY. A key is expired when the simulated clock is past its expiry
 * (Redis's keyIsExpired: now > when). Every lookup deletes an expired key
 * first and reports it missing, as Redis's expireIfNeeded does on a master.
 * Redis also deletes expired keys in the background (ten times a second);
 * while the clock only moves forward no command can tell the two apart
 * (KEYS and SCAN skip expired keys, every read expires them), so the model
 * does it on access. A clock set BACK is the one case where they differ:
 * a key whose expiry the clock had passed is gone for the model (as if the
 * background expiry had deleted it, what Redis does unless the step back
 * comes within its cron's period), never alive again -- the model expires
 * against the latest time the clock was set to. A script sees one instant:
 * the clock does not move while it runs (Redis freezes its expiry clock
 * for a script too).
 */
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

static uint64_t fnv(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

void rm_ks_init(rm_keyspace *ks) {
  ks->nb = 64;
  ks->n = 0;
  ks->b = rm_xmalloc(ks->nb * sizeof(rm_obj *));
  memset(ks->b, 0, ks->nb * sizeof(rm_obj *));
}

static void obj_free(rm_obj *o) {
  switch (o->type) {
  case RM_T_STRING:
    rm_bytes_free(&o->v.s);
    break;
  case RM_T_HASH:
    rm_hash_free(&o->v.h);
    break;
  case RM_T_LIST:
    rm_list_free(&o->v.l);
    break;
  case RM_T_ZSET:
    rm_zset_free(&o->v.z);
    break;
  default:
    break;
  }
  rm_bytes_free(&o->key);
  free(o);
}

void rm_ks_free(rm_keyspace *ks) {
  for (size_t i = 0; i < ks->nb; i++) {
    rm_obj *o = ks->b[i];
    while (o) {
      rm_obj *next = o->next;
      obj_free(o);
      o = next;
    }
  }
  free(ks->b);
  ks->b = NULL;
  ks->nb = ks->n = 0;
}

static rm_obj **slot_of(rm_keyspace *ks, uint64_t h, const char *k, size_t n) {
  rm_obj **pp = &ks->b[h & (ks->nb - 1)];
  while (*pp && !((*pp)->hash == h && (*pp)->key.len == n &&
                  (n == 0 || memcmp((*pp)->key.p, k, n) == 0)))
    pp = &(*pp)->next;
  return pp;
}

static int expired(const rm_model *m, const rm_obj *o) {
  return o->expire >= 0 && m->latest > o->expire;
}

rm_obj *rm_ks_lookup(rm_model *m, const char *k, size_t n) {
  rm_obj **pp = slot_of(&m->ks, fnv(k, n), k, n);
  rm_obj *o = *pp;
  if (!o)
    return NULL;
  if (expired(m, o)) {
    *pp = o->next;
    m->ks.n--;
    obj_free(o);
    return NULL;
  }
  return o;
}

static void grow(rm_keyspace *ks) {
  size_t nb = ks->nb * 2;
  rm_obj **b = rm_xmalloc(nb * sizeof(rm_obj *));
  memset(b, 0, nb * sizeof(rm_obj *));
  for (size_t i = 0; i < ks->nb; i++) {
    rm_obj *o = ks->b[i];
    while (o) {
      rm_obj *next = o->next;
      o->next = b[o->hash & (nb - 1)];
      b[o->hash & (nb - 1)] = o;
      o = next;
    }
  }
  free(ks->b);
  ks->b = b;
  ks->nb = nb;
}

rm_obj *rm_ks_create(rm_model *m, const char *k, size_t n, int type) {
  rm_keyspace *ks = &m->ks;
  if (ks->n >= ks->nb)
    grow(ks);
  uint64_t h = fnv(k, n);
  rm_obj **pp = slot_of(ks, h, k, n);
  if (*pp) { /* an expired leftover (callers looked it up first) */
    rm_obj *old = *pp;
    *pp = old->next;
    ks->n--;
    obj_free(old);
    pp = slot_of(ks, h, k, n);
  }
  rm_obj *o = rm_xmalloc(sizeof *o);
  memset(o, 0, sizeof *o);
  o->hash = h;
  o->type = type;
  o->expire = -1;
  rm_bytes_set(&o->key, k, n);
  o->next = NULL;
  *pp = o;
  ks->n++;
  return o;
}

void rm_ks_delete(rm_model *m, rm_obj *o) {
  rm_obj **pp = slot_of(&m->ks, o->hash, o->key.p, o->key.len);
  if (*pp == o) {
    *pp = o->next;
    m->ks.n--;
  }
  obj_free(o);
}

void rm_ks_delete_if_empty(rm_model *m, rm_obj *o) {
  size_t n = o->type == RM_T_HASH   ? o->v.h.n
             : o->type == RM_T_LIST ? o->v.l.n
             : o->type == RM_T_ZSET ? o->v.z.n
                                    : 1;
  if (n == 0)
    rm_ks_delete(m, o);
}

const char *rm_type_name(int type) {
  switch (type) {
  case RM_T_STRING:
    return "string";
  case RM_T_HASH:
    return "hash";
  case RM_T_LIST:
    return "list";
  case RM_T_ZSET:
    return "zset";
  default:
    return "none";
  }
}

void rm_foreach_key(rm_model *m,
                    void (*fn)(void *user, const char *key, size_t klen,
                               int type, int64_t expire_ms),
                    void *user) {
  for (size_t i = 0; i < m->ks.nb; i++)
    for (rm_obj *o = m->ks.b[i]; o; o = o->next)
      if (!expired(m, o))
        fn(user, o->key.p, o->key.len, o->type, o->expire);
}

size_t rm_dbsize(rm_model *m) {
  size_t n = 0;
  for (size_t i = 0; i < m->ks.nb; i++)
    for (rm_obj *o = m->ks.b[i]; o; o = o->next)
      n += !expired(m, o);
  return n;
}
