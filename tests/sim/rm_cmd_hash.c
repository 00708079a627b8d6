/*
 * rm_cmd_hash.c -- the Redis model's hash commands with Redis 7.0's
 * semantics (rm_int.h): HSET (field/value pairs, the number of new fields),
 * HGET, HEXISTS, HDEL (the key goes with its last field), HLEN, HKEYS,
 * HGETALL (insertion order: a small hash's listpack order).
 */
#include "rm_int.h"

static void c_hset(rm_ctx *c) {
  if (c->argc % 2 == 1) {
    rm_out_arity(c, "hset");
    return;
  }
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_HASH, &o))
    return;
  if (!o)
    o = rm_ks_create(c->m, c->argv[1].p, c->argv[1].len, RM_T_HASH);
  long long created = 0;
  for (int i = 2; i < c->argc; i += 2)
    created += rm_hash_set(&o->v.h, c->argv[i].p, c->argv[i].len,
                           c->argv[i + 1].p, c->argv[i + 1].len);
  rm_out_int(c, created);
}

static void c_hget(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_HASH, &o))
    return;
  long i = o ? rm_hash_find(&o->v.h, c->argv[2].p, c->argv[2].len) : -1;
  if (i < 0)
    rm_out_nil(c);
  else
    rm_out_bulk(c, o->v.h.v[i].p, o->v.h.v[i].len);
}

static void c_hexists(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_HASH, &o))
    return;
  rm_out_int(c, o && rm_hash_find(&o->v.h, c->argv[2].p, c->argv[2].len) >= 0);
}

static void c_hdel(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_HASH, &o))
    return;
  long long n = 0;
  for (int i = 2; o && i < c->argc; i++) {
    n += rm_hash_del(&o->v.h, c->argv[i].p, c->argv[i].len);
    if (o->v.h.n == 0) {
      rm_ks_delete(c->m, o);
      break;
    }
  }
  rm_out_int(c, n);
}

static void c_hlen(rm_ctx *c) {
  rm_obj *o;
  if (!rm_lookup_typed(c, 1, RM_T_HASH, &o))
    rm_out_int(c, o ? (long long)o->v.h.n : 0);
}

static void hall(rm_ctx *c, int fields, int values) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_HASH, &o))
    return;
  size_t n = o ? o->v.h.n : 0;
  rm_out_array(c, n * (size_t)(fields + values));
  for (size_t i = 0; i < n; i++) {
    if (fields)
      rm_out_bulk(c, o->v.h.f[i].p, o->v.h.f[i].len);
    if (values)
      rm_out_bulk(c, o->v.h.v[i].p, o->v.h.v[i].len);
  }
}

static void c_hkeys(rm_ctx *c) { hall(c, 1, 0); }
static void c_hgetall(rm_ctx *c) { hall(c, 1, 1); }

const rm_cmd rm_cmds_hash[] = {
    {"hset", -4, c_hset, 0, NULL},      {"hget", 3, c_hget, 0, NULL},
    {"hexists", 3, c_hexists, 0, NULL}, {"hdel", -3, c_hdel, 0, NULL},
    {"hlen", 2, c_hlen, 0, NULL},       {"hkeys", 2, c_hkeys, 0, NULL},
    {"hgetall", 2, c_hgetall, 0, NULL}, {NULL, 0, NULL, 0, NULL}};
