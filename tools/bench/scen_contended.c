/*
 * scen_contended.c -- --workers processes on ONE lock. Inside the lock each
 * does a non-atomic GET then SET of a counter (on its own hiredis
 * connection), so a broken mutual exclusion shows up as lost updates:
 * sum of the workers' acquisitions minus the counter's final value.
 * Measured: acquisitions/s, time-to-acquire (the duration of
 * dlock_mutex_lock) p50/p99/max over all workers, per-worker min/max
 * acquisitions (fairness), lost updates.
 *
 * The serial reference is the same loop in one process alone: what the
 * lock + GET + SET + unlock cycle costs with nobody to hand over to.
 *
 * Scenario "contended-spin" (issue 31): the same contended loop with the
 * spin lock (dlock_mutex_new_spin: no pub/sub, back-off polling) against
 * the pub/sub mutex, alternating, with the server's command counts (INFO
 * commandstats deltas) beside the rates: what polling costs Redis.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define SCEN "contended"
#define MAXW 256

typedef struct cont_shared {
  atomic_int ready, go;
  _Atomic int64_t until;
  long cap; /* samples per worker */
  struct {
    long count, nsamples;
    double cpu_us;
    int64_t end_ns;
    int ok;
    char err[160];
  } w[MAXW];
  float samples[]; /* µs, cap per worker */
} cont_shared;

typedef struct cont_arg {
  const bench_opts *o;
  cont_shared *sh;
  int spin; /* dlock_mutex_new_spin instead of dlock_mutex_new */
  char lock[96], counter[96];
} cont_arg;

static void worker(int i, void *p) {
  cont_arg *a = p;
  cont_shared *sh = a->sh;
  dlock_client *c = bench_client(a->o, 1, 0);
  dlock_mutex *m = NULL;
  if ((a->spin ? dlock_mutex_new_spin(c, a->lock, &m)
               : dlock_mutex_new(c, a->lock, &m)) != 0)
    _exit(1);
  redisContext *r = bench_connect(a->o);
  float *samples = sh->samples + (size_t)i * (size_t)sh->cap;
  bench_worker_ready(&sh->ready, &sh->go);
  int64_t until = atomic_load(&sh->until);
  double cpu0 = bench_cpu_us();
  long n = 0;
  const char *get[2] = {"GET", a->counter};
  char val[32];
  const char *set[3] = {"SET", a->counter, val};
  for (;;) {
    int64_t t0 = dlc_now_ns();
    int rc = dlock_mutex_lock(m);
    int64_t t1 = dlc_now_ns();
    if (rc) {
      snprintf(sh->w[i].err, sizeof sh->w[i].err, "lock: %s: %s",
               dlock_err_name(rc), dlock_last_error());
      break;
    }
    redisReply *g = bench_cmd(r, 2, get);
    long long v = g->type == REDIS_REPLY_STRING ? atoll(g->str) : 0;
    freeReplyObject(g);
    snprintf(val, sizeof val, "%lld", v + 1);
    freeReplyObject(bench_cmd(r, 3, set));
    rc = dlock_mutex_unlock(m);
    if (rc) {
      snprintf(sh->w[i].err, sizeof sh->w[i].err, "unlock: %s: %s",
               dlock_err_name(rc), dlock_last_error());
      n++;
      break;
    }
    if (n < sh->cap)
      samples[n] = (float)((double)(t1 - t0) / 1e3);
    n++;
    if (t1 >= until || n >= 50000000L)
      break;
  }
  sh->w[i].cpu_us = bench_cpu_us() - cpu0;
  sh->w[i].end_ns = dlc_now_ns();
  sh->w[i].count = n;
  sh->w[i].nsamples = n < sh->cap ? n : sh->cap;
  sh->w[i].ok = sh->w[i].err[0] == '\0';
  redisFree(r);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct cont_result {
  long total, min, max;
  double rate, cpu_us, secs;
  long long counter;
  int failed;
  bench_samples acq;
} cont_result;

static void run_kind(const bench_opts *o, int workers, double secs,
                     const char *tag, int spin, cont_result *res) {
  memset(res, 0, sizeof *res);
  bs_init(&res->acq);
  long cap = (long)(secs * 40000) + 1000; /* 40k acq/s per worker is plenty */
  if (cap > 4000000)
    cap = 4000000;
  size_t shsz = sizeof(cont_shared) + (size_t)workers * (size_t)cap * 4;
  cont_shared *sh = bench_shm(shsz);
  sh->cap = cap;
  atomic_store(&sh->until, INT64_MAX);
  cont_arg a;
  a.o = o;
  a.sh = sh;
  a.spin = spin;
  snprintf(a.lock, sizeof a.lock, "%s:contended:%s", o->run_id, tag);
  snprintf(a.counter, sizeof a.counter, "%s:counter:%s", o->run_id, tag);
  redisContext *ctl = bench_connect(o);
  freeReplyObject(bench_cmdf(ctl, "DEL %s", a.counter));
  int *pids = bench_fork(workers, worker, &a);
  int64_t wait_end = dlc_now_ns() + (int64_t)60e9;
  while (atomic_load(&sh->ready) < workers && dlc_now_ns() < wait_end)
    dlc_sleep_ns(1000000);
  int64_t t0 = dlc_now_ns();
  atomic_store(&sh->until, t0 + (int64_t)(secs * 1e9));
  atomic_store(&sh->go, 1);
  res->failed = bench_reap(pids, workers, t0 + (int64_t)((secs + 60) * 1e9));
  int64_t last = t0 + 1;
  res->min = -1;
  for (int i = 0; i < workers; i++) {
    long n = sh->w[i].count;
    res->total += n;
    res->cpu_us += sh->w[i].cpu_us;
    if (res->min < 0 || n < res->min)
      res->min = n;
    if (n > res->max)
      res->max = n;
    if (sh->w[i].end_ns > last)
      last = sh->w[i].end_ns;
    bs_add_many(&res->acq, sh->samples + (size_t)i * (size_t)cap,
                (size_t)sh->w[i].nsamples);
    if (sh->w[i].err[0])
      bm_note("contended %s worker %d: %s", tag, i, sh->w[i].err);
  }
  res->secs = (double)(last - t0) / 1e9;
  res->rate = (double)res->total / res->secs;
  redisReply *r = bench_cmdf(ctl, "GET %s", a.counter);
  res->counter = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
  freeReplyObject(r);
  freeReplyObject(bench_cmdf(ctl, "DEL %s", a.counter));
  redisFree(ctl);
  bench_shm_free(sh, shsz);
  if (res->failed)
    bm_note("contended %s: %d of %d workers failed", tag, res->failed, workers);
}

static void run(const bench_opts *o, int workers, double secs, const char *tag,
                cont_result *res) {
  run_kind(o, workers, secs, tag, 0, res);
}

/* Folds one repetition into the running totals: counts add up, samples
 * are pooled, fairness keeps the worst repetition's least/best pair. */
static void fold(cont_result *acc, cont_result *r, long long *lost) {
  acc->total += r->total;
  acc->cpu_us += r->cpu_us;
  acc->failed += r->failed;
  *lost += (long long)r->total - r->counter;
  if (r->max > 0 &&
      (acc->max == 0 ||
       (double)r->min / (double)r->max < (double)acc->min / (double)acc->max)) {
    acc->min = r->min;
    acc->max = r->max;
  }
  for (size_t i = 0; i < r->acq.n; i++)
    bs_add(&acc->acq, r->acq.v[i]);
  bs_free(&r->acq);
}

/* The serial reference and the contended run alternate (--reps blocks of
 * each, 2 at most outside --quick), so both see the same minutes of a
 * noisy machine; the serial reference alone moved 2.8k..13k acq/s between
 * runs here. Rates are medians over the blocks. */
void scen_contended(const bench_opts *o) {
  if (o->workers > MAXW)
    bench_die("--workers: at most %d", MAXW);
  int reps = o->quick ? 1 : (o->reps < 2 ? o->reps : 2);
  if (reps < 1)
    reps = 1;
  cont_result s, c, one;
  memset(&s, 0, sizeof s);
  memset(&c, 0, sizeof c);
  bs_init(&s.acq);
  bs_init(&c.acq);
  double srate[8], crate[8];
  long long slost = 0, clost = 0;
  redisContext *ctl = bench_connect(o);
  bench_cmdstats d = {0, 0, 0, 0, 0};
  char tag[32];
  for (int r = 0; r < reps; r++) {
    bench_log("contended %d/%d: serial reference, 1 process, %.1f s", r + 1,
              reps, o->serial_secs / reps);
    snprintf(tag, sizeof tag, "serial%d", r);
    run(o, 1, o->serial_secs / reps, tag, &one);
    srate[r] = one.rate;
    fold(&s, &one, &slost);
    bench_log("contended %d/%d: %d processes on one lock, %.1f s", r + 1, reps,
              o->workers, o->contended_secs / reps);
    bench_cmdstats a, b, dd;
    bench_cmdstats_read(ctl, &a);
    snprintf(tag, sizeof tag, "shared%d", r);
    run(o, o->workers, o->contended_secs / reps, tag, &one);
    bench_cmdstats_read(ctl, &b);
    bench_cmdstats_delta(&a, &b, &dd);
    d.evalsha += dd.evalsha;
    d.eval += dd.eval;
    crate[r] = one.rate;
    fold(&c, &one, &clost);
  }
  redisFree(ctl);
  bm_put(SCEN, "serial_acq_per_s",
         "serial reference: lock+GET+SET+unlock per second, 1 process",
         bench_median(srate, reps), "acq/s");
  bm_put(SCEN, "serial_p50_ms", "serial reference: time-to-acquire p50",
         bs_pct(&s.acq, 50) / 1e3, "ms");
  bm_put(SCEN, "serial_lost", "serial reference: lost updates", (double)slost,
         "updates");
  bs_free(&s.acq);
  char label[128];
  snprintf(label, sizeof label, "acquisitions/s, %d processes on one lock",
           o->workers);
  bm_put(SCEN, "acq_per_s", label, bench_median(crate, reps), "acq/s");
  /* The policy's price next to its rate (issue 30): how evenly the
   * processes were served and the longest wait. */
  bm_put(SCEN, "fairness", "fairness: least / best served worker",
         c.max ? (double)c.min / (double)c.max : 0, "");
  bm_put(SCEN, "acquire_max_ms", "time-to-acquire max (longest wait)",
         bs_max(&c.acq) / 1e3, "ms");
  bm_put(SCEN, "acquisitions", "acquisitions in total", (double)c.total, "acq");
  bm_put(SCEN, "acquire_p50_ms", "time-to-acquire p50",
         bs_pct(&c.acq, 50) / 1e3, "ms");
  bm_put(SCEN, "acquire_p99_ms", "time-to-acquire p99",
         bs_pct(&c.acq, 99) / 1e3, "ms");
  bm_put(SCEN, "worker_min", "acquisitions of the least served worker",
         (double)c.min, "acq");
  bm_put(SCEN, "worker_max", "acquisitions of the best served worker",
         (double)c.max, "acq");
  bm_put(SCEN, "lost_updates", "lost updates (acquisitions - counter)",
         (double)clost, "updates");
  bm_put(SCEN, "cpu_us_per_acq", "client CPU per acquisition (all workers)",
         c.total ? c.cpu_us / (double)c.total : 0, "µs");
  bm_put(SCEN, "scripts_per_acq", "script calls per acquisition",
         c.total ? (double)(d.evalsha + d.eval) / (double)c.total : 0, "calls");
  bm_put(SCEN, "reps", "repetitions (serial and contended alternating)", reps,
         "");
  bs_free(&c.acq);
}

/* The pub/sub mutex and the spin lock, --workers processes on one lock
 * each, alternating (--reps blocks, 2 at most outside --quick) so both see
 * the same minutes of a noisy machine. Per kind: acquisitions/s (median of
 * the blocks), time-to-acquire p50/p99, lost updates, and the server's
 * commands per second and per acquisition over the contended phases (the
 * workload's GET + SET, 2 per acquisition, included; the lock's share is
 * given apart). commandstats counts a script call and every command the
 * script runs. */
void scen_contended_spin(const bench_opts *o) {
  if (o->workers > MAXW)
    bench_die("--workers: at most %d", MAXW);
  int reps = o->quick ? 1 : (o->reps < 2 ? o->reps : 2);
  if (reps < 1)
    reps = 1;
  static const char *const kname[2] = {"pubsub", "spin"};
  cont_result acc[2];
  double rate[2][8], secs[2] = {0, 0};
  long long lost[2] = {0, 0}, cmds[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    memset(&acc[k], 0, sizeof acc[k]);
    bs_init(&acc[k].acq);
  }
  redisContext *ctl = bench_connect(o);
  char tag[32];
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < 2; k++) {
      bench_log("contended-spin %d/%d: %d processes on one %s lock, %.1f s",
                r + 1, reps, o->workers, k ? "spin" : "pub/sub mutex",
                o->contended_secs / reps);
      bench_cmdstats a, b, d;
      cont_result one;
      bench_cmdstats_read(ctl, &a);
      snprintf(tag, sizeof tag, "%s%d", kname[k], r);
      run_kind(o, o->workers, o->contended_secs / reps, tag, k, &one);
      bench_cmdstats_read(ctl, &b);
      bench_cmdstats_delta(&a, &b, &d);
      cmds[k] += d.evalsha + d.eval + d.other;
      secs[k] += one.secs;
      rate[k][r] = one.rate;
      fold(&acc[k], &one, &lost[k]);
    }
  redisFree(ctl);
  for (int k = 0; k < 2; k++) {
    const char *what = k ? "spin lock" : "pub/sub mutex";
    char key[64], label[160];
    double n = (double)acc[k].total;
    snprintf(key, sizeof key, "%s_acq_per_s", kname[k]);
    snprintf(label, sizeof label,
             "%s: acquisitions/s, %d processes on one lock", what, o->workers);
    bm_put(SCEN "-spin", key, label, bench_median(rate[k], reps), "acq/s");
    snprintf(key, sizeof key, "%s_acquire_p50_ms", kname[k]);
    snprintf(label, sizeof label, "%s: time-to-acquire p50", what);
    bm_put(SCEN "-spin", key, label, bs_pct(&acc[k].acq, 50) / 1e3, "ms");
    snprintf(key, sizeof key, "%s_acquire_p99_ms", kname[k]);
    snprintf(label, sizeof label, "%s: time-to-acquire p99", what);
    bm_put(SCEN "-spin", key, label, bs_pct(&acc[k].acq, 99) / 1e3, "ms");
    snprintf(key, sizeof key, "%s_cmds_per_s", kname[k]);
    snprintf(label, sizeof label,
             "%s: Redis commands/s (commandstats: scripts and the "
             "commands they run; GET+SET included)",
             what);
    bm_put(SCEN "-spin", key, label,
           secs[k] > 0 ? (double)cmds[k] / secs[k] : 0, "cmd/s");
    snprintf(key, sizeof key, "%s_lock_cmds_per_acq", kname[k]);
    snprintf(label, sizeof label,
             "%s: lock commands per acquisition (all - GET - SET)", what);
    bm_put(SCEN "-spin", key, label, n > 0 ? ((double)cmds[k] - 2 * n) / n : 0,
           "cmd");
    snprintf(key, sizeof key, "%s_fairness", kname[k]);
    snprintf(label, sizeof label,
             "%s: fairness, least / best served worker (%ld / %ld)", what,
             acc[k].min, acc[k].max);
    bm_put(SCEN "-spin", key, label,
           acc[k].max ? (double)acc[k].min / (double)acc[k].max : 0, "");
    snprintf(key, sizeof key, "%s_lost_updates", kname[k]);
    snprintf(label, sizeof label, "%s: lost updates", what);
    bm_put(SCEN "-spin", key, label, (double)lost[k], "updates");
    bs_free(&acc[k].acq);
  }
}
