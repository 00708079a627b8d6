/*
 * scen_cluster.c -- the "many" scenario on a Redis Cluster (issue 13):
 * --procs processes, a client and a lock each, lock+unlock pairs for
 * --secs, twice in the same run: every lock in ONE slot (a hash tag: one
 * master does all the work -- the single-master reference) and the locks
 * spread evenly over the masters. Reported per master: pairs/s and Redis
 * CPU per pair (INFO cpu of that master over the phase, divided by the
 * pairs it served: EVALSHA calls / 2); in total: pairs/s, the ratio to the
 * one-slot figure, and the balance (min/max pairs over the masters).
 *
 * The other scenarios measure raw hiredis round trips to one server and
 * do not run against a cluster (main.c says so).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"
#include "url.h"

#define MAX_MASTERS 16

typedef struct master {
  char host[64];
  int port;
  redisContext *ctl;
  double cpu0, evals0;
} master;

typedef struct cl_shared {
  atomic_int ready, go;
  _Atomic int64_t until;
  char names[64][64];
  struct {
    long count;
    int ok;
  } w[64];
} cl_shared;

typedef struct cl_arg {
  const bench_opts *o;
  cl_shared *sh;
} cl_arg;

/* A redis:// URL for host:port with the credentials of the cluster URL. */
static redisContext *connect_node(const bench_opts *o, const char *host,
                                  int port) {
  dlc_url u;
  char err[256], url[1024];
  if (dlc_url_parse(o->url, &u, err, sizeof err) != 0)
    bench_die("%s", err);
  snprintf(url, sizeof url, "redis://%.200s%s%.400s%s%.63s:%d",
           u.user ? u.user : "", u.password ? ":" : "",
           u.password ? u.password : "", u.password ? "@" : "", host, port);
  dlc_url_free(&u);
  redisContext *c = dlc_redis_connect(url, 10, 30, err, sizeof err);
  if (!c)
    bench_die("cannot connect to %s:%d: %s", host, port, err);
  return c;
}

/* The masters, from CLUSTER SLOTS asked of the first seed. */
static int find_masters(const bench_opts *o, master *m) {
  char err[512];
  redisContext *seed = dlc_redis_connect(o->url, 10, 30, err, sizeof err);
  if (!seed)
    bench_die("cannot connect to %s: %s", o->url, err);
  redisReply *r = bench_cmdf(seed, "CLUSTER SLOTS");
  int n = 0;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (e->elements < 3 || e->element[2]->elements < 2)
      continue;
    const char *h = e->element[2]->element[0]->str;
    int p = (int)e->element[2]->element[1]->integer;
    int seen = 0;
    for (int k = 0; k < n; k++)
      seen |= m[k].port == p && strcmp(m[k].host, h) == 0;
    if (!seen && n < MAX_MASTERS) {
      snprintf(m[n].host, sizeof m[n].host, "%s", h);
      m[n++].port = p;
    }
  }
  freeReplyObject(r);
  for (int k = 0; k < n; k++)
    m[k].ctl = connect_node(o, m[k].host, m[k].port);
  /* Which master serves a name: CLUSTER KEYSLOT, then the slot ranges. */
  redisFree(seed);
  return n;
}

/* The index of the master serving key. */
static int master_of(master *m, int n, const char *key) {
  redisReply *s = bench_cmdf(m[0].ctl, "CLUSTER KEYSLOT %s", key);
  long long slot = s->integer;
  freeReplyObject(s);
  redisReply *r = bench_cmdf(m[0].ctl, "CLUSTER SLOTS");
  int who = -1;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    redisReply *e = r->element[i];
    if (e->element[0]->integer <= slot && slot <= e->element[1]->integer)
      for (int k = 0; k < n; k++)
        if (m[k].port == e->element[2]->element[1]->integer &&
            strcmp(m[k].host, e->element[2]->element[0]->str) == 0)
          who = k;
  }
  freeReplyObject(r);
  return who;
}

/* used_cpu_user + used_cpu_sys of a master (seconds) and its EVALSHA
 * calls so far. */
static void sample(master *mm, double *cpu, double *evals) {
  redisReply *r = bench_cmdf(mm->ctl, "INFO cpu");
  const char *u = strstr(r->str, "used_cpu_user:");
  const char *s = strstr(r->str, "used_cpu_sys:");
  *cpu = (u ? atof(u + 14) : NAN) + (s ? atof(s + 13) : NAN);
  freeReplyObject(r);
  bench_cmdstats st;
  bench_cmdstats_read(mm->ctl, &st);
  *evals = (double)(st.evalsha + st.eval);
}

static void worker(int i, void *arg) {
  cl_arg *a = arg;
  dlock_client *c = bench_client(a->o, 1, 0);
  dlock_mutex *m;
  if (dlock_mutex_new(c, a->sh->names[i], &m) != 0)
    _exit(1);
  for (int k = 0; k < 50; k++)
    if (dlock_mutex_lock(m) != 0 || dlock_mutex_unlock(m) != 0)
      _exit(1);
  bench_worker_ready(&a->sh->ready, &a->sh->go);
  long n = 0;
  int64_t until = atomic_load(&a->sh->until);
  while (n < 100000000L && ((n & 7) || dlc_now_ns() < until)) {
    if (dlock_mutex_lock(m) != 0 || dlock_mutex_unlock(m) != 0)
      _exit(1);
    n++;
  }
  a->sh->w[i].count = n;
  a->sh->w[i].ok = 1;
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* One phase over the names in sh; fills pairs[k] (per master) and returns
 * the total pairs/s. */
static double phase(const bench_opts *o, cl_shared *sh, master *m, int n,
                    int procs, double *pairs, double *cpu) {
  atomic_store(&sh->ready, 0);
  atomic_store(&sh->go, 0);
  atomic_store(&sh->until, INT64_MAX);
  cl_arg a = {o, sh};
  int *pids = bench_fork(procs, worker, &a);
  int64_t wait_end = dlc_now_ns() + (int64_t)60e9;
  while (atomic_load(&sh->ready) < procs && dlc_now_ns() < wait_end)
    dlc_sleep_ns(1000000);
  for (int k = 0; k < n; k++)
    sample(&m[k], &m[k].cpu0, &m[k].evals0);
  int64_t t0 = dlc_now_ns();
  atomic_store(&sh->until, t0 + (int64_t)(o->many_secs * 1e9));
  atomic_store(&sh->go, 1);
  int bad = bench_reap(pids, procs,
                       dlc_now_ns() + (int64_t)((o->many_secs + 30) * 1e9));
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  if (bad)
    bm_note("many (cluster): %d of %d processes failed", bad, procs);
  long total = 0;
  for (int i = 0; i < procs; i++)
    total += sh->w[i].count;
  for (int k = 0; k < n; k++) {
    double c1, e1;
    sample(&m[k], &c1, &e1);
    /* One pair is two scripts; the samples' own INFO calls are not
     * EVALSHA. */
    pairs[k] = (e1 - m[k].evals0) / 2;
    cpu[k] = (c1 - m[k].cpu0) * 1e6;
  }
  return (double)total / wall;
}

void scen_cluster_many(const bench_opts *o) {
  master m[MAX_MASTERS];
  memset(m, 0, sizeof m);
  int n = find_masters(o, m);
  if (n < 1)
    bench_die("CLUSTER SLOTS named no master");
  int procs = o->procs > 64 ? 64 : o->procs;
  cl_shared *sh = bench_shm(sizeof *sh);
  /* One slot: every name carries the same hash tag. */
  for (int i = 0; i < procs; i++)
    snprintf(sh->names[i], sizeof sh->names[i], "{%s:one}:%d", o->run_id, i);
  double pairs[MAX_MASTERS], cpu[MAX_MASTERS];
  bench_log("many (cluster): %d processes, every lock on one master, %.1f s",
            procs, o->many_secs);
  double one = phase(o, sh, m, n, procs, pairs, cpu);
  int busiest = 0;
  for (int k = 1; k < n; k++)
    if (pairs[k] > pairs[busiest])
      busiest = k;
  double one_cpu = pairs[busiest] > 0 ? cpu[busiest] / pairs[busiest] : NAN;
  /* Spread: names chosen so that each master gets its share. */
  int want = (procs + n - 1) / n, got[MAX_MASTERS] = {0};
  for (int i = 0, cand = 0; i < procs && cand < 100000; cand++) {
    char name[64];
    snprintf(name, sizeof name, "%s:spread:%d", o->run_id, cand);
    int k = master_of(m, n, name);
    if (k >= 0 && got[k] < want) {
      got[k]++;
      snprintf(sh->names[i++], sizeof sh->names[0], "%s", name);
    }
  }
  bench_log("many (cluster): %d processes, locks spread over %d masters, "
            "%.1f s",
            procs, n, o->many_secs);
  double all = phase(o, sh, m, n, procs, pairs, cpu);
  double lo = INFINITY, hi = 0;
  char key[64], label[200];
  for (int k = 0; k < n; k++) {
    double wall = o->many_secs;
    snprintf(key, sizeof key, "cluster_m%d_pairs_per_s", k);
    snprintf(label, sizeof label, "pairs/s on master %d (%.60s:%d)", k,
             m[k].host, m[k].port);
    bm_put("many", key, label, pairs[k] / wall, "pairs/s");
    snprintf(key, sizeof key, "cluster_m%d_redis_cpu_us", k);
    snprintf(label, sizeof label, "Redis CPU per pair, master %d", k);
    bm_put("many", key, label, pairs[k] > 0 ? cpu[k] / pairs[k] : NAN, "µs");
    if (pairs[k] < lo)
      lo = pairs[k];
    if (pairs[k] > hi)
      hi = pairs[k];
  }
  bm_put("many", "cluster_masters", "masters", n, "");
  bm_put("many", "cluster_one_slot_pairs_per_s",
         "pairs/s, every lock on one master (reference)", one, "pairs/s");
  bm_put("many", "cluster_one_slot_redis_cpu_us",
         "Redis CPU per pair, one master", one_cpu, "µs");
  snprintf(label, sizeof label, "pairs/s, locks spread over %d masters", n);
  bm_put("many", "cluster_pairs_per_s", label, all, "pairs/s");
  bm_put("many", "cluster_scaling", "spread / (masters x one master)",
         one > 0 ? all / (n * one) : NAN, "x");
  bm_put("many", "cluster_balance", "balance: min/max pairs per master",
         hi > 0 ? lo / hi : NAN, "");
  bench_shm_free(sh, sizeof *sh);
  for (int k = 0; k < n; k++)
    redisFree(m[k].ctl);
}
