/*
 * sim_diff_int.h -- the lockstep runner's insides (sim_diff.h), shared by
 * sim_diff.c (commands, replies, the clock, failures, keyspaces) and
 * sim_diff_subs.c (subscribers and the messages they get).
 */
#ifndef DLOCK_SIM_DIFF_INT_H
#define DLOCK_SIM_DIFF_INT_H

#include <hiredis/hiredis.h>

#include "sim_diff.h"
#include "th.h"

typedef struct sim_msg {
  int sharded;
  char *ch, *msg;
  size_t chl, ml;
} sim_msg;

/* A set of channel names. */
typedef struct sim_chset {
  char **p;
  size_t *len;
  size_t n, cap;
} sim_chset;

typedef struct sim_sub {
  int id;          /* the client id of sim_diff_exec */
  redisContext *c; /* its subscriber connection on the server */
  sim_chset plain, shard;
  sim_msg *q; /* messages the model delivered, not yet read back */
  size_t qn, qcap;
} sim_sub;

typedef struct sim_skip {
  char name[24];
  unsigned long n;
} sim_skip;

struct sim_diff {
  th_redis *r;
  int shim_fd;
  redisContext *cmd;
  rm_model *m;
  int64_t now;
  sim_sub *subs;
  size_t nsubs;
  sim_script *scripts;
  size_t nscripts, scap;
  sim_chset published[2]; /* channels published to: plain, sharded */
  sim_skip skips[32];
  size_t nskips;
  sim_diff_stats st;
  unsigned long step;
  char ctx[512];
  char recent[6][320]; /* the last steps, for a failure's report */
};

/* ---- sim_diff.c ------------------------------------------------------- */
/* Prints the call the way a failure shows it ("EVALSHA <sha> (script
 * 'unlock') keys [...] args [...]"). */
void sim_describe_call(sim_diff *d, int argc, const char *const *argv,
                       const size_t *lens, char *buf, size_t len);
/* Prints what differs and the context, then fails the case. */
void sim_fail(sim_diff *d, const char *what, const char *detail)
    __attribute__((noreturn));
void sim_escape(const char *p, size_t n, size_t max, char *buf, size_t len);

/* ---- sim_diff_subs.c --------------------------------------------------- */
int sim_chset_has(const sim_chset *s, const char *p, size_t n);
void sim_chset_add(sim_chset *s, const char *p, size_t n);
int sim_chset_del(sim_chset *s, const char *p, size_t n);
void sim_chset_free(sim_chset *s);
/* The model's pub/sub callbacks (user = the runner). */
long long sim_subs_publish(void *user, int sharded, const char *ch, size_t chl,
                           const char *msg, size_t ml);
long long sim_subs_numsub(void *user, int sharded, const char *ch, size_t chl);
/* A subscribe-family command of client `conn`. */
void sim_subs_exec(sim_diff *d, int conn, int argc, const char *const *argv,
                   const size_t *lens);
/* Reads back every message the model delivered since the last call and
 * compares it with what the server delivered. */
void sim_subs_drain(sim_diff *d);
/* PING on every subscriber: nothing but the expected messages before the
 * answer. */
void sim_subs_check_quiet(sim_diff *d);
void sim_subs_drop_all(sim_diff *d);
void sim_subs_free(sim_diff *d);

#endif
