/*
 * lockscan.h -- the lock space of a Redis deployment, read through the
 * library's operators' reads (<dlock/admin.h>): what `dlock list`, `dlock
 * top`, `dlock status` and `dlock exporter` show. The tools have no
 * connection code of their own, so every URL the library takes works
 * (rediss:// with --tls-*, mutual TLS, ACL users and a config file's
 * passwords, redis-sentinel://, redis-cluster://).
 *
 * HOW. Every master is scanned at the same time, each on a thread of its
 * own: SCAN with MATCH and COUNT (never KEYS), one batch at a time; per
 * batch, one pipelined round of TYPE for the keys that can be a lock's own
 * key (a name not starting with redisson_ / dlock_, not a read hold's
 * {N}:...:rwlock_timeout:n), one of HLEN for the hashes (one of more than
 * 512 fields is no lock and is not read), then one pipelined round for the
 * details (docs/design.md "Every kind's keys"):
 *   hash, fields "<uuid>:<tid>"[":write"] (+ "mode"): mutex, fair, fenced
 *     (redisson_lock_token:{N} exists) or rwlock ("mode" present); its
 *     PTTL; waiters from dlock_lock_queue:{N} (mutex hand-over queue, with
 *     the time each was queued: dlock_lock_waits:{N} t<wait id>) and
 *     redisson_lock_queue:{N} / redisson_lock_timeout:{N} (fair queue).
 *   string with a decimal value: semaphore (seen with a dlock_once:{N}:*
 *     key or subscribers of redisson_sc:{N}), permits ({N}:timeout zset,
 *     Redisson RPermitExpirableSemaphore: one holder per permit id),
 *     latch (subscribers of redisson_countdownlatch__channel__{N});
 *     other integer strings only with `all` (kind "counter").
 * Then who: every client's info key dlock_client:{<uuid>} (issue 39:
 * host, pid, program, checked, since:<tid>:<name>, wait:<tid>:<name>,
 * permit:<id>, kind:<name>) read on the master of its slot -- the clients
 * named by holders and queues, and the info keys the scan met (a second
 * SCAN MATCH dlock_client:* per master only when the pattern hid them and
 * a permit's holder or a subscribed waiter is still unnamed). So a permit
 * is named by the client that lists it, a waiter that no queue holds (a
 * spin lock's, a semaphore's) by its client's wait:, a fair lock with no
 * waiters by its holder's kind:. A holder whose client has no info key is
 * reported as not alive (dead, or not dlock -- e.g. Redisson): its host,
 * pid and program are unknown (null in JSON, never a fake 0).
 *
 * FAILURES. A master that fails (no reply within the call's time,
 * refused login, NOPERM) is reported in ls_result.errors with its name and
 * why in words; the locks of the others are all there.
 *
 * COST. Per key scanned: its share of a SCAN call plus one TYPE; per lock a
 * handful of O(1)/O(small) reads; per client one HGETALL. Nothing is
 * O(keyspace) in one call (docs/operations.md has the figures per 1M keys).
 * Bounded by max_keys and the deadline.
 */
#ifndef DLOCK_LOCKSCAN_H
#define DLOCK_LOCKSCAN_H

#include <stddef.h>

#include "dlock.h"
#include "dlock/admin.h"

/* Who a holder or a waiter is, from its client's info key (known = 0:
 * no info key found; every other field is then unknown). */
typedef struct ls_who {
  int known;
  char client[40]; /* the client id; "" unknown */
  char host[128];
  char program[64];
  long long pid;
  long long checked_ms; /* the client's last check-in; 0 unknown */
  char kind[8];         /* "blocking", "async", "" (an older client) */
  char name[128];       /* its connection name (client_name); "" none */
} ls_who;

typedef struct ls_holder {
  char owner[96]; /* "<uuid>:<tid>" (a permit: its id, hex) */
  char mode[8];   /* "" (mutex), "read", "write", "permit" */
  long long count;
  int alive; /* 1 its client's info key exists, 0 not, -1 unknown */
  ls_who who;
  long long since_ms;   /* wall ms the hold began; 0: unknown */
  long long expires_ms; /* permit: wall ms of its expiry; -1 never */
} ls_holder;

typedef struct ls_waiter {
  char owner[96];        /* "<uuid>:<tid>" (async: "<uuid>:<owner>") */
  const char *queue;     /* "handover", "fair", or "none" (its info key) */
  long long deadline_ms; /* wall ms after which the entry is dead; 0: none */
  long long since_ms;    /* wall ms the wait began; 0: unknown */
  int alive;             /* its client's info key exists */
  ls_who who;
} ls_waiter;

typedef struct ls_lock {
  char *name;
  const char *kind;      /* mutex, fair, fenced, spin, rwlock, semaphore,
                            permits, latch, counter */
  char node[300];        /* the master that has it */
  long long ttl_ms;      /* PTTL: -1 no TTL */
  long long value;       /* semaphore/permits/latch/counter: its number */
  long long subscribers; /* clients subscribed to its channel (counted) */
  ls_holder *holders;
  size_t nholders;
  ls_waiter *waiters;
  size_t nwaiters;
} ls_lock;

typedef struct ls_opts {
  const char *pattern;   /* SCAN MATCH (lock names); NULL: "*" */
  int count;             /* SCAN COUNT; 0: 1000 */
  long long max_keys;    /* stop after this many keys per master; 0: none */
  long long deadline_ms; /* a scan ends this long after it began; 0: none */
  long long call_ms;     /* the longest one round trip may take (> 0) */
  int all;               /* list integer strings without evidence */
} ls_opts;

/* A master that failed: its name, why (words), the exit code it means
 * (69 unreachable, 77 login/ACL/TLS refused, 70 other). */
typedef struct ls_nodeerr {
  char node[300];
  char why[600];
  int code;
} ls_nodeerr;

typedef struct ls_result {
  ls_lock *locks;
  size_t n;
  long long keys_scanned;
  long long commands; /* commands sent */
  long long elapsed_ms;
  char **nodes; /* every master asked, in order */
  int *node_ok; /* per node: 1 read whole, 0 failed */
  size_t nnodes;
  ls_nodeerr *errors; /* the failed ones */
  size_t nerrors;
  int truncated; /* max_keys or the deadline stopped a scan */
} ls_result;

/* Scans the masters admin reaches into *out (sorted by name). 0 when the
 * masters could be listed -- each failed master is then in out->errors,
 * the others' locks in out->locks -- or the exit code with why in err
 * when not even that (69, 77, 70). ls_free(out) either way.
 * Thread-safety: one scan per admin object at a time. */
int ls_scan(dlock_admin *a, const ls_opts *o, ls_result *out, char *err,
            size_t errlen);
/* The lock `name` alone, read as the scan reads each lock (its kind,
 * holders, waiters and who they are): 0 with *out (kind NULL and no
 * holders when no lock has that name), or the exit code with why in err.
 * ls_lock_free(out) either way. */
int ls_read(dlock_admin *a, const char *name, const ls_opts *o, ls_lock *out,
            char *err, size_t errlen);
void ls_lock_free(ls_lock *l);
void ls_free(ls_result *r);

/* Finds name in r (NULL if absent). */
const ls_lock *ls_find(const ls_result *r, const char *name);

/* Wall-clock milliseconds since the epoch. */
long long ls_wall_ms(void);

/* The exit code of a failed admin call rc (dlock_last_error() read). */
int ls_exit_code(int rc, const char *why);

#endif
