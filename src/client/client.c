/*
 * client.c -- the client object: identity, lifecycle. (Its settings --
 * defaults, checks, derived bounds -- are config/settings.c.)
 *
 * A client owns: the parsed URL, a random UUID (its identity in every lock
 * field), the node pool behind the router, and its background threads --
 * pub/sub, renewal (the watchdog), expiry, errand, and for a Sentinel URL
 * the watcher -- with the abort pipe that ends their waits at
 * dlock_client_free. It is shared freely between threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"

int dlock__client_check(const dlock_client *c) {
  if (!c)
    return dlock__fail(DLOCK_EINVAL, "client is NULL");
  if (c->fork_gen != dlock__fork_gen())
    return dlock__fail(DLOCK_EFORK,
                       "this client was created before fork(); a child "
                       "process must create its own client");
  if (atomic_load_explicit(&((dlock_client *)c)->closing, memory_order_relaxed))
    return dlock__fail(DLOCK_ECLOSED, "client is closing");
  return 0;
}

/* A rediss:// client's TLS context, and its own copy of the name links
 * verify: the caller's strings are borrowed for dlock_client_new only. */
static int tls_init(dlock_client *c) {
  int rc = dlock__tls_ctx_new(&c->cfg, &c->tls_ctx);
  c->cfg.tls_ca_file = c->cfg.tls_ca_dir = NULL; /* loaded: not kept */
  c->cfg.tls_cert_file = c->cfg.tls_key_file = NULL;
  c->cfg.tls_truststore = c->cfg.tls_truststore_password = NULL;
  c->cfg.tls_keystore = c->cfg.tls_keystore_password = NULL;
  if (rc == 0 && c->cfg.tls_server_name &&
      !(c->cfg.tls_server_name = c->tls_name =
            dlock__strdup(c->cfg.tls_server_name)))
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (rc) {
    dlock__tls_ctx_free(c->tls_ctx);
    c->tls_ctx = NULL;
  }
  return rc;
}

/* The URL (copied and parsed), the client's UUID, and the unlock latch's
 * TTL. 0 or DLOCK_EINVAL / DLOCK_ENOMEM, with nothing left to free. */
static int identity_init(dlock_client *c, const char *url) {
  int rc = dlock__conn_name(c->cfg.client_name, &c->conn_name);
  if (rc)
    return rc;
  c->cfg.client_name = c->conn_name; /* the caller's is borrowed */
  c->url_str = dlock__strdup(url ? url : "redis://127.0.0.1:6379");
  if (!c->url_str) {
    free(c->conn_name);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  c->cfg.url = c->url_str;
  rc = dlock__url_parse(c->url_str, &c->url);
  if (rc) {
    free(c->url_str);
    free(c->conn_name);
    return rc;
  }
  if (c->url.tls && (rc = tls_init(c)) != 0) {
    dlock__url_free(&c->url);
    free(c->url_str);
    free(c->conn_name);
    return rc;
  }
  dlock__uuid4(c->id);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  c->started_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  c->latch_ttl_ms = dlock__latch_ttl(&c->cfg);
  c->once_ttl_ms = dlock__once_ttl(&c->cfg, &c->once_window_ms);
  return 0;
}

static void identity_free(dlock_client *c) {
  free(c->conn_name);
  dlock__tls_ctx_free(c->tls_ctx);
  free(c->tls_name);
  dlock__url_free(&c->url);
  free(c->url_str);
}

/* Connects and authenticates now, with the retry policy, so bad
 * credentials and unreachable servers surface at creation. */
static int warm(dlock_client *c) {
  int64_t prev = 0, first = dlock__now_ms();
  for (int i = 0;; i++) {
    int64_t t0 = dlock__now_ms();
    int rc = c->cl ? dlock__cluster_refresh(c) : dlock__node_warm(&c->node);
    if (rc == 0 || rc != DLOCK_ECONN || i >= c->cfg.retry_attempts)
      return rc;
    int64_t pause = dlock__retry_pause(&c->cfg, i, &prev);
    /* the next attempt may take as long as this one did (call_timeout_ms) */
    if (dlock__call_bound_over(&c->cfg, first, pause, dlock__now_ms() - t0))
      return rc;
    dlock__sleep_ms(pause);
  }
}

/* The abort pipe (dlock__io_guard): 0, or DLOCK_ENOMEM with none made. */
static int abort_init(dlock_client *c) {
  if (pipe2(c->abort_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno; /* EMFILE: say "too many open files" (issue 10) */
    c->abort_pipe[0] = c->abort_pipe[1] = -1;
    return dlock__fail(DLOCK_ENOMEM, "cannot make a pipe: %s", strerror(e));
  }
  return 0;
}

/* Ends every wait of the client's background threads on the network. */
static void abort_waits(dlock_client *c) {
  char b = 1;
  if (c->abort_pipe[1] >= 0 && write(c->abort_pipe[1], &b, 1) < 0)
    return; /* non-blocking: a byte is there already */
}

static void abort_close(dlock_client *c) {
  for (int i = 0; i < 2; i++)
    if (c->abort_pipe[i] >= 0)
      close(c->abort_pipe[i]);
  c->abort_pipe[0] = c->abort_pipe[1] = -1;
}

int dlock__client_new(const dlock_config *cfg_in, size_t cfg_size,
                      const dlock__store_ops *etcd, dlock_client **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  dlock_config cfg;
  int rc = dlock__config_load(cfg_in, cfg_size, &cfg);
  if (rc || (rc = dlock__config_check(&cfg)) != 0)
    return rc;
  dlock__config_log_ignored(&cfg, &cfg);
  dlock_client *c = dlock__calloc(1, sizeof *c);
  if (!c)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  c->cfg = cfg;
  c->fork_gen = dlock__fork_gen();
  atomic_init(&c->refs, 1); /* the caller's; each lock object adds one */
  /* Each stage is undone by the labels below it, in reverse order. */
  if ((rc = abort_init(c)) != 0)
    goto fail_free;
  rc = identity_init(c, cfg.url);
  c->cfg.loaded = NULL; /* the caller's (TLS messages named its keys) */
  if (rc != 0)
    goto fail_abort;
  if (c->url.etcd) { /* the etcd store: etcd_client.c */
    c->store = etcd;
    if ((rc = c->store->client_start(c)) != 0)
      goto fail_identity;
    *out = c;
    return 0;
  }
  dlock__sync_init(&c->sync);
  if ((rc = dlock__sentinel_init(c)) != 0)
    goto fail_identity;
  if ((rc = dlock__node_init(&c->node, c, &c->url, c->cfg.pool_size)) != 0)
    goto fail_sentinel;
  if ((rc = dlock__cluster_init(c)) != 0)
    goto fail_node;
  if ((rc = dlock__registry_init(&c->reg)) != 0)
    goto fail_node;
  if ((rc = dlock__pubsub_init(&c->ps)) != 0)
    goto fail_registry;
  (void)dlock__core_script(0); /* compute script digests once */
  if (!c->cfg.lazy_connect && (rc = warm(c)) != 0)
    goto fail_pubsub;
  if ((rc = dlock__pubsub_start(c)) != 0)
    goto fail_pubsub;
  if ((rc = dlock__watchdog_start(c)) != 0)
    goto fail_threads;
  if ((rc = dlock__errand_start(c)) != 0)
    goto fail_watchdog;
  if ((rc = dlock__sentinel_start(c)) != 0)
    goto fail_errand;
  *out = c;
  return 0;
fail_errand:
  dlock__errand_stop(c);
fail_watchdog:
  dlock__watchdog_stop(c);
fail_threads:
  dlock__pubsub_stop(c);
fail_pubsub:
  dlock__pubsub_destroy(&c->ps, 0);
fail_registry:
  dlock__holds_destroy(c);
  dlock__registry_destroy(&c->reg, 0);
fail_node:
  dlock__cluster_destroy(c, 0);
  dlock__node_destroy(&c->node);
fail_sentinel:
  dlock__sentinel_destroy(c, 0);
fail_identity:
  identity_free(c);
fail_abort:
  abort_close(c);
fail_free:
  free(c);
  return rc;
}

/* The memory of a client whose last reference went: the caller's (by
 * dlock_client_free, which already stopped its threads and closed its
 * connections) and every lock object's. */
static void client_release_memory(dlock_client *c) {
  int child = c->fork_gen != dlock__fork_gen();
  if (c->store) {
    c->store->client_release(c, child);
    identity_free(c);
    free(c);
    return;
  }
  dlock__holds_destroy(c);
  dlock__notes_free(c);
  dlock__pubsub_destroy(&c->ps, child);
  dlock__registry_destroy(&c->reg, child);
  dlock__sentinel_destroy(c, child);
  identity_free(c);
  free(c);
}

void dlock__client_ref(dlock_client *c) { atomic_fetch_add(&c->refs, 1); }

void dlock__client_unref(dlock_client *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1)
    client_release_memory(c);
}

void dlock_client_free(dlock_client *c) {
  if (!c)
    return;
  atomic_store(&c->closing, 1);
  if (c->fork_gen != dlock__fork_gen()) {
    /* In a forked child the threads do not exist and the locks may have
     * been held by them at fork time: release memory only, touch no lock.
     * The child's copies of the sockets were replaced by /dev/null at
     * fork (process.c); nothing is sent on them. */
    if (!c->store) {
      dlock__node_free_memory(&c->node);
      dlock__cluster_destroy(c, 1);
    }
  } else if (c->store) {
    c->store->client_stop(c);
  } else {
    /* First end every background wait on the network (connects, probes,
     * handshakes, reads: the I/O guard), so the joins below do not wait
     * for a server that does not answer (issue 38.9). */
    abort_waits(c);
    dlock__sentinel_stop(c);
    dlock__pubsub_stop(c);
    dlock__errand_stop(c);
    dlock__watchdog_stop(c);
    dlock__node_destroy(&c->node);
    dlock__cluster_destroy(c, 0);
  }
  abort_close(c);
  /* Lock objects still alive keep the memory (registry, mutexes) until
   * they are freed; their calls answer DLOCK_ECLOSED meanwhile. */
  dlock__client_unref(c);
}

const char *dlock_client_id(const dlock_client *c) { return c ? c->id : ""; }

size_t dlock__field(const dlock_client *c, uint64_t tid, char *buf) {
  memcpy(buf, c->id, DLOCK__UUID_LEN);
  buf[DLOCK__UUID_LEN] = ':';
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    tmp[--i] = (char)('0' + tid % 10);
    tid /= 10;
  } while (tid);
  size_t n = sizeof tmp - (size_t)i;
  memcpy(buf + DLOCK__UUID_LEN + 1, tmp + i, n);
  buf[DLOCK__UUID_LEN + 1 + n] = '\0';
  return DLOCK__UUID_LEN + 1 + n;
}
