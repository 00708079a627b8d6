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
 *   sim_calls_fair.c  the fair lock's KEYS/ARGV (its threads: sim_actor.c)
 *   sim_actor.c       the drivers' sequencing re-stated: acquire, release,
 *                     settle, commits, the router's tries (mutex.c, conn.c)
 *   sim_wd.c          the watchdog's collect / send / apply (watchdog.c)
 *   sim_permits.c     expirable permits: the driver (permits.c) re-stated,
 *                     on actors of their own with a PRNG stream of their own
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
enum { K_MUTEX = 0, K_READ, K_WRITE, K_SEM, K_FAIR, K_COUNT };
extern const char *const sim_kind_name[K_COUNT];
#define SIM_MUTEX_NAME "m0"
#define SIM_RW_NAME "rw0"
#define SIM_SEM_NAME "s0"
#define SIM_SEM_PERMITS 2
#define SIM_FAIR_NAME "f0" /* the fair lock (sim_calls_fair.c) */
/* A free fair lock with a live waiter in its queue is taken within this
 * (simulated ms): a dead head's place lives FAIR_LIVE_MS (5 s) after its
 * last attempt, a live waiter attempts at least every FAIR_REFRESH_MS
 * (1 s), and a call spans at most 3 tries of 500 ms and 2 pauses. */
#define SIM_FAIR_BOUND 10000
/* fair.c's FAIR_REFRESH_MS: the fair lock's ops' max_sleep_ms. */
#define SIM_FAIR_REFRESH_MS 1000
#define SIM_PERM_NAME "p0" /* expirable permits (sim_permits.c) */
#define SIM_PERM_CAP 2
#define SIM_PERM_ID 17 /* a permit id: 16 bytes (printable here) and a NUL */
#define SIM_PERM_WD 8  /* the permits one object renews, at most */
#define SIM_PERM_PEND 8
/* Actor numbers in events: >= 0 a lock thread, -1 the client's watchdog,
 * -2 its permits object's renewer, SIM_PACTOR + i its permit thread i,
 * SIM_FACTOR + i its fair lock thread i. */
#define SIM_PW (-2)
#define SIM_PACTOR 100
#define SIM_FACTOR 200

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
  int leaving;    /* a fair wait ended: its cancel (leave_queue) in flight */
  int fair_queue; /* the fair attempt joins the queue (fair_acquire) */
  int fail_rc;    /* the call's own error while it leaves the queue */
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
  /* an expirable permit (permit threads only; sim_permits.c) */
  struct {
    char id[SIM_PERM_ID];
    int held;            /* reported acquired, release not begun */
    int wd;              /* renewed by the object (lease_ms <= 0) */
    int64_t sent, lease; /* the answered attempt's send, its lease */
    int64_t until;       /* fixed lease: the caller's local deadline */
    int64_t cap;      /* an update to a shorter lease may have run: the caller
                         counts no further (-1 none) */
    int64_t cap_at;   /* when a stale copy set it (a renewal sent later and
                         answered lifts it), else -1 */
    int64_t late;     /* reported acquired this many ms past its send +
                         lease (>= 0: invariant 8 broken), else -1 */
    int64_t deadline; /* the wait's end */
    int64_t next_expiry, upd_sent, upd_lease, rel_first, rel_until;
    int rel_tries, updating;
    char gone[SIM_PERM_ID]; /* the id of the last release sent */
    int gone_ok;            /* ... answered released */
    int gone_ran;           /* an acquire copy of it ran since the send */
  } pm;
  /* the router's budget: no try starts, and none waits, past it (0 none) */
  int64_t route_until;
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

/* A client's permits object (src/kinds/permits.c struct dlock_permits): the
 * permits its renewer renews, the releases with an unknown outcome, the
 * renewer's state; busy = renew_mu (a batch or an update in flight). */
typedef struct sim_pobj {
  struct {
    char id[SIM_PERM_ID];
    int releasing, actor;
    int64_t valid_until;
    int64_t cap; /* an update_lease in doubt: valid_until never passes it */
  } wd[SIM_PERM_WD];
  int nwd;
  struct {
    char id[SIM_PERM_ID];
    int64_t first_sent, valid_until;
  } pend[SIM_PERM_PEND];
  int npend;
  int started, busy, nbatch;
  int64_t next, batch_sent;
  char batch[SIM_PERM_WD][SIM_PERM_ID];
} sim_pobj;

typedef struct sim_client {
  char id[40];
  sim_actor *actors;
  int nactors;
  sim_actor *pactors; /* the permit threads */
  int npactors;
  sim_actor *factors; /* the fair lock threads */
  int nfactors;
  sim_actor pw; /* the permits object's renewer thread */
  sim_pobj po;
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
  /* the permit threads' own stream: adding them changes no draw of the
   * others, so an older seed replays the same locks' story */
  sim_rng prng;
  sim_rng frng; /* the fair lock threads' own, for the same reason */
  int64_t fair_stuck_since; /* a free fair lock with a live waiter queued
                               since then (-1: not now) */
  int put_back_late_permit; /* DLOCK_SIM_PUT_BACK=permit_late_answer */
  int permit_lib_deadline;  /* --permit-lib-deadline: check the object's
                               own deadlines too (invariant 7b) */
  int permit_strict;        /* --permit-strict: the library's rule for an
                               attempt answered "already ours" as it is */
  int fair_strict;      /* --fair-strict: a dead head kept by the shrink's floor
                           is a violation (else counted) */
  int64_t fair_excused; /* the stretch counted began then (-1: none) */
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
  uint64_t n_pm_acquired, n_pm_released, n_pm_late, n_pm_lost, n_pm_back;
  uint64_t n_pm_earlier;       /* taken by an earlier attempt's late copy */
  uint64_t n_pm_lowered;       /* a late renewal or update copy moved a held
                                  permit's expiry back */
  long long pm_prev[SIM_MAXK]; /* the scores before an update copy ran */
  uint64_t n_fair_acquired, n_fair_released, n_fair_cancels, n_fair_raised;
  int delivered; /* the last step ran a copy on the server (the checks
                    of the server's state alone run then) */
  int violation;
};

/* sim_world.c */
void sim_world_init(sim_world *w, uint64_t seed, int nclients, int nactors,
                    int npactors, int nfactors);
/* The PRNG stream an actor's draws come from (its own for the permit and
 * fair lock threads). */
sim_rng *sim_rng_of(sim_world *w, int actor);
/* The actor an event's number names (NULL: the watchdog). */
sim_actor *sim_actor_at(sim_world *w, int client, int actor);
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
void sim_fair_acquire_call(const char *field, int target, int64_t lease,
                           int queue, const char *rid, int64_t now,
                           sim_call *c);
void sim_fair_release_call(const char *field, const dlock__eng_unlock *u,
                           int64_t tomb_ttl, int64_t now, sim_call *c);
void sim_fair_cancel_call(const char *field, int64_t now, sim_call *c);
const char *sim_lock_name(int kind);
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

/* sim_permits.c */
void sim_perm_start(sim_world *w, sim_actor *a);
void sim_perm_before(sim_world *w, const sim_req *q);
void sim_perm_ran(sim_world *w, const sim_req *q, const sim_rep *r);
int sim_pobj_valid(const sim_client *cl, const sim_actor *a, int64_t now);
int64_t sim_pobj_until(const sim_client *cl, const sim_actor *a);

/* sim_wd.c */
void sim_wd_arm(sim_world *w, int client);
void sim_wd_event(sim_world *w, int client, const sim_ev *e);

/* sim_check.c: 0, or 1 after printing the violation */
int sim_check(sim_world *w);
int sim_fail(sim_world *w, const char *what, const sim_actor *a,
             const sim_actor *b);
/* sim_check_permits.c: invariants 5-9 (the expirable permits) */
int sim_check_permits(sim_world *w);

#endif
