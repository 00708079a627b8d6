/*
 * rm_cmd_generic.c -- the Redis model's key-space and server commands with
 * Redis 7.0's semantics (rm_int.h): DEL, EXISTS, TYPE, PEXPIRE (with NX /
 * XX / GT / LT), PTTL, TIME (the simulated clock), PUBLISH / SPUBLISH (the
 * caller's subscribers count the receivers) and PUBSUB NUMSUB /
 * SHARDNUMSUB.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "rm_int.h"

static void c_del(rm_ctx *c) {
  long long n = 0;
  for (int i = 1; i < c->argc; i++) {
    rm_obj *o = rm_ks_lookup(c->m, c->argv[i].p, c->argv[i].len);
    if (o) {
      rm_ks_delete(c->m, o);
      n++;
    }
  }
  rm_out_int(c, n);
}

static void c_exists(rm_ctx *c) {
  long long n = 0;
  for (int i = 1; i < c->argc; i++)
    n += rm_ks_lookup(c->m, c->argv[i].p, c->argv[i].len) != NULL;
  rm_out_int(c, n);
}

static void c_type(rm_ctx *c) {
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  rm_out_status(c, rm_type_name(o ? o->type : RM_T_NONE));
}

enum { X_NX = 1, X_XX = 2, X_GT = 4, X_LT = 8 };

/* parseExtendedExpireArgumentsOrReply: 0 or -1 after the reply. */
static int expire_flags(rm_ctx *c, int *flags) {
  *flags = 0;
  for (int j = 3; j < c->argc; j++) {
    rm_arg a = c->argv[j];
    if (rm_arg_is(a, "nx"))
      *flags |= X_NX;
    else if (rm_arg_is(a, "xx"))
      *flags |= X_XX;
    else if (rm_arg_is(a, "gt"))
      *flags |= X_GT;
    else if (rm_arg_is(a, "lt"))
      *flags |= X_LT;
    else {
      rm_out_error(c, "ERR Unsupported option %.*s", (int)strnlen(a.p, a.len),
                   a.p);
      return -1;
    }
  }
  if ((*flags & X_NX) && (*flags & (X_XX | X_GT | X_LT))) {
    rm_out_error(c, "ERR NX and XX, GT or LT options at the same time are "
                    "not compatible");
    return -1;
  }
  if ((*flags & X_GT) && (*flags & X_LT)) {
    rm_out_error(c, "ERR GT and LT options at the same time are not "
                    "compatible");
    return -1;
  }
  return 0;
}

/* The NX/XX/GT/LT condition: 1 = go ahead. */
static int expire_allowed(int flags, long long when, long long cur) {
  if ((flags & X_NX) && cur != -1)
    return 0;
  if ((flags & X_XX) && cur == -1)
    return 0;
  if ((flags & X_GT) && (when <= cur || cur == -1))
    return 0;
  if ((flags & X_LT) && cur != -1 && when >= cur)
    return 0;
  return 1;
}

static void c_pexpire(rm_ctx *c) {
  int flags;
  long long when;
  if (expire_flags(c, &flags) || rm_get_ll(c, c->argv[2], &when))
    return;
  long long base = c->m->now;
  if (when > LLONG_MAX - base) {
    rm_out_error(c, "ERR invalid expire time in 'pexpire' command");
    return;
  }
  when += base;
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (!o) {
    rm_out_int(c, 0);
    return;
  }
  if (flags && !expire_allowed(flags, when, o->expire)) {
    rm_out_int(c, 0);
    return;
  }
  if (when <= c->m->now) /* checkAlreadyExpired: deleted now */
    rm_ks_delete(c->m, o);
  else
    o->expire = when;
  rm_out_int(c, 1);
}

static void c_pttl(rm_ctx *c) {
  rm_obj *o = rm_ks_lookup(c->m, c->argv[1].p, c->argv[1].len);
  if (!o)
    rm_out_int(c, -2);
  else if (o->expire < 0)
    rm_out_int(c, -1);
  else
    rm_out_int(c, o->expire - c->m->now > 0 ? o->expire - c->m->now : 0);
}

static void c_time(rm_ctx *c) {
  char s[24], us[24];
  int64_t now = c->m->now;
  int64_t sec = now / 1000, ms = now % 1000;
  if (ms < 0) {
    ms += 1000;
    sec--;
  }
  size_t sl = (size_t)snprintf(s, sizeof s, "%lld", (long long)sec);
  size_t ul = (size_t)snprintf(us, sizeof us, "%lld", (long long)ms * 1000);
  rm_out_array(c, 2);
  rm_out_bulk(c, s, sl);
  rm_out_bulk(c, us, ul);
}

static void publish(rm_ctx *c, int sharded) {
  const rm_pubsub *ps = &c->m->ps;
  long long n = ps->publish
                    ? ps->publish(ps->user, sharded, c->argv[1].p,
                                  c->argv[1].len, c->argv[2].p, c->argv[2].len)
                    : 0;
  rm_out_int(c, n);
}

static void c_publish(rm_ctx *c) { publish(c, 0); }
static void c_spublish(rm_ctx *c) { publish(c, 1); }

static void numsub(rm_ctx *c, int sharded) {
  const rm_pubsub *ps = &c->m->ps;
  rm_out_array(c, (size_t)(c->argc - 2) * 2);
  for (int i = 2; i < c->argc; i++) {
    rm_out_bulk(c, c->argv[i].p, c->argv[i].len);
    rm_out_int(c, ps->numsub ? ps->numsub(ps->user, sharded, c->argv[i].p,
                                          c->argv[i].len)
                             : 0);
  }
}

static void c_numsub(rm_ctx *c) { numsub(c, 0); }
static void c_shardnumsub(rm_ctx *c) { numsub(c, 1); }

static const rm_cmd g_pubsub_sub[] = {
    {"pubsub|numsub", -2, c_numsub, 0, NULL},
    {"pubsub|shardnumsub", -2, c_shardnumsub, 0, NULL},
    {"pubsub|channels", -2, NULL, 0, NULL},
    {"pubsub|numpat", 2, NULL, 0, NULL},
    {"pubsub|shardchannels", -2, NULL, 0, NULL},
    {"pubsub|help", 2, NULL, 0, NULL},
    {NULL, 0, NULL, 0, NULL}};

const rm_cmd rm_cmds_generic[] = {
    {"del", -2, c_del, 0, NULL},
    {"exists", -2, c_exists, 0, NULL},
    {"type", 2, c_type, 0, NULL},
    {"pexpire", -3, c_pexpire, 0, NULL},
    {"pttl", 2, c_pttl, 0, NULL},
    {"time", 1, c_time, 0, NULL},
    {"publish", 3, c_publish, 0, NULL},
    {"spublish", 3, c_spublish, 0, NULL},
    {"pubsub", -2, NULL, RM_CMD_CONTAINER, g_pubsub_sub},
    {NULL, 0, NULL, 0, NULL}};
