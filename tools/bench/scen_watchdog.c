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

void scen_watchdog(const bench_opts *o) {
  long n = o->wd_locks;
  int lease = o->wd_timeout_ms;
  int period = lease / 3;
  bench_log("watchdog: holding %ld locks, lease %d ms (renewal period %d ms)",
            n, lease, period);
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
  redisContext *ctl = bench_connect(o);
  dlock_mutex **ms = calloc((size_t)n, sizeof *ms);
  if (!ms)
    bench_die("out of memory");
  memset(ms, 0, (size_t)n * sizeof *ms); /* touch: not part of the growth */
  {
    char w[96];
    snprintf(w, sizeof w, "%s:wd:warm", o->run_id);
    dlock_mutex *m = NULL;
    if (dlock_mutex_new(c, w, &m) || dlock_mutex_lock(m) ||
        dlock_mutex_unlock(m))
      bench_die("watchdog warm-up failed: %s", dlock_last_error());
    dlock_mutex_free(m);
  }
  long long rss0 = bench_rss_bytes(), heap0 = bench_heap_bytes();

  /* Acquire. */
  double name_bytes = 0;
  char name[96];
  int64_t t0 = bench_now_ns();
  int64_t acq_limit = t0 + (int64_t)(o->quick ? 20e9 : 180e9);
  long held = 0;
  for (; held < n; held++) {
    int l = snprintf(name, sizeof name, "%s:wd:%ld", o->run_id, held);
    name_bytes += l + 1;
    if (dlock_mutex_new(c, name, &ms[held]))
      bench_die("dlock_mutex_new failed");
    rc = dlock_mutex_lock(ms[held]);
    if (rc)
      bench_die("watchdog: lock %ld: %s: %s", held, dlock_err_name(rc),
                dlock_last_error());
    if ((held & 255) == 0 && bench_now_ns() > acq_limit) {
      held++;
      break;
    }
  }
  double acq_s = (double)(bench_now_ns() - t0) / 1e9;
  if (held < n)
    bm_note("watchdog: acquisition stopped at %ld of %ld locks (time bound)",
            held, n);
  bm_put(SCEN, "held", "locks held", (double)held, "locks");
  bm_put(SCEN, "lease_ms", "watchdog lease (renewed every third)", lease, "ms");
  bm_put(SCEN, "acquire_per_s", "acquisitions/s while building the set",
         (double)held / acq_s, "acq/s");

  /* Two renewal periods. */
  int64_t window = 2LL * period * 1000000LL;
  bench_cmdstats cs0, cs1, csd;
  bench_cmdstats_read(ctl, &cs0);
  long long e0 = evalsha_calls(ctl), last = e0;
  double self0 = bench_cpu_us(), me0 = bench_thread_cpu_us();
  int64_t w0 = bench_now_ns(), last_rise = 0;
  int in_wave = 0;
  long waves = 0;
  int64_t wave_start = 0, longest_wave = 0;
  while (bench_now_ns() - w0 < window) {
    bench_sleep_ns(2000000);
    long long e = evalsha_calls(ctl);
    int64_t now = bench_now_ns();
    if (e > last) {
      if (!in_wave) {
        waves++;
        wave_start = now;
      }
      in_wave = 1;
      last_rise = now;
      last = e;
    } else if (in_wave && now - last_rise >= 20000000LL) {
      in_wave = 0;
      if (last_rise - wave_start > longest_wave)
        longest_wave = last_rise - wave_start;
    }
  }
  if (in_wave && last_rise - wave_start > longest_wave)
    longest_wave = last_rise - wave_start;
  int64_t w1 = bench_now_ns();
  double self1 = bench_cpu_us(), me1 = bench_thread_cpu_us();
  long long e1 = evalsha_calls(ctl);
  bench_cmdstats_read(ctl, &cs1);
  bench_cmdstats_delta(&cs0, &cs1, &csd);
  long long rss1 = bench_rss_bytes(), heap1 = bench_heap_bytes();
  double wall_us = (double)(w1 - w0) / 1e3;
  double periods = wall_us / (period * 1000.0);
  double cpu = (self1 - self0) - (me1 - me0);
  if (csd.evalsha > 0)
    bm_put(SCEN, "server_us_per_renewal_call",
           "server time per renewal EVALSHA (256 locks each)",
           (double)csd.script_usec / (double)csd.evalsha, "µs");
  bm_put(SCEN, "longest_pass_ms",
         "longest renewal pass seen (first to last EVALSHA of a wave)",
         (double)longest_wave / 1e6, "ms");
  bm_put(SCEN, "roundtrips_per_period",
         "renewal round trips (pipelined batches) per period",
         (double)waves / periods, "RTT");
  bm_put(SCEN, "evalsha_per_period", "renewal EVALSHA calls per period",
         (double)(e1 - e0) / periods, "calls");
  bm_put(SCEN, "cpu_pct", "client CPU, % of one core", cpu / wall_us * 100,
         "%");
  bm_put(SCEN, "cpu_us_per_lock",
         "client CPU per held lock per period (renewal cost)",
         cpu / periods / (double)held, "µs");
  bm_put(SCEN, "cpu_pct_default_lease",
         "same, projected to the default 30 s lease (10 s period)",
         cpu / wall_us * 100 * period / 10000.0, "%");
  double avg_name = name_bytes / (double)held;
  bm_put(SCEN, "rss_per_lock", "RSS growth per held lock, beyond its name",
         (double)(rss1 - rss0) / (double)held - avg_name, "B");
  if (heap0 >= 0 && heap1 >= 0)
    bm_put(SCEN, "heap_per_lock", "heap growth per held lock, beyond its name",
           (double)(heap1 - heap0) / (double)held - avg_name, "B");

  /* Every key still there, renewed within the last period and a half? */
  long missing = 0, late = 0;
  long long min_pttl = -1;
  const long chunk = 10000;
  for (long at = 0; at < held; at += chunk) {
    long k = held - at < chunk ? held - at : chunk;
    for (long i = 0; i < k; i++) {
      const char *argv[2] = {"PTTL", dlock_mutex_name(ms[at + i])};
      if (redisAppendCommandArgv(ctl, 2, argv, NULL) != REDIS_OK)
        bench_die("PTTL: %s", ctl->errstr);
    }
    for (long i = 0; i < k; i++) {
      void *rp = NULL;
      if (redisGetReply(ctl, &rp) != REDIS_OK || !rp)
        bench_die("PTTL: %s", ctl->errstr);
      long long v = ((redisReply *)rp)->integer;
      freeReplyObject(rp);
      if (v < 0)
        missing++;
      else if (v < lease - 2 * period)
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

  /* Release. */
  long elost = 0, other = 0;
  int64_t u0 = bench_now_ns();
  for (long i = 0; i < held; i++) {
    rc = dlock_mutex_unlock(ms[i]);
    if (rc == DLOCK_ELOST)
      elost++;
    else if (rc)
      other++;
    dlock_mutex_free(ms[i]);
  }
  double unl_s = (double)(bench_now_ns() - u0) / 1e9;
  if (other)
    bm_note("watchdog: %ld unlocks failed with errors other than ELOST", other);
  long cb = atomic_load(&g_lost_cb);
  bm_put(SCEN, "lost_locks", "locks lost (unlock said ELOST)", (double)elost,
         "locks");
  bm_put(SCEN, "lost_callbacks", "on_lock_lost calls", (double)cb, "calls");
  bm_put(SCEN, "unlock_per_s", "unlocks/s while releasing the set",
         (double)held / unl_s, "ops/s");
  free(ms);
  dlock_client_free(c);
  redisFree(ctl);
}
