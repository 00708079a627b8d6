/*
 * client.c -- the client object: configuration, identity, lifecycle.
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

#include "internal.h"

/* The layout record of a dlock_config (docs/abi.md): abi_magic says
 * dlock_config_init_sized ran; abi_size is the caller's sizeof. A size above
 * ABI_SIZE_MAX is garbage, not a struct. */
#define CONFIG_MAGIC 0x444c4346u /* "DLCF" */
#define ABI_SIZE_MAX 4096u

void dlock_config_init_sized(dlock_config *cfg, size_t size) {
  if (!cfg || size < offsetof(dlock_config, url) || size > ABI_SIZE_MAX)
    return;
  dlock_config d;
  memset(&d, 0, sizeof d);
  d.abi_magic = CONFIG_MAGIC;
  d.abi_size = (uint32_t)size;
  d.url = NULL;
  d.connect_timeout_ms = 10000;
  d.command_timeout_ms = 3000;
  d.retry_attempts = 3;
  d.retry_interval_ms = 1500;
  d.watchdog_timeout_ms = 30000;
  d.pool_size = 16;
  d.lazy_connect = 0;
  d.subscription_linger_ms = 100;
  d.multiplex = 1;
  d.tls_verify = 1;
  d.sync_replicas = -1;
  d.sync_timeout_ms = 1000;
  d.log_level = DLOCK_LOG_INFO;
  d.spin_fallback = 0;
  d.retry_delay = DLOCK_RETRY_CONSTANT;
  d.retry_base_delay_ms = 1000;
  d.retry_max_delay_ms = 2000;
  d.call_timeout_ms = 5000;
  /* The caller owns `size` bytes: the fields that fit get their defaults,
   * bytes this library does not know (a newer header's fields) get zero. */
  memset(cfg, 0, size);
  memcpy(cfg, &d, size < sizeof d ? size : sizeof d);
}

int dlock__config_check_record(const dlock_config *cfg, size_t size) {
  if (size < offsetof(dlock_config, url) || cfg->abi_magic != CONFIG_MAGIC)
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_config was not set up by dlock_config_init "
                       "(call it first, then set fields)");
  if (cfg->abi_size < offsetof(dlock_config, url) ||
      cfg->abi_size > ABI_SIZE_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_config records a size of %lu bytes: corrupted, "
                       "or not set up by dlock_config_init",
                       (unsigned long)cfg->abi_size);
  return 0;
}

/* *out = the caller's config as a whole one of this library's layout: the
 * fields that fit in the caller's size, defaults for the rest. Reads no byte
 * of *in past min(size, in->abi_size). NULL: all defaults. Fields are only
 * ever appended in natural alignment, so a real size never ends inside a
 * field. */
static int config_load(const dlock_config *in, size_t size, dlock_config *out) {
  dlock_config_init_sized(out, sizeof *out);
  if (!in)
    return 0;
  int rc = dlock__config_check_record(in, size);
  if (rc)
    return rc;
  size_t n = in->abi_size < size ? in->abi_size : size;
  const unsigned char *bytes = (const unsigned char *)in;
  for (size_t i = sizeof *out; i < n; i++)
    if (bytes[i])
      return dlock__fail(DLOCK_ENOTSUP,
                         "dlock_config sets a field at byte %zu that libdlock "
                         "%s does not know (built against a newer dlock.h)",
                         i, dlock_version_string());
  memcpy(out, in, n < sizeof *out ? n : sizeof *out);
  out->abi_size = (uint32_t)sizeof *out;
  return 0;
}

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

/* The lowest value dlock_client_new accepts for each int field with a
 * bound (the config file loader applies the same ones). */
static const struct {
  size_t off;
  int min;
  const char *name;
} g_int_min[] = {
    {offsetof(dlock_config, connect_timeout_ms), 1, "connect_timeout_ms"},
    {offsetof(dlock_config, command_timeout_ms), 1, "command_timeout_ms"},
    {offsetof(dlock_config, retry_attempts), 0, "retry_attempts"},
    {offsetof(dlock_config, retry_interval_ms), 0, "retry_interval_ms"},
    {offsetof(dlock_config, watchdog_timeout_ms), 3, "watchdog_timeout_ms"},
    {offsetof(dlock_config, pool_size), 1, "pool_size"},
    {offsetof(dlock_config, subscription_linger_ms), 0,
     "subscription_linger_ms"},
    {offsetof(dlock_config, sync_replicas), -1, "sync_replicas"},
    /* WAIT's timeout 0 would wait for ever */
    {offsetof(dlock_config, sync_timeout_ms), 1, "sync_timeout_ms"},
    {offsetof(dlock_config, retry_base_delay_ms), 0, "retry_base_delay_ms"},
    {offsetof(dlock_config, retry_max_delay_ms), 0, "retry_max_delay_ms"},
    {offsetof(dlock_config, call_timeout_ms), 0, "call_timeout_ms"},
};

int dlock__config_int_min(size_t off) {
  for (size_t i = 0; i < sizeof g_int_min / sizeof g_int_min[0]; i++)
    if (g_int_min[i].off == off)
      return g_int_min[i].min;
  return INT_MIN;
}

static int check_cfg(const dlock_config *cfg) {
  if (cfg->retry_delay < DLOCK_RETRY_CONSTANT ||
      cfg->retry_delay > DLOCK_RETRY_DECORRELATED_JITTER)
    return dlock__fail(DLOCK_EINVAL,
                       "retry_delay must be one of DLOCK_RETRY_* (0 to 3), "
                       "not %d",
                       cfg->retry_delay);
  for (size_t i = 0; i < sizeof g_int_min / sizeof g_int_min[0]; i++) {
    int v;
    memcpy(&v, (const char *)cfg + g_int_min[i].off, sizeof v);
    if (v < g_int_min[i].min)
      return dlock__fail(DLOCK_EINVAL, "%s must be >= %d", g_int_min[i].name,
                         g_int_min[i].min);
  }
  return 0;
}

int dlock__config_resolve(const dlock_config *in, dlock_config *out) {
  int rc = in ? dlock__config_check_record(in, in->abi_size) : 0;
  if (rc == 0)
    rc = config_load(in, in ? in->abi_size : 0, out);
  return rc ? rc : check_cfg(out);
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

/* A random number from 0 to n, both included (n >= 0). */
static int64_t rand_upto(int64_t n) {
  return n > 0 ? (int64_t)(dlock__rand64() % ((uint64_t)n + 1)) : 0;
}

int64_t dlock__retry_pause(const dlock_config *cfg, int n, int64_t *prev) {
  int64_t b = cfg->retry_base_delay_ms > 0 ? cfg->retry_base_delay_ms : 0;
  int64_t m = cfg->retry_max_delay_ms > 0 ? cfg->retry_max_delay_ms : 0;
  int64_t e = m; /* min(b * 2^n, m), without overflow */
  if (n < 0)
    n = 0;
  if (n < 62 && b > 0 && b <= m >> n)
    e = b << n;
  int64_t p;
  switch (cfg->retry_delay) {
  case DLOCK_RETRY_EQUAL_JITTER:
    p = e / 2 + rand_upto(e / 2);
    break;
  case DLOCK_RETRY_FULL_JITTER:
    p = rand_upto(e > 0 ? e : 1);
    break;
  case DLOCK_RETRY_DECORRELATED_JITTER: {
    int64_t last = prev && *prev > 0 ? *prev : b;
    p = b + (last > 0 ? rand_upto(3 * last - 1) : 0);
    if (p > m)
      p = m;
    break;
  }
  default:
    p = cfg->retry_interval_ms > 0 ? cfg->retry_interval_ms : 0;
    break;
  }
  if (prev)
    *prev = p;
  return p;
}

int64_t dlock__retry_pause_max(const dlock_config *cfg) {
  if (cfg->retry_delay == DLOCK_RETRY_CONSTANT)
    return cfg->retry_interval_ms > 0 ? cfg->retry_interval_ms : 0;
  int64_t m = cfg->retry_max_delay_ms > 0 ? cfg->retry_max_delay_ms : 0;
  int64_t b = cfg->retry_base_delay_ms > 0 ? cfg->retry_base_delay_ms : 0;
  /* decorrelated jitter's first pause is b even when b > m */
  return cfg->retry_delay == DLOCK_RETRY_DECORRELATED_JITTER && b > m ? b : m;
}

int64_t dlock__latch_ttl(const dlock_config *cfg) {
  /* The latch must outlive every retry of the unlock it protects. */
  int64_t t = ((int64_t)cfg->command_timeout_ms + dlock__retry_pause_max(cfg)) *
              (cfg->retry_attempts + 1);
  return t < 1 ? 1 : t;
}

int64_t dlock__send_max(const dlock_config *cfg) {
  int64_t cto = cfg->command_timeout_ms > 0 ? cfg->command_timeout_ms : 0;
  int64_t t = (cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 0) +
              2 * cto; /* the handshake (AUTH, HELLO, SELECT) and the reply */
  if (cfg->sync_replicas != 0 && cfg->sync_timeout_ms > 0)
    t += cfg->sync_timeout_ms; /* the WAIT pipelined behind it */
  return t;
}

int64_t dlock__once_ttl(const dlock_config *cfg, int64_t *window) {
  int64_t send = dlock__send_max(cfg);
  int64_t pause = dlock__retry_pause_max(cfg);
  int64_t tries = 1 + (cfg->retry_attempts > 0 ? cfg->retry_attempts : 0);
  /* Every attempt and its pause, plus the send on a fresh connection
   * that replaces a pooled one found dead (not an attempt). */
  int64_t w = (send + pause) * tries + send;
  if (window)
    *window = w;
  /* The last copy starts before the window ends; the key outlives it by
   * one more send and 1 s for the server's and the client's clocks. */
  return w + send + 1000;
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

int dlock_client_new_sized(const dlock_config *cfg_in, size_t cfg_size,
                           dlock_client **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  dlock_config cfg;
  int rc = config_load(cfg_in, cfg_size, &cfg);
  if (rc || (rc = check_cfg(&cfg)) != 0)
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
    if ((rc = dlock__etcd_client_start(c)) != 0)
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
  if (c->etcd) {
    dlock__etcd_client_release(c, child);
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
    if (!c->etcd) {
      dlock__node_free_memory(&c->node);
      dlock__cluster_destroy(c, 1);
    }
  } else if (c->etcd) {
    dlock__etcd_client_stop(c);
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
