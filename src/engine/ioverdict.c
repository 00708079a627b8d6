/*
 * ioverdict.c -- the I/O rules both clients share (ioverdict.h): what an
 * error reply means, the redirect bound, the retry verdict and the
 * immediate re-send, TLS failures, a Sentinel round's turn, and the
 * subscriber's refusal attribution, back-off, linger and wake-ups.
 *
 * Each was written twice before (conn.c/link.c/pubsub.c/sentinel.c and
 * async_conn.c/async_route.c/async_sub.c) and the copies differed
 * (research io-stack.md D1-D11). Both clients call these now; a change of
 * a rule is a change here, and tests/test_parity.c runs each case on both.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* ---- (a) an error reply ------------------------------------------------- */

static int starts(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

/* A redirect: "MOVED <slot> <host:port>" / "ASK ..." (the verb and a
 * space: "ASKING" is none). */
static int redirect_kind(const char *err) {
  if (starts(err, "MOVED "))
    return DLOCK__REPLY_MOVED;
  if (starts(err, "ASK "))
    return DLOCK__REPLY_ASK;
  return 0;
}

int dlock__reply_reroutes(const char *err, int topo) {
  /* a replica now (a failover), or one that lost its master */
  if (topo == DLOCK__TOPO_SENTINEL)
    return starts(err, "READONLY") || starts(err, "MASTERDOWN");
  if (topo == DLOCK__TOPO_CLUSTER)
    return starts(err, "READONLY") || starts(err, "CLUSTERDOWN");
  return 0;
}

int dlock__reply_verdict(const char *err, int topo, const char *script, int *rc,
                         int *reroute) {
  *reroute = 0;
  int redir = redirect_kind(err);
  if (redir && topo != DLOCK__TOPO_CLUSTER) {
    /* A cluster node behind a redis:// URL: the URL is wrong, and no
     * retry changes that. */
    *rc = dlock__fail(DLOCK_EREDIS,
                      "the server is a Redis Cluster node (it answered "
                      "'%s'): use a redis-cluster:// URL",
                      err);
    return DLOCK__REPLY_FINAL;
  }
  if (redir) {
    *rc = dlock__fail(DLOCK_EREDIS, "%s", err); /* if it cannot be followed */
    return redir;
  }
  if (dlock__retryable_reply(err)) {
    *reroute = dlock__reply_reroutes(err, topo);
    *rc = dlock__fail(DLOCK_EREDIS, "%s", err);
    return DLOCK__REPLY_RETRY;
  }
  if (strstr(err, "NOPERM") ||
      strstr(err, "can't run this command or subcommand"))
    /* DLOCK_EREDIS, as every refusal by the server after login (issue
     * 9.7's callers rely on it); the message says what to grant. */
    *rc = dlock__fail(DLOCK_EREDIS,
                      "the ACL user lacks a permission dlock needs%s%s%s "
                      "(docs/security.md has the minimal rule): %s",
                      script ? " (in its script '" : "", script ? script : "",
                      script ? "')" : "", err);
  else if (dlock__is_auth_error(err))
    *rc = dlock__fail(DLOCK_EAUTH, "authentication required: %s", err);
  else
    *rc = dlock__fail(DLOCK_EREDIS, "%s", err);
  return DLOCK__REPLY_FINAL;
}

/* ---- (b) redirects ------------------------------------------------------ */

int dlock__redirect_bound(int *n, const char *what) {
  if (++*n <= DLOCK__MAX_REDIRECTS)
    return 0;
  return dlock__fail(DLOCK_EREDIS,
                     "%s: more than %d cluster redirects (MOVED/ASK loop); "
                     "the cluster's slot map is inconsistent",
                     what ? what : "command", DLOCK__MAX_REDIRECTS);
}

/* ---- (c) retries ----------------------------------------------------------
 */

int dlock__retry_verdict(int tried, int tries, int64_t deadline, int64_t now,
                         int64_t *pause) {
  if (tried >= tries)
    return 0;
  if (deadline < 0)
    return 1;
  int64_t left = deadline - now;
  if (left <= 0)
    return 0; /* the call's wait budget ends its retries too */
  if (*pause > left)
    *pause = left;
  return 1;
}

int dlock__resend_now(int established, int timed_out, int no_retry, int *used) {
  if (!established || timed_out || no_retry >= 2 || *used)
    return 0;
  *used = 1;
  return 1;
}

int64_t dlock__reply_timeout(int cto, int wait_ms) {
  return (int64_t)(cto > 0 ? cto : 0) + (wait_ms > 0 ? wait_ms : 0);
}

/* ---- (d) TLS ----------------------------------------------------------- */

int dlock__io_closed_by_peer(const char *why) {
  return why && (strstr(why, "reset") || strstr(why, "Broken pipe") ||
                 strstr(why, "broken pipe"));
}

int dlock__tls_verdict(int at, const char *what, int closed, int client_cert,
                       const char *tls_err, const char *detail) {
  if (tls_err && strstr(tls_err, "certificate required"))
    /* TLS 1.3: the server refuses a missing client certificate only after
     * the client's handshake is done; its alert comes with the first
     * reply. */
    return dlock__fail(DLOCK_ETLS,
                       "%s: the server requires a client certificate "
                       "(tls_cert_file and tls_key_file; mutual TLS): %s",
                       what, tls_err);
  if (tls_err)
    return dlock__fail(DLOCK_ETLS, "%s: %s", what, tls_err);
  if (at == DLOCK__TLS_AT_HANDSHAKE && closed)
    return dlock__fail(DLOCK_ETLS, "%s: the server closed the connection",
                       what);
  if (at == DLOCK__TLS_AT_HANDSHAKE)
    return dlock__fail(DLOCK_ETLS, "%s failed: %s", what,
                       detail ? detail : "no reason given");
  if (at == DLOCK__TLS_AT_FIRST_REPLY && closed && !client_cert)
    /* ... or, when the client's first bytes reach it after it closed, a
     * reset that discards the alert. */
    return dlock__fail(DLOCK_ETLS,
                       "%s: the server closed the TLS connection right "
                       "after the TLS handshake: it most likely requires a "
                       "client certificate (tls_cert_file and tls_key_file; "
                       "mutual TLS) (%s)",
                       what, detail ? detail : "closed");
  return 0;
}

/* ---- (e) Sentinel ------------------------------------------------------- */

int dlock__sentinel_turn(int addr_rc, int role_rc, int asked, int n) {
  if (addr_rc == 0 && role_rc == 0)
    return DLOCK__SENT_USE;
  return asked < n ? DLOCK__SENT_NEXT : DLOCK__SENT_NONE;
}

/* ---- (f) subscriptions ----------------------------------------------------
 */

int dlock__subq_push(dlock__subq *q, void *e) {
  if (q->head + q->n == q->cap) {
    if (q->head > 0) {
      memmove(q->v, q->v + q->head, q->n * sizeof *q->v);
      q->head = 0;
    } else {
      size_t nc = q->cap ? q->cap * 2 : 16;
      void **nv = realloc(q->v, nc * sizeof *nv);
      if (!nv)
        return -1;
      q->v = nv;
      q->cap = nc;
    }
  }
  q->v[q->head + q->n++] = e;
  return 0;
}

void *dlock__subq_head(const dlock__subq *q) {
  return q->n ? q->v[q->head] : NULL;
}

void dlock__subq_pop(dlock__subq *q) {
  if (q->n) {
    q->head++;
    q->n--;
  }
}

void dlock__subq_forget(dlock__subq *q, const void *e) {
  for (size_t i = 0; i < q->n; i++)
    if (q->v[q->head + i] == e)
      q->v[q->head + i] = NULL;
}

void dlock__subq_reset(dlock__subq *q) { q->head = q->n = 0; }

void dlock__subq_free(dlock__subq *q) {
  free(q->v);
  memset(q, 0, sizeof *q);
}

int dlock__sub_refusal(int subscribing, const char *err) {
  if (!subscribing)
    return DLOCK__SUBREF_IDLE;
  /* "not here, not now": a slot moving, a cluster failing over, a server
   * loading its data -- not the waiters' problem */
  if (starts(err, "MOVED") || starts(err, "ASK") ||
      starts(err, "CLUSTERDOWN") || starts(err, "TRYAGAIN") ||
      starts(err, "LOADING"))
    return DLOCK__SUBREF_RETRY;
  return DLOCK__SUBREF_FAIL;
}

int64_t dlock__sub_backoff(int64_t *cur, int retry_interval_ms) {
  int64_t cap = retry_interval_ms > 50 ? retry_interval_ms : 50;
  int64_t now = *cur > 0 ? *cur : 50;
  *cur = now * 2 > cap ? cap : now * 2;
  return now;
}

int dlock__sub_linger(int64_t idle_since, int linger_ms, int64_t now,
                      int64_t *due) {
  *due = idle_since + (linger_ms > 0 ? linger_ms : 0);
  return now < *due;
}

/* A decimal integer of at most 18 digits, optionally negative. */
static int64_t parse_i64(const char *s, size_t n, int *ok) {
  int64_t v = 0;
  int neg = 0;
  size_t i = 0;
  *ok = 0;
  if (n > 0 && s[0] == '-') {
    neg = 1;
    i = 1;
  }
  if (i >= n || n - i > 18)
    return 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return 0;
    v = v * 10 + (s[i] - '0');
  }
  *ok = 1;
  return neg ? -v : v;
}

int64_t dlock__sub_wakes(int policy, const char *p, size_t n) {
  int ok;
  int64_t value = parse_i64(p, n, &ok);
  if (!ok)
    return 0;
  if (policy == DLOCK__WAKE_ALL || (policy == DLOCK__WAKE_LOCK && value == 1))
    return -1;
  if (policy == DLOCK__WAKE_COUNT)
    return value > 0 ? value : 0;
  return 1;
}

/* ---- (g) replica sync ---------------------------------------------------- */

void dlock__sync_why(char *buf, size_t n, long long acks, int want,
                     int waited_ms, int sync_timeout_ms) {
  if (acks < 0)
    snprintf(buf, n,
             "WAIT failed (an ACL user without +wait?): the write's "
             "replication is unconfirmed");
  else if (waited_ms > 0 && waited_ms < sync_timeout_ms)
    snprintf(buf, n,
             "%lld of %d replica%s confirmed the write within %d ms (what "
             "was left of the call's wait budget)",
             acks, want, want == 1 ? "" : "s", waited_ms);
  else
    snprintf(buf, n,
             "%lld of %d replica%s confirmed the write within %d ms "
             "(sync_timeout_ms)",
             acks, want, want == 1 ? "" : "s", sync_timeout_ms);
}

int dlock__retryable_reply(const char *s) {
  return strncmp(s, "LOADING", 7) == 0 || strncmp(s, "BUSY", 4) == 0 ||
         strncmp(s, "TRYAGAIN", 8) == 0 || strncmp(s, "MASTERDOWN", 10) == 0 ||
         strncmp(s, "CLUSTERDOWN", 11) == 0 || strncmp(s, "READONLY", 8) == 0;
}

int dlock__is_auth_error(const char *s) {
  return strncmp(s, "NOAUTH", 6) == 0 || strncmp(s, "WRONGPASS", 9) == 0 ||
         strstr(s, "invalid password") || strstr(s, "invalid username") ||
         strstr(s, "without any password configured") ||
         strstr(s, "AUTH <password> called");
}
