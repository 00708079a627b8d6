/*
 * util.h -- the bottom layer (src/util/): what every other file of the
 * library uses and which uses nothing of it -- errors and the per-thread
 * message (error.c), the log hook (log.c), internal locks and callouts
 * (callout.c), clocks (clock.c), random numbers (random.c), SHA1
 * (sha1.c), threads, fork and sockets of the process (process.c), string
 * builders and allocation (strbuf.c), a small hash map (map.c), the
 * client's counters (counters.c) and the calling thread's call deadline
 * (deadline.c). It includes only system headers and the public <dlock.h>.
 *
 * The layers of src/ and the rule (docs/design.md, "The layers of
 * src/"): util < proto < config < engine < net < client < etcd < kinds
 * < async < api; a file includes only headers of its own layer and the
 * layers below it (tests/docs/layers_check.py).
 *
 * Naming: public names dlock_, internal non-static names dlock__.
 */
#ifndef DLOCK_UTIL_H
#define DLOCK_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "dlock.h"

#define DLOCK__UUID_LEN 36
/* "<uuid>:<tid>" with tid up to 20 digits, plus ":write" and NUL. */
#define DLOCK__FIELD_MAX 72

/* ---- errors (error.c) --------------------------------------------------- */

/* When a message of `wanted` bytes (vsnprintf's answer) did not fit in
 * buf[size], ends it at a word boundary with " ..." (error.c). */
void dlock__cut_at_word(char *buf, size_t size, int wanted);
/* Sets the calling thread's detail message and returns err. */
int dlock__fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Only a public entry point clears the message: internal steps set it
 * (dlock__fail) or leave it. */
void dlock__clear_error(void);
/* Between begin and end (they nest) the calling thread's message is frozen:
 * a clean-up after a failure (leaving a wait queue, giving back what was
 * taken) cannot replace the message of the error the call returns. */
void dlock__err_keep_begin(void);
void dlock__err_keep_end(void);
/* 1 between dlock__err_keep_begin and _end (the message is frozen). */
int dlock__err_kept(void);
/* DLOCK_ENOTSUP with "<what> is not offered on etcd: <alternative>": a
 * Redis-only path reached by a client of the etcd store (etcd/). */
int dlock__etcd_notsup(const char *what, const char *instead);
/* The size of the calling thread's message buffer (dlock_last_error). */
#define DLOCK__ERRBUF_SIZE 512

/* ---- utilities (clock.c random.c sha1.c process.c strbuf.c) ------------ */

int64_t dlock__now_ms(void); /* monotonic */
/* ---- log hook (log.c) ---------------------------------------------------
 * dlock__log passes one event to cfg->log_fn (level <= cfg->log_level), or,
 * when no hook is set, to stderr if the environment's DLOCK_LOG asks for
 * that level. name may be NULL. Any thread. dlock__log_on says whether an
 * event of that level would go anywhere (to skip costly formatting). */
int dlock__log_on(const dlock_config *cfg, int level);
void dlock__log(const dlock_config *cfg, int level, const char *name,
                const char *event, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Delivers one formatted event now (the hook or stderr); dlock__log calls
 * it, or callout.c when the thread's last internal lock is released. */
void dlock__log_emit(const dlock_config *cfg, int level, const char *name,
                     const char *event, const char *msg);

/* ---- callouts (callout.c): no user callback under an internal lock ----
 * Every internal mutex is taken and released through dlock__mu_lock /
 * dlock__mu_trylock / dlock__mu_unlock (they count the locks this thread
 * holds); a log event raised under one is kept (dlock__log_keep returns 1)
 * and delivered when the thread's last lock is released; on_lock_lost and
 * async completions go through dlock__callout_lost / _done, which abort if
 * the thread holds a lock. dlock__never reports a broken invariant and
 * aborts. */
void dlock__mu_lock(pthread_mutex_t *m);
int dlock__mu_trylock(pthread_mutex_t *m); /* 0 taken, else EBUSY */
void dlock__mu_unlock(pthread_mutex_t *m);
int dlock__mu_depth(void);
int dlock__log_keep(const dlock_config *cfg, int level, const char *name,
                    const char *event, const char *msg);
void dlock__callout_lost(const dlock_config *cfg, const char *name);
void dlock__callout_done(void (*cb)(int, void *), int rc, void *arg);
_Noreturn void dlock__never(const char *what);

/* ---- counters (stats.c): dlock_client_stats's fields, one relaxed atomic
 * each, indexed by dlock__stat. dlock__stat_add(&c->stats, DLOCK__ST_X, 1)
 * from any thread. Gauges (holds, connected) are read at query time. */
typedef enum dlock__stat {
  DLOCK__ST_ACQUIRED,
  DLOCK__ST_ACQUIRED_DIRECT,
  DLOCK__ST_ACQUIRED_HANDOVER,
  DLOCK__ST_REENTERED,
  DLOCK__ST_RELEASED,
  DLOCK__ST_WAITS,
  DLOCK__ST_WAIT_HIST0, /* 8 buckets: dlock__stat_wait() fills them */
  DLOCK__ST_WAIT_HIST7 = DLOCK__ST_WAIT_HIST0 + 7,
  DLOCK__ST_WAIT_MS_TOTAL,
  DLOCK__ST_WAIT_MS_MAX, /* a maximum, not a sum */
  DLOCK__ST_TIMEOUTS,
  DLOCK__ST_CANCELS,
  DLOCK__ST_RENEWALS_SENT,
  DLOCK__ST_RENEWALS_FAILED,
  DLOCK__ST_LOST_KEY_GONE,
  DLOCK__ST_LOST_UNREACHABLE,
  DLOCK__ST_LOST_THREAD_EXIT,
  DLOCK__ST_LOST_FORCED,
  DLOCK__ST_RECONNECTS,
  DLOCK__ST_RETRIES,
  DLOCK__ST_ENOSYNC,
  DLOCK__ST_COMMANDS,
  DLOCK__ST_ROUND_TRIPS,
  DLOCK__ST_LOST_EXPIRED,
  DLOCK__ST_COUNT
} dlock__stat;
typedef struct dlock__stats {
  _Atomic(uint64_t) v[DLOCK__ST_COUNT];
} dlock__stats;
static inline void dlock__stat_add(dlock__stats *s, dlock__stat k, uint64_t n) {
  atomic_fetch_add_explicit(&s->v[k], n, memory_order_relaxed);
}
/* One wait of wait_ms ended with an acquisition: waits, histogram, total,
 * maximum. */
void dlock__stat_wait(dlock__stats *s, int64_t wait_ms);
/* A first hold taken (reentry is not counted here): acquired, by hand-over
 * or directly; when the call waited (since monotonic ms started), its
 * wait too. Returns the wait in ms (0: it did not wait). */
int64_t dlock__stat_acquired(dlock__stats *s, int handover, int waited,
                             int64_t started);

int64_t dlock__wall_ms(void); /* CLOCK_REALTIME, ms since the epoch */
int64_t dlock__now_us(void);  /* monotonic */
void dlock__sleep_ms(int64_t ms);
/* The clock's time ms from now, for pthread_cond_timedwait (pass the clock
 * the condition variable was made with). */
struct timespec dlock__abstime(clockid_t clk, int64_t ms);
/* Initialises *cv to time its waits on CLOCK_MONOTONIC (pass
 * dlock__abstime(CLOCK_MONOTONIC, ms) to pthread_cond_timedwait): every
 * timed wait of the library is on that clock, so a step of the wall clock
 * neither stalls nor hurries it. 0, or -1 (cannot initialise). */
int dlock__cond_init_mono(pthread_cond_t *cv);
/* Fills buf with n cryptographically random bytes (getrandom). */
int dlock__random_bytes(void *buf, size_t n);
/* Fast per-thread PRNG (seeded from getrandom). */
uint64_t dlock__rand64(void);
void dlock__rand_reset_thread(void); /* after fork(): reseed on next use */
void dlock__uuid4(char out[DLOCK__UUID_LEN + 1]);
/* SHA1 of data as 40 lowercase hex chars + NUL. */
void dlock__sha1_hex(const char *data, size_t len, char out[41]);
/* Per-process thread id: a counter, never reused, assigned on first use. */
uint64_t dlock__tid(void);
/* Fork generation: increases in every child after fork(). */
unsigned dlock__fork_gen(void);
void *dlock__malloc(size_t n);
void *dlock__calloc(size_t n, size_t m);
char *dlock__strdup(const char *s);
char *dlock__strndup(const char *s, size_t n);

/* A string builder with inline storage; never fails silently: on OOM it
 * sets oom and keeps the old contents. */
typedef struct dlock__sb {
  char *p;
  size_t len, cap;
  int oom;
  int heap; /* p was malloc'ed */
  char inl[192];
} dlock__sb;
void dlock__sb_init(dlock__sb *b);
/* Starts with the caller's buffer (e.g. on its stack) instead of inl. */
void dlock__sb_init_buf(dlock__sb *b, char *buf, size_t cap);
void dlock__sb_free(dlock__sb *b);
void dlock__sb_reset(dlock__sb *b);
void dlock__sb_add(dlock__sb *b, const char *s, size_t n);
void dlock__sb_adds(dlock__sb *b, const char *s);
void dlock__sb_addu64(dlock__sb *b, uint64_t v);
void dlock__sb_addi64(dlock__sb *b, int64_t v);
/* Decimal text of v into buf (>= 21 bytes), NUL-terminated; returns the
 * length. snprintf costs ~700 instructions per number on the hot path. */
size_t dlock__fmt_i64(char *buf, int64_t v);

/* A tiny string-keyed hash map (chaining); keys are borrowed. */
typedef struct dlock__map_ent {
  struct dlock__map_ent *next;
  const char *key;
  size_t klen;
  uint64_t hash;
  void *val;
} dlock__map_ent;
typedef struct dlock__map {
  dlock__map_ent **b;
  size_t nb, n;
} dlock__map;
int dlock__map_init(dlock__map *m, size_t nb);
void dlock__map_free(dlock__map *m);
void *dlock__map_get(const dlock__map *m, const char *key, size_t klen);
int dlock__map_put(dlock__map *m, const char *key, size_t klen, void *val);
void *dlock__map_del(dlock__map *m, const char *key, size_t klen);

/* pthread_create that returns once the new thread runs fn: the thread's
 * start-up (the C library's and a sanitizer's allocations) is over, so a
 * fork() right after dlock_client_new cannot copy an allocator lock that a
 * starting thread held (issue 9.9: a fork child hung in ASan's allocator).
 * 0 or the pthread_create error. */
int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* The set of the library's sockets, released in fork children (process.c):
 * track after a connection is made, untrack before it is closed. */
void dlock__fd_track(int fd);
void dlock__fd_untrack(int fd);
/* The deadline (monotonic ms) of the calling thread's current public call
 * when its wait budget is finite and positive, else -1: the router stops
 * retrying there. Public entry points reset it (dlock__clear_error). */
int64_t dlock__call_deadline(void);
void dlock__call_deadline_reset(void);
/* Sets it (dlock__budget_start: the budget's deadline when finite and
 * positive, else -1). */
void dlock__call_deadline_set(int64_t deadline);
/* The bound of one command's retries (dlock_config.call_timeout_ms): 1 when
 * a re-send after `pause` ms that may take next_ms (0: it fails at once,
 * command_timeout_ms: the last attempt got no reply) would end past the
 * bound counted from `first` (monotonic ms of the first send); the thread's
 * message then says so. 0: send it (or no bound). */
int dlock__call_bound_over(const dlock_config *cfg, int64_t first,
                           int64_t pause, int64_t next_ms);

#endif
