/*
 * rm_cmd_string.c -- the Redis model's string commands with Redis 7.0's
 * semantics (rm_int.h): GET, SET with its options (NX XX GET EX PX EXAT
 * PXAT KEEPTTL, checked in Redis's order: syntax, then the expiry value,
 * then the key), INCR / INCRBY / DECR / DECRBY (strict integers, overflow
 * refused, the TTL kept).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "rm_int.h"

static void c_get(rm_ctx *c) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_STRING, &o))
    return;
  if (!o)
    rm_out_nil(c);
  else
    rm_out_bulk(c, o->v.s.p, o->v.s.len);
}

enum {
  S_NX = 1,
  S_XX = 2,
  S_GET = 4,
  S_KEEPTTL = 8,
  S_EX = 16,
  S_PX = 32,
  S_EXAT = 64,
  S_PXAT = 128
};

/* parseExtendedStringArgumentsOrReply for SET: 0 or -1 after the reply.
 * Each option is accepted only when the ones it excludes are absent (the
 * same option twice is accepted: the last value counts). */
static int set_flags(rm_ctx *c, int *fl, int *exp_arg) {
  const int ttl_any = S_EX | S_PX | S_EXAT | S_PXAT;
  *fl = 0;
  *exp_arg = 0;
  for (int j = 3; j < c->argc; j++) {
    rm_arg a = c->argv[j];
    int next = j < c->argc - 1;
    if (rm_arg_is(a, "nx") && !(*fl & S_XX))
      *fl |= S_NX;
    else if (rm_arg_is(a, "xx") && !(*fl & S_NX))
      *fl |= S_XX;
    else if (rm_arg_is(a, "get"))
      *fl |= S_GET;
    else if (rm_arg_is(a, "keepttl") && !(*fl & ttl_any))
      *fl |= S_KEEPTTL;
    else if (rm_arg_is(a, "ex") &&
             !(*fl & (S_KEEPTTL | S_EXAT | S_PX | S_PXAT)) && next)
      *fl |= S_EX, *exp_arg = ++j;
    else if (rm_arg_is(a, "px") &&
             !(*fl & (S_KEEPTTL | S_EX | S_EXAT | S_PXAT)) && next)
      *fl |= S_PX, *exp_arg = ++j;
    else if (rm_arg_is(a, "exat") &&
             !(*fl & (S_KEEPTTL | S_EX | S_PX | S_PXAT)) && next)
      *fl |= S_EXAT, *exp_arg = ++j;
    else if (rm_arg_is(a, "pxat") &&
             !(*fl & (S_KEEPTTL | S_EX | S_EXAT | S_PX)) && next)
      *fl |= S_PXAT, *exp_arg = ++j;
    else {
      rm_out_syntax(c);
      return -1;
    }
  }
  return 0;
}

/* getExpireMillisecondsOrReply: the absolute expiry, or -1 after the
 * reply. */
static int set_expiry(rm_ctx *c, int fl, rm_arg a, long long *when) {
  long long v;
  if (rm_get_ll(c, a, &v))
    return -1;
  int secs = fl & (S_EX | S_EXAT);
  if (v <= 0 || (secs && v > LLONG_MAX / 1000)) {
    rm_out_error(c, "ERR invalid expire time in 'set' command");
    return -1;
  }
  if (secs)
    v *= 1000;
  if (fl & (S_EX | S_PX)) {
    if (v > LLONG_MAX - c->m->now) {
      rm_out_error(c, "ERR invalid expire time in 'set' command");
      return -1;
    }
    v += c->m->now;
  }
  *when = v;
  return 0;
}

static void c_set(rm_ctx *c) {
  int fl, ea;
  long long when = -1;
  if (set_flags(c, &fl, &ea) || (ea && set_expiry(c, fl, c->argv[ea], &when)))
    return;
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (fl & S_GET) {
    if (o && o->type != RM_T_STRING) {
      rm_out_wrongtype(c);
      return;
    }
    if (o)
      rm_out_bulk(c, o->v.s.p, o->v.s.len);
    else
      rm_out_nil(c);
  }
  if (((fl & S_NX) && o) || ((fl & S_XX) && !o)) {
    if (!(fl & S_GET))
      rm_out_nil(c);
    return;
  }
  int64_t keep = o && (fl & S_KEEPTTL) ? o->expire : -1;
  if (o)
    rm_ks_delete(c->m, o);
  o = rm_ks_create(c->m, c->argv[1].p, c->argv[1].len, RM_T_STRING);
  rm_bytes_set(&o->v.s, c->argv[2].p, c->argv[2].len);
  o->expire = ea ? when : keep;
  if (!(fl & S_GET))
    rm_out_status(c, "OK");
}

/* incrDecrCommand: the key's value + incr. */
static void incr_by(rm_ctx *c, long long incr) {
  rm_obj *o;
  if (rm_lookup_typed(c, 1, RM_T_STRING, &o))
    return;
  long long v = 0;
  if (o && !rm_str2ll(o->v.s.p, o->v.s.len, &v)) {
    rm_out_error(c, "ERR value is not an integer or out of range");
    return;
  }
  if ((incr < 0 && v < 0 && incr < LLONG_MIN - v) ||
      (incr > 0 && v > 0 && incr > LLONG_MAX - v)) {
    rm_out_error(c, "ERR increment or decrement would overflow");
    return;
  }
  v += incr;
  char buf[24];
  size_t n = (size_t)snprintf(buf, sizeof buf, "%lld", v);
  if (!o)
    o = rm_ks_create(c->m, c->argv[1].p, c->argv[1].len, RM_T_STRING);
  rm_bytes_set(&o->v.s, buf, n); /* the TTL stays */
  rm_out_int(c, v);
}

static void c_incr(rm_ctx *c) { incr_by(c, 1); }
static void c_decr(rm_ctx *c) { incr_by(c, -1); }

static void c_incrby(rm_ctx *c) {
  long long v;
  if (!rm_get_ll(c, c->argv[2], &v))
    incr_by(c, v);
}

static void c_decrby(rm_ctx *c) {
  long long v;
  if (rm_get_ll(c, c->argv[2], &v))
    return;
  if (v == LLONG_MIN) {
    rm_out_error(c, "ERR decrement would overflow");
    return;
  }
  incr_by(c, -v);
}

const rm_cmd rm_cmds_string[] = {
    {"get", 2, c_get, 0, NULL},   {"set", -3, c_set, 0, NULL},
    {"incr", 2, c_incr, 0, NULL}, {"incrby", 3, c_incrby, 0, NULL},
    {"decr", 2, c_decr, 0, NULL}, {"decrby", 3, c_decrby, 0, NULL},
    {NULL, 0, NULL, 0, NULL}};
