/*
 * rm_int.h -- the Redis model's internal map (tests/sim, redis_model.h):
 * the keyspace's objects, the reply sink every command writes to, the
 * command table, and the helpers the rm_*.c files share. What each file
 * owns:
 *   redis_model.c   the model object, the clock, rm_command (client level)
 *   rm_keyspace.c   keys, objects, expiry on access
 *   rm_values.c     the value types' storage (string, hash, list, zset)
 *   rm_parse.c      numbers as Redis parses and prints them
 *   rm_reply.c      reply trees (rm_reply) and the sink that builds them
 *   rm_commands.c   the command table, lookup, arity, model errors
 *   rm_cmd_*.c      the commands of one family each
 *   rm_lua.c        the embedded Lua: redis.*, conversions, script cache,
 *                   EVAL / EVALSHA / SCRIPT
 */
#ifndef DLOCK_RM_INT_H
#define DLOCK_RM_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "redis_model.h"

/* ---- memory (aborts on OOM: test code) -------------------------------- */
void *rm_xmalloc(size_t n);
void *rm_xrealloc(void *p, size_t n);
char *rm_xmemdup(const char *p, size_t n); /* n bytes + a NUL */

/* An argument: not owned, not NUL-terminated in general. */
typedef struct rm_arg {
  const char *p;
  size_t len;
} rm_arg;

/* Owned bytes, always followed by a NUL (not counted in len). */
typedef struct rm_bytes {
  char *p;
  size_t len;
} rm_bytes;
void rm_bytes_set(rm_bytes *b, const char *p, size_t n);
void rm_bytes_free(rm_bytes *b);
int rm_arg_eq(rm_arg a, const char *p, size_t n); /* bytes equal */
int rm_arg_is(rm_arg a, const char *lower_word);  /* case-insensitive */
int rm_bytes_cmp(const char *a, size_t al, const char *b, size_t bl);

/* ---- values (rm_values.c) ---------------------------------------------- */
typedef struct rm_hash {
  rm_bytes *f, *v; /* insertion order (a small hash's listpack order) */
  size_t n, cap;
} rm_hash;
typedef struct rm_list {
  rm_bytes *a; /* elements a[head .. head + n) */
  size_t head, n, cap;
} rm_list;
typedef struct rm_zent {
  double score;
  rm_bytes m;
} rm_zent;
typedef struct rm_zset {
  rm_zent *e; /* sorted by (score, member bytes) as Redis orders them */
  size_t n, cap;
} rm_zset;

/* hash: the index of field f, or -1 */
long rm_hash_find(const rm_hash *h, const char *f, size_t n);
/* 1 new field, 0 updated */
int rm_hash_set(rm_hash *h, const char *f, size_t fl, const char *v, size_t vl);
int rm_hash_del(rm_hash *h, const char *f, size_t n); /* 1 deleted */
void rm_hash_free(rm_hash *h);

void rm_list_push_tail(rm_list *l, const char *p, size_t n);
rm_bytes *rm_list_at(const rm_list *l, size_t i);
/* Pops the head into *out (owned by the caller now). */
void rm_list_pop_head(rm_list *l, rm_bytes *out);
void rm_list_remove_at(rm_list *l, size_t i);
void rm_list_free(rm_list *l);

long rm_zset_find(const rm_zset *z, const char *m, size_t n);
/* Inserts a member that is not there. */
void rm_zset_insert(rm_zset *z, double score, const char *m, size_t n);
void rm_zset_remove_at(rm_zset *z, size_t i);
/* Changes the score of entry i, keeping the order. */
void rm_zset_rescore(rm_zset *z, size_t i, double score);
void rm_zset_free(rm_zset *z);

/* ---- keyspace (rm_keyspace.c) ------------------------------------------ */
typedef struct rm_obj {
  struct rm_obj *next; /* bucket chain */
  uint64_t hash;
  int type;       /* RM_T_* */
  int64_t expire; /* absolute ms, -1 none */
  rm_bytes key;
  union {
    rm_bytes s;
    rm_hash h;
    rm_list l;
    rm_zset z;
  } v;
} rm_obj;

typedef struct rm_keyspace {
  rm_obj **b;
  size_t nb, n;
} rm_keyspace;

void rm_ks_init(rm_keyspace *ks);
void rm_ks_free(rm_keyspace *ks);
/* The live object of key, or NULL; an expired one is deleted first. */
rm_obj *rm_ks_lookup(rm_model *m, const char *k, size_t n);
/* A new empty object of type under key (which must not be live). */
rm_obj *rm_ks_create(rm_model *m, const char *k, size_t n, int type);
void rm_ks_delete(rm_model *m, rm_obj *o);
/* Deletes o if its value is empty (a hash, list or zset with no element),
 * as Redis does after a removal. */
void rm_ks_delete_if_empty(rm_model *m, rm_obj *o);

/* ---- the reply sink ------------------------------------------------------
 * A command writes its reply through a sink: the tree sink (rm_reply.c)
 * for clients, the Lua sink (rm_lua.c) for redis.call, which converts each
 * value to Lua on the fly. An array announces its length, then its
 * elements follow. */
typedef struct rm_sink {
  void (*integer)(void *st, long long v);
  void (*bulk)(void *st, const char *p, size_t n);
  void (*nil)(void *st);       /* nil bulk string */
  void (*nil_array)(void *st); /* nil array */
  void (*status)(void *st, const char *p, size_t n);
  void (*error)(void *st, const char *p, size_t n); /* "CODE message" */
  void (*array)(void *st, size_t n);
} rm_sink;

/* The tree sink: fills a rm_reply. */
typedef struct rm_tree {
  rm_reply *root;
  int started;
  int depth;
  rm_reply *arr[16];
  size_t filled[16];
} rm_tree;
extern const rm_sink rm_tree_sink;
void rm_tree_begin(rm_tree *t, rm_reply *out);

/* ---- commands ------------------------------------------------------------ */
typedef struct rm_ctx {
  rm_model *m;
  int argc;
  const rm_arg *argv;
  const rm_sink *sink;
  void *st;
  int in_script;
} rm_ctx;

typedef void (*rm_cmd_fn)(rm_ctx *c);
enum {
  RM_CMD_NOSCRIPT = 1, /* not callable from a script (EVAL, SCRIPT) */
  RM_CMD_CONTAINER = 2 /* has subcommands (argv[1]) */
};
typedef struct rm_cmd {
  const char *name; /* lower case; "pubsub|numsub" for a subcommand */
  int arity;        /* Redis's: n exact, -n at least n */
  rm_cmd_fn fn;     /* NULL: known to Redis but not modelled */
  int flags;
  const struct rm_cmd *sub; /* RM_CMD_CONTAINER: {NULL}-terminated */
} rm_cmd;

/* lookup result: found (its fn may be NULL: not modelled), a Redis
 * command the model does not have, no Redis command at all, an unknown
 * subcommand of a container */
enum { RM_LK_FOUND, RM_LK_UNMODELLED, RM_LK_UNKNOWN, RM_LK_UNKNOWN_SUB };
/* The command of argv: *cmd set on RM_LK_FOUND, and for RM_LK_UNKNOWN_SUB
 * to the container. */
int rm_cmd_lookup(int argc, const rm_arg *argv, const rm_cmd **cmd);
/* 1 when argc fits cmd's arity. */
int rm_cmd_arity_ok(const rm_cmd *cmd, int argc);
/* Runs cmd (found, modelled, arity checked) with the sink of c. */
void rm_cmd_run(rm_ctx *c, const rm_cmd *cmd);

/* The families' tables ({NULL}-terminated), rm_cmd_*.c. */
extern const rm_cmd rm_cmds_generic[], rm_cmds_string[], rm_cmds_hash[],
    rm_cmds_list[], rm_cmds_zset[], rm_cmds_script[];

/* Reply helpers over c's sink. */
void rm_out_int(rm_ctx *c, long long v);
void rm_out_bulk(rm_ctx *c, const char *p, size_t n);
void rm_out_nil(rm_ctx *c);
void rm_out_nil_array(rm_ctx *c);
void rm_out_status(rm_ctx *c, const char *s);
void rm_out_array(rm_ctx *c, size_t n);
void rm_out_double(rm_ctx *c, double d); /* bulk, %.17g / inf / -inf */
/* An error reply "<fmt...>": fmt starts with the code ("ERR ..."). */
void rm_out_error(rm_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rm_out_wrongtype(rm_ctx *c);
void rm_out_syntax(rm_ctx *c);
void rm_out_arity(rm_ctx *c, const char *name); /* the command's own */

/* Records a model error (what is not modelled) and writes its error
 * reply "MODELERR <what>" through c's sink. */
void rm_model_fail(rm_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rm_model_note(rm_model *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The live object of argv[i] if it has type (NULL when missing); -1 after
 * a WRONGTYPE reply. */
int rm_lookup_typed(rm_ctx *c, int i, int type, rm_obj **o);

/* ---- numbers as Redis parses and prints them (rm_parse.c) --------------- */
/* Redis's string2ll: strict decimal, no spaces, no '+', no leading zeros. */
int rm_str2ll(const char *p, size_t n, long long *v);
/* getLongLongFromObjectOrReply: 0, or -1 after "value is not an integer
 * or out of range". */
int rm_get_ll(rm_ctx *c, rm_arg a, long long *v);
/* getLongFromObjectOrReply (long is long long here); with a range. */
int rm_get_range_ll(rm_ctx *c, rm_arg a, long long min, long long max,
                    long long *v, const char *msg);
/* getPositiveLongFromObjectOrReply with msg for a negative value. */
int rm_get_positive(rm_ctx *c, rm_arg a, long long *v, const char *msg);
/* getDoubleFromObject: 0 or -1 (no reply). */
int rm_str2d(const char *p, size_t n, double *v);
/* "%.17g", "inf", "-inf" into buf (>= 32 bytes); the length. */
size_t rm_fmt_double(char *buf, double d);
/* Redis's number -> argument text for a Lua number: "%.17g". */
size_t rm_fmt_lua_number(char *buf, double d);

/* ---- the Lua side (rm_lua.c) ------------------------------------------- */
typedef struct rm_lua rm_lua;
rm_lua *rm_lua_new(rm_model *m);
void rm_lua_free(rm_lua *l);
/* EVAL (evalsha 0) / EVALSHA (1) with c's argv. */
void rm_lua_eval(rm_ctx *c, int evalsha);
/* SCRIPT LOAD body: the sha reply, or an error. */
void rm_lua_script_load(rm_ctx *c, rm_arg body);
/* 1 if a script of sha (40 hex, any case) is cached. */
int rm_lua_script_exists(rm_lua *l, const char *sha, size_t n);

/* ---- the model object (redis_model.c) ----------------------------------- */
struct rm_model {
  rm_keyspace ks;
  int64_t now;
  int64_t latest; /* the latest time the clock was set to (>= now) */
  rm_pubsub ps;
  rm_lua *lua;
  int model_err; /* a model error since the last clear */
  char model_err_text[512];
  int running; /* a model error of the current rm_command */
};

#endif
