/*
 * async.c -- the event-loop client object (include/dlock/async.h): its
 * configuration and identity, the hooks of the loop it is attached to, the
 * loop's entry points (a socket readable or writable, the timer due), and
 * the one loop timer that stands for the client's timer heap.
 *
 * REENTRANCY: every entry point counts itself in `depth`; user callbacks
 * run only from entry points (a call that completes inside an API call
 * arms a zero-delay timer instead), so a callback never runs inside the
 * call that queued it. dlock_async_free called from a callback does its
 * work at once (closing connections, ECLOSED to every pending call) but
 * leaves the memory to the outermost entry point, which checks `closing`
 * after every step that may have run a callback.
 */
#include <stdlib.h>
#include <string.h>

#include "async/async.h"

int64_t dlock__async_now(void) { return dlock__now_ms(); }

void dlock__async_sync(dlock_async *a) {
  if (!a->attached || a->closing)
    return;
  dlock__atimer *t = dlock__aheap_top(&a->timers);
  if (!t) {
    if (a->sched_at >= 0)
      a->hooks.cancel_timer(a->hooks.data);
    a->sched_at = -1;
    return;
  }
  if (t->at == a->sched_at)
    return;
  int64_t ms = t->at - dlock__async_now();
  a->hooks.schedule_timer(a->hooks.data, ms > 0 ? ms : 0);
  a->sched_at = t->at;
}

void dlock__async_timer(dlock_async *a, dlock__atimer *t, int64_t at) {
  /* Out of memory for the heap's growth leaves t unarmed: the wait it
   * belongs to then ends with its connection's timeout or never; nothing
   * better can be done without memory. */
  (void)dlock__aheap_add(&a->timers, t, at);
  if (a->depth == 0)
    dlock__async_sync(a);
}

void dlock__async_untimer(dlock_async *a, dlock__atimer *t) {
  dlock__aheap_del(&a->timers, t);
}

static void flush_fired(dlock__atimer *t) { (void)t; }

static void enter(dlock_async *a) { a->depth++; }

static void release_memory(dlock_async *a) {
  dlock__aroute_free(a);
  dlock__tls_ctx_free(a->tls_ctx);
  free(a->tls_name);
  dlock__aheap_free(&a->timers);
  dlock__map_free(&a->holds);
  dlock__map_free(&a->subs);
  dlock__map_free(&a->chans);
  dlock__url_free(&a->url);
  free(a->url_str);
  free(a->conn_name);
  free(a);
}

static void leave(dlock_async *a) {
  if (!a->closing)
    dlock__async_flush(a);
  if (--a->depth > 0)
    return;
  if (a->gone)
    release_memory(a);
  else
    dlock__async_sync(a);
}

int dlock_async_new(const dlock_config *cfg_in, dlock_async **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  dlock_async *a = dlock__calloc(1, sizeof *a);
  if (!a)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__config_resolve(cfg_in, &a->cfg);
  if (rc) {
    free(a);
    return rc;
  }
  dlock__config_log_ignored(&a->cfg, &a->cfg);
  a->cfg.loaded = NULL; /* the caller's */
  const char *url = a->cfg.url ? a->cfg.url : "redis://127.0.0.1:6379";
  if (!(a->url_str = dlock__strdup(url))) {
    free(a);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  a->cfg.url = a->url_str;
  if ((rc = dlock__url_parse(a->url_str, &a->url)) != 0 ||
      (a->url.etcd &&
       (rc = dlock__etcd_notsup("the event-loop client (dlock_async)",
                                "use the blocking client "
                                "(dlock_client_new) with the etcd:// URL")))) {
    dlock__url_free(&a->url);
    free(a->url_str);
    free(a);
    return rc;
  }
  /* rediss://: the blocking client's context (tls.c), made once here. */
  if (a->url.tls && (rc = dlock__tls_ctx_new(&a->cfg, &a->tls_ctx)) != 0) {
    dlock__url_free(&a->url);
    free(a->url_str);
    free(a);
    return rc;
  }
  int name_oom = a->url.tls && a->cfg.tls_server_name &&
                 !(a->tls_name = dlock__strdup(a->cfg.tls_server_name));
  /* Borrowed for this call only: not kept (tls_name is the copy). */
  a->cfg.tls_ca_file = a->cfg.tls_ca_dir = NULL;
  a->cfg.tls_cert_file = a->cfg.tls_key_file = a->cfg.tls_server_name = NULL;
  a->cfg.tls_truststore = a->cfg.tls_truststore_password = NULL;
  a->cfg.tls_keystore = a->cfg.tls_keystore_password = NULL;
  if (name_oom || dlock__map_init(&a->holds, 64) ||
      dlock__map_init(&a->subs, 16) || dlock__map_init(&a->chans, 32) ||
      dlock__conn_name(a->cfg.client_name, &a->conn_name)) {
    release_memory(a);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  a->cfg.client_name = a->conn_name; /* the caller's is borrowed */
  dlock__uuid4(a->id);
  a->started_ms = dlock__wall_ms(); /* the info key (async_info.c) */
  a->sched_at = -1;
  a->flush.fn = flush_fired;
  a->flush.arg = a;
  dlock__aconn_init(&a->cmd, a, "command");
  a->cmd.data = 1;
  a->cmd.cmdconn = 1;
  dlock__asub_init(a);
  a->sub.data = 1;
  if (dlock__aroute_init(a) != 0) {
    release_memory(a);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  *out = a;
  return 0;
}

int dlock_async_attach(dlock_async *a, const dlock_async_hooks *h) {
  dlock__clear_error();
  if (!a || !h)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (a->attached || a->closing)
    return dlock__fail(DLOCK_EINVAL, "the client is attached to a loop "
                                     "already");
  if (!h->add_read || !h->del_read || !h->add_write || !h->del_write ||
      !h->release || !h->schedule_timer || !h->cancel_timer || !h->cleanup)
    return dlock__fail(DLOCK_EINVAL, "a hook is missing");
  a->hooks = *h;
  a->attached = 1;
  if (a->cmd.head)
    dlock__aconn_start(&a->cmd);
  if (a->sub_list)
    dlock__asub_kick(a); /* a->sub, or a cluster master's */
  dlock__aroute_start(a);
  dlock__async_sync(a);
  return 0;
}

void dlock_async_free(dlock_async *a) {
  if (!a || a->closing)
    return;
  dlock__clear_error();
  enter(a);
  a->closing = 1;
  dlock__aconn_close(&a->cmd);
  dlock__aconn_close(&a->sub);
  dlock__aroute_close(a);
  dlock__awd_close(a);
  dlock__ainfo_close(a);
  dlock__async_ops_close(a);
  dlock__asub_close(a);
  dlock__async_flush(a);
  dlock__async_untimer(a, &a->flush);
  if (a->attached) {
    if (a->sched_at >= 0)
      a->hooks.cancel_timer(a->hooks.data);
    a->hooks.cleanup(a->hooks.data);
  }
  a->gone = 1;
  leave(a);
}

const char *dlock_async_id(const dlock_async *a) { return a ? a->id : ""; }

/* ---- the loop's entry points ------------------------------------------------
 */

/* The connection of w: every watch the library makes is a dlock__awatch. */
static dlock__aconn *conn_of(dlock_async_watch *w) {
  return ((dlock__awatch *)w)->k;
}

/* w's socket is ready: its connection does `ready`, inside the handle,
 * unless the watch has no connection or the handle is closing. */
static void socket_ready(dlock_async_watch *w, void (*ready)(dlock__aconn *)) {
  dlock_async *a = w->a;
  dlock__aconn *k = conn_of(w);
  if (!k || a->closing)
    return;
  enter(a);
  ready(k);
  leave(a);
}

void dlock_async_on_readable(dlock_async_watch *w) {
  socket_ready(w, dlock__aconn_readable);
}

void dlock_async_on_writable(dlock_async_watch *w) {
  socket_ready(w, dlock__aconn_writable);
}

void dlock_async_on_timer(dlock_async *a) {
  if (!a || a->closing)
    return;
  enter(a);
  a->sched_at = -1;
  int64_t now = dlock__async_now();
  /* Only the timers due now: one that re-arms itself for now runs on the
   * next turn of the loop. */
  for (int n = 0; n < 100000 && !a->closing; n++) {
    dlock__atimer *t = dlock__aheap_top(&a->timers);
    if (!t || t->at > now)
      break;
    dlock__aheap_del(&a->timers, t);
    t->fn(t);
    if (!a->closing)
      dlock__async_flush(a);
  }
  leave(a);
}
