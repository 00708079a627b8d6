/*
 * dlock.h -- distributed locks on Redis for C programs.
 *
 * This header is the whole public API of libdlock: anything not declared here
 * (or in <dlock/version.h>, which it includes) is internal and may change.
 *
 * Conventions used by every function below
 * -----------------------------------------
 * - Return values: 0 (DLOCK_OK) on success, a negative DLOCK_E* code on
 *   failure. Predicates return 1/0 or a negative code. The detail message of
 *   the calling thread's most recent call is dlock_last_error() (empty after
 *   a call that succeeded).
 * - Objects are opaque and created by *_new, destroyed by *_free. Every *_free
 *   accepts NULL.
 * - Strings passed in are copied unless a comment says otherwise; the caller
 *   may free them as soon as the call returns.
 * - Thread-safety: a dlock_client and every lock object may be shared by any
 *   number of threads. A held lock belongs to the thread that acquired it
 *   (pthread semantics): only that thread may unlock it. Each function states
 *   its own rule in a "Thread-safety:" line.
 * - Callbacks (on_lock_lost) run on one of the client's background threads
 *   (the watchdog or the expiry thread). They must return quickly and must
 *   not call blocking dlock functions.
 * - fork(): a client must not be used in a child process; every call there
 *   returns DLOCK_EFORK. The child may create its own client.
 * - Versions: DLOCK_SINCE(major, minor) names the release that added each
 *   call. The structs the caller allocates (dlock_config, dlock_status) only
 *   grow at the end and carry a layout record, so programs built against an
 *   older header keep working with a newer library of the same SONAME
 *   (libdlock.so.DLOCK_SOVERSION). The policy: docs/abi.md.
 *
 * Redis layout: the mutex is Redisson's RLock (hash <name>, field
 * "<client uuid>:<thread id>" = hold count, channel
 * "redisson_lock__channel:{<name>}"), so C and Java processes can share one
 * lock. See docs/design.md.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "dlock/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/* DLOCK_SINCE(major, minor) marks the release that added a call; every call
 * below carries one (tests/abi checks it). It expands to nothing. The 0.1
 * series recorded no per-call versions: the calls tagged 0.1 are all those
 * that existed when the tags were introduced (0.2), all added while the
 * version was 0.1.0. See docs/abi.md for the API/ABI policy. */
#define DLOCK_SINCE(major, minor)

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* Error codes. The numbers are pinned: never renumbered, never reused.
 * X(name, value, message). DLOCK_EQUORUM is not returned by this version
 * (a Redlock round without a majority is DLOCK_EBUSY or DLOCK_ETIMEDOUT,
 * the votes in dlock_last_error()); docs/errors.md has when each is. */
#define DLOCK_ERRNO_MAP(X)                                                     \
  X(OK, 0, "success")                                                          \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EBUSY, -3, "lock is held elsewhere")                                       \
  X(ETIMEDOUT, -4, "timed out waiting for the lock")                           \
  X(EPERM, -5, "lock is not held by the calling thread")                       \
  X(ELOST, -6, "lock was held but has been lost (expired, deleted or taken)")  \
  X(ECONN, -7, "cannot reach the Redis server")                                \
  X(EAUTH, -8, "authentication refused by the Redis server")                   \
  X(EREDIS, -9, "the Redis server replied with an error")                      \
  X(EPROTO, -10, "unexpected reply from the Redis server")                     \
  X(ECLOSED, -11, "the client is shutting down")                               \
  X(EFORK, -12, "client used in a child process after fork()")                 \
  X(ECANCELED, -13, "operation canceled")                                      \
  X(EDEADLK, -14, "operation would deadlock (e.g. read-to-write upgrade)")     \
  X(ENOTSUP, -15, "not supported")                                             \
  X(EQUORUM, -16, "no majority of masters granted the lock")                   \
  X(ETLS, -17, "TLS handshake or certificate verification failed")             \
  X(ENOSYNC, -18, "replicas did not confirm the acquisition in time")

enum dlock_errno {
#define DLOCK__ERR_ENUM(name, value, msg) DLOCK_##name = (value),
  DLOCK_ERRNO_MAP(DLOCK__ERR_ENUM)
#undef DLOCK__ERR_ENUM
};

/* Static, human-readable text for an error code; never NULL ("unknown
 * error" for codes outside the list). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_strerror(int err);

/* The code's symbolic name without the prefix ("EBUSY"), or "UNKNOWN".
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_err_name(int err);

/* The detail message of the calling thread's most recent dlock call: the
 * server's error text for DLOCK_EREDIS, what is wrong for DLOCK_EINVAL, the
 * system error for DLOCK_ECONN. Every call that can fail starts by clearing
 * it, so it is the empty string after a call that succeeded (and before the
 * first call): read it right after the failing call. The pointer is valid
 * until the same thread's next dlock call.
 * Thread-safety: any thread (per-thread storage). */
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_last_error(void);

/* Version of the library actually linked, DLOCK_VERSION_NUMBER form, and as
 * text ("0.1.0"). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_version(void);
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_version_string(void);

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct dlock_client dlock_client;

/* dlock_config.tls_verify (since 0.3 by name; 0 and 1 since 0.2). */
#define DLOCK_TLS_VERIFY_NONE 0    /* no check at all: insecure */
#define DLOCK_TLS_VERIFY_FULL 1    /* the chain and the name (default) */
#define DLOCK_TLS_VERIFY_CA_ONLY 2 /* the chain, not the name */

/* dlock_config.retry_delay (since 0.3): Redisson's delay kinds. */
#define DLOCK_RETRY_CONSTANT 0
#define DLOCK_RETRY_EQUAL_JITTER 1
#define DLOCK_RETRY_FULL_JITTER 2
#define DLOCK_RETRY_DECORRELATED_JITTER 3

/* Client settings. Allocated by the caller (usually on the stack) and always
 * prepared with dlock_config_init before anything else touches it:
 *
 *   dlock_config cfg;
 *   dlock_config_init(&cfg);           (defaults and the layout record)
 *   cfg.url = "redis://10.0.0.5:6379";
 *   rc = dlock_client_new(&cfg, &c);
 *
 * The struct grows (docs/abi.md): new fields are only ever appended, never
 * inserted, removed or resized. dlock_config_init passes the size of the
 * struct as this header defines it; the library records it in abi_size,
 * writes nothing past it, and dlock_client_new reads only the fields that fit
 * in it (the rest keep their defaults). So a program built against an older
 * header runs against a newer library unchanged, and a program built against
 * a newer header runs against an older library unless it sets a field that
 * library does not know (then dlock_client_new returns DLOCK_ENOTSUP).
 * A config that did not go through dlock_config_init (an aggregate or
 * designated initialiser, a memset, uninitialised memory) is refused by
 * dlock_client_new with DLOCK_EINVAL. Copies of an initialised config
 * (cfg2 = cfg) are fine. Positional initialisers ({"redis://...", 10000,
 * ...}) are not supported: the field order starts with the layout record. */
/* Levels of the log hook (dlock_config.log_level): an event is passed on
 * when its level is <= the configured one. */
#define DLOCK_LOG_ERROR 1 /* a hold lost, a call failed for good */
#define DLOCK_LOG_WARN 2  /* renewal failed, reconnecting, retrying */
#define DLOCK_LOG_INFO 3  /* connected, failover/redirect followed */
#define DLOCK_LOG_DEBUG 4 /* every acquisition, hand-over, decline */

/* The log hook (since 0.3). level: DLOCK_LOG_*. name: the lock name the
 * event is about, or NULL. event: a short fixed word naming the kind of
 * event ("connect", "reconnect", "disconnect", "failover", "redirect",
 * "retry", "acquired", "renew_failed", "lost", "expired", "enosync",
 * "decline", "config_ignored", ...: docs/operations.md). A hold's loss is
 * logged ("lost") before on_lock_lost runs, and its renewal failures
 * ("renew_failed", with the lease left) as they happen.
 * msg: one line for humans, no newline. All strings are valid during the
 * call only. Called from whichever thread met the event (an API thread,
 * the watchdog or pub/sub thread, or the loop of an event-loop client),
 * possibly from several threads at once; it must return quickly and must
 * not free the client it is logging for. */
typedef void dlock_log_fn(void *arg, int level, const char *name,
                          const char *event, const char *msg);

typedef struct dlock_config {
  /* The layout record: private, written by dlock_config_init (a mark that
   * it ran, and sizeof(dlock_config) in the caller's header). Never set. */
  uint32_t abi_magic;
  uint32_t abi_size;
  /* redis://[[user]:password@]host[:port][/db] or
   * unix:///path/to/socket[?db=N&password=...&user=...], or
   * rediss://... (the redis:// form over TLS: the tls_* fields below), or
   * redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/
   * master-name[/db][?sentinel_user=...&sentinel_password=...] (since 0.3:
   * the master found and followed through Sentinel, docs/sentinel.md;
   * rediss-sentinel:// over TLS), or
   * redis-cluster://[[user]:password@]host:port[,host:port...] (a Redis
   * Cluster: any reachable seed; rediss-cluster:// over TLS; every call
   * works unchanged, docs/cluster.md), or
   * etcd://[user:password@]host[:port][,host[:port]...][/prefix][?tls=1]
   * (since 0.3: the etcd store, a CP backend, docs/etcd.md: an etcd 3.4+
   * cluster through its v3 JSON gateway, the members tried in turn, port
   * 2379 by default, keys "<prefix><name>/<lease hex>" as `etcdctl lock`
   * makes them; etcds:// or ?tls=1 over TLS with the tls_* fields below).
   * On etcd the mutex (plain, fair -- every etcd mutex is FIFO --, fenced,
   * spin), multilocks of such mutexes, expirable permits and status work;
   * read-write locks, Redlock, semaphores, latches, sync_replicas and the
   * event-loop client answer DLOCK_ENOTSUP naming the alternative.
   * watchdog_timeout_ms is the etcd client's session lease: whole seconds,
   * at least 2000; a fixed lease_ms likewise.
   * NULL means "redis://127.0.0.1:6379". Copied by dlock_client_new. */
  const char *url;
  int connect_timeout_ms;  /* per connection attempt; default 10000 */
  int command_timeout_ms;  /* per reply; default 3000 */
  int retry_attempts;      /* retries after the first try; default 3; a
                              timed call retries only within its wait
                              budget (see dlock_mutex_timedlock) */
  int retry_interval_ms;   /* pause between tries; default 1500 */
  int watchdog_timeout_ms; /* lease of watchdog locks; renewed every third;
                              default 30000 */
  int pool_size;           /* command connections shared by all threads when
                              multiplex is 0 (see below); default 16 */
  int lazy_connect; /* 0: dlock_client_new connects and authenticates before
                       it returns; 1: it returns at once and the first
                       operation reports connection errors. Default 0. */
  /* Called on a background thread when a renewal finds a held lock gone
   * (expired, deleted or taken), or when renewals kept failing until the
   * lease ran out; and on a thread that exits still holding locks, once
   * per lock, from its thread-exit destructor (the renewal of its holds
   * stops and the keys expire after their lease: docs/threading.md).
   * name is valid during the call only. May be NULL. During the call,
   * dlock_last_error() on that thread says which happened ("lock 'x' was
   * lost: a renewal found its key gone or taken ..." / "... renewals kept
   * failing ... until its lease ran out" / "... the thread holding it
   * exited without unlocking ..."); the holder's unlock then returns
   * DLOCK_ELOST with the same reason. */
  void (*on_lock_lost)(const char *name, void *arg);
  void *on_lock_lost_arg;
  /* Keep a lock channel subscribed this long after its last waiter left, so
   * a thread that unlocks and soon locks again under contention needs no
   * SUBSCRIBE/UNSUBSCRIBE round trips and joins the hand-over queue with its
   * first attempt (one script call less per contended acquisition; measured
   * +13 % acquisitions/s and -30 % client CPU with 8 processes on one lock).
   * Default 100 ms; 0 drops the subscription as soon as no thread waits. */
  int subscription_linger_ms;
  /* 1 (default): the commands of all threads of the client share one
   * connection per server and are pipelined -- a thread writes its command
   * at once, one thread at a time reads the replies and hands each to its
   * caller -- so concurrent threads cost Redis far fewer reads and writes.
   * 0: each command borrows a connection of a pool of pool_size. */
  int multiplex;
  /* ---- since 0.2: TLS (rediss:// URLs; docs/security.md) ---- */
  /* PEM bundle of the CAs trusted to sign the server's certificate; NULL
   * (default) = the system's store. */
  const char *tls_ca_file;
  /* A directory of hashed CA certificates (c_rehash); default NULL. */
  const char *tls_ca_dir;
  /* The client's certificate and its private key (PEM), for servers that
   * require mutual TLS (tls-auth-clients yes); default NULL (none). */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* The name sent as SNI and verified against the server's certificate;
   * NULL (default) = the URL's host. */
  const char *tls_server_name;
  /* What is checked of the server's certificate (DLOCK_TLS_VERIFY_*):
   * DLOCK_TLS_VERIFY_FULL (1, default): the chain leads to a trusted CA and
   * the certificate names the server. DLOCK_TLS_VERIFY_CA_ONLY (2, since
   * 0.3): the chain only, any name (what a config file's
   * sslEnableEndpointIdentification: false or sslVerificationMode: CA_ONLY
   * gives). DLOCK_TLS_VERIFY_NONE (0): accept any certificate -- the
   * connection is encrypted but not authenticated (anyone on the path can
   * impersonate the server); only this value turns the CA check off. Any
   * other value is FULL. The library never prints; the CLI warns. */
  int tls_verify;
  /* Private: what dlock_config_load allocated (freed by
   * dlock_config_dispose). Never set. */
  void *loaded;
  /* ---- since 0.3: replica sync (docs/sentinel.md) ---- */
  /* After every lock write (acquire, unlock, the writes of every lock kind)
   * WAIT until this many replicas acknowledged it: -1 (default) = every
   * replica connected to the master at that moment, 0 = do not wait,
   * n > 0 = at least n. An acquisition the replicas did not confirm within
   * sync_timeout_ms (or what is left of a timed call's wait budget, when
   * less) is undone and retried under the retry policy, then fails with
   * DLOCK_ENOSYNC. A master without replicas costs nothing. */
  int sync_replicas;
  int sync_timeout_ms; /* WAIT's timeout; default 1000 (Redisson's
                          slavesSyncTimeout) */
  /* ---- since 0.3: observability (docs/design.md, client info) ---- */
  /* The name every connection of the client gives itself (CLIENT SETNAME),
   * shown by the server's CLIENT LIST as name=...: Redisson's clientName.
   * NULL (default) = "dlock:<program>:<host>:<pid>"; "" = no name. The
   * characters Redis refuses in a name (space, control and non-ASCII
   * bytes) are sent as '_'. A server that refuses the command (an ACL
   * without +client) is not an error: the connection stays unnamed.
   * Copied by dlock_client_new / dlock_async_new. */
  const char *client_name;
  /* ---- since 0.3: log hook (docs/operations.md) ---- */
  /* The library never prints on its own. When log_fn is set, it is called
   * for every event at log_level or more severe (DLOCK_LOG_*; default
   * DLOCK_LOG_INFO): connects and disconnects, failovers and redirects
   * followed, renewal failures as they happen, losses, declines, retries,
   * config settings accepted but ignored. When log_fn is NULL and the
   * environment has DLOCK_LOG=error|warn|info|debug, the events go to
   * stderr as timestamped lines instead (for programs that set no hook).
   * See dlock_log_fn for the call's contract. */
  dlock_log_fn *log_fn;
  void *log_arg;
  int log_level;
  /* ---- since 0.3: waiting without pub/sub (docs/spin.md) ---- */
  /* 0 (default): a waiting dlock_mutex_lock/timedlock of a plain mutex
   * whose SUBSCRIBE the server refuses (an ACL user without +subscribe or
   * without the lock's channels, a proxy that does not pass pub/sub) fails
   * with DLOCK_EAUTH. 1: it waits as a spin lock does instead (polls with
   * exponential back-off, dlock_mutex_new_spin), and says so once per
   * client through the log hook (DLOCK_LOG_WARN, event "spin_fallback");
   * from then on the client's plain mutexes wait that way without trying
   * SUBSCRIBE again, and their unlocks wake other clients' pub/sub waiters
   * only when PUBLISH is allowed (else those notice at their next timed
   * retry). Fair and fenced locks and read-write locks never fall back.
   * YAML: spinFallback (dlock's own key). */
  int spin_fallback;
  /* ---- since 0.3: the retry delay policy (Redisson's retryDelay) ---- */
  /* The pause before retry n (n = 0 for the first retry) of a command, a
   * connection or an acquisition the replicas did not confirm:
   * DLOCK_RETRY_CONSTANT (default): retry_interval_ms every time. The
   * others are Redisson's delay kinds over retry_base_delay_ms (b) and
   * retry_max_delay_ms (m), with e = min(b * 2^n, m):
   * DLOCK_RETRY_EQUAL_JITTER: e/2 + a random 0..e/2;
   * DLOCK_RETRY_FULL_JITTER: a random 0..e;
   * DLOCK_RETRY_DECORRELATED_JITTER: min(b + a random 0..3*prev, m), prev
   * being the previous pause (b at first). docs/config.md. */
  int retry_delay;
  int retry_base_delay_ms; /* default 1000 */
  int retry_max_delay_ms;  /* default 2000 */
  /* ---- since 0.3: PKCS12 key stores (Redisson's sslTruststore,
   * sslKeystore; docs/security.md) ---- */
  /* A PKCS12 file of trusted CA certificates (used instead of the system's
   * store, with tls_ca_file / tls_ca_dir if set too), and its password
   * (NULL: none). A Java keystore (JKS) is refused: convert it with
   * keytool -importkeystore -deststoretype PKCS12. Default NULL. */
  const char *tls_truststore;
  const char *tls_truststore_password;
  /* A PKCS12 file holding the client's certificate (and its chain) and
   * private key, for mutual TLS, instead of tls_cert_file + tls_key_file;
   * and its password. Default NULL. Copied (loaded) by dlock_client_new. */
  const char *tls_keystore;
  const char *tls_keystore_password;
  /* ---- since 0.3: bounded calls (issue 39; docs/errors.md) ---- */
  /* The longest a command of a call goes on being retried, in ms from its
   * first send; 0 = no bound (the whole retry policy). Default 5000. The
   * router sends no copy of a command that would start more than
   * call_timeout_ms after the first one, nor a copy after an attempt that
   * got no reply when that copy's reply could not come in time either (its
   * pause plus command_timeout_ms past the bound). So a call that needs no
   * wait -- dlock_mutex_trylock, dlock_mutex_is_locked,
   * dlock_status_query, an unlock -- against a server that stopped
   * answering returns DLOCK_ECONN after one command_timeout_ms (3 s by
   * default), and against a refused connection after the retries that
   * start within call_timeout_ms; it never takes longer than
   * call_timeout_ms + command_timeout_ms (a server that stops answering in
   * the middle of the retries), plus connect_timeout_ms when the network
   * swallows a connection attempt. dlock_client_new's connection attempts
   * follow the same rule. A waiting call (wait_ms > 0) is bounded by its
   * wait budget as before; each of its commands by this. YAML:
   * callTimeout (dlock's own key). The event-loop client (dlock/async.h)
   * bounds its calls by their wait_ms and its retry timers instead. */
  int call_timeout_ms;
  /* ---- new fields go here, at the end, with their default in
   * dlock_config_init_sized and a DLOCK_SINCE note (docs/abi.md) ---- */
} dlock_config;

/* Fills the first `size` bytes at cfg: the layout record (abi_size = size),
 * the documented default of every field that fits in `size`, zero bytes for
 * the rest. Writes nothing past `size`. Does nothing when cfg is NULL or
 * size is below 8 (the layout record) or above 4096 (not a struct size).
 * Programs call dlock_config_init, which passes sizeof(dlock_config).
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_config_init_sized(dlock_config *cfg, size_t size);

/* dlock_client_new with the size of dlock_config in the caller's header.
 * Reads at most that many bytes of *cfg, and at most its abi_size. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_client_new_sized(const dlock_config *cfg, size_t size,
                                     dlock_client **out);

/* The two calls below are inline wrappers (since 0.2) that pass this
 * header's sizeof(dlock_config). The library also exports plain functions
 * of these names: they keep the 0.1 layout for objects compiled against the
 * 0.1 header, and this header does not declare them (docs/abi.md). */
#ifndef DLOCK_BUILDING

/* Fills *cfg with the documented defaults and the layout record. Required
 * before any other use of a dlock_config (see above). NULL is ignored.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
static inline void dlock_config_init(dlock_config *cfg) {
  dlock_config_init_sized(cfg, sizeof(dlock_config));
}

/* Creates a client: parses cfg->url, and unless cfg->lazy_connect is set,
 * connects and authenticates (AUTH, SELECT) before returning, applying the
 * retry policy to unreachable servers within cfg->call_timeout_ms: one
 * connection attempt is a TCP connect and a TLS handshake (each at most
 * connect_timeout_ms) and the login's reply (at most command_timeout_ms);
 * the next attempt starts only when, after its pause, it could end within
 * call_timeout_ms of the first one taking as long as the last one did. So
 * it returns within max(call_timeout_ms, one attempt) -- 3 s against a
 * stalled server, 4.5 s against a refused port, with the defaults -- and,
 * with call_timeout_ms 0, within (retry_attempts + 1) attempts plus
 * retry_attempts pauses. Starts four background threads:
 * pub/sub wake-ups, lease renewal (the watchdog: renewals and loss reports
 * only), the expiry thread that reports a hold lost the moment its local
 * deadline passes, and the errand thread (the client's info key, declines,
 * cluster map refreshes) (docs/threading.md); a redis-sentinel:// client a
 * fifth, the Sentinel watcher (it follows failovers). A sentinel client finds
 * the master by asking the sentinels in turn (DLOCK_ECONN naming what each said
 * when none names a master that answers ROLE as one). The client id is a fresh
 * random UUID v4. cfg: borrowed for the call (strings copied); NULL means all
 * defaults. out: receives the client, freed with dlock_client_free; set to NULL
 * on failure. Errors: DLOCK_EINVAL (NULL out, malformed URL, bad numbers, a cfg
 * that dlock_config_init did not set up; on etcd a watchdog_timeout_ms that is
 * not whole seconds >= 2 s), DLOCK_ENOTSUP (cfg sets a field this
 * library does not know: the program was built against a newer dlock.h; on
 * etcd sync_replicas > 0), DLOCK_ECONN (unreachable after the retry policy; on
 * etcd also no member with a quorum), DLOCK_EAUTH (password or ACL user
 * refused), DLOCK_EREDIS (SELECT refused; the etcd gateway's error reply),
 * DLOCK_EPROTO (etcd:// names a port that is no etcd v3 gateway), DLOCK_ETLS,
 * DLOCK_ENOMEM. An etcd client starts one background thread (the session
 * lease's keepalives, deadlines and watches) instead of the four above.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
static inline int dlock_client_new(const dlock_config *cfg,
                                   dlock_client **out) {
  return dlock_client_new_sized(cfg, sizeof(dlock_config), out);
}

#endif /* !DLOCK_BUILDING */

/* Reads the YAML file at path (Redisson's vocabulary: lockWatchdogTimeout,
 * singleServerConfig / clusterServersConfig / sentinelServersConfig, ...;
 * docs/config.md has every key) into cfg, which dlock_config_init prepared:
 * the keys the file sets replace cfg's values, the others stay. Strings are
 * copied into memory the config owns until dlock_config_dispose; values may
 * come from the environment (${VAR}). Writes no field past cfg's recorded
 * size (docs/abi.md).
 * Errors: DLOCK_EINVAL (NULL argument, cfg not set up by dlock_config_init,
 * an unreadable file, a YAML syntax error, an unknown key, a wrong type or
 * a bad value, an unset ${VAR}: dlock_last_error() names the file, line and
 * column), DLOCK_ENOMEM. On error cfg is unchanged.
 * Thread-safety: any thread, on a cfg no other thread uses. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_config_load(const char *path, dlock_config *cfg);

/* Frees what dlock_config_load allocated for cfg and resets the string
 * fields it set to NULL (the other fields keep their values). A config that
 * was never loaded is left as it is. NULL is ignored. dlock_client_new
 * copies what it needs: disposing a config after creating clients with it
 * is fine. Thread-safety: any thread, on a cfg no other thread uses. */
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_config_dispose(dlock_config *cfg);

/* Stops the background threads, closes every connection and releases the
 * client. Locks still held are not released: their renewal stops and they
 * expire after their lease. Returns at once whatever the background
 * threads wait for on the network (a connect, a handshake, a reply: each
 * such wait ends when the client is freed); it waits only for a callback
 * (on_lock_lost, the log hook) running on one of them, a host name being
 * resolved, or a write to a full socket buffer (docs/threading.md). Lock
 * objects created from the client (mutex variants, rwlock, semaphore, latch)
 * may be freed before or after this call: each keeps the client's memory alive
 * until it is freed, and its calls answer DLOCK_ECLOSED meanwhile. Accepts
 * NULL. Thread-safety: any thread, but not from a callback, and not while other
 * threads are inside calls on this client or its objects -- a thread
 * blocked in a wait counts. To shut down with waiters, call
 * dlock_client_cancel_waits (they return DLOCK_ECANCELED), join them, then
 * free. Redlock objects borrow their clients: free them first. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_client_free(dlock_client *c);

/* The client's id (36-char lowercase UUID), valid for the client's
 * lifetime. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_client_id(const dlock_client *c);

/* Who a client is, as its info key records it. From its first hold on, a
 * client keeps a small hash "dlock_client:{<client id>}" (fields host, pid,
 * program, started) with the watchdog timeout as TTL, refreshed by its
 * errand thread every renewal period: it expires with the client. The
 * lock's own keys are unchanged. Layout frozen (like dlock_holder). */
typedef struct dlock_client_info {
  char host[256];       /* gethostname() of the client's machine */
  char program[256];    /* the program's short name */
  long long pid;        /* the client's process id on that machine */
  long long started_ms; /* when the client was created: ms since the epoch */
} dlock_client_info;

/* Reads the info key of the client whose id starts `owner` -- a client id
 * or a holder field "<client id>:<thread id>[:write]" from dlock_status.
 * Returns 1 (found: *info filled), 0 (no info key: the client is gone, has
 * held nothing yet, or is not dlock -- e.g. Redisson; *info zeroed), or
 * DLOCK_EINVAL (NULL, or owner shorter than 36 characters), DLOCK_ECONN,
 * DLOCK_EREDIS, DLOCK_EFORK, DLOCK_ECLOSED. Nothing to free. Thread-safety:
 * any thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_client_info_query(dlock_client *c, const char *owner,
                                      dlock_client_info *info);

/* The connection name (CLIENT SETNAME, dlock_config.client_name or the
 * default "dlock:<program>:<host>:<pid>") of the client whose id starts
 * `owner` (as for dlock_client_info_query), as its info key records it,
 * into buf (len bytes, truncated, NUL-terminated; "" when none). Returns 1
 * (found), 0 (no info key, or a client that names no connection), or
 * DLOCK_EINVAL (NULL, len 0, owner shorter than 36 characters),
 * DLOCK_ECONN, DLOCK_EREDIS, DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any
 * thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_client_conn_name_query(dlock_client *c, const char *owner,
                                           char *buf, size_t len);

/* When the hold of `owner` -- a holder field "<client id>:<thread id>
 * [:write]" from dlock_status -- on lock `name` began: *since_ms gets the
 * wall-clock time (ms since the epoch) the holder's client took the lock
 * (the acquisition that began the hold, not a reentrant one). The holder's
 * client publishes it in its info key from its errand thread (never on
 * the lock call's own path) once the hold has lasted 100 ms (a shorter hold
 * is never published: a client that locks and unlocks continuously writes
 * nothing for it), at most one write per 100 ms; a younger hold is not
 * found yet, or may show that thread's previous hold of the name. Returns 1
 * (found), 0 (not known: the client is gone, is not dlock or a dlock before
 * 0.3, or the hold is
 * that young; *since_ms = 0), DLOCK_EINVAL (NULL, empty name, owner not
 * "<36-character id>:<thread id>"), DLOCK_ECONN, DLOCK_EREDIS,
 * DLOCK_EFORK, DLOCK_ECLOSED. Holders of the event-loop client
 * (dlock_async) publish theirs too since 0.3: owner "<client id>:<owner>".
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_hold_since_query(dlock_client *c, const char *owner,
                                     const char *name, long long *since_ms);

/* How many hold records the client keeps: one per (lock name, thread) that
 * holds the lock now or whose unlock ended without an answer. Records are
 * freed when the thread holds nothing, so this is bounded by the holds, not
 * by the threads that ever locked. For diagnostics and tests; no Redis
 * traffic. 0 for NULL. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API size_t dlock_client_hold_records(dlock_client *c);

/* Ends every wait in progress on this client: each thread blocked in a
 * lock/wait call of this client returns DLOCK_ECANCELED after leaving the
 * wait queue -- unless the lock was handed to it meanwhile, in which case the
 * call succeeds and the caller holds the lock. Calls started after this one
 * are not affected. Returns 0, or DLOCK_EINVAL for NULL.
 * Thread-safety: any thread, and async-signal-safe (it only does an atomic
 * add and a write(2)), so a signal handler may call it. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_client_cancel_waits(dlock_client *c);

/* ------------------------------------------------------------------------ */
/* Reentrant mutex (Redisson RLock layout)                                   */
/* ------------------------------------------------------------------------ */

typedef struct dlock_mutex dlock_mutex;

/* Creates a lock object for the Redis key `name` (not empty, copied). No
 * Redis traffic. Errors: DLOCK_EINVAL (NULL/empty name, NULL out),
 * DLOCK_ENOMEM, DLOCK_EFORK. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_new(dlock_client *c, const char *name,
                              dlock_mutex **out);

/* Fair variant: FIFO across all clients (Redisson RFairLock layout: queue
 * redisson_lock_queue:{name}, deadlines redisson_lock_timeout:{name}, one
 * channel per waiter). Used with the same dlock_mutex_* calls. A blocking
 * call (lock, timedlock with wait_ms != 0) joins the queue with its first
 * attempt; waiters are served in the order their first attempts reached the
 * server. trylock and timedlock(0, ...) never join the queue: they succeed
 * only when the lock is free and nobody is queued. A waiter that dies is
 * skipped once its deadline passes (the deadline of the waiter ahead, or
 * the holder's TTL, plus its own wait budget; 300000 ms for an unbounded
 * wait). Unlock wakes only the head waiter. Errors as dlock_mutex_new.
 * See docs/fair.md. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_new_fair(dlock_client *c, const char *name,
                                   dlock_mutex **out);

/* Fenced variant (Redisson RFencedLock layout): every successful acquire,
 * reentrant ones included, increments the counter
 * redisson_lock_token:{name} (no TTL, never reset) and the hold gets that
 * value as its fencing token; see dlock_mutex_token(). Tokens are strictly
 * increasing across all holders and clients; the first is 1.
 * What a token protects against: a holder that stalls (GC pause, SIGSTOP,
 * swap, slow network) past its lease while another client takes the lock,
 * then writes to the shared resource believing it still holds the lock.
 * The lock cannot prevent that late write. The RESOURCE must: pass the
 * token with every write, and have the resource remember the highest token
 * it accepted and reject writes carrying a lower one. Without that check
 * in the resource, the token protects nothing. Errors as dlock_mutex_new.
 * See docs/fenced.md. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_new_fenced(dlock_client *c, const char *name,
                                     dlock_mutex **out);

/* Spin lock (Redisson RSpinLock): the reentrant mutex's layout (hash
 * `name`, field "<client id>:<thread id>" = hold count, TTL = lease), so
 * it excludes and is excluded by a dlock_mutex, a Redisson RLock or
 * RSpinLock of the same name, and one thread's holds through any of this
 * client's objects of the name are one reentrant hold. It uses no pub/sub:
 * a waiting call tries again after exponential back-off sleeps with jitter
 * (Redisson's defaults: 1 ms, x2 plus up to `fails` ms of jitter, at most
 * 128 ms), and its unlock publishes nothing (it hands the lock to nobody:
 * pub/sub waiters of the same name notice at their next timed retry).
 * Watchdog renewal, fixed leases, loss reports, unlock, force unlock
 * (without PUBLISH), status and every other dlock_mutex_* call work as on
 * a dlock_mutex. For servers or ACL users without pub/sub, and for very
 * many locks with short waits; see docs/spin.md. Ownership: the caller
 * owns *out (dlock_mutex_free). Errors as dlock_mutex_new.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_mutex_new_spin(dlock_client *c, const char *name,
                                   dlock_mutex **out);

/* Frees the object. Holds still recorded on it (by any thread) are
 * abandoned, not released: their renewal stops and the key expires after
 * its lease. Accepts NULL. Thread-safety: any thread, but no other thread
 * may be using the object. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_mutex_free(dlock_mutex *m);

/* Acquires, waiting as long as it takes; watchdog lease (renewed while
 * held). Reentrant: the owning thread may lock again (hold count + 1).
 * Errors: DLOCK_ECONN (server unreachable beyond the retry policy),
 * DLOCK_EAUTH, DLOCK_EREDIS (e.g. WRONGTYPE under the name), DLOCK_ELOST
 * (a reentrant acquire found this thread's hold gone; the hold is dropped),
 * DLOCK_ECLOSED, DLOCK_EFORK, DLOCK_ENOSYNC (cfg.sync_replicas: the
 * replicas did not confirm the acquisition -- a hand-over from an unlock
 * included -- within sync_timeout_ms, after the retry policy (for a timed
 * call: within its wait budget; trylock: one attempt); it was undone,
 * nothing is held). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_lock(dlock_mutex *m);

/* One attempt; DLOCK_EBUSY if the lock is held elsewhere. Watchdog lease.
 * Other errors as dlock_mutex_lock. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_trylock(dlock_mutex *m);

/* The longest fixed lease any call accepts (~31.7 years); longer ones are
 * refused with DLOCK_EINVAL before anything is sent (Redis refuses a PEXPIRE
 * whose expiry time overflows, and the local deadline must stay
 * computable). */
#define DLOCK_LEASE_MAX_MS 1000000000000LL

/* wait_ms < 0: wait forever; 0: one attempt (DLOCK_EBUSY if held
 * elsewhere); > 0: wait at most that long (DLOCK_ETIMEDOUT when it runs
 * out). The budget bounds the whole call, retries included: a command
 * that fails (connection refused, reset, a transient server state) is
 * retried under the retry policy (retry_attempts, retry_interval_ms) only
 * while the budget lasts; a mutex or read-write lock call that waits
 * (wait_ms > 0) and holds nothing yet keeps trying past the policy until its
 * budget ends (a Sentinel
 * failover, a restarting server), so against a dead server the call returns
 * DLOCK_ECONN after about wait_ms (plus at most one connection attempt,
 * connect_timeout_ms, or one reply, command_timeout_ms or a WAIT's
 * sync_timeout_ms, when the network swallows packets instead of refusing
 * them). With wait_ms < 0 or 0 the whole retry policy applies. The same holds
 * for every timed call of the library (rwlock, multilock, semaphore, latch).
 * lease_ms > 0: fixed lease, no renewal; <= 0: watchdog lease; above
 * DLOCK_LEASE_MAX_MS: DLOCK_EINVAL. A reentrant acquire never shortens the
 * key's TTL (an inner hold with a shorter lease keeps the outer hold's TTL).
 * Other errors as dlock_mutex_lock. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_timedlock(dlock_mutex *m, long long wait_ms,
                                    long long lease_ms);

/* Releases one hold of the calling thread. When holds remain, the TTL is
 * reset to the lease of the holds (the watchdog timeout if any hold uses the
 * watchdog, else the most recent explicit lease). The last release deletes
 * the key and hands the lock to the next waiter (or publishes "0").
 * Errors: DLOCK_EPERM (the calling thread has no hold on this lock name by
 * the library's record; no Redis traffic), DLOCK_ELOST (it had one, but
 * Redis says it is gone: expired, deleted or taken; or its local deadline
 * passed before the unlock -- see dlock_mutex_validity; the record is
 * dropped),
 * DLOCK_ECONN, DLOCK_EREDIS. Retried safely after a lost reply (idempotency
 * latch). Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_unlock(dlock_mutex *m);

/* Deletes the lock whoever holds it and publishes "0". Returns 1 if a lock
 * was deleted, 0 if there was none, or a negative error. Holders are not
 * told directly: their next renewal or unlock reports DLOCK_ELOST. Sent at
 * most once, never re-sent by the retry policy (a second copy could delete
 * a lock that another owner took in between): DLOCK_ECONN means the outcome
 * is unknown. DLOCK_EREDIS ("not a lock") when the key under the name is of
 * another type, or a hash with a field that is not a holder's
 * "<client id>:<thread id>" (a user's hash, a read-write lock's); it is left
 * alone. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_force_unlock(dlock_mutex *m);

/* 1 if any client holds the lock, 0 if not, or a negative error:
 * DLOCK_EREDIS ("not a lock") when the key under the name is of another
 * type, DLOCK_ECONN, DLOCK_EINVAL (NULL). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_is_locked(dlock_mutex *m);

/* 1 if the calling thread holds the lock, 0 if not, or a negative error.
 * A hold whose local deadline has passed (see dlock_mutex_validity), or that
 * the watchdog reported lost, answers 0 at once without asking Redis;
 * otherwise Redis is asked (HEXISTS of the thread's field), and when it
 * cannot be reached (DLOCK_ECONN) a hold still within its local deadline
 * answers 1. Thread-safety: any thread (it answers for the calling thread). */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_is_held(dlock_mutex *m);

/* *ms = how long the calling thread's hold on the lock's name is still
 * guaranteed to be its own: its local deadline minus now. The local deadline
 * is the send time of the last confirmed acquisition or renewal + lease -
 * (lease/100 + 2 ms) for clock drift; the server's key cannot expire before
 * it. Watchdog holds move it forward with every confirmed renewal; when it
 * passes unrenewed the hold is lost at that moment (on_lock_lost runs then,
 * even while a renewal is stuck in the network). Fixed-lease holds end at
 * acquisition + lease - margin. No Redis traffic.
 * Returns 0 (*ms > 0), DLOCK_EPERM (no hold; *ms = 0), DLOCK_ELOST (the hold
 * is lost or past its deadline; *ms = 0), DLOCK_EINVAL (NULL argument),
 * DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread, for itself. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_validity(dlock_mutex *m, long long *ms);

/* The calling thread's hold count according to Redis (0 if none), or a
 * negative error. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_hold_count(dlock_mutex *m);

/* Stores the key's PTTL in *ttl_ms (-2: no key, -1: no expiry) and returns
 * 0, or a negative error. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_ttl(dlock_mutex *m, long long *ttl_ms);

/* The lock's name, valid for the object's lifetime. */
DLOCK_SINCE(0, 1)
DLOCK_API const char *dlock_mutex_name(const dlock_mutex *m);

/* Writes the holder field the calling thread uses for this lock,
 * "<client id>:<thread id>" (NUL-terminated) into buf.
 * Errors: DLOCK_EINVAL (NULL, or len too small: 58 bytes always suffice).
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_owner(const dlock_mutex *m, char *buf, size_t len);

/* The fencing token of the calling thread's current hold on a fenced mutex:
 * the token of its most recent successful acquire (a reentrant acquire gets
 * a new, higher token; an unlock that leaves holds keeps the last one). No
 * Redis traffic. Send it with every write to the protected resource, which
 * must reject tokens lower than the highest it has seen.
 * Errors: DLOCK_EPERM (no hold), DLOCK_ENOTSUP (not a fenced mutex),
 * DLOCK_EINVAL (NULL argument). Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_mutex_token(dlock_mutex *m, uint64_t *token);

/* ------------------------------------------------------------------------ */
/* Lock status (for tools)                                                   */
/* ------------------------------------------------------------------------ */

typedef struct dlock_holder {
  char *owner;     /* holder field, e.g. "<uuid>:<tid>" or "...:write" */
  long long count; /* hold count */
} dlock_holder;

/* Filled by dlock_status_query, released by dlock_status_clear. Allocated
 * by the caller; needs no init (the query writes all of it). It grows like
 * dlock_config (docs/abi.md): fields are only appended, the calls get the
 * caller's sizeof(dlock_status), and the library writes only the fields that
 * fit in it (a field this library does not know reads as zero). */
typedef struct dlock_status {
  /* The layout record: private, written by dlock_status_query. */
  uint32_t abi_magic;
  uint32_t abi_size;
  int locked;       /* 1 if the key exists */
  long long ttl_ms; /* PTTL: -2 no key, -1 no expiry */
  char mode[8];     /* "" (mutex), "read" or "write" (rwlock) */
  size_t n_holders;
  dlock_holder *holders; /* n_holders entries */
  /* ---- new fields go here, at the end (docs/abi.md) ---- */
} dlock_status;

/* dlock_status_query / dlock_status_clear with the size of dlock_status in
 * the caller's header: they write at most `size` bytes at st. A size below
 * 8 or above 4096 is refused (DLOCK_EINVAL) / ignored. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_status_query_sized(dlock_client *c, const char *name,
                                       dlock_status *st, size_t size);
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_status_clear_sized(dlock_status *st, size_t size);

/* Inline wrappers (since 0.2) passing this header's sizeof(dlock_status);
 * the exported functions of these names keep the 0.1 layout (as for
 * dlock_config_init above). */
#ifndef DLOCK_BUILDING

/* Reads the holders, their hold counts and the TTL of the lock `name`
 * (works for mutex and read-write lock layouts). *st is filled and must be
 * released with dlock_status_clear. Errors: DLOCK_EINVAL, DLOCK_EREDIS (e.g.
 * the key is not a hash), DLOCK_ECONN. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
static inline int dlock_status_query(dlock_client *c, const char *name,
                                     dlock_status *st) {
  return dlock_status_query_sized(c, name, st, sizeof(dlock_status));
}

/* Frees what dlock_status_query stored in *st and zeroes it. NULL ok; a
 * struct the query never filled is only zeroed. */
DLOCK_SINCE(0, 1)
static inline void dlock_status_clear(dlock_status *st) {
  dlock_status_clear_sized(st, sizeof(dlock_status));
}

#endif /* !DLOCK_BUILDING */

/* ------------------------------------------------------------------------ */
/* Client counters (since 0.3; docs/operations.md)                           */
/* ------------------------------------------------------------------------ */

/* Waits by how long they took: < 1, 4, 16, 64, 256, 1024, 4096 ms, and
 * the rest (wait_hist[7]). */
#define DLOCK_STATS_WAIT_BUCKETS 8

/* What a client did since it was created: filled by dlock_client_stats.
 * Counters only grow (a snapshot; two snapshots subtract). Allocated by the
 * caller; needs no init. Grows like dlock_status (docs/abi.md): fields are
 * only appended, the call gets the caller's sizeof, and writes only the
 * fields that fit (a field this library does not know reads as zero). */
typedef struct dlock_client_stats {
  /* The layout record: private, written by dlock_client_stats. */
  uint32_t abi_magic;
  uint32_t abi_size;
  uint64_t acquired;          /* holds begun (re-entries not counted) */
  uint64_t acquired_direct;   /* ... by the acquire script itself */
  uint64_t acquired_handover; /* ... by a hand-over grant to a waiter */
  uint64_t reentered;         /* re-entries of a hold this thread had */
  uint64_t released;          /* holds ended by their final unlock */
  uint64_t waits; /* acquisitions that had to wait (and got the lock) */
  uint64_t wait_hist[DLOCK_STATS_WAIT_BUCKETS]; /* waits by duration */
  uint64_t wait_ms_total;                       /* sum of the waits, ms */
  uint64_t wait_ms_max;                         /* the longest wait, ms */
  uint64_t timeouts;        /* waits that ended DLOCK_ETIMEDOUT */
  uint64_t cancels;         /* waits that ended DLOCK_ECANCELED */
  uint64_t renewals_sent;   /* watchdog renewals sent (per hold, retries too) */
  uint64_t renewals_failed; /* renewal rounds that failed: an error, no answer,
                               or not confirmed within 1.5 renewal periods (once
                               per round and hold) */
  uint64_t lost_key_gone;   /* holds lost: a renewal found the field gone */
  uint64_t lost_unreachable; /* ... the server unreachable past the lease */
  uint64_t lost_thread_exit; /* ... the holding thread exited */
  uint64_t lost_forced; /* ... this thread's own unlock or reentrant acquire
                           found it gone before its lease ended (force-unlocked,
                           deleted, taken) */
  uint64_t reconnects;  /* connections reopened after a failure (command,
                           subscriber, watchdog) */
  uint64_t retries;     /* commands re-sent under the retry policy */
  uint64_t enosync;     /* acquisitions undone: replicas did not ack */
  uint64_t commands;    /* commands sent (every connection) */
  uint64_t round_trips; /* writes that waited for their replies */
  uint64_t holds;    /* now: holds this client has (held, not lost, before their
                        local deadline; a gauge) */
  int32_t connected; /* now: 1 if the command connection is up (on a cluster:
                        every master talked to) */
  int32_t reserved_;
  uint64_t lost_expired; /* holds with a fixed lease that ran out before
                            their unlock (counted at the unlock) */
  /* ---- new fields go here, at the end (docs/abi.md) ---- */
} dlock_client_stats;
typedef dlock_client_stats dlock_stats;

/* Copies the counters of client c into st, writing at most `size` bytes
 * (the caller's sizeof). Cheap (no Redis traffic, no lock held for long):
 * any thread, any time while c is alive; the counters are updated with
 * relaxed atomics, so a snapshot taken while other threads work may be a
 * few events apart between fields. Errors: DLOCK_EINVAL (NULL argument, a
 * size below 8 or above 4096). */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_client_stats_sized(dlock_client *c, dlock_client_stats *st,
                                       size_t size);
/* dlock_client_stats(c, &st): dlock_client_stats_sized with this header's
 * sizeof(dlock_client_stats). */
#define dlock_client_stats(c, st)                                              \
  dlock_client_stats_sized((c), (st), sizeof(dlock_client_stats))

/* The waiters queued for the fair lock `name` (Redisson's list
 * "redisson_lock_queue:{name}"), head first: each a holder-style field
 * "<client id>:<thread id>" (dlock_client_info_query names its client).
 * *waiters gets a malloc'd array of *n malloc'd strings (NULL and 0 when
 * nobody waits or on error), owned by the caller: free it with
 * dlock_fair_waiters_free. Errors: DLOCK_EINVAL (NULL, empty name),
 * DLOCK_EREDIS (the key is not a list), DLOCK_ECONN, DLOCK_ENOMEM,
 * DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 2)
DLOCK_API int dlock_fair_waiters_query(dlock_client *c, const char *name,
                                       char ***waiters, size_t *n);
/* Frees what dlock_fair_waiters_query returned. NULL ok. */
DLOCK_SINCE(0, 2)
DLOCK_API void dlock_fair_waiters_free(char **waiters, size_t n);

/* The lock names an etcd:// client's prefix holds now (one read of the
 * keys "<prefix><name>/<lease hex>"; docs/etcd.md), sorted, each once;
 * pattern: NULL for all, else an fnmatch(3) pattern the names must match.
 * On an etcd client dlock_fair_waiters_query gives any name's waiters in
 * order (every etcd mutex queues) and dlock_status_query its holder.
 * *names gets a malloc'd array of *n malloc'd strings (NULL and 0 when
 * none or on error), freed with dlock_fair_waiters_free. Errors:
 * DLOCK_EINVAL (NULL argument), DLOCK_ENOTSUP (a Redis client: `dlock
 * list` scans Redis itself), DLOCK_ECONN, DLOCK_EAUTH, DLOCK_ENOMEM,
 * DLOCK_EFORK, DLOCK_ECLOSED. Experimental. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_lock_names_query(dlock_client *c, const char *pattern,
                                     char ***names, size_t *n);

/* ------------------------------------------------------------------------ */
/* Read-write lock (Redisson RReadWriteLock layout) -- experimental          */
/* ------------------------------------------------------------------------ */

/* Many readers or one writer, both reentrant, across clients. Redis layout
 * (Redisson's): hash <name> with field "mode" ("read"/"write"), reader
 * fields "<uuid>:<tid>" and the writer field "<uuid>:<tid>:write" (hold
 * counts); one key {name}:<uuid>:<tid>:rwlock_timeout:<n> per read hold
 * carrying that hold's lease, so the read holds of a dead client expire;
 * channel redisson_rwlock:{name}. Not fair. See docs/rwlock.md.
 * Write->read downgrade: the writer may also take read holds (and
 * dlock_rwlock_downgrade swaps a write hold for a read hold). Read->write
 * upgrade is refused at once with DLOCK_EDEADLK (it could wait forever). */
typedef struct dlock_rwlock dlock_rwlock;

/* Creates a read-write lock object for the Redis key `name` (not empty,
 * copied). No Redis traffic. Errors: DLOCK_EINVAL (NULL/empty name, NULL
 * out), DLOCK_ENOMEM, DLOCK_EFORK. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_new(dlock_client *c, const char *name,
                               dlock_rwlock **out);

/* Frees the object. Holds still recorded on it are abandoned, not released:
 * their renewal stops and they expire after their lease. Accepts NULL.
 * Thread-safety: any thread, but no other thread may be using the object. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_rwlock_free(dlock_rwlock *rw);

/* Read lock: waits until no other thread holds the write lock; watchdog
 * lease. Reentrant; allowed while the calling thread holds the write lock
 * (downgrade). Errors as dlock_mutex_lock. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_rdlock(dlock_rwlock *rw);
/* One attempt; DLOCK_EBUSY if another thread holds the write lock. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_tryrdlock(dlock_rwlock *rw);
/* wait_ms and lease_ms as dlock_mutex_timedlock (wait_ms < 0 forever, 0
 * one attempt; lease_ms <= 0 watchdog). DLOCK_ETIMEDOUT when the wait runs
 * out. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_timedrdlock(dlock_rwlock *rw, long long wait_ms,
                                       long long lease_ms);

/* Write lock: waits until nobody else holds the lock in any mode;
 * watchdog lease. Reentrant for the writer (each reentry adds the lease to
 * the remaining TTL, as Redisson does). Errors as dlock_mutex_lock, plus
 * DLOCK_EDEADLK at once, without waiting, if the calling thread holds a
 * read lock on this name and not the write lock (upgrade refused; release
 * the read holds first). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_wrlock(dlock_rwlock *rw);
/* One attempt; DLOCK_EBUSY if held elsewhere in any mode; DLOCK_EDEADLK as
 * dlock_rwlock_wrlock. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_trywrlock(dlock_rwlock *rw);
/* wait_ms and lease_ms as dlock_mutex_timedlock; DLOCK_EDEADLK as
 * dlock_rwlock_wrlock. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_timedwrlock(dlock_rwlock *rw, long long wait_ms,
                                       long long lease_ms);

/* Releases the calling thread's most recent hold on this object, read or
 * write (LIFO over its write and read holds: after wrlock, rdlock the first
 * unlock releases the read hold, the second the write hold). The last write
 * release publishes "1" (every waiter retries), the last read release "0".
 * Errors: DLOCK_EPERM (the thread holds nothing on this object; no Redis
 * traffic), DLOCK_ELOST (Redis says that hold is gone: expired, deleted or
 * taken; every hold of that mode is forgotten), DLOCK_ECONN, DLOCK_EREDIS
 * (the hold stays recorded; the call may be repeated).
 * Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_unlock(dlock_rwlock *rw);

/* Downgrade: the calling thread's most recent hold must be a write hold;
 * it is replaced by a read hold (lease_ms > 0: that fixed lease; <= 0:
 * watchdog lease). The read hold is taken before the write hold is
 * released, so no other writer can get in between; other readers may join
 * as soon as the thread holds no more write holds. The read hold takes the
 * write hold's place in the LIFO order. Errors: DLOCK_EPERM (the most
 * recent hold is not a write hold), DLOCK_ELOST (the write hold was lost;
 * the thread then holds neither), DLOCK_ECONN, DLOCK_EREDIS (the thread's
 * holds are as before the call). Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_rwlock_downgrade(dlock_rwlock *rw, long long lease_ms);

/* *ms = how long every hold the calling thread has on the read-write lock
 * (read, write, or both) is still guaranteed to be its own: the least of
 * their local deadlines minus now, as dlock_mutex_validity computes them
 * (send time of the last confirmed acquisition or renewal + lease - (lease/100
 * + 2 ms)). No Redis traffic. Returns 0 (*ms > 0), DLOCK_EPERM (no hold;
 * *ms = 0), DLOCK_ELOST (a hold is lost or past its deadline; *ms = 0),
 * DLOCK_EINVAL (NULL argument), DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety:
 * any thread, for itself. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_rwlock_validity(dlock_rwlock *rw, long long *ms);

/* ------------------------------------------------------------------------ */
/* Multi-lock: all of N mutexes, all-or-nothing -- experimental              */
/* ------------------------------------------------------------------------ */

/* All of N mutexes or none (Redisson RedissonMultiLock semantics). The
 * members are ordinary dlock_mutex objects of any variant, on the same or
 * different clients/servers; each keeps its own Redis layout (the mutex hash
 * under exactly its own name), and nothing else is stored. Acquisition goes
 * over the members in array order, one attempt each; when a member is held
 * elsewhere, every member taken in this call is released before the thread
 * waits, for that member alone, with its own timed acquire and the
 * remaining budget, and then tries the others again. A thread never waits
 * while holding a member, so multi-locks over the same mutexes in different
 * orders cannot deadlock; no partial hold is left behind by a failed call
 * (a member whose release fails with DLOCK_ECONN is left to its lease).
 * Holds are the members' own holds (reentrant, thread-owned, renewed by the
 * watchdog or with a fixed lease each counted from that member's own
 * acquisition). See docs/multilock.md. */
typedef struct dlock_multilock dlock_multilock;

/* Creates a multi-lock over locks[0..n). The array is copied; the members
 * and their clients are borrowed and must outlive the object. No Redis
 * traffic. Errors: DLOCK_EINVAL (NULL out or locks, n == 0, a NULL member,
 * the same object twice), DLOCK_ENOMEM. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_multilock_new(dlock_mutex **locks, size_t n,
                                  dlock_multilock **out);
/* Frees the object, not the members. Holds taken through it stay with the
 * members (as holds of the threads that took them). Accepts NULL.
 * Thread-safety: no other thread may be using the object. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_multilock_free(dlock_multilock *ml);
/* Acquires every member, waiting as long as it takes; watchdog leases.
 * Errors: those of dlock_mutex_lock from any member (the members taken in
 * this call are released first). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_multilock_lock(dlock_multilock *ml);
/* One pass: DLOCK_EBUSY (naming the busy member) if any member is held
 * elsewhere; nothing is held then. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_multilock_trylock(dlock_multilock *ml);
/* wait_ms < 0: forever; 0: as trylock; > 0: at most about that long, then
 * DLOCK_ETIMEDOUT (naming the member still held) with nothing held.
 * lease_ms > 0: that fixed lease on each member; <= 0: watchdog leases.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_multilock_timedlock(dlock_multilock *ml, long long wait_ms,
                                        long long lease_ms);
/* Releases one hold of every member (last member first), continuing past
 * failures. Errors: DLOCK_EPERM (the calling thread does not hold the
 * multi-lock by this object's record; no Redis traffic); the first member
 * error other than a loss (DLOCK_ECONN...: that member's outcome is
 * unknown, it keeps its hold and the multi-lock stays held -- call
 * dlock_multilock_unlock again, which releases only the members not yet
 * released); DLOCK_ELOST (some member was lost while held -- expired,
 * deleted or taken; it is named in dlock_last_error(); the others were
 * released). Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_multilock_unlock(dlock_multilock *ml);

/* ------------------------------------------------------------------------ */
/* Redlock: majority of N independent masters -- experimental                */
/* ------------------------------------------------------------------------ */

/* A lock held by a majority (n/2 + 1) of N independent Redis masters, one
 * client per master (the Redlock algorithm; docs/redlock.md). Each master
 * holds the ordinary mutex hash under exactly `name` (field "<that client's
 * uuid>:<tid>" = 1, TTL = lease), plus the fencing counter
 * redisson_lock_token:{name}. A round asks every master AT THE SAME TIME,
 * one attempt each without the client's retry policy, bounded by that
 * client's command_timeout_ms; a master that is down, slow or errs is a
 * failed vote, and once the outcome is decided a round waits at most
 * lease/20 more for the rest. validity = lease - elapsed (monotonic) -
 * (lease/100 + 2 ms); the lock is taken only with a majority and a positive
 * validity, else every master is released at once before the call goes on (a
 * random 20-200 ms pause, then a new round) or returns. Not reentrant. Hazards
 * (read docs/redlock.md before relying on it): a master that restarts empty
 * at once can hand a second client a majority (restart masters only after
 * the longest lease, or persist with appendfsync always); clock jumps on a
 * master; a holder that pauses past its validity. */
typedef struct dlock_redlock dlock_redlock;

/* Creates a Redlock over clients[0..n) (one per master, all different; n
 * <= 64) for the key `name` (not empty, copied). The array is copied; the
 * clients are borrowed and must outlive the object. No Redis traffic, so it
 * works while masters are down (make their clients with lazy_connect).
 * Errors: DLOCK_EINVAL (NULL/empty arguments, n == 0 or > 64, a NULL or
 * repeated client), DLOCK_EFORK, DLOCK_ENOMEM. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_new(dlock_client **clients, size_t n,
                                const char *name, dlock_redlock **out);
/* Stops the object's renewal thread, waits for vote threads still running
 * (a paused master: at most one command timeout) and frees the object. A
 * hold still recorded is abandoned (its keys expire after the lease).
 * Accepts NULL.
 * Thread-safety: no other thread may be using the object. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_redlock_free(dlock_redlock *rl);
/* Rounds until a majority grants the lock; watchdog lease (the first
 * client's watchdog_timeout_ms, renewed every third of it on every master
 * at once by a per-object thread; if renewal cannot keep a majority -- more
 * than n - majority masters say the key is gone, or no majority answered
 * before the validity ran out -- the hold is lost: the first client's
 * on_lock_lost runs on that renewal thread and unlock returns DLOCK_ELOST).
 * Errors: DLOCK_EDEADLK (this thread already holds it: not reentrant --
 * also through another Redlock object of that name with a client in common,
 * or as a mutex or read-write lock of that name on one of the clients: the
 * same field on that master), DLOCK_ECANCELED (dlock_client_cancel_waits on
 * any of the clients),
 * DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_lock(dlock_redlock *rl);
/* One round: DLOCK_EBUSY if it did not win, with dlock_last_error() naming
 * the votes ("2 of 5 masters voted, 3 needed (1 held elsewhere, 2 failed or
 * unreachable: ...)"); nothing of ours is left on any reachable master
 * (a vote still running when the round gave up -- a paused master -- is
 * taken back by its thread when it ends; dlock_redlock_free waits for it).
 * Watchdog lease. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_trylock(dlock_redlock *rl);
/* wait_ms < 0: forever; 0: one round (DLOCK_EBUSY); > 0: rounds until
 * about that long has passed, then DLOCK_ETIMEDOUT naming the last round's
 * votes. lease_ms > 0: fixed lease, no renewal; <= 0: watchdog lease.
 * Other errors as dlock_redlock_lock. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_timedlock(dlock_redlock *rl, long long wait_ms,
                                      long long lease_ms);
/* Releases the lock on every master at once (only where our field is;
 * unreachable masters are ignored: their keys expire). Returns DLOCK_OK if
 * the calling thread held the Redlock by this object's record (even if a
 * fixed lease has run out meanwhile), DLOCK_ELOST if renewal had reported
 * it lost, DLOCK_EPERM if the thread does not hold it (no Redis traffic).
 * Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_unlock(dlock_redlock *rl);
/* The fencing token of the calling thread's current hold, drawn during the
 * acquisition (before the validity check): 1 + the highest counter reported
 * by any master that answered the vote, written ("set if higher") to every
 * master that answered, accepted when a majority then holds exactly it.
 * Guarantee: a token is greater than every token whose acquisition
 * finished before this acquisition began, PROVIDED that some master that
 * stored the earlier token and answered this vote kept its data. When all
 * masters answer every vote this survives any n - 1 masters restarting
 * empty; in the worst case (each draw reaching only a bare majority) a
 * single master that loses its data can break it. Concurrent holders (the
 * Redlock hazards above) may draw tokens in either order. The resource
 * must reject writes with a token lower than the highest it has seen.
 * Errors: DLOCK_EPERM (not held by the calling thread), DLOCK_EINVAL.
 * No Redis traffic. Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_token(dlock_redlock *rl, uint64_t *token);
/* *ms = the calling thread's remaining validity (0 once it has run out):
 * the end of the lease as measured from the start of the winning round
 * (or the last renewal that reached a majority) minus the drift allowance.
 * Work protected by the lock should finish within it. Errors: DLOCK_EPERM
 * (not held by the calling thread), DLOCK_ELOST (renewal reported the hold
 * lost), DLOCK_EINVAL. No Redis traffic. Thread-safety: the owning thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_redlock_validity(dlock_redlock *rl, long long *ms);

/* ------------------------------------------------------------------------ */
/* Semaphore (Redisson RSemaphore layout) -- experimental                    */
/* ------------------------------------------------------------------------ */

/* A counting semaphore shared by every client of the server (docs/
 * semaphore.md). Layout, exactly Redisson's: the string key `name` holds the
 * number of available permits (no TTL); a missing key means "not set"
 * (nothing can be acquired). Channel redisson_sc:{name}: adding permits
 * publishes the new number of available permits. Permits are not owned:
 * any thread or process may post, and a holder that dies never gives its
 * permit back (no lease). On an etcd:// client the same calls and codes
 * keep the count in the key <prefix><name>~sem, changed only by
 * compare-and-swap on its mod revision, and waiters watch that key instead
 * of the channel (docs/etcd.md). */
typedef struct dlock_sem dlock_sem;

/* Creates a semaphore object for the key `name` (not empty, copied). No
 * Redis traffic. The object keeps the client's memory alive (see
 * dlock_client_free). Errors: DLOCK_EINVAL (NULL/empty name, NULL out),
 * DLOCK_ENOMEM, DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_new(dlock_client *c, const char *name, dlock_sem **out);
/* Frees the object (not the Redis key, and no permit is given back).
 * Accepts NULL. Thread-safety: not while other threads use s. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_sem_free(dlock_sem *s);
/* Sets the number of permits if the semaphore is not set yet (Redisson
 * trySetPermits; publishes the count). Errors: DLOCK_EBUSY (already set,
 * nothing changed), DLOCK_EINVAL (permits < 0), DLOCK_ECONN, DLOCK_EREDIS
 * (e.g. WRONGTYPE). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_init(dlock_sem *s, long long permits);
/* Takes one permit, waiting as long as it takes (dlock_sem_timedwait with
 * wait_ms < 0). */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_wait(dlock_sem *s);
/* One attempt: takes a permit or returns DLOCK_EBUSY (none available, or the
 * semaphore is not set). Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_trywait(dlock_sem *s);
/* Takes one permit. wait_ms < 0: wait forever; 0: one attempt (DLOCK_EBUSY);
 * > 0: at most that long (DLOCK_ETIMEDOUT). A waiting thread sleeps on the
 * client's subscription to redisson_sc:{name} (a post wakes as many waiting
 * threads of a client as it announces permits) and re-checks at least once
 * a second, since pub/sub messages can be lost. Errors: DLOCK_EBUSY,
 * DLOCK_ETIMEDOUT, DLOCK_ECANCELED (dlock_client_cancel_waits; no permit
 * taken), DLOCK_ECLOSED, DLOCK_ECONN, DLOCK_EREDIS, DLOCK_EINVAL (NULL).
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_timedwait(dlock_sem *s, long long wait_ms);
/* Gives back one permit (Redisson release: INCRBY 1, creating the key at 1
 * if missing, then publishes the new value). Any thread or process may post;
 * nothing checks that the caller took a permit. Errors: DLOCK_ECONN,
 * DLOCK_EREDIS, DLOCK_EINVAL. Counts once even when the retry policy
 * re-sends it after a lost reply (a request id, docs/errors.md); after
 * DLOCK_ECONN the outcome is unknown, and calling again posts again.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_post(dlock_sem *s);
/* *v = the permits available now (0 if the semaphore is not set). Errors:
 * DLOCK_EINVAL (NULL), DLOCK_EPROTO (the key is not a number), DLOCK_ECONN,
 * DLOCK_EREDIS. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_sem_value(dlock_sem *s, long long *v);

/* ------------------------------------------------------------------------ */
/* Count-down latch (Redisson RCountDownLatch layout) -- experimental        */
/* ------------------------------------------------------------------------ */

/* A one-shot gate shared by every client of the server (docs/latch.md).
 * Layout, exactly Redisson's: the string key `name` holds the remaining count
 * (no TTL) and is deleted when it reaches zero, so "never set" and "open"
 * are the same state. Channel redisson_countdownlatch__channel__{name}
 * (always with the braces): "0" when the count reaches zero, "1" when a new
 * count is set. */
typedef struct dlock_latch dlock_latch;

/* Creates a latch object for the key `name` (not empty, copied). No Redis
 * traffic. The object keeps the client's memory alive (see dlock_client_free).
 * Errors: DLOCK_EINVAL (NULL/empty name, NULL out), DLOCK_ENOMEM, DLOCK_EFORK,
 * DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_new(dlock_client *c, const char *name,
                              dlock_latch **out);
/* Frees the object (not the Redis key). Accepts NULL. Thread-safety: not
 * while other threads use l. */
DLOCK_SINCE(0, 1)
DLOCK_API void dlock_latch_free(dlock_latch *l);
/* Closes the latch with `count` if it is open (Redisson trySetCount;
 * publishes "1"). A latch that reached zero can be set again. Errors:
 * DLOCK_EBUSY (already set, nothing changed), DLOCK_EINVAL (count <= 0),
 * DLOCK_ECONN, DLOCK_EREDIS. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_init(dlock_latch *l, long long count);
/* Decrements the count; at zero deletes the key and publishes "0", which
 * wakes every waiter. On an open latch it does nothing (Redisson: the DECR
 * result is deleted again). Counts once even when the retry policy re-sends
 * it after a lost reply (a request id, docs/errors.md); after DLOCK_ECONN
 * the outcome is unknown, and calling again counts again. Errors:
 * DLOCK_ECONN, DLOCK_EREDIS, DLOCK_EINVAL. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_count_down(dlock_latch *l);
/* Waits until the latch is open (dlock_latch_timedawait with wait_ms < 0).
 * Returns at once if it was never set. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_await(dlock_latch *l);
/* Waits until the count is zero (key absent). wait_ms < 0: forever; 0: one
 * check; > 0: at most that long. Returns 0 at once on an open or never-set
 * latch. A waiting thread sleeps on the client's subscription (any message
 * wakes every waiting thread of the client, which re-reads the count) and
 * re-checks at least once a second, since pub/sub messages can be lost.
 * Errors: DLOCK_ETIMEDOUT (still closed; also for wait_ms == 0),
 * DLOCK_ECANCELED (dlock_client_cancel_waits), DLOCK_ECLOSED, DLOCK_ECONN,
 * DLOCK_EREDIS, DLOCK_EINVAL. Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_timedawait(dlock_latch *l, long long wait_ms);
/* *n = the remaining count (0 when open or never set). Errors: DLOCK_EINVAL
 * (NULL), DLOCK_EPROTO (the key is not a number), DLOCK_ECONN, DLOCK_EREDIS.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 1)
DLOCK_API int dlock_latch_count(dlock_latch *l, long long *n);

/* ------------------------------------------------------------------------ */
/* Expirable permits (Redisson RPermitExpirableSemaphore layout)             */
/* ------------------------------------------------------------------------ */

/* A semaphore whose permits are owned, named and leased (docs/permits.md):
 * a permit whose holder dies comes back when its lease runs out, and a
 * Java service on Redisson's RPermitExpirableSemaphore shares the same
 * permits. Layout, exactly Redisson's: the string key `name` holds the
 * number of available permits (missing: not set, nothing can be taken);
 * the sorted set {name}:timeout (name:timeout when the name contains '{')
 * has one member per permit taken -- its 16-byte id, raw -- scored with its
 * expiry in ms since the epoch (922337203685477: never). Channel
 * redisson_sc:{name}: every script that adds permits publishes the new
 * count. Expired permits are reclaimed by the next script that runs on the
 * key (acquire, available, update_lease, the watchdog's renewal), as
 * Redisson does: nothing needs to run at the moment a lease ends. Expiry
 * times are the clients' wall clocks (as Redisson's): clients whose clocks
 * disagree by d ms move each other's leases by d. */
typedef struct dlock_permits dlock_permits;

/* A permit id as text: 32 lowercase hex digits (Redisson's form). Buffers
 * that receive one need DLOCK_PERMIT_ID_LEN + 1 bytes. */
#define DLOCK_PERMIT_ID_LEN 32

/* One taken permit, as dlock_permits_list reports it. Frozen layout. */
typedef struct dlock_permit {
  char id[DLOCK_PERMIT_ID_LEN + 1];
  /* Wall-clock expiry, ms since the epoch; -1 never (taken without a lease
   * by Redisson). A value in the past: expired, not yet reclaimed. */
  long long expires_at_ms;
} dlock_permit;

/* Creates a permits object for the key `name` (not empty, copied). No Redis
 * traffic. The object keeps the client's memory alive (see
 * dlock_client_free). Errors: DLOCK_EINVAL (NULL/empty name, NULL out, a
 * name whose keys would fall into different cluster slots), DLOCK_ENOMEM,
 * DLOCK_EFORK, DLOCK_ECLOSED. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_new(dlock_client *c, const char *name,
                                dlock_permits **out);
/* Stops renewing the object's watchdog permits and frees it (not the Redis
 * keys). A permit still held is not given back: it expires after its lease
 * (a watchdog permit: watchdog_timeout_ms after its last renewal), as if
 * its holder had died -- release permits first. Accepts NULL.
 * Thread-safety: not while other threads use p. */
DLOCK_SINCE(0, 3)
DLOCK_API void dlock_permits_free(dlock_permits *p);
/* Takes one permit and writes its id into id_out (DLOCK_PERMIT_ID_LEN + 1
 * bytes, NUL-terminated). wait_ms < 0: wait forever; 0: one attempt
 * (DLOCK_EBUSY); > 0: at most that long (DLOCK_ETIMEDOUT). lease_ms > 0:
 * the permit expires that long after the acquisition unless released or
 * its lease is updated; <= 0: the watchdog -- this object renews the
 * permit every watchdog_timeout_ms / 3 (lease watchdog_timeout_ms) while
 * the process lives and the object exists; a renewal that finds the permit
 * gone, or renewals that fail until its lease may have run out on the
 * server, run cfg.on_lock_lost with the object's name (then, not later; on
 * the object's renewal thread) and the permit is no longer renewed. Above
 * DLOCK_LEASE_MAX_MS: DLOCK_EINVAL. A waiting thread sleeps on the client's
 * subscription to redisson_sc:{name} and re-checks at least once a second
 * and when the earliest lease of a taken permit ends (expired permits
 * announce nothing). A re-sent copy of an acquire (the retry policy) never
 * takes a second permit: the id is chosen before the first send. The lease
 * counts from the acquisition's send: an answer that comes after send +
 * lease - (lease/100 + 2 ms) is no permit -- the server may have reclaimed
 * it for another taker meanwhile -- so the permit is given back at once
 * and the call answers DLOCK_ELOST (dlock_last_error() says how late;
 * id_out stays empty). Errors: DLOCK_EBUSY, DLOCK_ETIMEDOUT,
 * DLOCK_ECANCELED, DLOCK_ECLOSED, DLOCK_ELOST (answered past the lease),
 * DLOCK_ECONN (outcome unknown: the permit may be taken; it expires with
 * its lease), DLOCK_EREDIS, DLOCK_EAUTH (the server refused SUBSCRIBE),
 * DLOCK_EINVAL (NULL). Thread-safety: any thread; the permit is the
 * process's, not the thread's: any thread or process may release it. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_acquire(dlock_permits *p, long long wait_ms,
                                    long long lease_ms,
                                    char id_out[DLOCK_PERMIT_ID_LEN + 1]);
/* dlock_permits_acquire with wait_ms 0: one attempt, DLOCK_EBUSY when no
 * permit is available (or the permits are not set). */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_try_acquire(dlock_permits *p, long long lease_ms,
                                        char id_out[DLOCK_PERMIT_ID_LEN + 1]);
/* Gives back the permit `id` (32 hex digits, either case), taken by any
 * client or process, and publishes the new count (Redisson tryRelease).
 * Ends this object's renewal of it. Errors: DLOCK_ELOST (no such permit:
 * released already, or expired and reclaimed; or found past its lease --
 * then it is given back all the same), DLOCK_EINVAL (NULL, not an id),
 * DLOCK_ECONN, DLOCK_EREDIS. A release may be retried after DLOCK_ECONN
 * (the outcome unknown), at any time: this object remembers it (its 32 most
 * recent such releases), and the retry -- or a copy the retry policy
 * re-sent -- that finds the permit gone returns 0, "released", as an
 * unlock's retry does (docs/errors.md); unless its first copy was sent
 * after the local deadline of a permit this object renews (DLOCK_ELOST).
 * Meanwhile a renewal that finds it gone reports no loss. Thread-safety:
 * any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_release(dlock_permits *p, const char *id);
/* Sets the lease of the taken permit `id` (Redisson updateLeaseTime):
 * lease_ms > 0: it now expires lease_ms from now (and this object stops
 * renewing it); <= 0: this object's watchdog renews it from now on. Until
 * the update is confirmed nothing changes locally: after DLOCK_ECONN a
 * permit the watchdog renewed is still renewed (call again to set the
 * lease). Errors: DLOCK_ELOST (no such permit, or already expired),
 * DLOCK_EINVAL, DLOCK_ECONN, DLOCK_EREDIS. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_update_lease(dlock_permits *p, const char *id,
                                         long long lease_ms);
/* *n = the permits available now, after reclaiming the expired ones (0 if
 * not set). Errors: DLOCK_EINVAL (NULL), DLOCK_ECONN, DLOCK_EREDIS.
 * Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_available(dlock_permits *p, long long *n);
/* Sets the number of permits if not set yet (Redisson trySetPermits;
 * publishes it). Errors: DLOCK_EBUSY (already set, nothing changed),
 * DLOCK_EINVAL (permits < 0), DLOCK_ECONN, DLOCK_EREDIS. Thread-safety: any
 * thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_try_set_permits(dlock_permits *p,
                                            long long permits);
/* Makes the total (available + taken) `permits` (Redisson setPermits): sets
 * the count when not set, otherwise adds the difference to the available
 * count (which may go below zero while more permits than that are taken:
 * they are not handed out again until enough come back). Publishes the
 * total when it changed anything. Idempotent. Errors: DLOCK_EINVAL
 * (permits < 0), DLOCK_ECONN, DLOCK_EREDIS. Thread-safety: any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_set_permits(dlock_permits *p, long long permits);
/* The taken permits, earliest expiry first, and the available count, read
 * without changing anything (expired permits not yet reclaimed are listed,
 * with their past expiry). Returns 1 when the permits are set (the count
 * key exists), 0 when not (*available 0; the list may still hold permits),
 * or a negative code. *out (NULL when *n is 0) is freed with
 * dlock_permits_list_free; available may be NULL. Errors: DLOCK_EINVAL,
 * DLOCK_ENOMEM, DLOCK_EPROTO (the count key is not a number), DLOCK_ECONN,
 * DLOCK_EREDIS (e.g. WRONGTYPE: the name is another kind). Thread-safety:
 * any thread. */
DLOCK_SINCE(0, 3)
DLOCK_API int dlock_permits_list(dlock_permits *p, dlock_permit **out,
                                 size_t *n, long long *available);
/* Frees a list from dlock_permits_list. Accepts NULL. */
DLOCK_SINCE(0, 3)
DLOCK_API void dlock_permits_list_free(dlock_permit *list);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
