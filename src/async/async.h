/*
 * async.h -- the async layer (src/async/): what the event-loop client's
 * files share (async*.c), above the lock kinds (kinds/kinds.h). Nothing
 * here is API. Everything runs on the loop's thread: no locks.
 *
 *   async.c        the client object, the loop's entry points, completions
 *   async_timer.c  the client's timers (one heap, one loop timer)
 *   async_conn.c   a non-blocking connection: connect, AUTH/SELECT,
 *                  pipelined requests, the retry policy
 *   async_sub.c    the subscriber connection and the channel entries
 *   async_lock.c   lock and unlock calls, the hold records
 *   async_wd.c     the watchdog timer: batched renewals, lost holds
 *   async_route.c  where a connection goes: the URL's server, the
 *                  master the sentinels name (redis-sentinel://), or the
 *                  master of a request's slot (redis-cluster://)
 */
#ifndef DLOCK_ASYNC_INTERNAL_H
#define DLOCK_ASYNC_INTERNAL_H

#include "dlock/async.h"
#include "kinds/kinds.h"

/* ---- timers (async_timer.c) ------------------------------------------- */

typedef struct dlock__atimer dlock__atimer;
typedef void dlock__atimer_fn(dlock__atimer *t);
struct dlock__atimer {
  int64_t at;  /* monotonic ms */
  size_t slot; /* heap index + 1; 0 = not armed */
  dlock__atimer_fn *fn;
  void *arg;
};
typedef struct dlock__aheap {
  dlock__atimer **v;
  size_t n, cap;
} dlock__aheap;
/* Arms t for `at` (re-arms an armed one). 0 or DLOCK_ENOMEM. */
int dlock__aheap_add(dlock__aheap *h, dlock__atimer *t, int64_t at);
void dlock__aheap_del(dlock__aheap *h, dlock__atimer *t); /* if armed */
dlock__atimer *dlock__aheap_top(const dlock__aheap *h);
void dlock__aheap_free(dlock__aheap *h);

/* ---- connections (async_conn.c) ---------------------------------------- */

typedef struct dlock__areq dlock__areq;
typedef struct dlock__aconn dlock__aconn;
/* A request's end: reply (freed by the callee) or err with why. */
typedef void dlock__areq_fn(dlock__areq *r, redisReply *reply, int err,
                            const char *why);

/* One command on the command connection, kept until its reply: its bytes
 * (re-sent by the retry policy), and who waits for it. */
struct dlock__areq {
  dlock__areq *next;
  char *cmd;
  size_t len;
  const dlock__script *script; /* NOSCRIPT: re-sent as EVAL */
  int eval;                    /* cmd is the EVAL form */
  int slot;                    /* its first key's cluster slot, or -1 */
  int asking;                  /* Cluster: send ASKING before it (ASK) */
  int ask_pending;             /* ASKING's reply comes first */
  int redirects;               /* MOVED / ASK of this try */
  int waits;                   /* a WAIT was pipelined behind it */
  int wait_want;               /* the replicas it asked for */
  int wait_ms;                 /* that WAIT's timeout (take_unsent) */
  /* The wait budget's end of the call that sent it (monotonic ms; 0 none):
   * its WAIT never waits past it (async_conn.c take_unsent), nor does the
   * retry policy re-send it past it (req_retry, dlock__retry_verdict). */
  int64_t wait_until;
  redisReply *held; /* its reply, while the WAIT's is awaited */
  int no_sync;      /* never followed by WAIT (an undo) */
  int unsynced;     /* WAIT did not confirm it (engine's verdict) */
  long long acks;   /* WAIT's answer (-1: it failed) */
  int tries;        /* tries so far (failed ones included) */
  /* Sends whose bytes may have left (at least one byte written): a try
   * that failed before writing is no copy (issue 38 / io-stack.md D4). */
  int sends;
  size_t out_start; /* where its bytes begin in the connection's out */
  int counted;      /* this try's send is counted in sends */
  int behind_hs;    /* written behind its connection's handshake */
  int resent_now;   /* re-sent at once after an idle connection broke */
  int64_t pause;    /* the last retry pause (retry_delay) */
  int no_retry;     /* one send: the caller retries (renewals) */
  /* Error replies go to fn as replies (the route's own questions and
   * INFO judge them); else an error reply is judged by the shared verdict
   * (ioverdict.c) and fn hears err with its message. */
  int raw;
  int64_t sent_at;            /* when its bytes went out (monotonic ms) */
  dlock__atimer retry;        /* armed while waiting for a re-send */
  dlock__areq *rnext, *rprev; /* in the connection's waiting-for-retry list */
  dlock__aconn *k;            /* the connection, while waiting */
  dlock__areq_fn *fn;
  void *arg;
  /* Frees arg when the request is dropped without an end (fn is not
   * called: the client is being freed); NULL when arg is not the
   * request's to free (e.g. a call's record, ended on its own path). */
  void (*drop)(void *arg);
};

enum {
  DLOCK__AC_IDLE,
  DLOCK__AC_RESOLVING, /* waiting for the address (async_route.c) */
  DLOCK__AC_CONNECTING,
  DLOCK__AC_TLS, /* the TLS handshake (rediss://) */
  DLOCK__AC_HANDSHAKE,
  DLOCK__AC_READY
};

/* The library's watch of one socket: the public part, and its connection
 * (the loop's events find their connection through it). */
typedef struct dlock__awatch {
  dlock_async_watch w;
  dlock__aconn *k;
} dlock__awatch;

struct dlock__aconn {
  dlock_async *a;
  const char *what; /* "command", "subscriber": messages */
  int state;
  dlock_async_watch *w; /* while a socket is open */
  int reading, writing; /* interest given to the adapter */
  int refused;          /* an add_* hook failed: fail from the timer */
  redisReader *reader;
  dlock__sb out; /* bytes to write */
  size_t out_off;
  int hs_left;     /* handshake replies still expected */
  int hs_n;        /* handshake commands sent */
  char hs_kind[6]; /* what each handshake command is */
  /* Where it connects: NULL is the client's URL; a sentinel connection
   * has its own (async_route.c). */
  const dlock__url *url;
  dlock__url at;       /* the address of the connection open (borrowed) */
  char host[256];      /* at.host's bytes */
  int data;            /* a data node's connection (not a sentinel's) */
  int cmdconn;         /* a command connection (a->cmd, a cluster node's) */
  unsigned gen;        /* Sentinel: the master generation it was made for */
  void *ssl;           /* rediss://: the TLS session (tls.c) */
  int ssl_rw;          /* TLS: a read waits for writability */
  int sync_n;          /* sync_replicas -1: the replicas INFO counted */
  int64_t sync_at;     /* when INFO was last sent for it (0: never) */
  int sync_recount;    /* a WAIT's answer asked to count again */
  int answered;        /* a reply came on the socket open */
  int probe;           /* probing for a TLS-only port (plain URL) */
  char probe_why[600]; /* the failure that started the probe */
  dlock__areq *head, *tail;    /* sent or queued, in order */
  dlock__areq *unsent;         /* first of them whose bytes are not in out */
  dlock__areq *retrying;       /* waiting for their re-send */
  struct addrinfo *ai, *ai_at; /* TCP addresses, the one being tried */
  dlock__atimer timeout;       /* connect, or the oldest reply */
  dlock__atimer reconnect;     /* subscriber: the next try */
  /* subscriber only: its (UN)SUBSCRIBEs in flight, oldest first (an
   * error reply is the oldest's refusal: ioverdict.c dlock__subq); replies
   * with no request (confirmations, messages), and the connection's state
   * changes. */
  dlock__subq subq;
  int64_t backoff; /* subscriber: reconnect back-off (dlock__sub_backoff) */
  void (*on_push)(dlock__aconn *k, redisReply *r);
  void (*on_ready)(dlock__aconn *k);
  void (*on_down)(dlock__aconn *k, int err, const char *why);
};

void dlock__aconn_init(dlock__aconn *k, dlock_async *a, const char *what);
/* Queues r (its cmd set by dlock__areq_set) and starts the connection if
 * needed. */
void dlock__aconn_submit(dlock__aconn *k, dlock__areq *r);
/* Subscriber: appends raw command bytes (only when READY). */
void dlock__aconn_write(dlock__aconn *k, const char *p, size_t n);
/* Opens the socket when idle (attached client). */
void dlock__aconn_start(dlock__aconn *k);
/* Closes everything; requests are freed without their callbacks. */
void dlock__aconn_close(dlock__aconn *k);
/* Fails the connection (not final: its requests are retried): e.g. a
 * master that moved. */
void dlock__aconn_drop(dlock__aconn *k, const char *why);
/* async_route.c's answer for a connection left RESOLVING: connect to
 * k->at now (err 0), or fail with err and why. */
void dlock__aconn_resolved(dlock__aconn *k, int err, const char *why);
/* A request with a plain command (argv), for the route's own queries. */
dlock__areq *dlock__areq_cmd(int argc, const char **argv, const size_t *lens,
                             dlock__areq_fn *fn, void *arg);
/* Closes the socket (no request may be on it). */
void dlock__aconn_close_socket(dlock__aconn *k);
/* Queues r on k itself (dlock__aconn_submit routes a->cmd's requests on a
 * cluster client). */
void dlock__aconn_enqueue(dlock__aconn *k, dlock__areq *r);
/* r failed with err: re-sent retry_interval_ms later through the route, or
 * ended when no attempt is left. */
void dlock__aconn_retry(dlock__aconn *k, dlock__areq *r, int err,
                        const char *why);
/* Events from async.c. */
void dlock__aconn_readable(dlock__aconn *k);
void dlock__aconn_writable(dlock__aconn *k);

/* A request for an EVALSHA of s with keys and args, calling fn(arg) at its
 * end. NULL on OOM. */
dlock__areq *dlock__areq_eval(const dlock__script *s, int nkeys,
                              const char **keys, const size_t *klens, int nargs,
                              const char **args, const size_t *alens,
                              dlock__areq_fn *fn, void *arg);
/* dlock__areq_eval of a call as sent (dlock__acq_call / rel_call .send). */
dlock__areq *dlock__areq_eval_call(const dlock__call *k, dlock__areq_fn *fn,
                                   void *arg);
void dlock__areq_free(dlock__areq *r);

/* ---- the client (async.c) ------------------------------------------------ */

typedef struct dlock__aop dlock__aop;
typedef struct dlock__ahold dlock__ahold;
typedef struct dlock__asub dlock__asub;

struct dlock_async {
  dlock_config cfg;
  char *url_str;
  dlock__url url;
  char *conn_name; /* CLIENT SETNAME of both connections; NULL: none */
  char id[DLOCK__UUID_LEN + 1];
  dlock_async_hooks hooks;
  int attached;
  int closing; /* dlock_async_free began */
  int depth;   /* entry points of the loop on the stack */
  int gone;    /* freed inside a callback: release when depth drops to 0 */
  dlock__aheap timers;
  int64_t sched_at; /* the loop timer's due time; -1 none */
  dlock__atimer flush;
  dlock__aop *done, *done_tail; /* completed, their callbacks not yet run */
  dlock__aop *ops;              /* every call not completed */
  dlock__aconn cmd, sub;
  void *tls_ctx;               /* rediss://: the SSL_CTX (tls.c), else NULL */
  char *tls_name;              /* cfg.tls_server_name, copied */
  struct dlock__aroute *route; /* redis-sentinel://: async_route.c */
  dlock__map holds;            /* "<name>\0<owner>" -> dlock__ahold */
  uint64_t hold_gen;           /* stamps hold records */
  dlock__map subs;             /* lock name -> dlock__asub */
  dlock__map chans;            /* channel and grant channel -> dlock__asub */
  dlock__asub *sub_list;
  dlock__atimer sub_kick;   /* subscribe again after a transient refusal */
  dlock__atimer sub_linger; /* entries without waiters: unsubscribe when due */
  dlock__ahold *wd_head;    /* holds the watchdog renews */
  dlock__atimer wd_timer;
  dlock__atimer loss_timer;  /* the engine's next local deadline (async_wd.c) */
  dlock__atimer wd_retry;    /* failed renewals' next try (async_wd.c) */
  int wd_batches;            /* renewal requests in flight */
  dlock__stats stats;        /* dlock_async_stats's counters (stats.c) */
  struct dlock__ainfo *info; /* the info key's writer (async_info.c) */
  int64_t started_ms;        /* wall ms of dlock_async_new: the info key */
};

int64_t dlock__async_now(void);
/* Arms a timer of a (the loop timer follows at the next sync). */
void dlock__async_timer(dlock_async *a, dlock__atimer *t, int64_t at);
void dlock__async_untimer(dlock_async *a, dlock__atimer *t);
/* Re-schedules the loop timer for the heap's first timer. */
void dlock__async_sync(dlock_async *a);

/* ---- calls and holds (async_lock.c) ------------------------------------- */

/* One hold record: what owner holds on name (count, lease kinds, local
 * deadline, lost) in the blocking client's dlock__hold, plus the calls of
 * that (name, owner) waiting their turn. */
struct dlock__ahold {
  dlock__hold h;
  long long owner;
  uint64_t gen;
  dlock__ahold *wd_prev, *wd_next;
  int in_wd;
  dlock__aop *busy;            /* the call running */
  dlock__aop *q_head, *q_tail; /* waiting their turn */
  char field[DLOCK__FIELD_MAX];
  size_t fl;
  size_t name_len, key_len;
  char key[]; /* name '\0' owner */
};

/* One lock or unlock call, from dlock_async_lock/unlock to its callback. */
struct dlock__aop {
  dlock_async *a;
  dlock__aop *prev, *next;   /* a->ops: every call not completed */
  dlock__aop *qnext;         /* its record's queue, then the done list */
  dlock__aop *wprev, *wnext; /* its subscription entry's waiters */
  int unlock;
  dlock__ahold *h;
  dlock_async_cb *cb;
  void *arg;
  int rc;
  char msg[256];
  long long wait_ms;
  int64_t lease;
  int wd;     /* lease from the watchdog */
  int target; /* the hold count after the attempt in flight */
  /* The wait: its state and sequence are the engine's wait machine
   * (engine/waitm.h), as the blocking client's. */
  dlock__wm wm;
  int64_t deadline;    /* the call's: monotonic ms, -1 none */
  int64_t sent;        /* send time of the last attempt */
  dlock__eng_unlock u; /* an unlock: the engine's view (rid, count) */
  int in_flight;
  int began;        /* the call's deadline is set (its first try) */
  dlock__asub *sub; /* joined subscription entry */
  int active;       /* its subscription is confirmed */
  dlock__atimer deadline_t, ttl_t;
  /* Replica sync: an acquisition the replicas did not confirm is undone
   * and tried again after sync_t (engine.c's dlock__eng_sync_retry). */
  dlock__atimer sync_t;
  int sync_i;         /* acquisitions undone so far */
  int64_t sync_prev;  /* the last retry pause (dlock__retry_pause) */
  char sync_why[160]; /* what the last WAIT said */
  /* The release in flight (op->u: the caller's unlock, an undo, or the
   * committing copy of a pending one): what runs with its final answer,
   * once committed (async_lock.c rel_send). */
  void (*rel_then)(dlock__aop *op, int rc, int sends);
  int rel_rc, rel_sends; /* its answer, while its tombstone is written */
  /* An attempt whose outcome is unknown and that may have been sent: its
   * request is committed after the call's next answer ("" none). */
  char owed[33];
  char away_why[256];         /* a passing failure ridden out: its message */
  int64_t began_at, began_ms; /* the call began (monotonic, wall ms) */
  int info_pub;               /* its wait went out in an info write */
};

/* Completes every pending call with DLOCK_ECLOSED and frees the records
 * (dlock_async_free). */
void dlock__async_ops_close(dlock_async *a);
/* Runs the callbacks of completed calls, in order. */
void dlock__async_flush(dlock_async *a);
/* A pub/sub wake-up for op (a message, a grant for its wait: granted, a
 * new or lost subscription). */
void dlock__aop_wake(dlock__aop *op, int granted);
/* Subscription refused: the call ends with err (message why). */
void dlock__aop_sub_failed(dlock__aop *op, int err, const char *why);
/* The watchdog found the hold gone or past its deadline. */
void dlock__ahold_lost(dlock_async *a, dlock__ahold *h);

/* ---- subscriptions (async_sub.c) ----------------------------------------- */

void dlock__asub_init(dlock_async *a);
/* Joins the waiters of `name` (subscribing if needed): 1 if its
 * subscription is active already, 0 if not yet, or DLOCK_ENOMEM. */
int dlock__asub_join(dlock_async *a, const char *name, dlock__aop *op,
                     dlock__asub **out);
/* Joins the waiters of `name` only when its subscription is active (other
 * calls wait, or it lingers: subscription_linger_ms): 1 joined, else 0 --
 * the call's first attempt may then join the hand-over queue, as the
 * blocking client's (mutex.c join_early). */
int dlock__asub_join_active(dlock_async *a, const char *name, dlock__aop *op,
                            dlock__asub **out);
void dlock__asub_leave(dlock_async *a, dlock__asub *s, dlock__aop *op);
void dlock__asub_close(dlock_async *a);
/* Makes k a subscriber connection (callbacks of async_sub.c). */
void dlock__asub_conn_init(dlock_async *a, dlock__aconn *k);
/* The map arrived: subscribe the entries that wait for a connection. */
void dlock__asub_kick(dlock_async *a);

/* ---- routes (async_route.c) ---------------------------------------------- */

/* Where k connects now: 0 with k->at set, or 1 when the address is being
 * asked for (k is RESOLVING; dlock__aconn_resolved follows), or a code
 * with why. */
int dlock__aroute_addr(dlock__aconn *k, char *why, size_t wn);
/* k's server says it is not (or no longer) the master: ask again (a
 * cluster's map: refresh it). */
void dlock__aroute_invalid(dlock__aconn *k);
/* Cluster: sends r to the master of its slot (after the map is known). */
void dlock__aroute_submit(dlock_async *a, dlock__areq *r);
/* Cluster: MOVED (ask 0) or ASK (ask 1) to host:port for slot; r is
 * re-sent there. */
void dlock__aroute_redirect(dlock_async *a, dlock__areq *r, unsigned slot,
                            const char *host, int port, int ask);
/* The subscriber connection for channel ch: a->sub, a cluster slot's
 * master's, or NULL while the map is unknown (asked for; then
 * dlock__asub_kick). */
dlock__aconn *dlock__aroute_subconn(dlock_async *a, const char *ch, size_t n);
/* 1 when subscriptions are sharded (SSUBSCRIBE; scripts SPUBLISH). */
int dlock__aroute_sharded(const dlock_async *a);
/* The tags of the info key's copies (key: the client's info key) on a
 * cluster whose map is known: dlock__info_copy_tags over the slot map.
 * 0 on other topologies or while the map is unknown. */
int dlock__aroute_info_tags(const dlock_async *a, const char *key, size_t kl,
                            char (*tags)[8], int max);
/* What the scripts publish with: "SPUBLISH" on a sharded cluster. */
const char *dlock__apublish(const dlock_async *a);
/* async.c attached the client: start what waits. */
void dlock__aroute_start(dlock_async *a);
int dlock__aroute_init(dlock_async *a);
void dlock__aroute_close(dlock_async *a);
void dlock__aroute_free(dlock_async *a);
/* The route's connection whose watch is w, or NULL. */
dlock__aconn *dlock__aroute_conn(dlock_async *a, dlock_async_watch *w);

/* ---- the info key (async_info.c) -------------------------------------------
 */

typedef struct dlock__ainfo dlock__ainfo;
/* A lock call op begins (its start time is set): the first one writes the
 * key at once, a later one makes the writer look again when it may be
 * worth publishing. */
void dlock__ainfo_want(dlock_async *a, dlock__aop *op);
/* op ends (h its record, before it may be freed): a published wait or hold
 * that ended makes the next write come soon. */
void dlock__ainfo_ended(dlock_async *a, const dlock__aop *op,
                        const dlock__ahold *h);
void dlock__ainfo_close(dlock_async *a);

/* ---- the watchdog (async_wd.c) ---------------------------------------------
 */

void dlock__awd_add(dlock_async *a, dlock__ahold *h);
void dlock__awd_remove(dlock_async *a, dlock__ahold *h);
void dlock__awd_close(dlock_async *a);

#endif
