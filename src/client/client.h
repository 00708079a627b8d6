/*
 * client.h -- the client layer (src/client/): the client object and its
 * lifecycle (client.c), the hold registry (holds.c), the wait budget
 * (wait.c), pub/sub waiting (pubsub.c), renewal and local deadlines
 * (watchdog.c), the errand thread (errand.c) and the client's info key
 * (clientinfo.c, clientnotes.c); the store ops table a client of another
 * store than Redis is reached through (store.h). Above net (net/net.h).
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "client/store.h"
#include "net/net.h"

/* dlock_client_new_sized's work (api/client_new.c): the client of cfg. For
 * an etcd:// URL its store is etcd, the etcd layer's table (never NULL),
 * which becomes c->store. 0 and *out, or a code with nothing made. */
int dlock__client_new(const dlock_config *cfg_in, size_t cfg_size,
                      const dlock__store_ops *etcd, dlock_client **out);

/* A lock object's reference on its client (see dlock_client.refs). */
void dlock__client_ref(dlock_client *c);
void dlock__client_unref(dlock_client *c);

/* ---- client ------------------------------------------------------------- */

typedef struct dlock__slot dlock__slot;
typedef struct dlock__sub dlock__sub;
typedef struct dlock__hold dlock__hold;
typedef struct dlock__mutex_ops dlock__mutex_ops;

/* The pub/sub side of a client (pubsub.c): one subscriber connection and
 * thread, the wait entries by channel. dlock__pubsub_init makes the mutex,
 * maps and wake pipe; dlock__pubsub_start the thread; _stop joins it and
 * wakes every waiter; _destroy frees the rest. */
typedef struct dlock__pubsub {
  pthread_mutex_t mu;
  dlock__map subs;   /* shared channel -> dlock__sub */
  atomic_int n_subs; /* entries in subs (a lock-free hint) */
  dlock__map grants; /* grant channel -> dlock__sub */
  /* The time (ms) by which the thread looks at the entries again, -1 =
   * only when poked (set by the thread under mu): a waiter that leaves an
   * entry pokes it only if its linger would end before that. */
  int64_t wake_at;
  dlock__sub *list;
  /* Grants that reached no wait (its thread gave up and its cancel could
   * not leave the queue): the errand thread sends their declines. */
  struct dlock__decline *declines;
  int pipe[2]; /* wakes the thread (also from a signal handler) */
  pthread_t thread;
  int started;
  int connected;
} dlock__pubsub;

/* The hold registry (holds.c): one entry per lock name and family with
 * live objects, each with its per-thread hold records. mu also guards the
 * watchdog's lists (dlock__watchdog) and every dlock__hold. */
typedef struct dlock__registry {
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* monotonic clock: the watchdog's sleeps */
  dlock__map locks;   /* dlock__lockent by (family, name) */
  dlock__hold *grave; /* freed holds a renewal batch may still see */
} dlock__registry;

/* Renewal and local deadlines (watchdog.c): the holds the watchdog renews,
 * its thread and the expiry thread. Guarded by the registry's mutex. */
typedef struct dlock__watchdog {
  dlock__hold *head; /* holds renewed by the watchdog */
  size_t count;
  int busy; /* a renewal batch is in flight */
  int stop;
  pthread_t thread;
  int started;
  pthread_cond_t exp_cv;
  pthread_t exp_thread;
  int exp_started;
  int64_t exp_wake_at; /* when the expiry thread looks next */
} dlock__watchdog;

/* The errand thread (errand.c): everything a client does in the background
 * that is neither a renewal nor a loss report -- the info key, declines,
 * cluster map refreshes the renewal thread asks for -- on connections of
 * its own. Guarded by the registry's mutex. */
typedef struct dlock__errand {
  pthread_t thread;
  int started, stop;
  pthread_cond_t cv; /* monotonic: its sleeps (with reg.mu) */
  /* The client's info key (clientinfo.c): monotonic ms of its next write;
   * 0 until the client's first hold asks for it. */
  int64_t info_at;
  int info_running;     /* a write is in flight (info_tick) */
  int info_dirty;       /* a hold began since the last write started */
  int64_t info_end;     /* monotonic ms the last write ended */
  int64_t since_check;  /* monotonic ms of the next look at hold ages (0:
                           none; dlock__info_since_later) */
  int declines;         /* the pub/sub thread queued declines (dlock__pubsub) */
  int refresh;          /* the renewal thread asks for a cluster map refresh */
  atomic_uint declined; /* declines answered by Redis (for tests) */
} dlock__errand;

struct dlock_client {
  dlock_config cfg;
  char *url_str;
  dlock__url url;
  char id[DLOCK__UUID_LEN + 1];
  unsigned fork_gen;
  atomic_int closing;
  /* The caller's reference plus one per lock object: objects may be freed
   * after the client (dlock_client_free stops threads and connections;
   * the memory goes with the last reference). */
  atomic_int refs;
  atomic_uint cancel_gen;    /* bumped by dlock_client_cancel_waits */
  atomic_int spin_fell_back; /* SUBSCRIBE refused: mutexes spin (spin.c) */
  dlock__node node;   /* standalone: the only node. The router picks it. */
  dlock__stats stats; /* dlock_client_stats's counters (stats.c) */
  dlock__cluster *cl; /* redis-cluster://: the masters; else NULL */
  void *tls_ctx;      /* SSL_CTX of a rediss:// client, else NULL */
  char *tls_name;     /* copy of cfg.tls_server_name */
  char *conn_name;    /* CLIENT SETNAME of every link; NULL: none (own copy) */
  int64_t latch_ttl_ms;
  int64_t once_ttl_ms;    /* dlock__once_ttl: PX of a once key */
  int64_t once_window_ms; /* its copies' resend window (dlock__cmd) */
  int64_t started_ms;     /* wall clock, ms since the epoch: for the info key */
  struct dlock__note *notes; /* waits, permits for the info key (reg.mu) */

  dlock__pubsub ps;    /* waiting for locks (pubsub.c) */
  dlock__registry reg; /* the hold registry (holds.c) */
  dlock__watchdog wd;  /* renewal and local deadlines (watchdog.c) */
  dlock__errand er;    /* info key, declines, map refreshes (errand.c) */
  /* dlock_client_free writes [1]; every background wait polls [0]
   * (dlock__io_guard): -1 when not made. */
  int abort_pipe[2];

  dlock__sentinel sent; /* redis-sentinel:// master discovery (sentinel.c) */
  dlock__sync sync;     /* replica sync: WAIT after writes (sync.c) */
  /* etcd:// (the etcd store, etcd.h): its state; NULL for a Redis client.
   * Then node, cl, sent, sync, wd and the pub/sub thread are unused. */
  struct dlock__etcd *etcd;
  /* The calls into that store (store.h), set with the URL before its
   * start; NULL for a Redis client. */
  const dlock__store_ops *store;
};

/* ---- the client's info key (clientinfo.c) ------------------------------
 * "dlock_client:{<client id>}", a hash: host, pid, program, started (ms since
 * the epoch). Written by the errand thread from the client's first hold
 * on, every renewal period, with the watchdog timeout as TTL: it expires
 * with the client. dlock_client_info_query reads it. */
/* Asks the errand thread to write the key now if it never did (reg_mu
 * held). */
void dlock__info_want(dlock_client *c);
/* Writes the key, sent by send(c, arg, key, argc, argv, lens) -- an EVAL
 * of the write script, routed by key (the errand thread's own connection,
 * without WAIT). send returns 0 or a negative code. The key also carries
 * "conn_name" (the client's connection name) for dlock status. No lock
 * held; one attempt. 0 or a negative code. */
typedef int dlock__info_send_fn(dlock_client *c, void *arg, const char *key,
                                int argc, const char **argv,
                                const size_t *lens);
int dlock__info_write_via(dlock_client *c, dlock__info_send_fn *send,
                          void *arg);

/* The info key is written again soon (reg.mu held) -- at once, or
 * DLOCK__INFO_GAP_MS after the previous write ended: a published hold
 * start ended (clientinfo.c). */
#define DLOCK__INFO_GAP_MS 100
void dlock__info_soon(dlock_client *c);
/* A hold's start is published (since:<tid>:<name> in the info key, for
 * "dlock status") once the hold has lasted this long: short holds -- the
 * uncontended lock+unlock of a busy client -- never cost an info write. */
#define DLOCK__SINCE_AFTER_MS 100
/* A hold began (reg.mu held): the errand thread looks at the holds'
 * ages DLOCK__SINCE_AFTER_MS from now, unless a look is due already. */
void dlock__info_since_later(dlock_client *c);
/* The errand thread's look (reg.mu held): 1 when some current hold has
 * lasted DLOCK__SINCE_AFTER_MS and its start is unpublished (write the info
 * key now); *next = when the next unpublished hold gets that old, or 0. */
int dlock__holds_since_due(dlock_client *c, int64_t now, int64_t *next);
/* The holds c has now (dlock_client_stats's gauge): records of a thread
 * holding the lock, not lost, before their local deadline. Takes reg.mu. */
int64_t dlock__holds_now(dlock_client *c);
/* The info key lists at most this many holds (since:<tid>:<name>). */
#define DLOCK__INFO_HOLDS_MAX 512
/* Appends "since:<tid>:<name>\0<wall ms>\0" for each current hold of c
 * that has lasted DLOCK__SINCE_AFTER_MS (or was published before) to b (at
 * most DLOCK__INFO_HOLDS_MAX), marking them published; returns how many.
 * Takes reg.mu. */
int dlock__holds_since(dlock_client *c, dlock__sb *b);

/* The rest of the info key (clientnotes.c, issue 39): when the client
 * checked in, its waits (wait:<tid>:<name> = wall ms the wait began), the
 * permits it took (permit:<id> = "<wall ms>|<name>") and the kind of its
 * locks no key shows (kind:<name>). A note is made with no Redis traffic
 * and published, like a hold's start, once it has lasted
 * DLOCK__SINCE_AFTER_MS. Each takes reg.mu unless it says otherwise. */
typedef struct dlock__note dlock__note;
/* A wait of thread tid for `name` begins: a handle for _end (NULL: OOM,
 * not noted; _end accepts it). */
void *dlock__note_wait(dlock_client *c, const char *name, uint64_t tid);
void dlock__note_wait_end(dlock_client *c, void *note);
/* Permit `id` (32 hex) of `name` taken through object obj / given back (by
 * id; id NULL: every permit noted for obj, which is being freed). */
void dlock__note_permit(dlock_client *c, const void *obj, const char *name,
                        const char *id);
void dlock__note_permit_end(dlock_client *c, const void *obj, const char *id);
/* The watchdog's look (reg.mu held), as dlock__holds_since_due. */
int dlock__notes_due(dlock_client *c, int64_t now, int64_t *next);
/* Appends the pairs above ("field\0value\0") to b, marking the notes
 * published; returns how many pairs. */
int dlock__info_extra(dlock_client *c, dlock__sb *b);
/* Client teardown (no mutex: also in a fork child). */
void dlock__notes_free(dlock_client *c);
/* A Cluster client's copies of its info key, one on every master but the
 * one its key lives on: "dlock_client:{<tag>}:<client id>", a short tag
 * hashing to a slot of that master, so a tool names the client's holds
 * on the masters that answer when that one does not. argv is the write
 * as sent by send (argv[3] the key; replaced for each copy and restored).
 * Best effort: failures are ignored. */
void dlock__info_copies(dlock_client *c, dlock__info_send_fn *send, void *arg,
                        int argc, const char **argv, size_t *lens);
/* The info key's write script (clientinfo.c), for the event-loop client's
 * writer (async_info.c). */
const dlock__script *dlock__info_script(void);

/* The connection name for a config's client_name (clientinfo.c): NULL gives
 * "dlock:<program>:<host>:<pid>", "" none; the bytes Redis refuses in a
 * name become '_'. *out: malloc'd (the caller frees it) or NULL for none.
 * 0 or DLOCK_ENOMEM. */
int dlock__conn_name(const char *configured, char **out);

/* Checks that c may be used by this process; returns 0 or DLOCK_EFORK /
 * DLOCK_ECLOSED / DLOCK_EINVAL. */
int dlock__client_check(const dlock_client *c);

/* ---- the wait budget (wait.c) -------------------------------------------- */

/* When a waiting call must stop: its deadline and the cancel generation
 * it began under. One per call, on the caller's stack; c may be NULL (a
 * budget of time alone). */
typedef struct dlock__budget {
  dlock_client *c;
  long long wait_ms;   /* as the caller gave it: -1 forever, 0 no wait */
  int64_t started;     /* monotonic ms */
  int64_t deadline;    /* monotonic ms; -1 none */
  unsigned cancel_gen; /* c->cancel_gen when the call began */
} dlock__budget;
void dlock__budget_start(dlock__budget *b, dlock_client *c, long long wait_ms);
/* Milliseconds left: -1 no deadline, 0 spent. */
int64_t dlock__budget_left(const dlock__budget *b);
/* until (monotonic ms, -1 none) brought back to the deadline if past it. */
int64_t dlock__budget_clamp(const dlock__budget *b, int64_t until);
/* 1 if dlock_client_cancel_waits() was called since the budget began. */
int dlock__budget_canceled(const dlock__budget *b);
/* Why the wait must end now, or 0: DLOCK_ECLOSED (the client is closing),
 * DLOCK_ECANCELED (message names `what`), DLOCK_ETIMEDOUT with no message
 * (the caller words it: only it knows what was still missing). */
int dlock__budget_over(const dlock__budget *b, const char *what);
/* The code a wait that ended without the lock reports: a failure (a lost
 * connection, a server error, a timeout) after dlock_client_cancel_waits()
 * was called since the wait began is reported as DLOCK_ECANCELED, the
 * failure named in the message (dlock.h: every thread blocked in a wait
 * returns DLOCK_ECANCELED), so which of the two came first never shows.
 * rc >= 0, DLOCK_ECLOSED and DLOCK_ELOST pass as they are. */
int dlock__budget_end(const dlock__budget *b, int rc, const char *what);

/* ---- pub/sub waiting (pubsub.c) ----------------------------------------- */

/* A thread waiting for a lock. Lives on the waiter's stack; guarded by
 * c->sub_mu. */
struct dlock__slot {
  dlock__slot *next, *prev;
  pthread_cond_t cv;
  uint64_t tid;
  uint64_t wait_id; /* set by the caller before joining; grants name it */
  int granted;      /* the unlock script handed the lock to this thread */
  int kicked;       /* retry now: "0" message, subscription (re)activated */
  int failed;       /* the server refused the subscription (sub_error) */
  int all;          /* woken by a "1" (wake-all) message */
  int64_t value;    /* payload of the last message (semaphore permits) */
};

enum {
  DLOCK__SUB_IDLE,
  DLOCK__SUB_SUBSCRIBING,
  DLOCK__SUB_ACTIVE,
  DLOCK__SUB_UNSUBSCRIBING,
  DLOCK__SUB_FAILED /* SUBSCRIBE refused (ACL); retried when refs drop to 0 */
};

struct dlock__sub {
  dlock__sub *next_all;
  char *channel;       /* shared channel */
  char *grant_channel; /* per-client grant channel, or NULL */
  int wake_policy;
  int state;
  int refs;         /* waiting threads */
  int confirms;     /* (un)subscribe confirmations still expected */
  int conn;         /* the subscriber connection it is on (pubsub.c), or -1 */
  int64_t retry_at; /* a transient refusal: subscribe again from then */
  int64_t idle_since;
  char *error;        /* the server's refusal, when FAILED */
  dlock__slot *slots; /* FIFO */
  dlock__slot *slots_tail;
};

/* Joins the wait entry for (channel, grant_channel), subscribing if needed;
 * registers slot. *active tells whether the subscription is confirmed. */
int dlock__sub_join(dlock_client *c, const char *channel,
                    const char *grant_channel, int wake_policy,
                    dlock__slot *slot, dlock__sub **out, int *active);
/* Joins only if an active subscription for channel already exists (another
 * local waiter, or a lingering one): then the caller may join the server's
 * queue with its very first attempt. Returns 1 if joined, 0 if not. */
int dlock__sub_join_active(dlock_client *c, const char *channel,
                           dlock__slot *slot, dlock__sub **out);
/* Waits (c->sub_mu taken inside) until the slot is granted/kicked or the
 * monotonic deadline (ms; <0 = none) passes. Returns 1 if woken, 0 on
 * timeout. *active is the subscription state on return. */
int dlock__sub_wait(dlock_client *c, dlock__sub *s, dlock__slot *slot,
                    int64_t until_ms, int *granted, int *active);
void dlock__sub_leave(dlock_client *c, dlock__sub *s, dlock__slot *slot);
/* After a wait returned with slot->failed: sets the thread's error message
 * (the channel and the server's refusal, e.g. an ACL user without SUBSCRIBE)
 * and returns DLOCK_EAUTH. `what` names the waited-for object. */
int dlock__sub_error(dlock_client *c, dlock__sub *s, const char *what);
/* The wait of the kinds without hand-over (semaphore, latch): subscribes to
 * channel, then calls check(arg) -- 1 done, 0 not yet, < 0 error -- after
 * every wake-up and at least every recheck_ms (pub/sub is at most once;
 * recheck_fn(arg), when not NULL, gives that bound anew before each sleep:
 * the permits' next expiry), until it is done or the budget b (started
 * before the caller's first check) says stop. Returns 0, check's error, or
 * dlock__budget_over's answer (DLOCK_ETIMEDOUT with no message: the caller
 * words it). */
int dlock__sub_wait_check(dlock_client *c, const char *channel, int wake_policy,
                          const dlock__budget *b, int64_t recheck_ms,
                          int64_t (*recheck_fn)(void *), int (*check)(void *),
                          void *arg, const char *what);
/* The mutex and maps: 0 or DLOCK_ENOMEM (nothing left to undo). */
int dlock__pubsub_init(dlock__pubsub *ps);
/* Frees what _init made; forked: in a fork child (the mutex is left). */
void dlock__pubsub_destroy(dlock__pubsub *ps, int forked);
/* The wake pipe and the subscriber thread: 0 or DLOCK_ENOMEM (undone). */
int dlock__pubsub_start(dlock_client *c);
/* Joins the thread, wakes every waiter (they answer DLOCK_ECLOSED), closes
 * the pipe. Safe after a failed or no start. */
void dlock__pubsub_stop(dlock_client *c);

/* ---- the kinds' ops tables: the interface the registry, the watchdog
 * and the info key call a lock kind through (each kind fills one in,
 * kinds/) ---- */

/* What distinguishes the mutex variants (plain, fair, fenced). The wait
 * loop, the hold records and the watchdog are shared (mutex.c). */
typedef struct dlock__mutex_ops {
  const char *kind_name;
  /* One acquire attempt. target = the thread's hold count after it; queue =
   * join the wait queue on failure (only when subscribed); wait_ms = the
   * caller's wait budget (fair lock deadlines; -1 forever). Returns 1 held
   * (*token set by fenced locks), 0 taken elsewhere (*ttl = holder's PTTL),
   * or a negative code (DLOCK_ELOST: a reentrant acquire found our hold
   * gone). w: the wait this attempt belongs to (never NULL; id 0 for a
   * single attempt). */
  int (*attempt)(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                 int queue, int64_t wait_ms, int64_t *ttl, uint64_t *token,
                 const dlock__wait *w);
  /* Releases one hold: 1 released, 0 holds remain, DLOCK_ELOST if Redis
   * says we are not the owner, or a negative code. expected = the thread's
   * hold count before this unlock as the client knows it: the script writes
   * expected - 1 if the server's count is at least that, and changes
   * nothing if it is lower (a copy of this unlock already ran), so any
   * number of copies count once. DLOCK_ELOST from a final release
   * (expected 1) that may have been sent before is read as "released" by
   * the caller (mutex.c rel_end). u: the release (engine.h): u->lease the
   * remaining holds' lease, u->expected, u->rid (32 hex) its request id --
   * a copy changes nothing once its tombstone
   * redisson_unlock_latch:{name}:<rid> exists -- and u->commit: a
   * committing copy, which writes that tombstone with its effect. */
  int (*release)(dlock_mutex *m, uint64_t tid, const dlock__eng_unlock *u);
  /* Leaves the wait queue after giving up: 1 if the lock was handed to us
   * meanwhile (*token set), 0 if not, or a negative code. May be NULL. */
  int (*cancel)(dlock_mutex *m, uint64_t tid, int64_t lease, int64_t wait_ms,
                uint64_t *token, const dlock__wait *w);
  /* The channel(s) a waiting thread subscribes to; grant may stay empty
   * (no direct hand-over). */
  void (*channels)(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                   dlock__sb *grant);
  /* Force unlock: 1 deleted, 0 none, or a negative code. */
  int (*force)(dlock_mutex *m);
  int wake_policy;
  /* Appended to "<uuid>:<tid>" in the hash field ("" or ":write"); the
   * watchdog's batched renewal checks this field. */
  const char *field_suffix;
  /* 1: a waiting call joins the server-side queue with its very first
   * attempt, before it is subscribed (fair lock: arrival order is the order
   * of first attempts). 0: only once subscribed (direct hand-over needs a
   * live subscriber). */
  int queue_first;
  /* Custom renewal for holds whose lease lives in more than the hash (read
   * locks). Called on the watchdog thread without locks held; returns 1
   * renewed, 0 gone (lost), or a negative code (retried). NULL: the batched
   * hash-field renewal. */
  int (*renew)(dlock_client *c, const char *name, size_t name_len, uint64_t tid,
               int count);
  /* > 0: a waiting thread attempts again at least this often (its attempt
   * keeps its place in the queue alive: fair locks). 0: only on wake-ups
   * and when the holder's TTL runs out. */
  int64_t max_sleep_ms;
  /* 1: a waiting call never subscribes; it attempts again after back-off
   * sleeps (the spin lock, spin.c). */
  int spin;
} dlock__mutex_ops;

/* ---- the hold registry (holds.c) ----------------------------------------- */

/* One lock name and family (mutex / write / read) with live objects of this
 * client: the per-thread hold records of that lock. Guarded by c->reg_mu. */
typedef struct dlock__lockent dlock__lockent;

/* Finds or creates the entry of (ops' family, name) and counts one more
 * object on it. 0 or DLOCK_ENOMEM. Takes reg_mu. */
int dlock__reg_attach(dlock_client *c, const char *name, size_t name_len,
                      const dlock__mutex_ops *ops, dlock__lockent **out);
/* One object fewer; the last one forgets the entry's holds (renewal stops)
 * and frees the entry. Takes reg_mu. */
void dlock__reg_detach(dlock_client *c, dlock__lockent *e);
const char *dlock__lockent_name(const dlock__lockent *e, size_t *len);
const dlock__mutex_ops *dlock__lockent_ops(const dlock__lockent *e);
/* The thread's record, or NULL (reg_mu held). */
dlock__hold *dlock__hold_find(dlock__lockent *e, uint64_t tid);
/* The thread's record, created when missing; NULL only on OOM (reg_mu). */
dlock__hold *dlock__hold_get(dlock__lockent *e, uint64_t tid);
/* Whether thread tid holds a mutex (plain, fair, fenced) or either side of
 * a read-write lock of that name on c (any family; takes reg_mu). */
int dlock__reg_thread_holds(dlock_client *c, const char *name, size_t len,
                            uint64_t tid);
/* Frees the record if it holds nothing and has nothing pending (reg_mu
 * held); a renewal batch in flight defers the free to the watchdog. */
void dlock__hold_put(dlock_client *c, dlock__hold *h);
void dlock__hold_grave_empty(dlock_client *c); /* reg_mu held */
/* The registry's mutex and condition variable: 0 or DLOCK_ENOMEM (nothing
 * left to undo). The map of entries is made on first use. */
int dlock__registry_init(dlock__registry *r);
/* Destroys them (not in a fork child: forked). The entries and records go
 * with dlock__holds_destroy. */
void dlock__registry_destroy(dlock__registry *r, int forked);
/* A composite object's list of hold records (one per thread; the object's
 * own mutex held): the thread's record, created when missing and create
 * is set (NULL only on OOM or when absent). */
dlock__hold *dlock__holdlist_find(dlock__hold **list, uint64_t tid, int create);
/* Unlinks h from the list and frees it (the object's own mutex held). A
 * composite object drops a thread's record as soon as the thread holds
 * nothing through it, so its list is as long as the number of threads
 * holding it now, not of the threads that ever did (issue 26). */
void dlock__holdlist_drop(dlock__hold **list, dlock__hold *h);
/* Frees every record of the list. */
void dlock__holdlist_free(dlock__hold **list);
/* Appends mode to h->modes: 0 or DLOCK_ENOMEM. */
int dlock__hold_push_mode(dlock__hold *h, char mode);
/* Frees one record and what it owns (modes, marks). */
void dlock__hold_free(dlock__hold *h);
/* Client teardown: frees every record (and the registry when no object is
 * left). Touches no mutex (also used in a fork child). */
void dlock__holds_destroy(dlock_client *c);

/* ---- holds and the watchdog (watchdog.c) -------------------------------- */

void dlock__wd_add(dlock_client *c, dlock__hold *h);    /* reg_mu held */
void dlock__wd_remove(dlock_client *c, dlock__hold *h); /* reg_mu held */
/* Waits until no renewal batch is in flight (reg_mu held). */
void dlock__wd_quiesce(dlock_client *c);
/* Losses to report: a list built with reg_mu held (dlock__lost_add copies
 * name; out of memory drops the note), then dlock__lost_report (reg_mu
 * held; released while cfg.on_lock_lost runs, with dlock_last_error() set
 * to the reason on the calling thread) frees it. */
typedef struct dlock__lost_note dlock__lost_note;
void dlock__lost_add(dlock__lost_note **list, const char *name, int why);
void dlock__lost_report(dlock_client *c, dlock__lost_note *list);
/* Notes (once per client) that the calling thread holds a lock of c, so
 * that if it exits still holding locks their renewal stops and each is
 * reported lost (DLOCK__LOST_THREAD_EXIT). reg_mu may be held. Best
 * effort: out of memory skips the note. */
void dlock__thread_note(dlock_client *c);
int dlock__watchdog_start(dlock_client *c);
void dlock__watchdog_stop(dlock_client *c);
/* The renewal path's bound on every wait on the network (watchdog.c): a
 * connect, the plain-or-TLS probe, a handshake, a renewal's reply wait at
 * most min(command_timeout_ms, connect_timeout_ms, watchdog_timeout_ms /
 * 6) -- half a renewal period -- so no wait spends more than that of the
 * three periods a hold's deadline allows. At least 1. */
int dlock__wd_wait_bound(const dlock_config *cfg);

/* The errand thread (errand.c): started after the watchdog; stopped by
 * dlock_client_free, at once whatever it waits for (its waits poll the
 * client's abort pipe). */
int dlock__errand_start(dlock_client *c);
void dlock__errand_stop(dlock_client *c);
/* The renewal thread asks for a cluster map refresh (no lock held): the
 * errand thread does it, so the renewal path never waits for one. */
void dlock__errand_refresh(dlock_client *c);
/* Wakes the errand thread if it runs (reg.mu held). */
void dlock__errand_wake(dlock_client *c);
/* Wakes the errand thread to send the queued declines (pubsub.c, with
 * neither reg.mu nor ps.mu held). */
void dlock__errand_decline_poke(dlock_client *c);

/* Writes "<uuid>:<tid>" into buf (>= DLOCK__FIELD_MAX). Returns length. */
size_t dlock__field(const dlock_client *c, uint64_t tid, char *buf);

#endif
