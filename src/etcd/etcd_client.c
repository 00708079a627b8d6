/*
 * etcd_client.c -- an etcd:// client's start and stop, and what the etcd
 * store refuses (etcd.h says what it shares with the Redis store).
 *
 * START: the config's etcd rules (the session lease is watchdog_timeout_ms
 * in whole seconds, at least 2 s; sync_replicas has no meaning: every etcd
 * write is committed by a quorum before it is answered), the hold registry
 * (holds.c, as for Redis), the cancel pipe dlock_client_cancel_waits
 * writes (pubsub.c's, without its thread: the lease thread reads it), the
 * transport, and -- unless lazy_connect -- authentication and the session
 * lease, so an unreachable cluster, a port that is no etcd or refused
 * credentials surface at dlock_client_new; then the lease thread.
 *
 * STOP: the lease thread ends. A client that holds nothing revokes its
 * session, so its keys (waits' leftovers, its info key) go at once; a
 * client freed while holding locks leaves them to expire with the lease
 * (dlock.h: "Locks still held are not released").
 *
 * REFUSED, never degraded: read-write locks, Redlock, latches, the
 * event-loop client, sync_replicas, Redisson interop -- each
 * with DLOCK_ENOTSUP naming what to use instead (docs/etcd.md).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd/etcd_int.h"

int dlock__etcd_no_counter(dlock__chobj *o) {
  (void)o;
  return DLOCK_ENOTSUP;
}

int dlock__etcd_kind_check(dlock_client *c, const dlock__mutex_ops *ops,
                           const char *name) {
  (void)c;
  (void)name;
  if (ops == &dlock__plain_ops || ops == &dlock__fair_ops ||
      ops == &dlock__fenced_ops || ops == &dlock__spin_ops)
    return 0;
  return dlock__etcd_notsup("read-write locks",
                            "use a mutex (dlock_mutex_new; every etcd mutex is "
                            "FIFO), or a redis:// client");
}

static int config_check(const dlock_config *cfg) {
  if (cfg->watchdog_timeout_ms < 2000 || cfg->watchdog_timeout_ms % 1000)
    return dlock__fail(DLOCK_EINVAL,
                       "watchdog_timeout_ms is an etcd client's session "
                       "lease: whole seconds of at least 2 s (etcd leases "
                       "are; got %d ms)",
                       cfg->watchdog_timeout_ms);
  if (cfg->sync_replicas > 0)
    return dlock__etcd_notsup("sync_replicas",
                              "every etcd write is committed by a quorum of "
                              "members before it is answered; leave it at -1 "
                              "or 0");
  return 0;
}

/* The cancel pipe dlock_client_cancel_waits writes (pubsub.c's poke). */
static int cancel_pipe(dlock_client *c) {
  if (pipe(c->ps.pipe) != 0) {
    c->ps.pipe[0] = c->ps.pipe[1] = -1;
    return dlock__fail(DLOCK_ENOMEM, "pipe: out of descriptors");
  }
  for (int i = 0; i < 2; i++) {
    fcntl(c->ps.pipe[i], F_SETFL, fcntl(c->ps.pipe[i], F_GETFL) | O_NONBLOCK);
    fcntl(c->ps.pipe[i], F_SETFD, FD_CLOEXEC);
  }
  return 0;
}

static void etcd_free(dlock__etcd *e, int forked) {
  if (!e)
    return;
  if (!forked) {
    dlock__etcd_http_free(e->http);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->lease_cv);
  }
  free(e->prefix);
  free(e);
}

/* The etcd state of c: 0 or a code (nothing made). */
static int etcd_new(dlock_client *c) {
  dlock__etcd *e = dlock__calloc(1, sizeof *e);
  if (!e)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  e->c = c;
  e->prefix = dlock__strdup(c->url.prefix ? c->url.prefix : "");
  e->prefix_len = e->prefix ? strlen(e->prefix) : 0;
  e->ttl_want_s = c->cfg.watchdog_timeout_ms / 1000;
  if (!e->prefix || pthread_mutex_init(&e->mu, NULL) != 0) {
    free(e->prefix);
    free(e);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (dlock__cond_init_mono(&e->lease_cv) != 0) {
    pthread_mutex_destroy(&e->mu);
    free(e->prefix);
    free(e);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  int rc = dlock__etcd_http_new(c, &e->http);
  if (rc) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->lease_cv);
    free(e->prefix);
    free(e);
    return rc;
  }
  c->etcd = e;
  return 0;
}

/* Authenticates and makes the session now (not lazy_connect). */
static int warm(dlock__etcd *e) {
  int rc = dlock__etcd_http_auth(e);
  dlock__etcd_session s;
  return rc ? rc : dlock__etcd_session_get(e, &s);
}

int dlock__etcd_client_start(dlock_client *c) {
  int rc = config_check(&c->cfg);
  if (rc)
    return rc;
  if ((rc = dlock__registry_init(&c->reg)) != 0)
    return rc;
  if ((rc = dlock__pubsub_init(&c->ps)) != 0)
    goto fail_registry;
  if ((rc = cancel_pipe(c)) != 0)
    goto fail_pubsub;
  if ((rc = etcd_new(c)) != 0)
    goto fail_pipe;
  if (!c->cfg.lazy_connect && (rc = warm(c->etcd)) != 0)
    goto fail_etcd;
  if ((rc = dlock__etcd_lease_start(c->etcd)) != 0)
    goto fail_session;
  return 0;
fail_session:
  if (c->etcd->s.id) {
    dlock__err_keep_begin();
    (void)dlock__etcd_revoke(c->etcd, c->etcd->s.id);
    dlock__err_keep_end();
  }
fail_etcd:
  etcd_free(c->etcd, 0);
  c->etcd = NULL;
fail_pipe:
  dlock__pubsub_stop(c); /* closes the pipe (no thread was started) */
fail_pubsub:
  dlock__pubsub_destroy(&c->ps, 0);
fail_registry:
  dlock__registry_destroy(&c->reg, 0);
  return rc;
}

void dlock__etcd_client_stop(dlock_client *c) {
  dlock__etcd *e = c->etcd;
  dlock__etcd_lease_stop(e);
  if (dlock__holds_now(c) == 0 && e->s.id) {
    dlock__err_keep_begin();
    (void)dlock__etcd_revoke(e, e->s.id);
    dlock__err_keep_end();
    e->s.id = 0;
  }
  dlock__mu_lock(&e->mu);
  dlock__etcd_gates_free(e);
  dlock__mu_unlock(&e->mu);
  if (e->lm)
    curl_multi_cleanup(e->lm);
  e->lm = NULL;
  /* the pooled connections: the memory may wait for the last lock object
   * or hold note (client.c's refs), the sockets must not */
  dlock__etcd_http_close(e->http);
  dlock__pubsub_stop(c); /* wakes nothing (no thread), closes the pipe */
}

void dlock__etcd_client_release(dlock_client *c, int forked) {
  dlock__holds_destroy(c);
  dlock__pubsub_destroy(&c->ps, forked);
  dlock__registry_destroy(&c->reg, forked);
  etcd_free(c->etcd, forked);
  c->etcd = NULL;
}

int dlock__etcd_connected(dlock_client *c) {
  return atomic_load(&c->etcd->connected);
}

int dlock_lock_names_query(dlock_client *c, const char *pattern, char ***names,
                           size_t *n) {
  dlock__clear_error();
  if (names)
    *names = NULL;
  if (n)
    *n = 0;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!names || !n)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (!c->etcd)
    return dlock__fail(DLOCK_ENOTSUP,
                       "dlock_lock_names_query needs an etcd:// client: on "
                       "Redis, `dlock list` scans the keyspace itself");
  return dlock__etcd_names(c, pattern, names, n);
}
