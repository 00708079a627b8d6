/*
 * lockscan.h -- the lock space of a Redis deployment, read without the
 * library (plain hiredis connections, tools/common/url.h): what `dlock
 * list`, `dlock top` and `dlock exporter` show.
 *
 * HOW. For every master (one; every master a redis-cluster:// seed's
 * CLUSTER SLOTS names): SCAN with MATCH and COUNT (never KEYS), one batch
 * at a time; per batch, one pipelined round of TYPE for the keys that can
 * be a lock's own key (a name not starting with redisson_ / dlock_, not a
 * read hold's {N}:...:rwlock_timeout:n), one of HLEN for the hashes (one
 * of more than 512 fields is no lock and is not read), then one
 * pipelined round for the details (docs/design.md "Every kind's keys"):
 *   hash, fields "<uuid>:<tid>"[":write"] (+ "mode"): mutex, fair, fenced
 *     (redisson_lock_token:{N} exists) or rwlock ("mode" present); its
 *     PTTL; waiters from dlock_lock_queue:{N} (mutex hand-over queue) and
 *     redisson_lock_queue:{N} / redisson_lock_timeout:{N} (fair queue).
 *   string with a decimal value: semaphore (seen with a dlock_once:{N}:*
 *     key or subscribers of redisson_sc:{N}), permits ({N}:timeout zset,
 *     Redisson RPermitExpirableSemaphore: one holder per permit id),
 *     latch (subscribers of redisson_countdownlatch__channel__{N});
 *     other integer strings only with `all` (kind "counter": RSemaphore and
 *     RCountDownLatch keep nothing else).
 * Holders are resolved through their client's info key
 * dlock_client:{<uuid>} (host, pid, program, since:<tid>:<name>); a
 * holder without one is reported as not alive (its client stopped
 * refreshing it: dead, or not a dlock client -- e.g. Redisson).
 *
 * COST. Per key scanned: its share of a SCAN call plus one TYPE; per lock
 * a handful of O(1)/O(small) reads. Nothing is O(keyspace) in one call,
 * so Redis serves others between the batches (docs/operations.md has the
 * figures per 1M keys). Bounded by max_keys and deadline_ms.
 */
#ifndef DLOCK_LOCKSCAN_H
#define DLOCK_LOCKSCAN_H

#include <stddef.h>

typedef struct ls_holder {
  char owner[96]; /* "<uuid>:<tid>" (a permit: its id, hex) */
  char mode[8];   /* "" (mutex), "read", "write", "permit" */
  long long count;
  int alive; /* its client's info key exists */
  char host[128];
  char program[64];
  long long pid;        /* 0: unknown */
  long long since_ms;   /* wall ms the hold began; 0: unknown */
  long long expires_ms; /* permit: wall ms of its expiry; -1 never */
} ls_holder;

typedef struct ls_waiter {
  char owner[96];        /* "<uuid>:<tid>" */
  const char *queue;     /* "fair" or "handover" */
  long long deadline_ms; /* wall ms after which the entry is dead; 0: none */
  int alive;             /* its client's info key exists */
  char host[128];
  char program[64];
  long long pid;
} ls_waiter;

typedef struct ls_lock {
  char *name;
  const char *kind;      /* mutex, fair, fenced, rwlock, semaphore, permits,
                            latch, counter */
  char node[64];         /* host:port of the master that has it */
  long long ttl_ms;      /* PTTL: -1 no TTL */
  long long value;       /* semaphore/permits/latch/counter: its number */
  long long subscribers; /* waiting clients subscribed (sem/latch) */
  ls_holder *holders;
  size_t nholders;
  ls_waiter *waiters;
  size_t nwaiters;
} ls_lock;

typedef struct ls_opts {
  const char *url;
  const char *pattern;   /* SCAN MATCH (lock names); NULL: "*" */
  int count;             /* SCAN COUNT; 0: 1000 */
  long long max_keys;    /* stop after this many keys per scan; 0: none */
  long long deadline_ms; /* stop scanning after this long; 0: none */
  int all;               /* list integer strings without evidence */
  int timeout_s;         /* connect and command timeout; 0: 5 */
} ls_opts;

typedef struct ls_result {
  ls_lock *locks;
  size_t n;
  long long keys_scanned;
  long long commands; /* commands sent */
  long long elapsed_ms;
  size_t nodes;
  int truncated; /* max_keys or the deadline stopped the scan */
} ls_result;

/* Scans o->url's lock space into *out (sorted by name). 0, or the exit
 * code with why in err (out is then empty): 69 a node unreachable, 77 its
 * login refused, 64 a TLS URL (not supported yet), 70 any other failure.
 * ls_free(out) either way. Thread-safety: any thread; out is the caller's. */
int ls_scan(const ls_opts *o, ls_result *out, char *err, size_t errlen);
void ls_free(ls_result *r);

/* Finds name in r (NULL if absent). */
const ls_lock *ls_find(const ls_result *r, const char *name);

/* Wall-clock milliseconds since the epoch. */
long long ls_wall_ms(void);

#endif
