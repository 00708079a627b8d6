/*
 * dlock/async.h -- the event-loop client: Redisson-compatible locks for
 * programs built around an event loop (libevent, libuv, a loop of their own)
 * that cannot park a thread in dlock_mutex_lock.
 *
 * A dlock_async runs entirely inside the caller's loop: it starts no thread,
 * never blocks (except getaddrinfo(3) on a host name when it connects: use
 * an address or a unix socket where that matters), and calls back from the
 * loop's callbacks only. It shares everything that is seen from outside with
 * the blocking client (dlock.h): the Redis layout (Redisson's RLock hash,
 * field "<client id>:<owner>"), the acquire and unlock scripts, the
 * hand-over queue of waiters and its pub/sub grants, the watchdog's rules
 * and the retry policy. Async owners, blocking dlock_mutex threads and Java
 * Redisson clients contend for the same locks.
 *
 *   dlock_config cfg;
 *   dlock_config_init(&cfg);
 *   cfg.url = "redis://127.0.0.1:6379";
 *   dlock_async *a;
 *   dlock_async_new(&cfg, &a);                 (no I/O yet)
 *   dlock_libevent_attach(a, base);            (dlock/adapters/libevent.h)
 *   dlock_async_lock(a, "orders:42", 1, 5000, -1, on_locked, ctx);
 *   event_base_dispatch(base);
 *
 * Kinds with an async form: the reentrant mutex (dlock_mutex_new's layout).
 * The fair, fenced, read-write and counting kinds are blocking-only.
 *
 * Topologies: redis://, unix://, rediss:// (TLS: the blocking client's
 * tls_* settings and checks; handshake, reads and writes are non-blocking
 * steps driven by the loop; no SIGPIPE when the server closes a
 * connection) and redis-sentinel:// / rediss-sentinel:// (the master the
 * sentinels name, its ROLE checked in the round -- a sentinel naming a
 * replica is passed over -- and asked again after a lost connection,
 * READONLY, MASTERDOWN, a ROLE that is not master, +switch-master or
 * +promoted-slave) and
 * redis-cluster:// / rediss-cluster:// (each call sent to the master of
 * its lock's slot, MOVED and ASK followed, sharded pub/sub on that
 * master; a command and a subscriber connection per master).
 * cfg.sync_replicas sends WAIT after every lock write but renewals; an
 * acquisition the replicas did not confirm within sync_timeout_ms is
 * undone and tried again within the call's budget, else its callback gets
 * DLOCK_ENOSYNC (nothing of it left), as the blocking client's
 * (docs/sentinel.md).
 *
 * Threads: a dlock_async and all its calls belong to one thread, the one
 * that runs its loop. Callbacks run on that thread, from the loop, never
 * from inside the call that queued them.
 *
 * Connections: one command connection (every command pipelined on it) and
 * one subscriber connection, opened when first needed and reopened after a
 * failure (a Sentinel client has one more, to a sentinel; a Cluster client
 * has both per master, and one to ask for the slot map; the subscriber is
 * reopened after 50 ms, doubling up to cfg.retry_interval_ms). A command
 * whose connection fails is re-sent after cfg.retry_interval_ms, at most
 * cfg.retry_attempts more times (the scripts are safe to repeat) and never
 * past the end of its call's wait budget; then its call answers
 * DLOCK_ECONN (with a Sentinel URL: the message lists what each sentinel
 * said when none named a master). A connection that broke while idle has
 * its commands re-sent once at once. A server's error reply answers
 * DLOCK_EREDIS with its text (NOPERM, WRONGTYPE, a MOVED at a redis://
 * URL: "use a redis-cluster:// URL") or DLOCK_EAUTH. TLS failures (a
 * certificate refused, a client certificate the server wants, a plain
 * redis:// URL at a TLS port: "speaks TLS: use rediss://") answer
 * DLOCK_ETLS at once. These rules are the blocking client's (one
 * implementation, src/engine/ioverdict.c).
 */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlock_async dlock_async;

/* The completion of a queued call: rc is DLOCK_OK or a negative code;
 * dlock_last_error() holds its detail message during the callback. Runs
 * exactly once per queued call, on the loop. It may call any dlock_async
 * function, dlock_async_free included. */
typedef void dlock_async_cb(int rc, void *arg);

/* Creates an event-loop client from cfg (NULL: all defaults; prepared by
 * dlock_config_init; strings copied): parses the URL, draws the client id.
 * No I/O and no thread: connections are opened once it is attached to a
 * loop (dlock_async_attach, or an adapter) and has work.
 * cfg.on_lock_lost is called on the loop (name valid during the call);
 * cfg.subscription_linger_ms keeps a lock channel subscribed that long
 * after its last waiting call; cfg.pool_size, multiplex and lazy_connect
 * do not apply. rediss://: the TLS context is made here (cfg's tls_* files
 * loaded once). Errors: DLOCK_EINVAL (NULL out, malformed URL or numbers,
 * a cfg dlock_config_init did not set up, tls_cert_file without
 * tls_key_file), DLOCK_ENOTSUP (a field this library does not know),
 * DLOCK_ETLS (a tls_* file that does
 * not load, with OpenSSL's reason), DLOCK_ENOMEM. *out is NULL on failure.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_async_new(const dlock_config *cfg, dlock_async **out);

/* The client's counters (dlock_client_stats's struct and meaning,
 * docs/operations.md), writing at most `size` bytes (the caller's sizeof):
 * acquired, reentered, released, lost_key_gone, lost_unreachable,
 * lost_forced, lost_expired, timeouts,
 * renewals_sent/failed, and the gauges
 * holds and connected (the command connection is ready) so far.
 * Errors: DLOCK_EINVAL (NULL, a size below 8 or above 4096). Thread-safety:
 * the loop's thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_async_stats_sized(dlock_async *a, dlock_client_stats *st,
                                      size_t size);
#define dlock_async_stats(a, st)                                               \
  dlock_async_stats_sized((a), (st), sizeof(dlock_client_stats))

/* Closes the connections and frees the client. Every call still pending
 * calls back once, inside this call, with DLOCK_ECLOSED (a lock being
 * acquired may still be taken on the server: it expires after its lease);
 * then the adapter's cleanup hook runs. Locks held are not released: their
 * renewal stops and they expire after their lease. Accepts NULL. May be
 * called from a callback (the memory goes when the callback returns).
 * Thread-safety: the loop's thread. */
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_async_free(dlock_async *a);

/* Acquires the mutex `name` for `owner` (Redisson's lockAsync(threadId):
 * the hash field is "<client id>:<owner>"), reentrantly per owner. wait_ms
 * and lease_ms mean what they mean in dlock_mutex_timedlock: wait_ms < 0
 * waits for ever, 0 is one attempt (DLOCK_EBUSY), > 0 at most that long
 * (DLOCK_ETIMEDOUT); lease_ms > 0 is a fixed lease, <= 0 the watchdog lease
 * (cfg.watchdog_timeout_ms, renewed every third of it by a loop timer while
 * held). A waiting call is woken by pub/sub and served in the same
 * hand-over order as blocking waiters. The calls of one (name, owner) run
 * one after another in the order they were made.
 * cb(rc, arg) runs once: DLOCK_OK (held), DLOCK_EBUSY, DLOCK_ETIMEDOUT,
 * DLOCK_ELOST (a reentrant acquire found the owner's hold gone),
 * DLOCK_ECONN (also when the wait budget ends during the retries),
 * DLOCK_EAUTH (a refused SUBSCRIBE of this lock; NOAUTH), DLOCK_EREDIS (a
 * server's error reply, a MOVED/ASK loop), DLOCK_ETLS (rediss://: the
 * server's certificate refused, a client certificate it wants; or a plain
 * URL at a TLS port), DLOCK_ECLOSED, DLOCK_ENOMEM.
 * Returns 0 (queued), or DLOCK_EINVAL (NULL a, name or cb, empty name,
 * lease_ms above DLOCK_LEASE_MAX_MS), DLOCK_ECLOSED (being freed),
 * DLOCK_ENOMEM: then nothing was queued and cb will not run.
 * Thread-safety: the loop's thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_async_lock(dlock_async *a, const char *name,
                               long long owner, long long wait_ms,
                               long long lease_ms, dlock_async_cb *cb,
                               void *arg);

/* Releases one hold of `owner` on `name`; the last one deletes the key and
 * hands the lock to the next waiter (or publishes "0"). cb(rc, arg) runs
 * once: DLOCK_OK, DLOCK_EPERM (owner holds no lock of that name by this
 * client's record), DLOCK_ELOST (it did, but the hold is gone: renewal found
 * it gone, its local deadline passed, or Redis says so), DLOCK_ECONN,
 * DLOCK_EREDIS, DLOCK_ECLOSED. Returns as dlock_async_lock.
 * Thread-safety: the loop's thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_async_unlock(dlock_async *a, const char *name,
                                 long long owner, dlock_async_cb *cb,
                                 void *arg);

/* The client id (36-char UUID) of every hash field this client writes,
 * valid for the client's lifetime; "" for NULL. Thread-safety: any. */
DLOCK_SINCE(0, 2)
DLOCK_API const char *dlock_async_id(const dlock_async *a);

/* ------------------------------------------------------------------------ */
/* Event-loop hooks: what an adapter fills (hiredis's redisAsyncContext ev   */
/* style). dlock/adapters/libevent.h and libuv.h are two; another loop      */
/* needs the same dozen lines.                                               */
/* ------------------------------------------------------------------------ */

/* One socket of the client. The library owns it; `ev` is the adapter's
 * (NULL when the library creates the watch): its per-socket state, made on
 * the first add_* and freed by release. */
typedef struct dlock_async_watch {
  int fd;
  void *ev; /* the adapter's */
  dlock_async *a;
} dlock_async_watch;

/* The hooks, all called on the loop's thread with `data`:
 * - add_read / add_write: start reporting that w->fd is readable /
 *   writable, by calling dlock_async_on_readable(w) /
 *   dlock_async_on_writable(w) from the loop, level-triggered, until the
 *   matching del_* (the library calls add_* only while not watching). 0,
 *   or -1 when the adapter cannot (the connection then fails).
 * - del_read / del_write: stop that.
 * - release: the socket is about to be closed: stop everything for w and
 *   free w->ev; w itself is freed by the library after the call.
 * - schedule_timer: call dlock_async_on_timer(a) once, ms milliseconds
 *   from now (ms >= 0), replacing the timer scheduled before, if any.
 * - cancel_timer: the scheduled timer must not fire.
 * - cleanup: the client is being freed (after every release): free data.
 * None of them may call back into the library synchronously. */
typedef struct dlock_async_hooks {
  void *data;
  int (*add_read)(void *data, dlock_async_watch *w);
  void (*del_read)(void *data, dlock_async_watch *w);
  int (*add_write)(void *data, dlock_async_watch *w);
  void (*del_write)(void *data, dlock_async_watch *w);
  void (*release)(void *data, dlock_async_watch *w);
  void (*schedule_timer)(void *data, long long ms);
  void (*cancel_timer)(void *data);
  void (*cleanup)(void *data);
} dlock_async_hooks;

/* Attaches the client to a loop through hooks (copied). Once per client.
 * Work queued before it starts now. Returns 0, or DLOCK_EINVAL (NULL
 * argument, a hook missing, already attached).
 * Thread-safety: the loop's thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_async_attach(dlock_async *a,
                                 const dlock_async_hooks *hooks);

/* What the adapter calls from the loop: w's socket is readable / writable;
 * the timer is due. Thread-safety: the loop's thread. */
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_async_on_readable(dlock_async_watch *w);
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_async_on_writable(dlock_async_watch *w);
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_async_on_timer(dlock_async *a);

#ifdef __cplusplus
}
#endif

#endif
