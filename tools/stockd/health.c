/* health.c -- dlock-stockd's view of its lock service (issue 27):
 *  - /healthz: 503 while Redis does not answer. One PING on a connection
 *    of its own, with a short timeout (SD_PING_MS), its result cached for
 *    at most SD_HEALTH_CACHE_MS: a stopped (SIGSTOP) or killed server is
 *    reported within SD_HEALTH_CACHE_MS + SD_PING_MS (1 s), a flood of
 *    probes costs Redis two PINGs a second.
 *  - /metrics: the library's counters of every dlock client of the
 *    service (dlock_client_stats), summed over the products, and the
 *    holds reported lost (cfg.on_lock_lost).
 *  - log lines: "<ISO 8601 UTC, ms> dlock-stockd[<instance>] <level>
 *    lock=<name>: <message>" on stderr. */
#include <event2/buffer.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "stockd.h"
#include "url.h"

#define SD_PING_MS 500
#define SD_HEALTH_CACHE_MS 500

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static redisContext *g_rc;     /* the probe's connection, under g_mu */
static long long g_checked_ms; /* dlc_now_ms of the last probe; 0 none */
static int g_up = -1;          /* its result; -1 not probed yet */
static char g_why[256];
static atomic_llong g_lost; /* on_lock_lost calls */

void sd_log(const char *instance, const char *lock, const char *fmt, ...) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[40], msg[1024];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* one fprintf: lines of different threads do not interleave */
  fprintf(stderr, "%s.%03ldZ dlock-stockd[%s] lock=%s: %s\n", when,
          ts.tv_nsec / 1000000L, instance, lock && *lock ? lock : "-", msg);
}

void sd_on_lock_lost(const char *name, void *arg) {
  const sd_opts *o = arg;
  atomic_fetch_add(&g_lost, 1);
  sd_log(o->name, name,
         "hold LOST (on_lock_lost): the lock expired, was deleted or taken; "
         "the purchase under it may overlap another");
}

/* One PING (connecting first if needed). 1 up, 0 down (g_why says why).
 * Under g_mu. */
static int probe(const sd_opts *o) {
  if (!g_rc) {
    char err[256] = "";
    /* connect and login within 1 s: a stopped server accepts the TCP
     * connection (the kernel does) but never answers AUTH */
    g_rc = dlc_redis_connect(o->url, 1, 1, err, sizeof err);
    if (!g_rc) {
      snprintf(g_why, sizeof g_why, "%s", err);
      return 0;
    }
  }
  struct timeval tv = {0, (suseconds_t)SD_PING_MS * 1000};
  redisSetTimeout(g_rc, tv);
  redisReply *r = redisCommand(g_rc, "PING");
  int ok =
      r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
  if (!ok) {
    snprintf(g_why, sizeof g_why, "PING: %s",
             r && r->type == REDIS_REPLY_ERROR ? r->str
             : g_rc->errstr[0]                 ? g_rc->errstr
                                               : "no reply");
    redisFree(g_rc); /* a late PONG must not answer the next PING */
    g_rc = NULL;
  }
  if (r)
    freeReplyObject(r);
  return ok;
}

int sd_health(const sd_opts *o, char *why, size_t len) {
  pthread_mutex_lock(&g_mu);
  long long now = dlc_now_ms();
  if (g_up < 0 || now - g_checked_ms >= SD_HEALTH_CACHE_MS) {
    int was = g_up;
    g_up = probe(o);
    g_checked_ms = dlc_now_ms();
    if (was >= 0 && was != g_up)
      sd_log(o->name, NULL,
             g_up ? "Redis reachable again" : "Redis unreachable: %s", g_why);
  }
  int up = g_up;
  snprintf(why, len, "%s", up ? "" : g_why);
  pthread_mutex_unlock(&g_mu);
  return up;
}

void sd_health_free(void) {
  pthread_mutex_lock(&g_mu);
  if (g_rc)
    redisFree(g_rc);
  g_rc = NULL;
  pthread_mutex_unlock(&g_mu);
}

static void head(struct evbuffer *out, const char *name, const char *type,
                 const char *help) {
  evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                      type);
}

void sd_metrics_dlock(struct evbuffer *out, const sd_service *svc) {
  dlock_client_stats sum;
  memset(&sum, 0, sizeof sum);
  int clients = 0, connected = 0;
  for (int i = 0; i < svc->n; i++) {
    const sk_engine *e = &svc->p[i].e;
    dlock_client *cs[1 + SK_REDLOCK_SERVERS];
    int n = 0;
    if (e->dc)
      cs[n++] = e->dc;
    for (int k = 0; k < SK_REDLOCK_SERVERS; k++)
      if (e->rlc[k])
        cs[n++] = e->rlc[k];
    for (int k = 0; k < n; k++) {
      dlock_client_stats st;
      if (dlock_client_stats(cs[k], &st) != 0)
        continue;
      clients++;
      connected += st.connected != 0;
      sum.acquired += st.acquired;
      sum.acquired_direct += st.acquired_direct;
      sum.acquired_handover += st.acquired_handover;
      sum.waits += st.waits;
      sum.timeouts += st.timeouts;
      sum.cancels += st.cancels;
      sum.renewals_sent += st.renewals_sent;
      sum.renewals_failed += st.renewals_failed;
      sum.lost_key_gone += st.lost_key_gone;
      sum.lost_unreachable += st.lost_unreachable;
      sum.lost_thread_exit += st.lost_thread_exit;
      sum.lost_forced += st.lost_forced;
      sum.reconnects += st.reconnects;
      sum.retries += st.retries;
      sum.enosync += st.enosync;
      sum.commands += st.commands;
      sum.holds += st.holds;
    }
  }
  head(out, "stockd_dlock_clients", "gauge", "dlock clients of the service");
  evbuffer_add_printf(out, "stockd_dlock_clients %d\n", clients);
  head(out, "stockd_dlock_connected", "gauge",
       "dlock clients whose command connection is up");
  evbuffer_add_printf(out, "stockd_dlock_connected %d\n", connected);
  head(out, "stockd_dlock_acquired_total", "counter",
       "Holds begun, by how (the acquire script, or a hand-over)");
  evbuffer_add_printf(out,
                      "stockd_dlock_acquired_total{how=\"direct\"} %llu\n"
                      "stockd_dlock_acquired_total{how=\"handover\"} %llu\n",
                      (unsigned long long)sum.acquired_direct,
                      (unsigned long long)sum.acquired_handover);
  head(out, "stockd_dlock_waits_total", "counter",
       "Acquisitions that had to wait");
  evbuffer_add_printf(out, "stockd_dlock_waits_total %llu\n",
                      (unsigned long long)sum.waits);
  head(out, "stockd_dlock_wait_timeouts_total", "counter",
       "Waits that timed out");
  evbuffer_add_printf(out, "stockd_dlock_wait_timeouts_total %llu\n",
                      (unsigned long long)sum.timeouts);
  head(out, "stockd_dlock_renewals_total", "counter",
       "Watchdog renewals sent, and those that failed");
  evbuffer_add_printf(out,
                      "stockd_dlock_renewals_total{result=\"sent\"} %llu\n"
                      "stockd_dlock_renewals_total{result=\"failed\"} %llu\n",
                      (unsigned long long)sum.renewals_sent,
                      (unsigned long long)sum.renewals_failed);
  head(out, "stockd_dlock_lost_holds_total", "counter",
       "Holds lost, by reason");
  evbuffer_add_printf(
      out,
      "stockd_dlock_lost_holds_total{reason=\"key_gone\"} %llu\n"
      "stockd_dlock_lost_holds_total{reason=\"unreachable\"} %llu\n"
      "stockd_dlock_lost_holds_total{reason=\"thread_exit\"} %llu\n"
      "stockd_dlock_lost_holds_total{reason=\"forced\"} %llu\n",
      (unsigned long long)sum.lost_key_gone,
      (unsigned long long)sum.lost_unreachable,
      (unsigned long long)sum.lost_thread_exit,
      (unsigned long long)sum.lost_forced);
  head(out, "stockd_dlock_lock_lost_callbacks_total", "counter",
       "on_lock_lost calls (each is logged with the lock name)");
  evbuffer_add_printf(out, "stockd_dlock_lock_lost_callbacks_total %lld\n",
                      atomic_load(&g_lost));
  head(out, "stockd_dlock_reconnects_total", "counter",
       "Connections reopened after a failure");
  evbuffer_add_printf(out, "stockd_dlock_reconnects_total %llu\n",
                      (unsigned long long)sum.reconnects);
  head(out, "stockd_dlock_retries_total", "counter",
       "Commands re-sent under the retry policy");
  evbuffer_add_printf(out, "stockd_dlock_retries_total %llu\n",
                      (unsigned long long)sum.retries);
  head(out, "stockd_dlock_commands_total", "counter", "Commands sent");
  evbuffer_add_printf(out, "stockd_dlock_commands_total %llu\n",
                      (unsigned long long)sum.commands);
  head(out, "stockd_dlock_holds", "gauge", "Holds the service has now");
  evbuffer_add_printf(out, "stockd_dlock_holds %llu\n",
                      (unsigned long long)sum.holds);
  pthread_mutex_lock(&g_mu);
  int up = g_up;
  pthread_mutex_unlock(&g_mu);
  head(out, "stockd_redis_up", "gauge",
       "The last /healthz probe's PING: 1 answered, 0 not, -1 none yet");
  evbuffer_add_printf(out, "stockd_redis_up %d\n", up);
}
