/*
 * sim.h -- the deterministic simulator of issue 41 (`make sim`): one thread,
 * simulated time, a seeded PRNG, an event queue, a network per connection,
 * the Redis model (redis_model.h) running the library's REAL Lua scripts,
 * and the library's REAL engine (src/engine/engine.c: hold records, local
 * deadlines, request binding, the unlock's verdicts) -- checked against the
 * locks' invariants after every step. docs/sim.md, "The simulator".
 *
 * The parts:
 *   sim_world.c       PRNG, event queue, trace, scripts (with overrides),
 *                     the network and the server (the model)
 *   sim_calls_mutex.c the plain mutex's and the watchdog's KEYS/ARGV
 *   sim_calls_rw.c    the read-write lock's KEYS/ARGV
 *   sim_actor.c       the drivers' sequencing re-stated: acquire, release,
 *                     settle, commits, the router's tries (mutex.c, conn.c)
 *   sim_wd.c          the watchdog's collect / send / apply (watchdog.c)
 *   sim_check.c       the invariants
 *   sim_main.c        seeds, budgets, the report
 */
#ifndef DLOCK_SIM_H
#define DLOCK_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "kinds/kinds.h"
#include "redis_model.h"

/* ---- configuration: the library's config fields the sim uses ------------ */
typedef struct sim_cfg {
  int64_t wd_lease;    /* watchdog_timeout_ms */
  int64_t cto;         /* command_timeout_ms */
  int tries;           /* retry_attempts + 1 */
  int64_t retry_pause; /* retry_interval_ms (DLOCK_RETRY_CONSTANT) */
  int64_t tomb_ttl;    /* dlock__tombstone_ttl */
} sim_cfg;

/* ---- PRNG (splitmix64: seeded, no other source of randomness) ----------- */
typedef struct sim_rng {
  uint64_t s;
} sim_rng;
uint64_t sim_rand(sim_rng *r);
int64_t sim_between(sim_rng *r, int64_t lo, int64_t hi); /* [lo, hi] */
int sim_chance(sim_rng *r, int per_mille);

/* ---- a script call or a command, as sent --------------------------------- */
#define SIM_MAXK 10
#define SIM_STR 112
typedef struct sim_call {
  const char *script; /* a script's name (sim_lib_scripts), NULL: command */
  int nk, na;         /* KEYS and ARGV (a command: na words, nk 0) */
  char k[SIM_MAXK][SIM_STR];
  char a[SIM_MAXK][SIM_STR];
} sim_call;

/* A reply, as the drivers read it. */
typedef struct sim_rep {
  int type; /* RM_REPLY_* */
  long long integer;
  char str[64];
} sim_rep;

/* ---- lock kinds the actors use ------------------------------------------ */
enum { K_MUTEX = 0, K_READ, K_WRITE, K_SEM, K_COUNT };
extern const char *const sim_kind_name[K_COUNT];
#define SIM_MUTEX_NAME "m0"
#define SIM_RW_NAME "rw0"
#define SIM_SEM_NAME "s0"
#define SIM_SEM_PERMITS 2

/* ---- events -------------------------------------------------------------- */
enum {
  EV_DELIVER = 1, /* a request copy reaches the server */
  EV_REPLY,       /* its reply reaches the client */
  EV_TIMEOUT,     /* a try's reply timeout */
  EV_TIMER,       /* an actor's own timer (sleep, retry pause, next op) */
  EV_WD,          /* the watchdog's wake-up */
  EV_WD_SEND,     /* the watchdog sends what it collected */
  EV_PAUSE        /* a client pause (GC, SIGSTOP) begins */
};
typedef struct sim_ev {
  int64_t at;
  uint64_t seq;
  int kind, client, actor; /* actor -1: the client's watchdog */
  uint64_t tag;            /* which request / timer it belongs to */
  int req;                 /* EV_DELIVER: index in the request pool */
  sim_rep rep;             /* EV_REPLY */
} sim_ev;

/* ---- the actors ---------------------------------------------------------- */
typedef struct sim_world sim_world;
typedef struct sim_actor sim_actor;
/* A router call's end: rc 0 answered (rep), or DLOCK_ECONN; sends copies. */
typedef void (*sim_done)(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                         int sends);
typedef void (*sim_step)(sim_world *w, sim_actor *a);

struct sim_actor {
  int client, idx;
  uint64_t tid;
  char field[64]; /* "<client id>:<tid>" */
  /* the engine's records, one per kind (the library's per name and object:
   * a read-write lock is two mutex objects) */
  dlock__hold rec[K_COUNT];
  int held[K_COUNT];    /* holds the program is inside (acquired, unlock not
                           begun) */
  int rel_ok[K_COUNT];  /* the last final release was answered released */
  int acq_ran[K_COUNT]; /* an acquire copy ran since then */
  /* the operation: kind, holds wanted, done so far */
  int kind, want;
  int64_t hold_ms;
  /* the acquire call */
  long long wait_ms;
  int64_t lease, started, sent;
  int wd, prior, try_round, acquiring, acq_rc;
  int64_t ttl;
  dlock__wait wt;
  char owed[33];
  /* the release call (an unlock, an undo, a settle) */
  dlock__eng_unlock u;
  int rel_retry, rel_forgot, rel_rc, rel_sends, undo_rc, undo_sends, settle_rc,
      settled;
  sim_step after_settle;
  /* tombstones to commit after an answer, and what follows */
  char commit_rid[2][33];
  int commit_rel[2], ncommit, commit_rc;
  sim_step after_commit;
  /* the semaphore object's request id and its previous change's */
  char sem_rid[33], sem_prev[33];
  /* the actor's own timer */
  uint64_t timer_tag;
  sim_step on_timer;
  /* the router call in flight */
  sim_call call;
  sim_done done;
  int try_no, sends;
  uint64_t tag; /* current try's tag (0: none) */
  uint64_t conn;
  int64_t conn_last_deliver, conn_last_reply;
};

typedef struct sim_wd_item {
  dlock__hold *h;
  uint32_t gen;
  int kind;
  int actor;
  int flag;     /* 1 renewed, 0 gone, 2 no answer */
  uint64_t tag; /* the request it went in */
} sim_wd_item;

typedef struct sim_client {
  char id[40];
  sim_actor *actors;
  int nactors;
  int64_t paused_until;
  /* the watchdog */
  int wd_busy, wd_n, wd_pending;
  sim_wd_item wd_items[16];
  int64_t wd_sent_at;
  uint64_t wd_wake_tag, wd_send_tag, wd_timeout_tag, wd_conn;
  int64_t wd_last_deliver, wd_last_reply;
  int64_t wd_next; /* its armed wake-up (-1 none) */
} sim_client;

/* ---- the trace: the last events, for a violation's story ----------------- */
#define SIM_TRACE 4096
#define SIM_TRACE_LEN 200

/* ---- the world ------------------------------------------------------------
 */
typedef struct sim_req {
  sim_call call;
  int client, actor, used;
  uint64_t tag, conn;
  int64_t reply_delay; /* -1: the reply is lost */
  int64_t sent_at;
  int held; /* held on the wire past the client's timeout */
} sim_req;

struct sim_world {
  uint64_t seed;
  sim_rng rng;
  sim_cfg cfg;
  int64_t now, t0;
  uint64_t steps, seq, next_tag;
  rm_model *m;
  /* scripts: name -> sha loaded into the model (override bodies applied) */
  int nscripts;
  const char **sname;
  char (*ssha)[41];
  /* events (a binary heap) and request copies in flight */
  sim_ev *heap;
  size_t nheap, capheap;
  sim_req *reqs;
  int nreqs, capreqs;
  sim_client *clients;
  int nclients;
  /* the trace ring */
  char trace[SIM_TRACE][SIM_TRACE_LEN];
  uint64_t ntrace;
  int verbose;
  int holders_only; /* check the holders (1, 2) only, not the keys (3) */
  /* fault rates, per mille of request copies */
  int p_drop, p_hold, p_slow, p_pause;
  /* counters */
  uint64_t n_sent, n_held, n_dropped, n_pauses, n_acquired, n_released;
  uint64_t n_lost_late;
  int violation;
};

/* sim_world.c */
void sim_world_init(sim_world *w, uint64_t seed, int nclients, int nactors);
void sim_world_free(sim_world *w);
void sim_trace(sim_world *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sim_trace_dump(const sim_world *w, FILE *f);
/* The last `max` lines that name one of whos[0..n) ("c0.t1", "c0.wd"):
 * the story of a violation, without the other actors' traffic. */
void sim_trace_story(const sim_world *w, FILE *f, const char *const *whos,
                     int n, int max);
void sim_push(sim_world *w, const sim_ev *e);
int sim_pop(sim_world *w, sim_ev *out);
void sim_timer(sim_world *w, int client, int actor, int kind, int64_t at,
               uint64_t tag);
/* Sends one copy of call on a connection (the actor's, or the client's
 * watchdog link when actor < 0): chooses its fate (delay, a lost reply, a
 * copy held past the client's timeout). */
void sim_send(sim_world *w, int client, int actor, const sim_call *c,
              uint64_t tag);
/* The server runs request copy i now (EV_DELIVER). */
void sim_deliver(sim_world *w, int i);
/* A probe of the model by the checker (read-only commands). */
int sim_probe(sim_world *w, sim_rep *out, const char *const *argv);
int sim_script_count(void);
const char *sim_who(char b[12], int actor); /* "t<n>", or "wd" */
const char *sim_describe(const sim_call *c, char *buf, size_t n);

/* sim_calls_mutex.c / sim_calls_rw.c: the calls, as src/ builds them */
void sim_call_acquire(sim_world *w, const sim_actor *a, int kind, int target,
                      sim_call *c);
void sim_call_release(sim_world *w, const sim_actor *a, int kind,
                      const dlock__eng_unlock *u, sim_call *c);
void sim_call_tomb(sim_world *w, int kind, const char *rid, int release,
                   sim_call *c);
void sim_call_renew(sim_world *w, const sim_client *cl, sim_wd_item *items,
                    int n, sim_call *c);
void sim_call_read_renew(sim_world *w, const sim_actor *a, sim_call *c);
void sim_mutex_acquire_call(const char *name, const char *field, int target,
                            int64_t lease, const dlock__wait *wt, int64_t now,
                            sim_call *c);
void sim_mutex_release_call(const char *name, const char *field,
                            const dlock__eng_unlock *u, int64_t tomb_ttl,
                            sim_call *c);
void sim_rw_acquire_call(int kind, const char *name, const char *field,
                         int target, int64_t lease, const char *rid,
                         sim_call *c);
void sim_rw_release_call(int kind, const char *name, const char *field,
                         const dlock__eng_unlock *u, int64_t tomb_ttl,
                         sim_call *c);
void sim_rw_timeout_prefix(const char *name, const char *field, char *out,
                           size_t n);
/* What an acquire script's answer means (engine/calls.c dlock__acq_reply,
 * rwlock.c attempt_answer): 1 held, 0 taken (*ttl), or a code. */
int sim_acq_answer(int kind, const sim_rep *r, int64_t *ttl);
/* A release script's answer (dlock__rel_reply, unlock_answer). */
int sim_rel_answer(const sim_rep *r);

/* sim_actor.c */
void sim_actor_start(sim_world *w, sim_actor *a);
void sim_actor_event(sim_world *w, sim_actor *a, const sim_ev *e);
void sim_route(sim_world *w, sim_actor *a, const sim_call *c, sim_done done);
void sim_rid(sim_world *w, char out[33]);

void sim_at_timer(sim_world *w, sim_actor *a, int64_t at, sim_step fn);
void sim_op_end(sim_world *w, sim_actor *a);

/* sim_sem.c */
void sim_sem_start(sim_world *w, sim_actor *a);
void sim_call_sem(sim_world *w, const sim_actor *a, int post, sim_call *c);

/* sim_wd.c */
void sim_wd_arm(sim_world *w, int client);
void sim_wd_event(sim_world *w, int client, const sim_ev *e);

/* sim_check.c: 0, or 1 after printing the violation */
int sim_check(sim_world *w);

#endif
