/*
 * kinds.h -- the lock kinds (src/kinds/): the mutex and its variants
 * (mutex.c, fair.c, fenced.c, spin.c), read-write locks (rwlock.c),
 * multilocks (multilock.c), Redlock (redlock.c), the counting kinds
 * (counter.c, sem.c, latch.c) and expirable permits (permits.c). Above the
 * client layer (client/client.h); the etcd store (etcd/etcd.h, above)
 * implements them on etcd, reached through the client's store ops table
 * (client/store.h). (The plain mutex's script calls both clients send are
 * engine/calls.c.)
 */
#ifndef DLOCK_KINDS_H
#define DLOCK_KINDS_H

#include "client/client.h"

typedef struct dlock__chobj dlock__chobj;

/* What distinguishes the counting kinds (semaphore, latch): an ops table,
 * as the mutex variants have (counter.c runs the common parts). */
typedef struct dlock__counter_kind {
  const char *name; /* "semaphore", "latch": messages */
  void (*channel)(dlock__sb *b, const char *name);
  int wake_policy;    /* DLOCK__WAKE_COUNT / DLOCK__WAKE_ALL */
  int64_t recheck_ms; /* longest sleep without a check (pub/sub is lossy) */
  /* One check of the waited-for condition (a permit taken, the latch
   * open): 1 done, 0 not yet, or a negative code. */
  int (*ready)(dlock__chobj *o);
} dlock__counter_kind;

/* The part of a counting kind that is a client, a name and one pub/sub
 * channel: the first member of dlock_sem and dlock_latch. Name and channel
 * share one allocation. */
struct dlock__chobj {
  const dlock__counter_kind *kind;
  dlock_client *c;
  char *name;
  size_t name_len;
  char *channel;
  size_t channel_len;
  /* Request id of this object's last state change whose reply came back
   * ("" = none): its once key is no longer needed and is deleted by the
   * next change (see dlock__once_begin). */
  pthread_mutex_t once_mu;
  char once_prev[33];
};
/* Allocates size bytes (a struct whose first member is a dlock__chobj),
 * checks c and name (messages name k->name), copies name and builds the
 * channel. 0 and *out, or DLOCK_EINVAL / DLOCK_EFORK / DLOCK_ENOMEM with
 * nothing left to free. The object holds a reference on c. */
int dlock__counter_new(dlock_client *c, const char *name,
                       const dlock__counter_kind *k, size_t size, void **out);
/* Frees what dlock__counter_new made (NULL accepted). */
void dlock__counter_free(dlock__chobj *o);
/* The prologue of a public call: DLOCK_EINVAL ("<kind> is NULL") or the
 * client's check. */
int dlock__counter_check(const dlock__chobj *o, const char *kind);
/* The store o's calls go to (client/store.h): its client's table, NULL for
 * a Redis client's object and for o NULL. */
const dlock__store_ops *dlock__counter_store(const dlock__chobj *o);
/* The public read of a count: dlock__counter_check, v checked (message
 * names vname), then dlock__counter_get. */
int dlock__counter_read(dlock__chobj *o, const char *kind, long long *v,
                        const char *vname);
/* GET of the count as an integer (absent: 0). 0 or a code. */
int dlock__counter_get(dlock__chobj *o, long long *v);
/* The wait of a counting kind: checks ready() at once, then (wait_ms != 0)
 * subscribes and checks after every wake-up until done or the budget
 * ends. 0 done; DLOCK_EBUSY (no wait, not ready) or DLOCK_ETIMEDOUT with
 * no message (the caller words them); another code with its message. */
int dlock__counter_wait(dlock__chobj *o, long long wait_ms);

/* Request ids that make a counting script (semaphore acquire/release,
 * latch count-down) count once however often the router re-sends it. The
 * script gets KEYS "once" = dlock_once:{name}:<rid> (the name's hash tag,
 * so one slot), set with PX once_ttl_ms when the script changes the count
 * -- before it changes it, so a failing SET leaves nothing half done --
 * and a re-sent copy that finds it returns without counting again; the
 * router sends no copy past once_window_ms after the first (dlock__cmd's
 * resend_window_ms), so every copy it sends finds the key. Each
 * call also deletes the once key of the object's previous completed change
 * (KEYS "prev", present when has_prev), so a busy object keeps about one
 * such key, not one per call. Used by one call on one thread; begin fills
 * w (0 or DLOCK_ENOMEM), end records the outcome and frees w. */
typedef struct dlock__once {
  char rid[33];
  dlock__sb key;  /* this call's once key */
  dlock__sb prev; /* the previous change's once key, when has_prev */
  int has_prev;
} dlock__once;
int dlock__once_begin(dlock__chobj *o, dlock__once *w);
/* stored = the reply came back and says the script stored its once key
 * (it changed the count): the key is no longer needed by a re-send and
 * becomes the object's "previous", deleted by the next change. */
void dlock__once_end(dlock__chobj *o, dlock__once *w, int stored);
struct dlock__script;
/* Runs a counting script of o once (dlock__once): KEYS = [name, (channel
 * when with_channel,) once, (prev)], ARGV = args[0..nargs) (nargs <= 3)
 * then the once key's TTL. The script returns 1 when it changed the count
 * (now or by an earlier copy), 0 when nothing changed; so does this, or a
 * negative code. */
int dlock__chobj_count(dlock__chobj *o, const struct dlock__script *sc,
                       int with_channel, int nargs, const char **args,
                       const size_t *alens);

/* ---- lock objects (mutex.c) --------------------------------------------- */

struct dlock_mutex {
  dlock_client *c;
  const dlock__mutex_ops *ops;
  dlock__lockent *e; /* its entry in the client's hold registry */
  size_t name_len;
  char name[];
};

extern const dlock__mutex_ops dlock__plain_ops;
extern const dlock__mutex_ops dlock__fair_ops;
extern const dlock__mutex_ops dlock__fenced_ops;
extern const dlock__mutex_ops dlock__spin_ops;

/* ---- waiting without pub/sub (spin.c) ----------------------------------
 * Redisson's ExponentialBackOff defaults: the first sleep 1 ms, each next
 * one the previous x2 plus a jitter of [0, fails) ms, at most 128 ms. */
#define DLOCK__SPIN_INITIAL_MS 1
#define DLOCK__SPIN_MAX_MS 128
#define DLOCK__SPIN_MULTIPLIER 2
#define DLOCK__SPIN_SLICE_MS 20 /* a sleep looks at cancel/close this often */
typedef struct dlock__backoff {
  int64_t next, max;
  int mult, fails;
} dlock__backoff;
void dlock__backoff_init(dlock__backoff *b);
/* The next sleep in ms (Redisson's ExponentialBackOffPolicy). */
int64_t dlock__backoff_next(dlock__backoff *b);
/* Sleeps a back-off period (ended early by a cancel or the client
 * closing; never past b's deadline), then calls round(arg); again while it
 * returns 0. Returns round's first non-zero answer (1 held, or a code):
 * round checks the budget (mutex.c spin_round). */
int dlock__spin_wait(const dlock__budget *b, int (*round)(void *arg),
                     void *arg);
/* 1 when m waits by spinning: a spin lock, or a plain mutex of a client
 * that fell back (dlock__spin_fall_back). */
int dlock__spins(const dlock_mutex *m);
/* The server refused the SUBSCRIBE of a wait on m (its error is the
 * thread's last): 1 when the wait goes on by spinning instead
 * (cfg.spin_fallback, a plain mutex; the client remembers it and the first
 * time says so through the log hook, event "spin_fallback"), else 0. */
int dlock__spin_fall_back(dlock_mutex *m);
/* The spin unlock (the plain unlock's arguments; wake = also try a PUBLISH
 * of "0", a refusal ignored): as dlock__mutex_ops.release. */
int dlock__spin_release(dlock_mutex *m, uint64_t tid,
                        const dlock__eng_unlock *u, int wake);
/* A plain final unlock failed with rc: when cfg.spin_fallback is set, the
 * server refused a permission (NOPERM) and the thread's field is gone --
 * the PUBLISH after the release was refused -- falls back as
 * dlock__spin_fall_back does and returns 1 (released); else rc. */
int dlock__spin_unlock_refused(dlock_mutex *m, uint64_t tid, int rc);
/* Force unlock without PUBLISH: 1 deleted, 0 none, or a negative code. */
int dlock__spin_force(dlock_mutex *m);

/* Creates a mutex object with the given ops (variants call this). */
int dlock__mutex_create(dlock_client *c, const char *name,
                        const dlock__mutex_ops *ops, dlock_mutex **out);
/* The shared acquire/release paths (what dlock_mutex_timedlock/unlock do),
 * for lock kinds built from mutex objects with their own ops (rwlock). */
int dlock__mutex_acquire(dlock_mutex *m, long long wait_ms, long long lease_ms);
int dlock__mutex_release(dlock_mutex *m);
/* The calling thread's recorded hold count on m (no Redis traffic). */
int dlock__mutex_local_count(dlock_mutex *m);
/* Writes tombstone key[0..klen) (SET key 1 PX dlock__tombstone_ttl) and
 * waits for the answer, under the retry policy: the commit of a request
 * that was sent more than once (safety round 4). 0, or the failure. Any
 * thread without an internal lock. */
int dlock__commit_tomb(dlock_client *c, const char *key, size_t klen);

/* Writes the tombstone of final release rid on lock name (one command,
 * the router's retries; best effort: a failure is ignored). Blocking; any
 * thread without reg_mu. */
void dlock__unlock_tombstone(dlock_client *c, const char *name,
                             const char *rid);

#endif
