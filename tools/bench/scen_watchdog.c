/*
 * scen_watchdog.c -- one client holds --wd-locks locks under the watchdog
 * (lease --wd-timeout-ms, renewed every third of it) for two renewal
 * periods, and we watch what that costs:
 *   - round trips per period: INFO commandstats is polled every 2 ms; a
 *     "wave" is a run of polls in which EVALSHA calls kept rising, ended by
 *     20 ms without one. The watchdog writes a whole batch before reading
 *     the replies, so one wave = one pipelined round trip.
 *   - EVALSHA calls per period (each carries many keys).
 *   - client CPU %: getrusage of the process minus the polling thread.
 *   - renewals that failed: after the window, PTTL of every key (pipelined):
 *     a key missing, or with less than lease - 1.5 periods left, missed a
 *     renewal.
 *   - locks lost: unlocks returning DLOCK_ELOST, and on_lock_lost calls.
 *   - memory per held lock: RSS growth (and heap growth) from before the
 *     lock objects were created to the end of the window, divided by the
 *     number of locks, minus the name bytes.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dlock.h"

#define SCEN "watchdog"

static atomic_long g_lost_cb;

static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  atomic_fetch_add(&g_lost_cb, 1);
}

static long long evalsha_calls(redisContext *ctl) {
  bench_cmdstats s;
  bench_cmdstats_read(ctl, &s);
  return s.evalsha;
}

/* One run of the scenario: the client, the held set, the control
 * connection. */
typedef struct wd_run {
  const bench_opts *o;
  dlock_client *c;
  redisContext *ctl;
  dlock_mutex **ms;
  long n, held;
  int lease, period;
  double name_bytes; /* of the held locks' names, NULs included */
} wd_run;

/* What the observation window saw. */
typedef struct wd_window {
  int64_t w0, w1;       /* monotonic ns */
  long waves;           /* renewal round trips */
  int64_t longest_wave; /* ns */
  long long e0, e1;     /* EVALSHA calls before / after */
  double cpu;           /* client CPU (µs) minus the polling thread */
  bench_cmdstats csd;   /* server stats over the window */
  long long rss0, heap0, rss1, heap1;
} wd_window;

static dlock_client *wd_client(const bench_opts *o, int lease) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = o->url;
  cfg.watchdog_timeout_ms = lease;
  if (o->multiplex >= 0)
    cfg.multiplex = o->multiplex;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    bench_die("dlock_client_new: %s: %s", dlock_err_name(rc),
              dlock_last_error());
  return c;
}

/* One lock and unlock first: scripts loaded, connections open. */
static void warm_up(const wd_run *r) {
  char w[96];
  snprintf(w, sizeof w, "%s:wd:warm", r->o->run_id);
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(r->c, w, &m) || dlock_mutex_lock(m) ||
      dlock_mutex_unlock(m))
    bench_die("watchdog warm-up failed: %s", dlock_last_error());
  dlock_mutex_free(m);
}

/* Acquires up to n locks (time-bounded). */
static void acquire_set(wd_run *r) {
  const bench_opts *o = r->o;
  char name[96];
  int64_t t0 = dlc_now_ns();
  int64_t acq_limit = t0 + (int64_t)(o->quick ? 20e9 : 180e9);
  for (r->held = 0; r->held < r->n; r->held++) {
    int l = snprintf(name, sizeof name, "%s:wd:%ld", o->run_id, r->held);
    r->name_bytes += l + 1;
    if (dlock_mutex_new(r->c, name, &r->ms[r->held]))
      bench_die("dlock_mutex_new failed");
    int rc = dlock_mutex_lock(r->ms[r->held]);
    if (rc)
      bench_die("watchdog: lock %ld: %s: %s", r->held, dlock_err_name(rc),
                dlock_last_error());
    if ((r->held & 255) == 0 && dlc_now_ns() > acq_limit) {
      r->held++;
      break;
    }
  }
  double acq_s = (double)(dlc_now_ns() - t0) / 1e9;
  if (r->held < r->n)
    bm_note("watchdog: acquisition stopped at %ld of %ld locks (time bound)",
            r->held, r->n);
  bm_put(SCEN, "held", "locks held", (double)r->held, "locks");
  bm_put(SCEN, "lease_ms", "watchdog lease (renewed every third)", r->lease,
         "ms");
  bm_put(SCEN, "acquire_per_s", "acquisitions/s while building the set",
         (double)r->held / acq_s, "acq/s");
}

/* Polls EVALSHA calls every 2 ms for two renewal periods: a wave is a run
 * of rising polls ended by 20 ms without one. */
static void count_waves(const wd_run *r, wd_window *w) {
  int64_t window = 2LL * r->period * 1000000LL, last_rise = 0, start = 0;
  long long last = w->e0;
  int in_wave = 0;
  while (dlc_now_ns() - w->w0 < window) {
    dlc_sleep_ns(2000000);
    long long e = evalsha_calls(r->ctl);
    int64_t now = dlc_now_ns();
    if (e > last) {
      if (!in_wave) {
        w->waves++;
        start = now;
      }
      in_wave = 1;
      last_rise = now;
      last = e;
    } else if (in_wave && now - last_rise >= 20000000LL) {
      in_wave = 0;
      if (last_rise - start > w->longest_wave)
        w->longest_wave = last_rise - start;
    }
  }
  if (in_wave && last_rise - start > w->longest_wave)
    w->longest_wave = last_rise - start;
}

/* Two renewal periods watched: round trips, calls, CPU, memory. */
static void observe(const wd_run *r, wd_window *w) {
  bench_cmdstats cs0, cs1;
  bench_cmdstats_read(r->ctl, &cs0);
  w->e0 = evalsha_calls(r->ctl);
  double self0 = bench_cpu_us(), me0 = bench_thread_cpu_us();
  w->w0 = dlc_now_ns();
  count_waves(r, w);
  w->w1 = dlc_now_ns();
  double self1 = bench_cpu_us(), me1 = bench_thread_cpu_us();
  w->e1 = evalsha_calls(r->ctl);
  bench_cmdstats_read(r->ctl, &cs1);
  bench_cmdstats_delta(&cs0, &cs1, &w->csd);
  w->rss1 = bench_rss_bytes();
  w->heap1 = bench_heap_bytes();
  w->cpu = (self1 - self0) - (me1 - me0);
}

static void report_window(const wd_run *r, const wd_window *w) {
  double wall_us = (double)(w->w1 - w->w0) / 1e3;
  double periods = wall_us / (r->period * 1000.0);
  double held = (double)r->held, cpu = w->cpu;
  if (w->csd.evalsha > 0)
    bm_put(SCEN, "server_us_per_renewal_call",
           "server time per renewal EVALSHA (256 locks each)",
           (double)w->csd.script_usec / (double)w->csd.evalsha, "µs");
  bm_put(SCEN, "longest_pass_ms",
         "longest renewal pass seen (first to last EVALSHA of a wave)",
         (double)w->longest_wave / 1e6, "ms");
  bm_put(SCEN, "roundtrips_per_period",
         "renewal round trips (pipelined batches) per period",
         (double)w->waves / periods, "RTT");
  bm_put(SCEN, "evalsha_per_period", "renewal EVALSHA calls per period",
         (double)(w->e1 - w->e0) / periods, "calls");
  bm_put(SCEN, "cpu_pct", "client CPU, % of one core", cpu / wall_us * 100,
         "%");
  bm_put(SCEN, "cpu_us_per_lock",
         "client CPU per held lock per period (renewal cost)",
         cpu / periods / held, "µs");
  bm_put(SCEN, "cpu_pct_default_lease",
         "same, projected to the default 30 s lease (10 s period)",
         cpu / wall_us * 100 * r->period / 10000.0, "%");
  double avg_name = r->name_bytes / held;
  bm_put(SCEN, "rss_per_lock", "RSS growth per held lock, beyond its name",
         (double)(w->rss1 - w->rss0) / held - avg_name, "B");
  if (w->heap0 >= 0 && w->heap1 >= 0)
    bm_put(SCEN, "heap_per_lock", "heap growth per held lock, beyond its name",
           (double)(w->heap1 - w->heap0) / held - avg_name, "B");
}

/* Every key still there, renewed within the last period and a half?
 * PTTL of every key, pipelined in chunks. */
static void check_keys(const wd_run *r) {
  long missing = 0, late = 0;
  long long min_pttl = -1;
  const long chunk = 10000;
  for (long at = 0; at < r->held; at += chunk) {
    long k = r->held - at < chunk ? r->held - at : chunk;
    for (long i = 0; i < k; i++) {
      const char *argv[2] = {"PTTL", dlock_mutex_name(r->ms[at + i])};
      if (redisAppendCommandArgv(r->ctl, 2, argv, NULL) != REDIS_OK)
        bench_die("PTTL: %s", r->ctl->errstr);
    }
    for (long i = 0; i < k; i++) {
      void *rp = NULL;
      if (redisGetReply(r->ctl, &rp) != REDIS_OK || !rp)
        bench_die("PTTL: %s", r->ctl->errstr);
      long long v = ((redisReply *)rp)->integer;
      freeReplyObject(rp);
      if (v < 0)
        missing++;
      else if (v < r->lease - 2 * r->period)
        late++;
      if (v >= 0 && (min_pttl < 0 || v < min_pttl))
        min_pttl = v;
    }
  }
  bm_put(SCEN, "min_pttl_ms", "smallest PTTL left after the window",
         (double)min_pttl, "ms");
  bm_put(SCEN, "failed_renewals",
         "renewals missed (key gone, or no renewal for 2 periods)",
         (double)(missing + late), "locks");
}

/* Unlocks and frees the set; ELOST counts as a lost lock. */
static void release_set(const wd_run *r) {
  long elost = 0, other = 0;
  int64_t u0 = dlc_now_ns();
  for (long i = 0; i < r->held; i++) {
    int rc = dlock_mutex_unlock(r->ms[i]);
    if (rc == DLOCK_ELOST)
      elost++;
    else if (rc)
      other++;
    dlock_mutex_free(r->ms[i]);
  }
  double unl_s = (double)(dlc_now_ns() - u0) / 1e9;
  if (other)
    bm_note("watchdog: %ld unlocks failed with errors other than ELOST", other);
  long cb = atomic_load(&g_lost_cb);
  bm_put(SCEN, "lost_locks", "locks lost (unlock said ELOST)", (double)elost,
         "locks");
  bm_put(SCEN, "lost_callbacks", "on_lock_lost calls", (double)cb, "calls");
  bm_put(SCEN, "unlock_per_s", "unlocks/s while releasing the set",
         (double)r->held / unl_s, "ops/s");
}

void scen_watchdog(const bench_opts *o) {
  wd_run r = {.o = o, .n = o->wd_locks, .lease = o->wd_timeout_ms};
  r.period = r.lease / 3;
  bench_log("watchdog: holding %ld locks, lease %d ms (renewal period %d ms)",
            r.n, r.lease, r.period);
  r.c = wd_client(o, r.lease);
  r.ctl = bench_connect(o);
  r.ms = calloc((size_t)r.n, sizeof(dlock_mutex *));
  if (!r.ms)
    bench_die("out of memory");
  memset(r.ms, 0,
         (size_t)r.n * sizeof(dlock_mutex *)); /* touch: not in the growth */
  warm_up(&r);
  wd_window w = {.rss0 = bench_rss_bytes(), .heap0 = bench_heap_bytes()};
  acquire_set(&r);
  observe(&r, &w);
  report_window(&r, &w);
  check_keys(&r);
  release_set(&r);
  free(r.ms);
  dlock_client_free(r.c);
  redisFree(r.ctl);
}
