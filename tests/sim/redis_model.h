/*
 * redis_model.h -- a model of one Redis 7 server for the deterministic
 * simulator (issue 41): the project's REAL Lua scripts run in an embedded
 * Lua 5.1 (the version Redis embeds) with redis.call / redis.pcall over an
 * in-memory keyspace whose clock is set by the caller. What it owns: the
 * interface; the parts live in rm_*.c (rm_int.h is their shared map).
 *
 * WHAT IS MODELLED (docs/sim.md): only the commands the library's scripts
 * and its direct calls use -- DEL EXISTS TYPE PEXPIRE PTTL TIME PUBLISH
 * SPUBLISH PUBSUB NUMSUB|SHARDNUMSUB, GET SET INCR INCRBY DECR DECRBY, HSET
 * HGET HEXISTS HDEL HLEN HKEYS HGETALL, RPUSH LPOP LLEN LINDEX LPOS LRANGE
 * LREM, ZADD ZCARD ZINCRBY ZRANGE ZRANGEBYSCORE ZREM ZSCORE, and EVAL /
 * EVALSHA / SCRIPT LOAD|EXISTS|FLUSH -- each with Redis 7.0's semantics and
 * error replies (WRONGTYPE, syntax and range errors, the order in which
 * Redis checks them). Any other Redis command (or form of one, such as
 * ZRANGE BYLEX, or a library such as cjson) is a MODEL ERROR: the call
 * fails with an error reply starting "MODELERR" and rm_model_error() says
 * what -- never ignored, even when a script catches it. A name that is no
 * Redis command at all gets Redis's own error reply.
 *
 * TIME is simulated: rm_set_time() sets the clock (ms since the epoch); the
 * model never reads a clock of its own and draws no random numbers. Keys
 * expire when the clock passes their expiry (Redis: expired when now >
 * expiry), checked on every access as Redis does (nothing happens between
 * calls: the observable result is the same as Redis's background expiry).
 * TIME inside a script answers the simulated clock.
 *
 * PUB/SUB: PUBLISH / SPUBLISH call the caller's publish callback, whose
 * return is the reply (the number of receivers); PUBSUB NUMSUB /
 * SHARDNUMSUB ask its numsub callback. Subscriptions are the caller's.
 *
 * REPLIES are hiredis-shaped (RESP2, what the library speaks): the type
 * numbers equal hiredis's REDIS_REPLY_* so a test can compare both.
 *
 * Thread-safety: a model belongs to one thread at a time. Memory: the model
 * aborts the process when malloc fails (it is test code).
 */
#ifndef DLOCK_REDIS_MODEL_H
#define DLOCK_REDIS_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct rm_model rm_model;

/* Reply types: the same numbers as hiredis's REDIS_REPLY_*. */
enum {
  RM_REPLY_STRING = 1,
  RM_REPLY_ARRAY = 2,
  RM_REPLY_INTEGER = 3,
  RM_REPLY_NIL = 4, /* a nil bulk string or a nil array (RESP2) */
  RM_REPLY_STATUS = 5,
  RM_REPLY_ERROR = 6
};

/* A reply. str (STRING, STATUS, ERROR: len bytes + a NUL) and element
 * (ARRAY: elements replies) are owned by the reply: rm_reply_clear. */
typedef struct rm_reply {
  int type;
  long long integer;
  char *str;
  size_t len;
  size_t elements;
  struct rm_reply *element;
} rm_reply;

/* The caller's pub/sub: publish returns the number of receivers of msg on
 * channel (sharded: SPUBLISH); numsub the number of subscribers of the
 * channel (sharded: SHARDNUMSUB). Either may be NULL: 0 receivers. */
typedef struct rm_pubsub {
  long long (*publish)(void *user, int sharded, const char *ch, size_t chlen,
                       const char *msg, size_t msglen);
  long long (*numsub)(void *user, int sharded, const char *ch, size_t chlen);
  void *user;
} rm_pubsub;

/* rm_command's results. */
enum {
  RM_OK = 0,     /* ran (its reply may be a Redis error reply) */
  RM_EMODEL = -1 /* a model error: the reply says what is not modelled */
};

/* A new model: empty keyspace, empty script cache, clock at 0. ps is
 * copied (NULL: nobody subscribes). Never NULL (aborts on OOM). */
rm_model *rm_new(const rm_pubsub *ps);
/* Frees the model and everything it holds. NULL is fine. */
void rm_free(rm_model *m);

/* The simulated clock, ms since the epoch. Setting it back is allowed (a
 * clock step): keys whose expiry the clock had passed stay expired (as if
 * Redis's background expiry had deleted them), TTLs are counted from the
 * new time. */
void rm_set_time(rm_model *m, int64_t ms);
int64_t rm_time(const rm_model *m);

/* Runs one command as a client would send it (argv[0] the name, any case;
 * binary-safe arguments). EVAL/EVALSHA run scripts. out receives the reply
 * (cleared first; the caller clears it). RM_OK, or RM_EMODEL when the
 * command, or one a script called, is not modelled: out is then an error
 * reply "MODELERR ..." and rm_model_error says the same. */
int rm_command(rm_model *m, int argc, const char *const *argv,
               const size_t *lens, rm_reply *out);
/* The same with a NULL-terminated argv of C strings (tests, tools). */
int rm_commandv(rm_model *m, rm_reply *out, const char *const *argv);
/* 1 when `name` (any case) is a command the model implements (EVAL,
 * EVALSHA and SCRIPT included), else 0 (a Redis command it does not
 * implement, or no command). */
int rm_has_command(const char *name, size_t len);

/* The text of the last model error ("" when none since rm_new or the last
 * rm_clear_model_error). */
const char *rm_model_error(const rm_model *m);
void rm_clear_model_error(rm_model *m);

/* Empties the keyspace (FLUSHALL) / the script cache (SCRIPT FLUSH: what a
 * restart or a failover to a fresh replica does). */
void rm_flushall(rm_model *m);
void rm_script_flush(rm_model *m);

/* Key types of rm_key_type / rm_foreach_key. */
enum { RM_T_NONE = 0, RM_T_STRING, RM_T_HASH, RM_T_LIST, RM_T_ZSET };
/* "none", "string", "hash", "list", "zset" (TYPE's answers). */
const char *rm_type_name(int type);

/* Calls fn once per live key (expired ones are skipped, as KEYS skips
 * them), in no particular order; expire_ms is the absolute expiry or -1.
 * fn must not change the model. */
void rm_foreach_key(rm_model *m,
                    void (*fn)(void *user, const char *key, size_t klen,
                               int type, int64_t expire_ms),
                    void *user);
/* Live keys now. */
size_t rm_dbsize(rm_model *m);

/* Line coverage of the scripts (a diagnostic: how much of each script a
 * test ran). Once on, every line a script runs is recorded by its digest;
 * rm_line_coverage copies the flags of lines 0..max_lines-1 of the script
 * sha (hit[i] = 1: line i ran) and returns how many it copied (0: the
 * script never ran). Slows scripts down: off by default. */
void rm_line_coverage_on(rm_model *m);
int rm_line_coverage(rm_model *m, const char *sha, unsigned char *hit,
                     int max_lines);

/* Frees what r holds and sets it to an empty NIL reply. */
void rm_reply_clear(rm_reply *r);
/* A deep copy of src into dst (dst is overwritten, not cleared). */
void rm_reply_copy(rm_reply *dst, const rm_reply *src);

#endif
