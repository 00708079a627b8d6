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
#include <math.h>
#include <pthread.h>
#include <stddef.h>
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
    int64_t t0 = dlc_now_ns();
    pair(m);
    int64_t t1 = dlc_now_ns();
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

/* ---- uncontended ---------------------------------------------------------
 * The floor is measured interleaved with the library: each repetition runs
 * a block of raw hiredis pairs (EVALSHA of a small HSET+PEXPIRE script,
 * then EVALSHA of a DEL script, on a fresh key: two round trips on the
 * connection type the library uses), then a block of library pairs on
 * fresh names, then on one name. The machine's noise moves all three
 * together; the medians over the repetitions are reported. */

static const char RAW_LOCK[] = "redis.call('hset', KEYS[1], ARGV[2], 1)\n"
                               "redis.call('pexpire', KEYS[1], ARGV[1])\n"
                               "return nil\n";
static const char RAW_UNLOCK[] = "redis.call('del', KEYS[1])\nreturn 1\n";

typedef struct raw_pair {
  redisContext *c;
  char lock_sha[41], unlock_sha[41];
} raw_pair;

/* Connects rp and loads its two scripts. */
static void pair_load(const bench_opts *o, raw_pair *rp, const char *lock_src,
                      const char *unlock_src) {
  rp->c = bench_connect(o);
  const char *src[2] = {lock_src, unlock_src};
  char *dst[2] = {rp->lock_sha, rp->unlock_sha};
  for (int i = 0; i < 2; i++) {
    const char *argv[3] = {"SCRIPT", "LOAD", src[i]};
    redisReply *r = bench_cmd(rp->c, 3, argv);
    if (r->type != REDIS_REPLY_STRING)
      bench_die("SCRIPT LOAD: %s",
                r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    snprintf(dst[i], 41, "%s", r->str);
    freeReplyObject(r);
  }
}

static void raw_load(const bench_opts *o, raw_pair *rp) {
  pair_load(o, rp, RAW_LOCK, RAW_UNLOCK);
}

/* One raw pair: two blocking EVALSHA round trips, formatted per call like
 * the library formats its own. */
static void raw_one(raw_pair *rp, const char *key) {
  const char *field = "00000000-0000-4000-8000-000000000000:1";
  const char *la[6] = {"EVALSHA", rp->lock_sha, "1", key, "30000", field};
  const char *ua[4] = {"EVALSHA", rp->unlock_sha, "1", key};
  redisReply *r = bench_cmd(rp->c, 6, la);
  if (r->type == REDIS_REPLY_ERROR)
    bench_die("raw lock: %s", r->str);
  freeReplyObject(r);
  r = bench_cmd(rp->c, 4, ua);
  if (r->type == REDIS_REPLY_ERROR)
    bench_die("raw unlock: %s", r->str);
  freeReplyObject(r);
}

/* The least a lock in this layout makes Redis do (many's "layout floor"
 * reference row): the commands every Redisson-compatible, idempotent,
 * hand-over-capable uncontended pair runs, without anything of this
 * library's -- EXISTS, HSET, PEXPIRE (Redisson's hash, never written into
 * another holder's); EXISTS of the unlock's tombstone and the wait queue,
 * HDEL of the holder's field, PUBLISH on Redisson's channel. Keys as the
 * library names them; formatted per call, like raw_one. */
static const char LAYOUT_LOCK[] =
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('hset', KEYS[1], ARGV[2], '1')\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "return redis.call('pttl', KEYS[1])\n";
static const char LAYOUT_UNLOCK[] =
    "if redis.call('exists', KEYS[2], KEYS[3]) == 0 then\n"
    "  if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then return nil end\n"
    "  redis.call('publish', ARGV[2], '0')\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

typedef struct layout_pair {
  raw_pair rp;
  char lock[128], queue[160], tomb[200], channel[160];
} layout_pair;

static void layout_load(const bench_opts *o, layout_pair *lp, const char *key) {
  pair_load(o, &lp->rp, LAYOUT_LOCK, LAYOUT_UNLOCK);
  snprintf(lp->lock, sizeof lp->lock, "%s", key);
  snprintf(lp->queue, sizeof lp->queue, "dlock_lock_queue:{%s}", key);
  snprintf(lp->tomb, sizeof lp->tomb,
           "redisson_unlock_latch:{%s}:0123456789abcdef0123456789abcdef", key);
  snprintf(lp->channel, sizeof lp->channel, "redisson_lock__channel:{%s}", key);
}

static void layout_one(layout_pair *lp) {
  const char *field = "00000000-0000-4000-8000-000000000000:1";
  const char *la[6] = {"EVALSHA", lp->rp.lock_sha, "1",
                       lp->lock,  "30000",         field};
  const char *ua[8] = {"EVALSHA", lp->rp.unlock_sha, "3",   lp->lock,
                       lp->queue, lp->tomb,          field, lp->channel};
  redisReply *r = bench_cmd(lp->rp.c, 6, la);
  if (r->type != REDIS_REPLY_NIL)
    bench_die("layout lock: %s",
              r->type == REDIS_REPLY_ERROR ? r->str : "not acquired");
  freeReplyObject(r);
  r = bench_cmd(lp->rp.c, 8, ua);
  if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
    bench_die("layout unlock: %s",
              r->type == REDIS_REPLY_ERROR ? r->str : "not released");
  freeReplyObject(r);
}

/* Per-repetition figures of one block. */
typedef struct block {
  double p50, p99, cpu, rate, csw;
  long done;
  bench_cmdstats d;
} block;

static void raw_block(raw_pair *rp, const char *prefix, long n,
                      int64_t limit_ns, block *b) {
  bench_samples s;
  bs_init(&s);
  char key[128];
  double cpu0 = bench_cpu_us(), csw0 = bench_ctxsw();
  int64_t t0 = dlc_now_ns();
  long i = 0;
  for (; i < n; i++) {
    snprintf(key, sizeof key, "%s:%ld", prefix, i);
    int64_t s0 = dlc_now_ns();
    raw_one(rp, key);
    int64_t s1 = dlc_now_ns();
    bs_add(&s, (double)(s1 - s0) / 1e3);
    if (s1 > limit_ns) {
      i++;
      break;
    }
  }
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  b->cpu = (bench_cpu_us() - cpu0) / (double)i;
  b->csw = (bench_ctxsw() - csw0) / (double)i;
  b->p50 = bs_pct(&s, 50);
  b->p99 = bs_pct(&s, 99);
  b->rate = (double)i / wall;
  b->done = i;
  bs_free(&s);
}

static void lib_block(dlock_client *c, redisContext *ctl, const char *prefix,
                      long n, int fresh, int64_t limit_ns, block *b) {
  bench_samples s;
  bs_init(&s);
  bench_cmdstats a, z;
  bench_cmdstats_read(ctl, &a);
  double cpu0 = bench_cpu_us(), csw0 = bench_ctxsw();
  int64_t t0 = dlc_now_ns();
  run_pairs(c, prefix, n, fresh, &s, limit_ns, &b->done);
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  b->cpu = (bench_cpu_us() - cpu0) / (double)b->done;
  b->csw = (bench_ctxsw() - csw0) / (double)b->done;
  bench_cmdstats_read(ctl, &z);
  bench_cmdstats_delta(&a, &z, &b->d);
  b->p50 = bs_pct(&s, 50);
  b->p99 = bs_pct(&s, 99);
  b->rate = (double)b->done / wall;
  bs_free(&s);
}

#define MAX_REPS 99

/* Median over reps blocks of the double at byte offset off. */
static double med_of(const block *b, int reps, size_t off) {
  double v[MAX_REPS];
  for (int r = 0; r < reps; r++)
    memcpy(&v[r], (const char *)&b[r] + off, sizeof v[r]);
  return bench_median(v, reps);
}

/* Medians over the repetitions of one kind of block, as metrics. */
static void put_blocks(const char *ph, const char *phl, block *b, int reps,
                       long *total_done) {
  char key[64], label[160];
  long done = 0;
  bench_cmdstats sum = {0, 0, 0, 0, 0};
  for (int r = 0; r < reps; r++) {
    done += b[r].done;
    sum.evalsha += b[r].d.evalsha;
    sum.eval += b[r].d.eval;
    sum.other += b[r].d.other;
    sum.script_usec += b[r].d.script_usec;
  }
  *total_done = done;
#define MED(field) med_of(b, reps, offsetof(block, field))
  snprintf(key, sizeof key, "%s_pairs_per_s", ph);
  snprintf(label, sizeof label, "pairs/s (%s, 1 thread)", phl);
  bm_put("uncontended", key, label, MED(rate), "pairs/s");
  snprintf(key, sizeof key, "%s_p50_us", ph);
  snprintf(label, sizeof label, "pair p50 (%s)", phl);
  bm_put("uncontended", key, label, MED(p50), "µs");
  snprintf(key, sizeof key, "%s_p99_us", ph);
  snprintf(label, sizeof label, "pair p99 (%s)", phl);
  bm_put("uncontended", key, label, MED(p99), "µs");
  snprintf(key, sizeof key, "%s_cpu_us", ph);
  snprintf(label, sizeof label, "client CPU per pair (%s)", phl);
  bm_put("uncontended", key, label, MED(cpu), "µs");
  snprintf(key, sizeof key, "%s_ctxsw", ph);
  snprintf(label, sizeof label, "context switches per pair (%s)", phl);
  bm_put("uncontended", key, label, MED(csw), "");
#undef MED
  if (!strcmp(ph, "raw"))
    return;
  double nd = (double)done;
  snprintf(key, sizeof key, "%s_evalsha", ph);
  snprintf(label, sizeof label, "EVALSHA per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)sum.evalsha / nd, "calls");
  snprintf(key, sizeof key, "%s_eval", ph);
  snprintf(label, sizeof label, "EVAL per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)sum.eval / nd, "calls");
  snprintf(key, sizeof key, "%s_scripts", ph);
  snprintf(label, sizeof label, "script calls per pair (%s, INFO commandstats)",
           phl);
  bm_put("uncontended", key, label, (double)(sum.evalsha + sum.eval) / nd,
         "calls");
  snprintf(key, sizeof key, "%s_server_us", ph);
  snprintf(label, sizeof label, "server time of the scripts per pair (%s)",
           phl);
  bm_put("uncontended", key, label, (double)sum.script_usec / nd, "µs");
}

/* Which commands, at top level and inside the scripts? (MONITOR) */
static void monitor_phase(const bench_opts *o, dlock_client *c,
                          redisContext *ctl, int fresh) {
  const char *ph = fresh ? "fresh" : "same";
  const char *phl = fresh ? "fresh names" : "same name";
  char prefix[96], key[64], label[128];
  long mn = o->quick ? 100 : 500;
  bench_monitor mon;
  bench_monitor_start(o, &mon);
  snprintf(prefix, sizeof prefix, "%s:u:%s:mon", o->run_id, ph);
  run_pairs(c, prefix, mn, fresh, NULL, INT64_MAX, NULL);
  bench_monitor_stop(&mon, ctl);
  snprintf(key, sizeof key, "%s_top_level", ph);
  snprintf(label, sizeof label,
           "Redis commands per pair at top level (%s, MONITOR)", phl);
  bm_put("uncontended", key, label,
         (double)(mon.evalsha + mon.eval + mon.other) / (double)mn, "cmds");
  snprintf(key, sizeof key, "%s_other_top", ph);
  snprintf(label, sizeof label,
           "non-script top-level commands per pair (%s, MONITOR)", phl);
  bm_put("uncontended", key, label, (double)mon.other / (double)mn, "cmds");
  snprintf(key, sizeof key, "%s_in_script", ph);
  snprintf(label, sizeof label, "redis.call inside scripts per pair (%s)", phl);
  bm_put("uncontended", key, label, (double)mon.in_script / (double)mn,
         "calls");
}

void scen_uncontended(const bench_opts *o) {
  int reps = o->reps < 1 ? 1 : (o->reps > MAX_REPS ? MAX_REPS : o->reps);
  long per = o->pairs / reps > 10 ? o->pairs / reps : 10;
  bench_log("uncontended: %d x (%ld raw hiredis pairs, %ld pairs on fresh "
            "names, %ld on one name), interleaved",
            reps, per, per, per);
  dlock_client *c = bench_client(o, 1, 0);
  redisContext *ctl = bench_connect(o);
  raw_pair rp;
  raw_load(o, &rp);
  char prefix[96];
  /* Warm-up: connections, scripts loaded, caches. */
  snprintf(prefix, sizeof prefix, "%s:u:warm", o->run_id);
  run_pairs(c, prefix, 300, 1, NULL, INT64_MAX, NULL);
  run_pairs(c, prefix, 300, 0, NULL, INT64_MAX, NULL);
  snprintf(prefix, sizeof prefix, "%s:u:rawwarm", o->run_id);
  for (int i = 0; i < 300; i++)
    raw_one(&rp, prefix);

  block raw[MAX_REPS], fr[MAX_REPS], sm[MAX_REPS];
  int64_t limit = dlc_now_ns() + (int64_t)(o->quick ? 8e9 : 90e9);
  int ran = 0;
  for (int r = 0; r < reps; r++) {
    snprintf(prefix, sizeof prefix, "%s:u:raw:%d", o->run_id, r);
    raw_block(&rp, prefix, per, limit, &raw[r]);
    snprintf(prefix, sizeof prefix, "%s:u:fresh:%d", o->run_id, r);
    lib_block(c, ctl, prefix, per, 1, limit, &fr[r]);
    snprintf(prefix, sizeof prefix, "%s:u:same:%d", o->run_id, r);
    lib_block(c, ctl, prefix, per, 0, limit, &sm[r]);
    ran++;
    if (dlc_now_ns() > limit)
      break;
  }
  if (ran < reps || fr[ran - 1].done < per || sm[ran - 1].done < per)
    bm_note("uncontended: time bound reached after %d of %d repetitions", ran,
            reps);
  long nraw, nfr, nsm;
  put_blocks("raw", "raw hiredis 2 x EVALSHA, interleaved", raw, ran, &nraw);
  put_blocks("fresh", "fresh names", fr, ran, &nfr);
  put_blocks("same", "same name", sm, ran, &nsm);
  double raw_cpu = bm_get("uncontended", "raw_cpu_us");
  bm_put("uncontended", "fresh_cpu_over_raw_us",
         "library CPU per pair above raw hiredis (fresh names)",
         bm_get("uncontended", "fresh_cpu_us") - raw_cpu, "µs");
  bm_put("uncontended", "same_cpu_over_raw_us",
         "library CPU per pair above raw hiredis (same name)",
         bm_get("uncontended", "same_cpu_us") - raw_cpu, "µs");
  bm_put("uncontended", "reps", "repetitions (medians reported)", ran, "");
  bm_put("uncontended", "pairs", "pairs per kind in total", (double)nfr,
         "pairs");
  monitor_phase(o, c, ctl, 1);
  monitor_phase(o, c, ctl, 0);
  redisFree(rp.c);
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

/* Runs one(st) until `until` (checked every 8 calls); how many ran. */
static long loop_until(void (*one)(void *), void *st, int64_t until) {
  long n = 0;
  while (n < 100000000L) {
    one(st);
    n++;
    if ((n & 7) == 0 && dlc_now_ns() >= until)
      break;
  }
  return n;
}

static void pair_of(void *m) { pair(m); }

static void *many_main(void *p) {
  many_thread *t = p;
  char name[96];
  snprintf(name, sizeof name, "%s:many:t:%d", t->o->run_id, t->idx);
  dlock_mutex *m = new_mutex(t->c, name);
  for (int i = 0; i < 50; i++)
    pair(m);
  atomic_fetch_add(t->ready, 1);
  while (!atomic_load(t->go))
    dlc_sleep_ns(100000);
  t->count = loop_until(pair_of, m, atomic_load(t->until));
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

/* One process's timed phase, after 50 pairs to warm up: one(st) in a
 * loop until the parent's deadline, its count and CPU into sh->w[i]. */
static void proc_run(many_shared *sh, int i, void (*one)(void *), void *st) {
  for (int k = 0; k < 50; k++)
    one(st);
  bench_worker_ready(&sh->ready, &sh->go);
  double cpu0 = bench_cpu_us();
  sh->w[i].count = loop_until(one, st, atomic_load(&sh->until));
  sh->w[i].cpu_us = bench_cpu_us() - cpu0;
  sh->w[i].end_ns = dlc_now_ns();
  sh->w[i].ok = 1;
}

static void many_proc(int i, void *arg) {
  many_proc_arg *a = arg;
  dlock_client *c = bench_client(a->o, 1, 0);
  char name[96];
  snprintf(name, sizeof name, "%s:many:p:%d", a->o->run_id, i);
  dlock_mutex *m = new_mutex(c, name);
  proc_run(a->sh, i, pair_of, m);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The same processes without the library: plain hiredis doing the raw
 * pair of "uncontended" (EVALSHA HSET+PEXPIRE, EVALSHA DEL) on a key of
 * its own. What 8 processes cost the machine apart from any lock library
 * -- each round trip wakes a process, and switching between processes
 * costs more than between the floor's threads -- measured interleaved. */
typedef struct raw_state {
  raw_pair rp;
  char key[128];
} raw_state;

static void raw_of(void *p) {
  raw_state *r = p;
  raw_one(&r->rp, r->key);
}

static void raw_proc(int i, void *arg) {
  many_proc_arg *a = arg;
  raw_state r;
  raw_load(a->o, &r.rp);
  snprintf(r.key, sizeof r.key, "%s:many:r:%d", a->o->run_id, i);
  proc_run(a->sh, i, raw_of, &r);
  redisFree(r.rp.c);
}

typedef struct many_fig {
  double rate, cpu, scripts, redis_pct;
} many_fig;

/* --threads threads sharing one client, own lock each, for --secs. */
static void many_threads(const bench_opts *o, redisContext *ctl, int rep,
                         many_fig *f) {
  dlock_client *c = bench_client(o, o->threads, 0);
  many_thread *t = calloc((size_t)o->threads, sizeof *t);
  pthread_t *th = calloc((size_t)o->threads, sizeof *th);
  atomic_int ready = 0, go = 0;
  _Atomic int64_t until = INT64_MAX;
  if (!t || !th)
    bench_die("out of memory");
  for (int i = 0; i < o->threads; i++) {
    t[i] = (many_thread){o, c, rep * 1000 + i, &ready, &go, &until, 0};
    if (pthread_create(&th[i], NULL, many_main, &t[i]) != 0)
      bench_die("pthread_create failed");
  }
  while (atomic_load(&ready) < o->threads)
    dlc_sleep_ns(1000000);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(ctl, &a);
  double rcpu0 = bench_redis_cpu_s(ctl);
  double cpu0 = bench_cpu_us();
  int64_t t0 = dlc_now_ns();
  atomic_store(&until, t0 + (int64_t)(o->many_secs * 1e9));
  atomic_store(&go, 1);
  long total = 0;
  for (int i = 0; i < o->threads; i++) {
    pthread_join(th[i], NULL);
    total += t[i].count;
  }
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  double cpu = bench_cpu_us() - cpu0;
  f->redis_pct = 100.0 * (bench_redis_cpu_s(ctl) - rcpu0) / wall;
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  free(t);
  free(th);
  dlock_client_free(c);
  f->rate = (double)total / wall;
  f->cpu = total ? cpu / (double)total : NAN;
  f->scripts = total ? (double)(d.evalsha + d.eval) / (double)total : NAN;
}

static void layout_of(void *p) { layout_one(p); }

static void layout_proc(int i, void *arg) {
  many_proc_arg *a = arg;
  layout_pair lp;
  char key[128];
  snprintf(key, sizeof key, "%s:many:l:%d", a->o->run_id, i);
  layout_load(a->o, &lp, key);
  proc_run(a->sh, i, layout_of, &lp);
  redisFree(lp.rp.c);
}

/* The floor's own request from the same processes: a pair is two of the
 * floor's EVALSHA (pre-formatted, HSET+PEXPIRE), so this row is what the
 * floor itself gives when its 8 connections are 8 processes instead of 8
 * threads -- the most any library can reach from processes here. */
static void floor_of(void *p) {
  bench_floor_one(p);
  bench_floor_one(p);
}

static void floor_proc(int i, void *arg) {
  many_proc_arg *a = arg;
  bench_floor *f = bench_floor_open(a->o);
  proc_run(a->sh, i, floor_of, f);
  bench_floor_close(f);
}

/* --procs processes running fn (many_proc: a client and a lock each;
 * raw_proc: plain hiredis pairs), for --secs. */
static void many_procs(const bench_opts *o, redisContext *ctl, many_fig *f,
                       void (*fn)(int, void *)) {
  size_t shsz =
      sizeof(many_shared) + (size_t)o->procs * sizeof(((many_shared *)0)->w[0]);
  many_shared *sh = bench_shm(shsz);
  atomic_store(&sh->until, INT64_MAX);
  many_proc_arg pa = {o, sh};
  int *pids = bench_fork(o->procs, fn, &pa);
  int64_t wait_end = dlc_now_ns() + (int64_t)60e9;
  while (atomic_load(&sh->ready) < o->procs && dlc_now_ns() < wait_end)
    dlc_sleep_ns(1000000);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(ctl, &a);
  double rcpu0 = bench_redis_cpu_s(ctl);
  int64_t t0 = dlc_now_ns();
  atomic_store(&sh->until, t0 + (int64_t)(o->many_secs * 1e9));
  atomic_store(&sh->go, 1);
  int bad = bench_reap(pids, o->procs,
                       dlc_now_ns() + (int64_t)((o->many_secs + 30) * 1e9));
  f->redis_pct = 100.0 * (bench_redis_cpu_s(ctl) - rcpu0) /
                 ((double)(dlc_now_ns() - t0) / 1e9);
  bench_cmdstats_read(ctl, &b);
  bench_cmdstats_delta(&a, &b, &d);
  long total = 0;
  double cpu = 0;
  int64_t last = t0 + 1;
  for (int i = 0; i < o->procs; i++) {
    total += sh->w[i].count;
    cpu += sh->w[i].cpu_us;
    if (sh->w[i].end_ns > last)
      last = sh->w[i].end_ns;
  }
  if (bad)
    bm_note("many: %d of %d processes failed", bad, o->procs);
  f->rate = (double)total / ((double)(last - t0) / 1e9);
  f->cpu = total ? cpu / (double)total : NAN;
  f->scripts = total ? (double)(d.evalsha + d.eval) / (double)total : NAN;
  bench_shm_free(sh, shsz);
}

static double med3(const many_fig *f, int n, size_t off) {
  double v[MAX_REPS];
  for (int i = 0; i < n; i++)
    memcpy(&v[i], (const char *)&f[i] + off, sizeof v[i]);
  return bench_median(v, n);
}

/* One run's medians: <key>_pairs_per_s, _cpu_us, (scripts) _scripts and
 * _redis_cpu_pct, labelled by what ran (rate) and a short name. */
static void put_run(const char *key, const char *what, const char *shortname,
                    const many_fig *f, int reps, int scripts) {
  char k[64], label[160];
  snprintf(k, sizeof k, "%s_pairs_per_s", key);
  snprintf(label, sizeof label, "pairs/s, %s", what);
  bm_put("many", k, label, med3(f, reps, offsetof(many_fig, rate)), "pairs/s");
  snprintf(k, sizeof k, "%s_cpu_us", key);
  snprintf(label, sizeof label, "client CPU per pair (%s)", shortname);
  bm_put("many", k, label, med3(f, reps, offsetof(many_fig, cpu)), "µs");
  if (scripts) {
    snprintf(k, sizeof k, "%s_scripts", key);
    snprintf(label, sizeof label, "script calls per pair (%s)", shortname);
    bm_put("many", k, label, med3(f, reps, offsetof(many_fig, scripts)),
           "calls");
  }
  snprintf(k, sizeof k, "%s_redis_cpu_pct", key);
  snprintf(label, sizeof label, "Redis CPU (%s run)", shortname);
  bm_put("many", k, label, med3(f, reps, offsetof(many_fig, redis_pct)),
         "% of a core");
}

/* Each repetition: the floor (plain hiredis EVALSHA from --threads
 * connections), the threads, the processes, back to back; medians. */
void scen_many(const bench_opts *o) {
  redisContext *ctl = bench_connect(o);
  char label[128];
  int reps = o->quick ? 1 : (o->reps < 3 ? o->reps : 3);
  if (reps < 1)
    reps = 1;
  many_fig th[MAX_REPS], pr[MAX_REPS], rw[MAX_REPS], fp[MAX_REPS], lf[MAX_REPS];
  double fl[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    bench_log("many %d/%d: hiredis floor (%d connections), %d threads on one "
              "client, %d processes; references from %d processes: raw "
              "hiredis pairs, the floor, the layout floor; %.1f s each",
              r + 1, reps, o->threads, o->threads, o->procs, o->procs,
              o->many_secs);
    fl[r] = bench_evalsha_conc_rps(o, o->threads, o->many_secs);
    many_threads(o, ctl, r, &th[r]);
    many_procs(o, ctl, &pr[r], many_proc);
    many_procs(o, ctl, &rw[r], raw_proc);
    many_procs(o, ctl, &fp[r], floor_proc);
    many_procs(o, ctl, &lf[r], layout_proc);
  }
  snprintf(label, sizeof label,
           "floor: hiredis EVALSHA req/s, %d connections (interleaved)",
           o->threads);
  bm_put("many", "floor_evalsha_rps", label, bench_median(fl, reps), "req/s");
  char what[96];
  snprintf(what, sizeof what, "%d threads (one client)", o->threads);
  put_run("threads", what, "threads", th, reps, 1);
  snprintf(what, sizeof what, "%d processes", o->procs);
  put_run("procs", what, "processes", pr, reps, 1);
  snprintf(what, sizeof what,
           "raw hiredis pairs, %d processes (interleaved; no library)",
           o->procs);
  put_run("raw_procs", what, "raw processes", rw, reps, 0);
  snprintf(what, sizeof what,
           "the floor's EVALSHA from %d processes (interleaved)", o->procs);
  put_run("floor_procs", what, "floor processes", fp, reps, 0);
  snprintf(what, sizeof what,
           "layout floor from %d processes: the layout's 6 commands, no "
           "library (interleaved)",
           o->procs);
  put_run("layout_procs", what, "layout floor processes", lf, reps, 0);
  bm_put("many", "reps", "repetitions (medians)", reps, "");
  redisFree(ctl);
}
