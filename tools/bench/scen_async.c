/*
 * scen_async.c -- the event-loop client (include/dlock/async.h) on a
 * libevent loop: one thread keeps 1,000 lock+unlock pairs in flight on
 * distinct names (each name: lock, on its callback unlock, on that one lock
 * again) for --secs. Reported: pairs/s, client CPU per pair (the whole
 * process: it has one thread), script calls per pair, and Redis's own CPU
 * (INFO cpu) as a percentage of one core over the run -- next to the same
 * figures of the 8-thread blocking "many" run (report.c's targets).
 */
#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "dlock.h"
#include "dlock/adapters/libevent.h"
#include "dlock/async.h"

enum { IN_FLIGHT = 1000 };

typedef struct slot {
  struct run *run;
  char name[96];
} slot;

typedef struct run {
  dlock_async *a;
  struct event_base *base;
  int64_t until_ns; /* stop starting new pairs */
  long pairs;
  int active; /* slots with a call in flight */
  slot slots[IN_FLIGHT];
} run;

static void on_locked(int rc, void *arg);

static void next_pair(slot *s) {
  run *r = s->run;
  if (dlc_now_ns() >= r->until_ns) {
    if (--r->active == 0)
      event_base_loopbreak(r->base);
    return;
  }
  int rc = dlock_async_lock(r->a, s->name, 1, -1, -1, on_locked, s);
  if (rc)
    bench_die("dlock_async_lock: %s: %s", dlock_err_name(rc),
              dlock_last_error());
}

static void on_unlocked(int rc, void *arg) {
  slot *s = arg;
  if (rc)
    bench_die("async unlock %s: %s: %s", s->name, dlock_err_name(rc),
              dlock_last_error());
  s->run->pairs++;
  next_pair(s);
}

static void on_locked(int rc, void *arg) {
  slot *s = arg;
  if (rc)
    bench_die("async lock %s: %s: %s", s->name, dlock_err_name(rc),
              dlock_last_error());
  rc = dlock_async_unlock(s->run->a, s->name, 1, on_unlocked, s);
  if (rc)
    bench_die("dlock_async_unlock: %s", dlock_err_name(rc));
}

/* Keeps IN_FLIGHT pairs going for secs; returns the pairs done. */
static long run_for(run *r, double secs) {
  r->pairs = 0;
  r->active = IN_FLIGHT;
  r->until_ns = dlc_now_ns() + (int64_t)(secs * 1e9);
  for (int i = 0; i < IN_FLIGHT; i++)
    next_pair(&r->slots[i]);
  event_base_dispatch(r->base);
  return r->pairs;
}

void scen_async(const bench_opts *o) {
  run *r = calloc(1, sizeof *r);
  if (!r)
    bench_die("out of memory");
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = o->url;
  int rc = dlock_async_new(&cfg, &r->a);
  r->base = event_base_new();
  if (rc || !r->base || dlock_libevent_attach(r->a, r->base) != 0)
    bench_die("dlock_async_new(%s): %s: %s", o->url, dlock_err_name(rc),
              dlock_last_error());
  for (int i = 0; i < IN_FLIGHT; i++) {
    r->slots[i].run = r;
    snprintf(r->slots[i].name, sizeof r->slots[i].name, "%s:async:%d",
             o->run_id, i);
  }
  bench_log("async: %d pairs in flight from one thread (libevent), %.1f s",
            IN_FLIGHT, o->many_secs);
  run_for(r, 0.2); /* connections, script cache */
  redisContext *ctl = bench_connect(o);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(ctl, &a);
  double rcpu0 = bench_redis_cpu_s(ctl);
  double cpu0 = bench_cpu_us();
  int64_t t0 = dlc_now_ns();
  long pairs = run_for(r, o->many_secs);
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  double cpu = bench_cpu_us() - cpu0;
  double rcpu = bench_redis_cpu_s(ctl) - rcpu0;
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  bm_put("async", "pairs_per_s", "pairs/s, 1 thread, 1000 in flight",
         (double)pairs / wall, "pairs/s");
  bm_put("async", "cpu_us", "client CPU per pair (async)",
         pairs ? cpu / (double)pairs : NAN, "µs");
  bm_put("async", "scripts", "script calls per pair (async)",
         pairs ? (double)(d.evalsha + d.eval) / (double)pairs : NAN, "calls");
  bm_put("async", "redis_cpu_pct", "Redis CPU (async run)", 100.0 * rcpu / wall,
         "% of a core");
  bm_put("async", "client_cpu_pct", "client CPU (async run)",
         100.0 * cpu / 1e6 / wall, "% of a core");
  redisFree(ctl);
  dlock_async_free(r->a);
  event_base_free(r->base);
  free(r);
}
