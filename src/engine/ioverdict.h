/*
 * ioverdict.h -- the rules of the I/O stack that the blocking client
 * (conn.c, link.c, pubsub.c, sentinel.c) and the event-loop client
 * (async_conn.c, async_route.c, async_sub.c) share, stated ONCE
 * (ioverdict.c). Until this file each client had its own copy of these
 * rules and the copies differed (research io-stack.md, section 1: D1-D11;
 * docs/design.md "Divergences closed"). The two socket stacks remain (one
 * machine under two drivers is issue 40's later step); what a reply, a
 * failure or a message MEANS is decided here.
 *
 * Like the engine (engine.h), sans-I/O: no socket, no sleep, no clock read,
 * no lock of its own. Given what happened (a reply's text, how a send
 * failed, times the caller read), a verdict says what it means. The only
 * side effect: a verdict that gives the call its answer sets the thread's
 * message (dlock__fail), as every failing step of the library does.
 *
 *   (a) an error reply: the call's answer (DLOCK_EREDIS with the server's
 *       text and, for NOPERM, what to grant; DLOCK_EAUTH for NOAUTH; a
 *       redirect on a non-cluster URL told to use redis-cluster://), a
 *       transient refusal retried under the policy, a redirect followed,
 *       and whether the master must be found again first (D1, D6);
 *   (b) the redirects one try follows, and the code past them (D7);
 *   (c) whether a failed send is tried again: the try count and the call's
 *       wait budget (D2), and the immediate, uncounted re-send after a
 *       connection that broke while idle (D9);
 *   (d) a TLS connection's failure: final, with what most likely caused
 *       it (D8);
 *   (e) a Sentinel round: a sentinel's answer counts once its master says
 *       ROLE master, else the next sentinel of the same round (D6);
 *   (f) subscriptions: a refusal answers the oldest (UN)SUBSCRIBE in
 *       flight on its connection (the queue below), which refusals are
 *       transient, the subscriber's reconnect back-off, how long a channel
 *       lingers, how many waits a lock channel's message wakes (D5, D10);
 *   (g) replica sync: what a short WAIT says (the timeout it really had).
 *
 * Thread-safety: none of its own (a dlock__subq belongs to its
 * connection's owner); the verdicts are pure functions of their arguments.
 */
#ifndef DLOCK_IOVERDICT_H
#define DLOCK_IOVERDICT_H

#include <stddef.h>
#include <stdint.h>

/* ---- (a) an error reply ------------------------------------------------- */

/* The URL's topology, for the verdicts that depend on it. */
enum { DLOCK__TOPO_PLAIN = 0, DLOCK__TOPO_SENTINEL, DLOCK__TOPO_CLUSTER };

/* What an error reply to a command means (NOSCRIPT aside: both clients
 * re-send the script as EVAL at once, on the same connection). */
enum {
  DLOCK__REPLY_FINAL = 0, /* the call's answer: *rc, the message set */
  DLOCK__REPLY_RETRY,     /* refused unrun, transient (LOADING, BUSY,
                           * TRYAGAIN, MASTERDOWN, CLUSTERDOWN, READONLY):
                           * tried again under the retry policy; *rc and the
                           * message are the answer if no try is left */
  DLOCK__REPLY_MOVED,     /* a cluster's slot moved: follow (not a try) */
  DLOCK__REPLY_ASK        /* a cluster's slot is moving: this command alone
                           * to the node named, after ASKING (not a try) */
};
/* Judges the error reply `err` of a command (`script`: the script's name
 * for messages, or NULL) on a client of topology `topo`. Returns a
 * DLOCK__REPLY_* kind; *rc is the code the call answers when it ends on
 * this reply (DLOCK_EREDIS with the server's text -- a NOPERM or "can't run
 * this command" says what the ACL user lacks and where the minimal rule is;
 * a MOVED or ASK on a non-cluster URL says to use redis-cluster://;
 * DLOCK_EAUTH for NOAUTH and other refused logins), its message set.
 * *reroute is 1 when the node served is not the one to serve, so where to
 * send is found again before the retry: a Sentinel client's READONLY or
 * MASTERDOWN (the node is a replica: the sentinels are asked again), a
 * Cluster client's READONLY or CLUSTERDOWN (the slot map is read again). */
int dlock__reply_verdict(const char *err, int topo, const char *script, int *rc,
                         int *reroute);
/* dlock__reply_verdict's *reroute alone (no message set): for the
 * background threads' own connections (renewals, errands). */
int dlock__reply_reroutes(const char *err, int topo);

/* ---- (b) redirects ------------------------------------------------------ */

/* Redirects (MOVED, ASK) one try of a command follows: a slot moving twice
 * in one call is possible, a chain longer than this is a loop. */
#define DLOCK__MAX_REDIRECTS 8
/* One more redirect of a try of `what` (*n counts them; the caller resets
 * it for every try): 0 to follow it, or DLOCK_EREDIS (message set: a
 * MOVED/ASK loop, the slot map is inconsistent) past DLOCK__MAX_REDIRECTS.
 * Final: a loop does not heal within one call. */
int dlock__redirect_bound(int *n, const char *what);

/* ---- (c) retries ----------------------------------------------------------
 */

/* After a failed try: `tried` tries so far (this one included) of at most
 * `tries` (1 + retry_attempts; 1 for a command sent once). deadline is the
 * end of the calling public call's wait budget (monotonic ms, < 0: none),
 * now the time. Returns 1 to try again after *pause (the retry delay
 * policy's pause, dlock__retry_pause, cut to what is left of the budget),
 * or 0: no try is left, or the budget is spent -- "wait at most wait_ms"
 * holds for connection failures too (a 1 s lock at a dead server answers
 * after 1 s, not after the retry policy). */
int dlock__retry_verdict(int tried, int tries, int64_t deadline, int64_t now,
                         int64_t *pause);
/* A send whose connection broke: re-sent at once on a new connection,
 * without counting as a try and without a pause (1), or not (0)? Yes when
 * the connection was there before the command (not made for it: a
 * connection that fails while connecting, or opened for this very send,
 * is the server's state, the retry policy's case), it broke without
 * timing out (a reset or a close: it most likely died while idle -- a
 * server restart, CLIENT KILL), the command may be sent more than once
 * (no_retry < 2), and it was not re-sent so already (*used, set now: once
 * per call). */
int dlock__resend_now(int established, int timed_out, int no_retry, int *used);

/* How long the reply of a command sent now may take: command_timeout_ms
 * (cto), plus the timeout of the WAIT pipelined behind it (wait_ms; 0:
 * none) -- for that command alone: a connection shared by many commands
 * times each by its own (until io-stack D11 the blocking client's shared
 * connection kept cto + sync_timeout_ms for every read after one WAIT). */
int64_t dlock__reply_timeout(int cto, int wait_ms);

/* ---- (d) TLS ----------------------------------------------------------- */

/* Where a rediss:// connection failed. */
enum {
  DLOCK__TLS_AT_HANDSHAKE = 0, /* in the TLS handshake (SSL_connect) */
  DLOCK__TLS_AT_FIRST_REPLY,   /* after it, before any reply came */
  DLOCK__TLS_AT_LATER          /* after a reply */
};
/* 1 when a failed read or write's text (strerror's) says the peer closed
 * the connection under us: a reset, or a broken pipe (a write after its
 * close). What dlock__tls_verdict's `closed` means after the handshake;
 * both clients' read and write paths. */
int dlock__io_closed_by_peer(const char *why);
/* A rediss:// connection failed `at` (what: where, for the message).
 * closed: the server closed or reset it; client_cert: one was offered;
 * tls_err: TLS's own refusal text (an alert, a certificate check), or
 * NULL; detail: the failure's own words (NULL: none). Returns DLOCK_ETLS,
 * message set, when it is TLS's doing -- FINAL on both clients: a refused
 * certificate, a client certificate the server wants, a handshake that
 * failed do not heal by retrying: "the server requires a client
 * certificate" for TLS 1.3's alert, "it most likely requires a client
 * certificate" for a close right after the handshake without one -- or 0:
 * an ordinary connection failure (DLOCK_ECONN, retried). */
int dlock__tls_verdict(int at, const char *what, int closed, int client_cert,
                       const char *tls_err, const char *detail);

/* ---- (e) Sentinel ------------------------------------------------------- */

/* One sentinel's turn in a round (both clients ask them in turn, starting
 * with the one that answered last): addr_rc is its answer to
 * SENTINEL GET-MASTER-ADDR-BY-NAME (0: it named an address), role_rc the
 * answer of that address to ROLE (0: "master"; not asked when addr_rc is
 * not 0). asked: sentinels asked in this round, this one included, of n.
 * Returns DLOCK__SENT_USE (the round ends with this master),
 * DLOCK__SENT_NEXT (ask the next sentinel: a stale sentinel, one naming a
 * replica, never pins the client) or DLOCK__SENT_NONE (every sentinel was
 * asked: the round ends with DLOCK_ECONN listing what each said). */
enum { DLOCK__SENT_USE = 0, DLOCK__SENT_NEXT, DLOCK__SENT_NONE };
int dlock__sentinel_turn(int addr_rc, int role_rc, int asked, int n);

/* Wake policy for messages on the shared channel. */
enum {
  DLOCK__WAKE_LOCK, /* "0": one waiter, "1": all (Redisson LockPubSub) */
  DLOCK__WAKE_ALL,  /* any message wakes every waiter (latch) */
  DLOCK__WAKE_COUNT /* message = permits available: wake that many */
};

/* ---- (f) subscriptions ----------------------------------------------------
 */

/* The (UN)SUBSCRIBE commands written on one subscriber connection and not
 * yet answered, oldest first: the server answers in command order, so an
 * error reply is the refusal of the oldest (one refused SUBSCRIBE fails
 * its own waits, never another lock's). An entry is the caller's
 * subscription record; forgotten ones (freed meanwhile) stay as NULL. */
typedef struct dlock__subq {
  void **v;
  size_t head, n, cap;
} dlock__subq;
/* Appends e. 0, or -1 out of memory (its answer then matches nothing). */
int dlock__subq_push(dlock__subq *q, void *e);
/* The oldest in flight (NULL: none, or forgotten). */
void *dlock__subq_head(const dlock__subq *q);
/* Drops the oldest (its answer came). */
void dlock__subq_pop(dlock__subq *q);
/* e is being freed: its places become NULL. */
void dlock__subq_forget(dlock__subq *q, const void *e);
/* The connection is gone: nothing is in flight. */
void dlock__subq_reset(dlock__subq *q);
void dlock__subq_free(dlock__subq *q);

/* What the server's refusal `err` of the oldest (UN)SUBSCRIBE means for
 * its subscription (subscribing: it was a SUBSCRIBE). */
enum {
  DLOCK__SUBREF_RETRY = 0, /* "not here, not now" (MOVED, ASK, TRYAGAIN,
                            * CLUSTERDOWN, LOADING): subscribed again
                            * DLOCK__SUB_RETRY_MS later, the waiters wait on */
  DLOCK__SUBREF_FAIL,      /* refused (an ACL user without the channel): its
                            * waits end with DLOCK_EAUTH */
  DLOCK__SUBREF_IDLE       /* an UNSUBSCRIBE refused: the record is idle */
};
#define DLOCK__SUB_RETRY_MS 100
int dlock__sub_refusal(int subscribing, const char *err);

/* The subscriber's reconnect back-off: *cur is the connection's state (0 a
 * fresh one, reset to 0 when a connection is made). Returns the pause
 * before the next connect -- 50 ms, then doubling up to retry_interval_ms
 * (at least 50) -- and advances *cur. A subscriber never waits a whole
 * retry interval after a first loss (its waiters meanwhile attempt at
 * once: a message may have been lost). */
int64_t dlock__sub_backoff(int64_t *cur, int retry_interval_ms);

/* A channel with no waiter left stays subscribed linger_ms (the config's
 * subscription_linger_ms) from idle_since: 1 while now is before that
 * (*due set), 0 when it is to be unsubscribed now. */
int dlock__sub_linger(int64_t idle_since, int linger_ms, int64_t now,
                      int64_t *due);

/* How many waiting waits a message (payload p, n bytes) on a lock's
 * channel wakes under the kind's wake policy (DLOCK__WAKE_*, above):
 * -1 every one, else that many -- the mutex: "0", Redisson's unlock, wakes
 * ONE; "1", a read unlock, all; a semaphore's count that many; 0 for a
 * payload that is no number (ignored). */
int64_t dlock__sub_wakes(int policy, const char *p, size_t n);

/* ---- (g) replica sync ----------------------------------------------------
 * Why a write's replication is unconfirmed, into buf[0..n): WAIT failed
 * (acks < 0), or `acks` of `want` replicas within the timeout the WAIT
 * really had -- `waited_ms`, which is sync_timeout_ms or, cut by the
 * call's wait budget, less (named so: raising sync_timeout_ms does not
 * help then). Both clients' ENOSYNC messages. */
void dlock__sync_why(char *buf, size_t n, long long acks, int want,
                     int waited_ms, int sync_timeout_ms);

/* 1 if the server's error reply s is a transient state the retry policy
 * retries (LOADING, BUSY, TRYAGAIN, MASTERDOWN). */
int dlock__retryable_reply(const char *s);

/* 1 if the server's error reply s means missing or wrong credentials. */
int dlock__is_auth_error(const char *s);

#endif
