/*
 * scen_pairs.c -- lock+unlock pairs without contention.
 *
 * uncontended: one thread, --pairs pairs on fresh names (a new lock object
 *   per pair, as a program locking many resources does) and on one name:
 *   pairs/s, p50/p99 of one pair, client CPU per pair (getrusage of the
 *   whole process: the library's background threads included), Redis
 *   commands per pair (INFO commandstats delta over the timed run), then a
 *   short MONITOR run that separates top-level commands from calls made
 *   inside scripts.
 * many: --threads threads on one shared client, each on its own lock, then
 *   --procs processes with a client each: total pairs/s.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

static void pair(dlock_mutex *m) {
  int rc = dlock_mutex_lock(m);
  if (rc)
    bench_die("lock %s: %s: %s", dlock_mutex_name(m), dlock_err_name(rc),
              dlock_last_error());
  rc = dlock_mutex_unlock(m);
  if (rc)
    bench_die("unlock %s: %s: %s", dlock_mutex_name(m), dlock_err_name(rc),
              dlock_last_error());
}

static dlock_mutex *new_mutex(dlock_client *c, const char *name) {
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(c, name, &m);
  if (rc)
    bench_die("dlock_mutex_new: %s", dlock_err_name(rc));
  return m;
}

/* n pairs; fresh: a new name and lock object for each. */
static void run_pairs(dlock_client *c, const char *prefix, long n, int fresh,
                      bench_samples *s, int64_t limit_ns, long *done) {
  char name[128];
  dlock_mutex *same = NULL;
  if (!fresh) {
    snprintf(name, sizeof name, "%s:same", prefix);
    same = new_mutex(c, name);
  }
  long i = 0;
  for (; i < n; i++) {
    dlock_mutex *m = same;
    if (fresh) {
      snprintf(name, sizeof name, "%s:%ld", prefix, i);
      m = new_mutex(c, name);
    }
    int64_t t0 = bench_now_ns();
    pair(m);
    int64_t t1 = bench_now_ns();
    if (s)
      bs_add(s, (double)(t1 - t0) / 1e3);
    if (fresh)
      dlock_mutex_free(m);
    if (t1 > limit_ns) {
      i++;
      break;
    }
  }
  dlock_mutex_free(same);
  if (done)
    *done = i;
}

static void uncontended_phase(const bench_opts *o, dlock_client *c,
                              redisContext *ctl, int fresh) {
  const char *ph = fresh ? "fresh" : "same";
  const char *phl = fresh ? "fresh names" : "same name";
  char prefix[96], key[64], label[128];
  snprintf(prefix, sizeof prefix, "%s:u:%s:warm", o->run_id, ph);
  run_pairs(c, prefix, 300, fresh, NULL, INT64_MAX, NULL);

  snprintf(prefix, sizeof prefix, "%s:u:%s", o->run_id, ph);
  bench_samples s;
  bs_init(&s);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(ctl, &a);
  double cpu0 = bench_cpu_us();
  int64_t t0 = bench_now_ns();
  long done = 0;
  run_pairs(c, prefix, o->pairs, fresh, &s,
            t0 + (int64_t)(o->quick ? 6e9 : 60e9), &done);
  double wall = (double)(bench_now_ns() - t0) / 1e9;
  double cpu = bench_cpu_us() - cpu0;
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  if (done < o->pairs)
    bm_note("uncontended %s: stopped after %ld of %ld pairs (time bound)", ph,
            done, o->pairs);
  double nd = (double)done;

  snprintf(key, sizeof key, "%s_pairs_per_s", ph);
  snprintf(label, sizeof label, "pairs/s (%s, 1 thread)", phl);
  bm_put("uncontended", key, label, nd / wall, "pairs/s");
  snprintf(key, sizeof key, "%s_p50_us", ph);
  snprintf(label, sizeof label, "pair p50 (%s)", phl);
  bm_put("uncontended", key, label, bs_pct(&s, 50), "µs");
  snprintf(key, sizeof key, "%s_p99_us", ph);
  snprintf(label, sizeof label, "pair p99 (%s)", phl);
  bm_put("uncontended", key, label, bs_pct(&s, 99), "µs");
  snprintf(key, sizeof key, "%s_cpu_us", ph);
  snprintf(label, sizeof label, "client CPU per pair (%s)", phl);
  bm_put("uncontended", key, label, cpu / nd, "µs");
  snprintf(key, sizeof key, "%s_evalsha", ph);
  snprintf(label, sizeof label, "EVALSHA per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)d.evalsha / nd, "calls");
  snprintf(key, sizeof key, "%s_eval", ph);
  snprintf(label, sizeof label, "EVAL per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)d.eval / nd, "calls");
  snprintf(key, sizeof key, "%s_scripts", ph);
  snprintf(label, sizeof label, "script calls per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)(d.evalsha + d.eval) / nd, "calls");
  snprintf(key, sizeof key, "%s_server_us", ph);
  snprintf(label, sizeof label, "server time of the scripts per pair (%s)",
           phl);
  bm_put("uncontended", key, label, (double)d.script_usec / nd, "µs");
  bs_free(&s);

  /* Which commands, at top level and inside the scripts? */
  long mn = o->quick ? 100 : 500;
  bench_monitor mon;
  bench_monitor_start(o, &mon);
  snprintf(prefix, sizeof prefix, "%s:u:%s:mon", o->run_id, ph);
  run_pairs(c, prefix, mn, fresh, NULL, INT64_MAX, NULL);
  bench_monitor_stop(&mon, ctl);
  snprintf(key, sizeof key, "%s_other_top", ph);
  snprintf(label, sizeof label,
           "other top-level commands per pair (%s, MONITOR)", phl);
  bm_put("uncontended", key, label, (double)mon.other / (double)mn, "cmds");
  snprintf(key, sizeof key, "%s_in_script", ph);
  snprintf(label, sizeof label, "redis.call inside scripts per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)mon.in_script / (double)mn,
         "calls");
}

void scen_uncontended(const bench_opts *o) {
  bench_log("uncontended: %ld lock+unlock pairs on fresh names, then on one "
            "name",
            o->pairs);
  dlock_client *c = bench_client(o, 1, 0);
  redisContext *ctl = bench_connect(o);
  uncontended_phase(o, c, ctl, 1);
  uncontended_phase(o, c, ctl, 0);
  dlock_client_free(c);
  redisFree(ctl);
}

/* ---- many --------------------------------------------------------------- */

typedef struct many_thread {
  const bench_opts *o;
  dlock_client *c;
  int idx;
  atomic_int *ready, *go;
  _Atomic int64_t *until;
  long count;
} many_thread;

static long loop_until(dlock_mutex *m, int64_t until) {
  long n = 0;
  while (n < 100000000L) {
    pair(m);
    n++;
    if ((n & 7) == 0 && bench_now_ns() >= until)
      break;
  }
  return n;
}

static void *many_main(void *p) {
  many_thread *t = p;
  char name[96];
  snprintf(name, sizeof name, "%s:many:t:%d", t->o->run_id, t->idx);
  dlock_mutex *m = new_mutex(t->c, name);
  for (int i = 0; i < 50; i++)
    pair(m);
  atomic_fetch_add(t->ready, 1);
  while (!atomic_load(t->go))
    bench_sleep_ns(100000);
  t->count = loop_until(m, atomic_load(t->until));
  dlock_mutex_free(m);
  return NULL;
}

typedef struct many_shared {
  atomic_int ready, go;
  _Atomic int64_t until;
  struct {
    long count;
    double cpu_us;
    int64_t end_ns;
    int ok;
  } w[];
} many_shared;

typedef struct many_proc_arg {
  const bench_opts *o;
  many_shared *sh;
} many_proc_arg;

static void many_proc(int i, void *arg) {
  many_proc_arg *a = arg;
  dlock_client *c = bench_client(a->o, 1, 0);
  char name[96];
  snprintf(name, sizeof name, "%s:many:p:%d", a->o->run_id, i);
  dlock_mutex *m = new_mutex(c, name);
  for (int k = 0; k < 50; k++)
    pair(m);
  atomic_fetch_add(&a->sh->ready, 1);
  int64_t give_up = bench_now_ns() + (int64_t)60e9;
  while (!atomic_load(&a->sh->go)) {
    if (bench_now_ns() > give_up)
      _exit(1);
    bench_sleep_ns(100000);
  }
  double cpu0 = bench_cpu_us();
  a->sh->w[i].count = loop_until(m, atomic_load(&a->sh->until));
  a->sh->w[i].cpu_us = bench_cpu_us() - cpu0;
  a->sh->w[i].end_ns = bench_now_ns();
  a->sh->w[i].ok = 1;
  dlock_mutex_free(m);
  dlock_client_free(c);
}

void scen_many(const bench_opts *o) {
  redisContext *ctl = bench_connect(o);
  char label[128];
  /* Threads sharing one client. */
  bench_log("many: %d threads, one client, own lock each, %.1f s", o->threads,
            o->many_secs);
  dlock_client *c = bench_client(o, o->threads, 0);
  many_thread *t = calloc((size_t)o->threads, sizeof *t);
  pthread_t *th = calloc((size_t)o->threads, sizeof *th);
  atomic_int ready = 0, go = 0;
  _Atomic int64_t until = INT64_MAX;
  if (!t || !th)
    bench_die("out of memory");
  for (int i = 0; i < o->threads; i++) {
    t[i] = (many_thread){o, c, i, &ready, &go, &until, 0};
    if (pthread_create(&th[i], NULL, many_main, &t[i]) != 0)
      bench_die("pthread_create failed");
  }
  while (atomic_load(&ready) < o->threads)
    bench_sleep_ns(1000000);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(ctl, &a);
  double cpu0 = bench_cpu_us();
  int64_t t0 = bench_now_ns();
  atomic_store(&until, t0 + (int64_t)(o->many_secs * 1e9));
  atomic_store(&go, 1);
  long total = 0;
  for (int i = 0; i < o->threads; i++) {
    pthread_join(th[i], NULL);
    total += t[i].count;
  }
  double wall = (double)(bench_now_ns() - t0) / 1e9;
  double cpu = bench_cpu_us() - cpu0;
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  free(t);
  free(th);
  dlock_client_free(c);
  snprintf(label, sizeof label, "pairs/s, %d threads (one client)", o->threads);
  bm_put("many", "threads_pairs_per_s", label, (double)total / wall, "pairs/s");
  bm_put("many", "threads_cpu_us", "client CPU per pair (threads)",
         cpu / (double)total, "µs");
  bm_put("many", "threads_scripts", "script calls per pair (threads)",
         (double)(d.evalsha + d.eval) / (double)total, "calls");

  /* Processes, one client each. */
  bench_log("many: %d processes, own client and lock each, %.1f s", o->procs,
            o->many_secs);
  size_t shsz =
      sizeof(many_shared) + (size_t)o->procs * sizeof(((many_shared *)0)->w[0]);
  many_shared *sh = bench_shm(shsz);
  atomic_store(&sh->until, INT64_MAX);
  many_proc_arg pa = {o, sh};
  int *pids = bench_fork(o->procs, many_proc, &pa);
  int64_t wait_end = bench_now_ns() + (int64_t)60e9;
  while (atomic_load(&sh->ready) < o->procs && bench_now_ns() < wait_end)
    bench_sleep_ns(1000000);
  bench_cmdstats_read(ctl, &a);
  t0 = bench_now_ns();
  atomic_store(&sh->until, t0 + (int64_t)(o->many_secs * 1e9));
  atomic_store(&sh->go, 1);
  int bad = bench_reap(pids, o->procs,
                       bench_now_ns() + (int64_t)((o->many_secs + 30) * 1e9));
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  total = 0;
  cpu = 0;
  int64_t last = t0 + 1;
  for (int i = 0; i < o->procs; i++) {
    total += sh->w[i].count;
    cpu += sh->w[i].cpu_us;
    if (sh->w[i].end_ns > last)
      last = sh->w[i].end_ns;
  }
  wall = (double)(last - t0) / 1e9;
  if (bad)
    bm_note("many: %d of %d processes failed", bad, o->procs);
  snprintf(label, sizeof label, "pairs/s, %d processes", o->procs);
  bm_put("many", "procs_pairs_per_s", label, (double)total / wall, "pairs/s");
  bm_put("many", "procs_cpu_us", "client CPU per pair (processes)",
         total ? cpu / (double)total : 0, "µs");
  bm_put("many", "procs_scripts", "script calls per pair (processes)",
         total ? (double)(d.evalsha + d.eval) / (double)total : 0, "calls");
  bench_shm_free(sh, shsz);
  redisFree(ctl);
}
