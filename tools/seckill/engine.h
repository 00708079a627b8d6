/*
 * engine.h -- one purchase under a strategy: the code of every scheme of
 * the lab (the naive Redis locks, dlock, segmented, atomic, redlock),
 * shared by dlock-seckill (forked worker processes, worker.c) and
 * dlock-stockd (HTTP threads, tools/stockd). It lives in the static
 * library dlock_strategies together with the strategy table (strategy.c).
 *
 * An sk_engine is one "service instance" of one product: its strategy,
 * its keys, its process-wide lock objects (the local mutex, the dlock
 * client and mutexes). An sk_eth is one request thread's side: its own
 * Redis connection, random state and lock token. Threads: one sk_engine
 * serves many threads at once (sk_engine_request is thread-safe given one
 * sk_eth per thread); sk_engine_init / sk_engine_free run alone.
 */
#ifndef DLOCK_SECKILL_ENGINE_H
#define DLOCK_SECKILL_ENGINE_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"
#include "seckill.h"

typedef struct sk_eth sk_eth;

typedef struct sk_engine {
  /* ---- set by the caller before sk_engine_init ---- */
  const sk_strategy *s;
  const char *url;      /* the stock's server */
  const char *lock_url; /* the lock store when not url (etcd), or NULL */
  const char *redlock_urls[SK_REDLOCK_SERVERS]; /* redlock only */
  sk_keys k;                                    /* stock, orders, users, lock */
  long long segments; /* 1, or the segment count (segmented) */
  long long lease_ms, watchdog_ms, threads;
  double work_min_ms, work_max_ms; /* the business work, a random sleep */
  /* hooks, each may be NULL: the wait was stopped (1) -- spins and lock
   * waits end with SK_O_DEADLOCK; a call failed (the first line is
   * reported by the caller); --kill-holder's kill point. */
  int (*aborted)(sk_eth *th);
  void (*on_error)(sk_eth *th, const char *msg);
  void (*killpoint)(sk_eth *th, enum sk_killpoint kp);
  void *user;
  atomic_llong *unlock_errors; /* counts failed releases, or NULL */
  /* the dlock clients' cfg.on_lock_lost (NULL: none) */
  void (*on_lock_lost)(const char *name, void *arg);
  void *on_lock_lost_arg;
  /* ---- the engine's own state ---- */
  pthread_mutex_t local; /* strategy "local" */
  dlock_client *dc;
  dlock_mutex *m[SK_MAX_SEGMENTS];
  dlock_client *rlc[SK_REDLOCK_SERVERS];
  dlock_redlock *rl;
  dlock_permits *pm; /* strategy "permits": the stock as permits */
} sk_engine;

struct sk_eth {
  sk_engine *e;
  int t;            /* thread number (lock tokens) */
  redisContext *rc; /* own connection; (re)connected on demand */
  uint64_t rng;     /* xorshift state, never 0 */
  char token[96];   /* owner id of the current hold */
  unsigned long long holds;
  long long wait_us; /* the last request's time spent acquiring locks */
  void *user;
};

/* Prepares e (the fields above the line set): the local mutex and, for
 * the dlock-based strategies, the dlock client(s) and lock objects.
 * 0, or -1 with err saying why (e is then freed: sk_engine_free is safe). */
int sk_engine_init(sk_engine *e, char *err, size_t errlen);
/* Frees what sk_engine_init made; no request may be running. */
void sk_engine_free(sk_engine *e);
/* Ends the current and future dlock waits of e's clients (from any
 * thread): they return SK_O_DEADLOCK. */
void sk_engine_cancel_waits(sk_engine *e);
/* Does the strategy need a dlock client? */
int sk_engine_uses_dlock(const sk_strategy *s);

/* A thread's side: zeroed, seeded (seed: any value). rc stays NULL until
 * the first command or until the caller connects it. */
void sk_eth_init(sk_eth *th, sk_engine *e, int t, uint64_t seed);
/* Closes the thread's connection. */
void sk_eth_close(sk_eth *th);

/* One purchase by user uid (NULL: anonymous; user: its number, the
 * segment it starts at) under the engine's strategy. Returns an
 * sk_outcome: SK_O_ORDER, SK_O_SOLDOUT, SK_O_DUPLICATE, SK_O_ERROR (the
 * on_error hook got why), SK_O_DEADLOCK (aborted while waiting).
 * th->wait_us says how long it waited for locks. */
int sk_engine_request(sk_eth *th, const char *uid, long long user);

/* Strategy "permits", after a run: waits (bounded by lease_ms + 5 s) until
 * every reservation left behind (by a killed buyer) has expired and has
 * been reclaimed into the stock through dlock_permits_available, so that
 * the stock key counts it. Returns the reservations still pending at the
 * end (0: none; a reservation without expiry would be stock lost for
 * good), or -1 with err. */
long long sk_permits_settle(const char *url, const sk_keys *k,
                            long long lease_ms, char *err, size_t errlen);

/* Sets the stock of k (split over segments) and zeroes the orders and the
 * users hash, on connection c. 0, or -1 with err. */
int sk_stock_set(redisContext *c, const sk_keys *k, long long segments,
                 long long stock, char *err, size_t errlen);
/* Reads the stock left (summed over segments) and the orders.
 * 0, or -1 with err. */
int sk_stock_get(redisContext *c, const sk_keys *k, long long segments,
                 long long *stock, long long *orders, char *err, size_t errlen);

#endif
