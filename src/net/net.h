/*
 * net.h -- the I/O layer of the blocking client (src/net/): links and
 * their transports (link.c, tls.c, pkcs12.c), the router and its nodes
 * (conn.c), Redis Cluster (cluster.c), Sentinel (sentinel.c), replica sync
 * (sync.c), background threads' own connections (bglink.c) and the
 * messages that explain a refusal (hints.c). Above the engine
 * (engine/engine.h), whose I/O verdicts it applies.
 */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include "engine/engine.h"

/* ---- the messages that explain a refusal (hints.c) ---- */

/* Called with the rc of a script run over keys (keys[0]: the object's
 * name): when the server refused it with WRONGTYPE, looks up the TYPE of
 * each key and replaces the message (which quoted the script's hash) with
 * one that names the object, the key and what that key holds. Returns rc. */
int dlock__explain_wrongtype(dlock_client *c, const dlock__script *s, int rc,
                             int nkeys, const char **keys, const size_t *klens);
/* The WRONGTYPE message's parts, for both clients: "the key 'k' holds a
 * string value" for key k of TYPE type appended to msg at *n (cap bytes;
 * "" and "none" add nothing), and the message itself (DLOCK_EREDIS, set)
 * for script s's object named k0, held being what was appended ("": "a
 * key"). */
void dlock__wrongtype_key(char *msg, size_t cap, size_t *n, const char *k,
                          size_t kl, const char *type);
int dlock__wrongtype_fail(const dlock__script *s, const char *k0, size_t k0l,
                          const char *held);

/* ---- links: one connection to one server (link.c) ---------------------- */

typedef struct dlock__link dlock__link;

/* The transport of a link: how bytes go over its socket (plain TCP and
 * unix sockets; TLS is a second table). read/write behave like recv/send
 * on the link's socket (> 0 bytes, 0 end of stream, -1 with errno: EAGAIN
 * when a timeout or a non-blocking socket stopped it). pending: bytes the
 * transport has decoded and buffered, which poll(2) on the socket cannot
 * see. close frees the transport's state (not the socket). */
typedef struct dlock__link_ops {
  const char *name;
  ssize_t (*read)(dlock__link *l, void *buf, size_t n);
  ssize_t (*write)(dlock__link *l, const void *buf, size_t n);
  size_t (*pending)(const dlock__link *l);
  void (*close)(dlock__link *l);
} dlock__link_ops;

extern const dlock__link_ops dlock__plain_link_ops;
extern const dlock__link_ops dlock__tls_link_ops;

/* ---- TLS (tls.c) ---- */
/* The client's TLS context from cfg's tls_* fields (CA file/dir or the
 * system store, client certificate and key, verification): 0 and *out, or
 * DLOCK_ETLS (a file that does not load, with OpenSSL's reason) /
 * DLOCK_EINVAL / DLOCK_ENOMEM. */
int dlock__tls_ctx_new(const dlock_config *cfg, void **out);
/* pkcs12.c: loads cfg's PKCS12 stores (tls_truststore, tls_keystore) into
 * the SSL_CTX ctx. 0, DLOCK_ETLS (unreadable, wrong password...) or
 * DLOCK_EINVAL (a Java keystore: the message says how to convert it). */
int dlock__tls_load_pkcs12(void *ctx, const dlock_config *cfg);
/* A store's file name: path without Redisson's file: / file:// prefix. */
void dlock__tls_ctx_free(void *ctx);
/* OpenSSL's queued error in words into buf (the oldest, with last the
 * newest; "no detail from OpenSSL" when none), the queue cleared. */
const char *dlock__tls_err_text(char *buf, size_t n, int last);
/* 1 if the TLS link l presents a client certificate. */
int dlock__tls_has_client_cert(const dlock__link *l);
/* Runs the TLS handshake on l's connected socket to host:port (bounded by
 * timeout_ms), sending `name` as SNI (unless an address) and checking the
 * server as dlock_config.tls_verify `verify` says (the chain unless
 * DLOCK_TLS_VERIFY_NONE; the name too unless also DLOCK_TLS_VERIFY_CA_ONLY);
 * from then on l uses dlock__tls_link_ops. 0, or DLOCK_ETLS with the failed
 * check in words (the caller frees l either way). */
int dlock__tls_attach(dlock__link *l, void *ctx, const char *host,
                      const char *name, int port, int verify, int timeout_ms);

/* The event-loop client's sessions (async_conn.c): the same context,
 * socket BIO (no SIGPIPE) and checks as dlock__tls_attach, driven one
 * non-blocking step at a time. dlock__tls_session: 0 and *out (an SSL
 * over fd, made non-blocking), or -1 with why. dlock__tls_step runs one
 * SSL_connect (op CONNECT: > 0 when done), SSL_read or SSL_write of up to
 * n bytes: > 0 bytes, 0 the stream ended, or a DLOCK__TLS_* below (why
 * says what failed for the ERR_ ones). */
enum {
  DLOCK__TLS_CONNECT,
  DLOCK__TLS_READ,
  DLOCK__TLS_WRITE,
  DLOCK__TLS_WANT_READ = -1,
  DLOCK__TLS_WANT_WRITE = -2,
  DLOCK__TLS_ERR_IO = -3, /* the socket failed */
  DLOCK__TLS_ERR_TLS = -4 /* TLS refused (verification, alert): ETLS */
};
int dlock__tls_session(void *ctx, int fd, const char *name, int verify,
                       void **out, char *why, size_t wn);
void dlock__tls_session_free(void *ssl);
/* 1 when the session offers a client certificate (tls_cert_file). */
int dlock__tls_session_has_cert(void *ssl);
int dlock__tls_step(void *ssl, int op, void *buf, size_t n, char *why,
                    size_t wn);
/* Decoded bytes buffered in the session (poll cannot see them). */
size_t dlock__tls_session_pending(void *ssl);

/* A minimal TLS ClientHello (link.c): a TLS-only port answers it with a
 * TLS record. What both clients probe a plain URL's odd server with. */
extern const unsigned char dlock__tls_client_hello[52];
extern const size_t dlock__tls_client_hello_len;

/* Why a link's last operation failed (dlock__link.err). */
enum {
  DLOCK__LINK_OK,
  DLOCK__LINK_IO,      /* the socket failed (errstr says how) */
  DLOCK__LINK_EOF,     /* the server closed the connection */
  DLOCK__LINK_TIMEOUT, /* no progress within the link's timeout */
  DLOCK__LINK_PROTO,   /* the bytes were not RESP */
  DLOCK__LINK_OOM,
  DLOCK__LINK_TLS /* the TLS layer failed (errstr says how): DLOCK_ETLS */
};

/* Used by one thread at a time (the pool lends it out; the multiplexed
 * connection has one reader and serialises writers). */
struct dlock__link {
  const dlock__link_ops *ops;
  int fd;
  void *tls; /* the transport's state, when it has one */
  redisReader *reader;
  int err; /* DLOCK__LINK_*: the last failure */
  char errstr[192];
  /* The last failure of dlock__link_send_shared: a writer's record apart
   * from err/errstr, which the thread reading the link writes meanwhile. */
  int werr;
  char werrstr[192];
  int read_ms, write_ms; /* timeouts (0 = none), for transports that poll */
  int tls_error;         /* the transport's last failure was TLS's own */
  unsigned addr_gen;     /* Sentinel: the master generation it was made for */
  /* Bytes the last dlock__link_send handed to the transport: 0 after a
   * failed send means the command cannot have reached the server. */
  size_t wrote;
};

/* Connects to url with the client's timeouts (connect_timeout_ms, then
 * command_timeout_ms for every read and write), then AUTH (or PING) and
 * SELECT. 0 and *out (free with dlock__link_free), or DLOCK_ECONN /
 * DLOCK_EAUTH / DLOCK_EREDIS / DLOCK_ENOMEM with the message set. */
int dlock__link_open(dlock_client *c, const dlock__url *url, dlock__link **out);
/* The same with replies (the handshake's, and later ones) awaited at most
 * reply_ms instead of command_timeout_ms (the watchdog's links: a renewal
 * must be answered while its lease runs). */
int dlock__link_open_ms(dlock_client *c, const dlock__url *url, int reply_ms,
                        dlock__link **out);

/* ---- the background I/O guard (link.c) -----------------------------------
 * dlock_client_free must not wait for a background thread stuck in the
 * network, and the renewal path must not wait on it longer than a renewal
 * can afford (issue 38.6, 38.9). A background thread of a client (the
 * renewal and errand threads, the Sentinel watcher, a permits renewer)
 * calls dlock__io_guard once, at its start: from then on each of its waits
 * on a socket -- connect, the plain-or-TLS probe, the TLS handshake, every
 * read, the router's retry pauses -- also ends when abort_fd (the client's
 * abort pipe, written by dlock_client_free) becomes readable; with
 * bound_ms > 0, the connect, probe, TLS handshake and handshake replies of
 * every link it opens wait at most bound_ms; with nowait, it never waits
 * for another thread's cluster map refresh (cluster.c). A link open by any
 * thread polls its client's abort pipe for the open's duration; other
 * threads' reads are unchanged (no extra poll on the hot path). */
void dlock__io_guard(int abort_fd, int bound_ms, int nowait);
int dlock__io_guard_fd(void); /* the calling thread's abort fd, or -1 */
int dlock__io_guard_nowait(void);
/* poll(2) of fd for events and of the guard's abort fd, at most ms (<= 0:
 * no bound), EINTR retried: 1 ready, 0 timed out, -2 aborted, -1 failed
 * (errno). */
int dlock__io_poll(int fd, short events, int ms);
/* Sleeps ms, or less when the guard's abort fd becomes readable. */
void dlock__io_pause(int64_t ms);
/* Closes the socket (untracking it: see dlock__fd_track) and frees l.
 * Accepts NULL. */
void dlock__link_free(dlock__link *l);
/* Read and write timeouts of the socket; 0 = none (block, or poll first). */
void dlock__link_set_timeout(dlock__link *l, int read_ms, int write_ms);
/* The read timeout alone; on a shared connection only its reader may call
 * it (it reads l->read_ms outside the connection's mutex: conn.c
 * mux_read). */
void dlock__link_set_read_timeout(dlock__link *l, int read_ms);
/* Writes all of p. 0, or -1 with l->err set. */
int dlock__link_send(dlock__link *l, const char *p, size_t len);
/* The same on a link another thread reads at the same time (the router's
 * shared connection: writers hold its mutex, the reader does not): 0, or
 * -1 with l->werr / l->werrstr set, never l->err (issue 26: TSan saw the
 * two threads write l->err at once while connections were killed). */
int dlock__link_send_shared(dlock__link *l, const char *p, size_t len);
/* One read from the socket into the reader. 0, or -1 with l->err set. */
int dlock__link_read(dlock__link *l);
/* The next complete reply already read, without I/O: 0 with *out (NULL
 * when none is complete), or -1 (protocol error, l->err set). */
int dlock__link_next(dlock__link *l, redisReply **out);
/* The next reply, reading as needed; NULL with l->err set on failure. */
redisReply *dlock__link_reply(dlock__link *l);
/* Bytes the transport holds that poll(2) cannot see (read them first). */
size_t dlock__link_pending(const dlock__link *l);
/* One command: written, then its reply read. NULL with l->err set. */
redisReply *dlock__link_cmd(dlock__link *l, int argc, const char **argv,
                            const size_t *lens);
/* Sets the thread's message for l's failure of `what` and returns the
 * code: DLOCK_ECONN ("no reply within timeout_ms ms", "server closed the
 * connection", the socket's error), DLOCK_EPROTO or DLOCK_ENOMEM. */
int dlock__link_fail(const dlock__link *l, int timeout_ms, const char *what);

/* ---- nodes and the router (conn.c) -------------------------------------- */

typedef struct dlock__conn {
  struct dlock__conn *next;
  dlock__link *link;
} dlock__conn;

/* A request waiting in a multiplexed connection (conn.c). */
typedef struct dlock__mreq dlock__mreq;

/* One connection shared by all API threads, commands pipelined: whoever
 * submits writes its command at once; one thread at a time (the reader)
 * reads replies in order and hands each to its waiting thread. */
typedef struct dlock__mux {
  pthread_mutex_t mu;
  pthread_cond_t state_cv;  /* a broken connection was closed */
  dlock__link *link;        /* NULL: not connected */
  unsigned gen;             /* increases with every new link */
  int reader;               /* a thread is reading replies */
  int broken;               /* a write failed; the reader closes the link */
  dlock__mreq *head, *tail; /* written, waiting for their replies */
} dlock__mux;

/* The replica count of the master as cfg.sync_replicas = -1 needs it. */
typedef struct dlock__sync {
  atomic_int replicas;     /* online replicas; -1 unknown */
  atomic_llong checked_at; /* monotonic ms of the last INFO */
} dlock__sync;

typedef struct dlock__node {
  dlock_client *c;
  const dlock__url *url;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dlock__conn *idle;
  int total;
  int max;
  int use_mux; /* cfg.multiplex */
  dlock__mux mux;
  dlock__sync sync; /* a cluster master's replica count (sync.c) */
  /* Observability (conn.c): up = the command connection is open (a gauge
   * dlock_client_stats reads without a lock); dropped = a connection
   * failed, the next one made is a reconnect. */
  atomic_int up;
  atomic_int dropped;
} dlock__node;
/* 1 if the command connection of n is up (dlock_client_stats). */
int dlock__node_up(dlock__node *n);

/* One command. argv[0..argc) with lengths. When script is set, argv[0] and
 * argv[1] are filled in by the router (EVALSHA sha, or EVAL body after a
 * NOSCRIPT). key routes the command; NULL means "any node". */
typedef struct dlock__cmd {
  const char *key;
  const dlock__script *script;
  int argc;
  const char **argv;
  const size_t *argvlen;
  /* 0: the retry policy. 1: one attempt, but a pooled connection found
   * dead on use is replaced once (Redlock votes, idempotent). 2: sent at
   * most once, whatever happens (force unlock). */
  int no_retry;
  /* > 0: WAIT for this many replicas is pipelined after the command on
   * the same connection (sync.c); its answer goes to *acks. */
  int wait_replicas;
  int sync_timeout_ms; /* WAIT's timeout */
  long long *acks;
  /* > 0: no copy is sent more than this many ms after the first send
   * started (the retry policy ends there with the last error): a counting
   * script's once key (counter.c) lives longer than this by the longest
   * one send can take, so every copy the router sends finds it. */
  int64_t resend_window_ms;
} dlock__cmd;

/* dlock__eval / dlock__areq_eval of such a call (conn.c, async_conn.c). */
int dlock__eval_call(dlock_client *c, const dlock__call *k, redisReply **out);

/* How many times the calling thread's last dlock__exec sent its command
 * (1 = no re-send: no other copy of it exists). */
int dlock__exec_sends(void);
/* Runs cmd with the retry policy; *out gets the reply (freeReplyObject).
 * Error replies become DLOCK_EREDIS (text in dlock_last_error), except the
 * ones the router handles (NOSCRIPT, LOADING, BUSY, TRYAGAIN). */
int dlock__exec(dlock_client *c, const dlock__cmd *cmd, redisReply **out);
/* Convenience for scripts: keys then args. */
int dlock__eval(dlock_client *c, const dlock__script *s, int nkeys,
                const char **keys, const size_t *klens, int nargs,
                const char **args, const size_t *alens, redisReply **out);
/* dlock__eval sent at most once (no_retry 2), for scripts whose second run
 * could do harm (force unlock: a retry could delete a lock that another
 * client took in between). A connection error or timeout leaves the
 * outcome unknown (DLOCK_ECONN). A NOSCRIPT reply (nothing ran) is still
 * answered with EVAL. */
int dlock__eval_once(dlock_client *c, const dlock__script *s, int nkeys,
                     const char **keys, const size_t *klens, int nargs,
                     const char **args, const size_t *alens, redisReply **out);
/* How dlock__eval_how sends a script: no_retry as dlock__cmd's; no_sync
 * 1 sends no WAIT after it even with cfg.sync_replicas (bookkeeping and
 * renewals: nothing a replica must confirm, and a WAIT would make them
 * sit out sync_timeout_ms when replicas lag); resend_window_ms as
 * dlock__cmd's. */
typedef struct dlock__send_how {
  int no_retry;
  int no_sync;
  int64_t resend_window_ms;
} dlock__send_how;
int dlock__eval_how(dlock_client *c, const dlock__script *s, int nkeys,
                    const char **keys, const size_t *klens, int nargs,
                    const char **args, const size_t *alens,
                    const dlock__send_how *how, redisReply **out);
/* The node of url with at most max pooled connections: 0 or DLOCK_ENOMEM.
 * Connections are made on first use (or by dlock__node_warm). */
int dlock__node_init(dlock__node *n, dlock_client *c, const dlock__url *url,
                     int max);
void dlock__node_destroy(dlock__node *n);
/* In a forked child: frees the node's connections, touches no mutex. */
void dlock__node_free_memory(dlock__node *n);
/* Establishes one pooled connection now (non-lazy client creation). */
int dlock__node_warm(dlock__node *n);

/* ---- Redis Cluster (cluster.c) ------------------------------------------- */

/* The slot map is refreshed at least this often (ms). */
#define DLOCK__CLUSTER_REFRESH_MS 5000
/* ... and at most once per this many ms. */
#define DLOCK__CLUSTER_MIN_REFRESH_MS 50

typedef struct dlock__cnode dlock__cnode;

/* The topology of a redis-cluster:// client: nodes[0..n) are every master
 * seen (never freed before the client), owner[slot] the index of the
 * slot's master or -1. */
typedef struct dlock__cluster {
  pthread_mutex_t mu;         /* node creation */
  pthread_mutex_t refresh_mu; /* one refresh at a time */
  dlock__cnode *nodes[DLOCK__CLUSTER_MAX_NODES];
  atomic_int n;
  _Atomic int16_t owner[DLOCK__SLOTS];
  atomic_int stale;             /* refresh before the next lookup */
  atomic_int sharded;           /* the servers have SSUBSCRIBE/SPUBLISH (7+) */
  atomic_uint epoch;            /* bumped by every change of the map */
  _Atomic int64_t refreshed_at; /* monotonic ms; 0 never */
  int64_t tried_at;             /* last round of questions (refresh_mu) */
} dlock__cluster;

/* Walks a CLUSTER SHARDS (shards = 1; tls picks the tls-port) or CLUSTER
 * SLOTS reply (an empty ip is `asked`, the node that answered), calling
 * fn(ctx, lo, hi, host, port) for each master's slot range. 0, or fn's
 * non-zero. Pure: both clients' maps are filled through it. */
typedef int dlock__slots_fn(void *ctx, long long lo, long long hi,
                            const char *host, int port);
int dlock__cluster_parse(const redisReply *r, int shards, int tls,
                         const char *asked, dlock__slots_fn *fn, void *ctx);
/* "MOVED <slot> <host>:<port>" / "ASK ..." (verb): 1 with slot, host
 * (cap bytes) and port, else 0 (conn.c; both clients). */
int dlock__parse_redirect(const char *s, const char *verb, unsigned *slot,
                          char *host, size_t cap, int *port);
/* On a cluster client: DLOCK_EINVAL (message naming kind and name) when
 * the keys and channels derived from name would not share one slot (a
 * name with '{' but no valid hash tag). Else 0. The counting kinds compare
 * their key's and channel's slots themselves (counter.c). */
int dlock__cluster_name_check(const dlock_client *c, const char *name,
                              const char *kind);
/* c->cl for a redis-cluster:// URL (no I/O): 0 or DLOCK_ENOMEM. */
int dlock__cluster_init(dlock_client *c);
/* Frees the topology and its nodes (closing their connections unless
 * forked). NULL c->cl accepted. */
void dlock__cluster_destroy(dlock_client *c, int forked);
/* Asks the known masters, then the seeds, for the slot map. 0 or
 * DLOCK_ECONN / DLOCK_ENOMEM (the old map is kept). */
int dlock__cluster_refresh(dlock_client *c);
/* The master serving key (NULL: any), refreshing the map first when it is
 * stale; NULL with the message set when no master is known. */
dlock__node *dlock__cluster_route(dlock_client *c, const char *key);
/* The master serving key as the map says now (no refresh); NULL if none. */
dlock__node *dlock__cluster_lookup(dlock_client *c, const char *key);
/* "SPUBLISH" on a cluster with sharded pub/sub, else "PUBLISH": the
 * publish command the scripts are given. */
const char *dlock__publish_cmd(const dlock_client *c);
/* The node at host:port, made when missing (redirect targets); NULL on
 * OOM or a full table. */
dlock__node *dlock__cluster_node_at(dlock_client *c, const char *host,
                                    int port);
/* A MOVED reply: slot now belongs to `to`; the map is refreshed soon. */
void dlock__cluster_moved(dlock_client *c, unsigned slot, dlock__node *to);
void dlock__cluster_mark_stale(dlock_client *c);
/* The distinct masters owning slots, up to max into out; returns how many
 * there are. */
int dlock__cluster_masters(dlock_client *c, dlock__node **out, int max);
/* ---- Sentinel (sentinel.c) ---------------------------------------------- */

/* Where a redis-sentinel:// client's master is. mu guards host/port/known;
 * gen changes whenever the address changes (links made for an older gen
 * are stale: conn.c, pubsub.c and watchdog.c drop them). The watcher
 * thread listens for +switch-master on one sentinel at a time. */
typedef struct dlock__sentinel {
  pthread_mutex_t mu;
  pthread_mutex_t disc_mu; /* one discovery at a time */
  char *host;              /* the last master found; NULL: none yet */
  int port;
  int known; /* host is current (0: ask the sentinels again) */
  int next;  /* the sentinel to ask first */
  atomic_uint gen;
  atomic_int stop;
  int pipe[2]; /* wakes the watcher */
  pthread_t thread;
  int started;
} dlock__sentinel;

/* The mutexes (a no-op for other URLs): 0 or DLOCK_ENOMEM. */
int dlock__sentinel_init(dlock_client *c);
/* The watcher thread (sentinel clients only): 0 or DLOCK_ENOMEM. */
int dlock__sentinel_start(dlock_client *c);
void dlock__sentinel_stop(dlock_client *c);
/* forked: in a fork child (touches no mutex). */
void dlock__sentinel_destroy(dlock_client *c, int forked);
/* link_open's hook: for a sentinel URL, *target = url with the current
 * master's host and port (host copied into buf) and *gen its generation;
 * discovers the master first when unknown. 0, or DLOCK_ECONN (no sentinel
 * named a master that says it is one: the message lists why per sentinel)
 * / DLOCK_ENOMEM. */
int dlock__sentinel_target(dlock_client *c, dlock__url *target, char *buf,
                           size_t n, unsigned *gen);
/* The master of generation gen failed (refused a connection, answered
 * READONLY): the next target asks the sentinels again. */
void dlock__sentinel_invalidate(dlock_client *c, unsigned gen);
/* The pure parts, shared with the event-loop client (async_route.c):
 * - SENTINEL GET-MASTER-ADDR-BY-NAME's reply: 0 with host (n bytes) and
 *   port, or DLOCK_EREDIS (an error reply) / DLOCK_ECONN (no such master)
 *   with why;
 * - ROLE's reply: NULL when "master", else what it is instead;
 * - a +switch-master payload: 1 with the new address when it names `name`;
 * - a +promoted-slave payload: 1 when it names `name`. */
int dlock__sentinel_addr_reply(const redisReply *r, const char *name,
                               char *host, size_t n, int *port, char *why,
                               size_t wn);
const char *dlock__sentinel_role(const redisReply *r);
int dlock__sentinel_switch_msg(const char *payload, const char *name,
                               char *host, size_t n, int *port);
int dlock__sentinel_promoted_msg(const char *payload, const char *name);
/* 1 if l was made for a master that is no longer the master. */
int dlock__link_stale(dlock_client *c, const dlock__link *l);
/* A redis:// URL at a Sentinel's port (hints.c): on l, whose server just
 * refused a data command as unknown, asks SENTINEL MASTERS (by the
 * monotonic deadline): DLOCK_EREDIS with "this is a Sentinel: use
 * redis-sentinel://<where>/<master>" when it is one, else 0. */
int dlock__sentinel_port_hint(dlock__link *l, const char *where,
                              int64_t deadline);
/* The same for the router's rc (a script refused as an unknown command on
 * a redis:// client): the new code and message, or rc as it was. */
int dlock__explain_sentinel_port(dlock_client *c, int rc);

/* ---- replica sync (sync.c) ---------------------------------------------- */

void dlock__sync_init(dlock__sync *s);
/* How many replicas the next write on key's master must wait for (0: send
 * no WAIT). May ask INFO replication (its failure is not the caller's: 0).
 * On a cluster each master's count is its own (dlock__node.sync). */
int dlock__sync_want(dlock_client *c, const char *key);
/* Judges WAIT's answer (acks, or -1 for an error reply) after a write that
 * waited for want: sets the thread's shortfall flag (dlock__sync_short)
 * when fewer replicas confirmed than required. */
void dlock__sync_done(dlock_client *c, const char *key, int want,
                      long long acks);
/* The replicas INFO replication's reply lists as online, or -1. */
int dlock__sync_parse_replicas(const redisReply *r);
/* off = 1: the calling thread's writes send no WAIT until off = 0 (the
 * undo of an unconfirmed acquisition: nothing to confirm). */
void dlock__sync_pause(int off);
/* Clears the calling thread's shortfall flag (every eval does first). */
void dlock__sync_reset(void);
/* The router sent a WAIT with this timeout (ms) on the calling thread:
 * sync_timeout_ms, or less when the call's wait budget ends sooner. */
void dlock__sync_waited(int ms);
/* 1 if the calling thread's last eval was a write the replicas did not
 * confirm in time (cfg.sync_timeout_ms); its message in *why. */
int dlock__sync_short(const char **why);

/* ---- a background thread's own connections (bglink.c) --------------------
 * One link per node, opened on first use with the thread's reply bound,
 * kept until it fails (then the next use reconnects, logged "reconnect"
 * once it succeeds), followed to a new master after a Sentinel failover.
 * Used by one thread. */
typedef struct dlock__bglink {
  dlock__node *node;
  dlock__link *link; /* or NULL */
  int failed;        /* the last link failed: the next one is a reconnect */
} dlock__bglink;
typedef struct dlock__bglinks {
  dlock__bglink *v;
  int n, cap;
  int read_ms;     /* replies awaited at most this long */
  const char *who; /* "watchdog", "errand": log lines */
} dlock__bglinks;
/* The link to node, connected when missing: NULL on failure (message set;
 * *out then names the entry, or is NULL when out of memory). */
dlock__link *dlock__bg_link(dlock_client *c, dlock__bglinks *s,
                            dlock__node *node, dlock__bglink **out);
/* The entry's link failed: closed, the next use reconnects; the cluster
 * map is marked stale (the master may have moved). */
void dlock__bg_drop(dlock_client *c, dlock__bglink *b);
/* Closes every link and frees the table. */
void dlock__bg_close(dlock__bglinks *s);
/* One command (argv) on the link to key's node (its slot's master on a
 * cluster, as the map says now, without refreshing it): *out the reply (an
 * error reply included). 0, DLOCK_ECONN (no master known, connection
 * failed: the link is dropped), DLOCK_ECLOSED, DLOCK_ENOMEM. */
int dlock__bg_call(dlock_client *c, dlock__bglinks *s, const char *key,
                   int argc, const char **argv, const size_t *lens,
                   redisReply **out);

#endif
