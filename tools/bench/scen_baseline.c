/*
 * scen_baseline.c -- the floor every ratio divides by: plain hiredis on the
 * connection type the library uses, pre-formatted commands (no formatting
 * cost in the loop), one blocking round trip per request.
 *   - 1 client: PING and EVALSHA of a small HSET+PEXPIRE script (the shape
 *     of the lock script's fast path): p50/p99, req/s, client CPU per
 *     request, server time per EVALSHA.
 *   - N clients (N = --threads, one connection each): req/s of both.
 *   - 1 connection pipelined (--pipeline deep): what one connection can
 *     carry when requests of many callers share it.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SCEN "baseline"

static const char BASE_SCRIPT[] = "redis.call('hset', KEYS[1], ARGV[2], 1)\n"
                                  "redis.call('pexpire', KEYS[1], ARGV[1])\n"
                                  "return nil\n";

typedef struct fmtcmd {
  char *p;
  int len;
} fmtcmd;

static fmtcmd format(int argc, const char **argv) {
  fmtcmd f = {NULL, 0};
  f.len = redisFormatCommandArgv(&f.p, argc, argv, NULL);
  if (f.len <= 0)
    bench_die("cannot format a command");
  return f;
}

static void one(redisContext *c, const fmtcmd *f) {
  void *r = NULL;
  if (redisAppendFormattedCommand(c, f->p, (size_t)f->len) != REDIS_OK ||
      redisGetReply(c, &r) != REDIS_OK || !r)
    bench_die("baseline: %s", c->errstr);
  if (((redisReply *)r)->type == REDIS_REPLY_ERROR)
    bench_die("baseline: %s", ((redisReply *)r)->str);
  freeReplyObject(r);
}

/* One block of n timed requests on one connection. */
typedef struct rtt_block {
  double p50, p99, rps, cpu, server_us;
  long done;
} rtt_block;

static void rtt_run(redisContext *c, const fmtcmd *f, long n, int64_t limit,
                    rtt_block *out) {
  bench_samples s;
  bs_init(&s);
  bench_cmdstats a, b, d;
  bench_cmdstats_read(c, &a);
  double cpu0 = bench_cpu_us();
  int64_t t0 = dlc_now_ns();
  long done = 0;
  while (done < n) {
    int64_t s0 = dlc_now_ns();
    one(c, f);
    int64_t s1 = dlc_now_ns();
    bs_add(&s, (double)(s1 - s0) / 1e3);
    done++;
    if (s1 > limit)
      break;
  }
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  double cpu = bench_cpu_us() - cpu0;
  bench_cmdstats_read(c, &b);
  bench_cmdstats_delta(&a, &b, &d);
  out->p50 = bs_pct(&s, 50);
  out->p99 = bs_pct(&s, 99);
  out->rps = (double)done / wall;
  out->cpu = cpu / (double)done;
  out->server_us = d.evalsha ? (double)d.script_usec / (double)d.evalsha : NAN;
  out->done = done;
  bs_free(&s);
}

#define MAX_REPS 99

static double med(const rtt_block *b, int n, size_t off) {
  double v[MAX_REPS];
  for (int i = 0; i < n; i++)
    memcpy(&v[i], (const char *)&b[i] + off, sizeof v[i]);
  return bench_median(v, n);
}

/* Medians over the blocks of one command, as metrics. */
static void rtt_put(const rtt_block *b, int n, const char *name) {
  char key[64], label[128];
  snprintf(key, sizeof key, "%s_p50_us", name);
  snprintf(label, sizeof label, "%s RTT p50, 1 client", name);
  bm_put(SCEN, key, label, med(b, n, offsetof(rtt_block, p50)), "µs");
  snprintf(key, sizeof key, "%s_p99_us", name);
  snprintf(label, sizeof label, "%s RTT p99, 1 client", name);
  bm_put(SCEN, key, label, med(b, n, offsetof(rtt_block, p99)), "µs");
  snprintf(key, sizeof key, "%s_rps", name);
  snprintf(label, sizeof label, "%s req/s, 1 client", name);
  bm_put(SCEN, key, label, med(b, n, offsetof(rtt_block, rps)), "req/s");
  snprintf(key, sizeof key, "%s_cpu_us", name);
  snprintf(label, sizeof label, "%s client CPU per request (hiredis)", name);
  bm_put(SCEN, key, label, med(b, n, offsetof(rtt_block, cpu)), "µs");
  if (!strcmp(name, "evalsha"))
    bm_put(SCEN, "evalsha_server_us", "EVALSHA server time per call",
           med(b, n, offsetof(rtt_block, server_us)), "µs");
}

/* PING and EVALSHA in alternating blocks (--reps of each, n requests in
 * all per command); medians of the blocks. */
static void rtt_phase(const bench_opts *o, redisContext *c, const fmtcmd *ping,
                      const fmtcmd *ev, long n) {
  int reps = o->reps < 1 ? 1 : (o->reps > MAX_REPS ? MAX_REPS : o->reps);
  long per = n / reps > 10 ? n / reps : 10;
  for (int i = 0; i < 300; i++) {
    one(c, ping);
    one(c, ev);
  }
  rtt_block bp[MAX_REPS], be[MAX_REPS];
  int64_t limit = dlc_now_ns() + (int64_t)(o->quick ? 5e9 : 30e9);
  int ran = 0;
  for (int r = 0; r < reps; r++) {
    rtt_run(c, ping, per, limit, &bp[r]);
    rtt_run(c, ev, per, limit, &be[r]);
    ran++;
    if (dlc_now_ns() > limit)
      break;
  }
  if (ran < reps || be[ran - 1].done < per)
    bm_note("baseline: time bound reached after %d of %d repetitions", ran,
            reps);
  rtt_put(bp, ran, "ping");
  rtt_put(be, ran, "evalsha");
  bm_put(SCEN, "reps", "repetitions of the 1-client blocks (medians)", ran, "");
}

typedef struct conc_arg {
  const bench_opts *o;
  const fmtcmd *f;
  atomic_int *ready, *go;
  int64_t until;
  long count;
} conc_arg;

static void *conc_thread(void *p) {
  conc_arg *a = p;
  redisContext *c = bench_connect(a->o);
  for (int i = 0; i < 50; i++)
    one(c, a->f);
  atomic_fetch_add(a->ready, 1);
  while (!atomic_load(a->go))
    dlc_sleep_ns(100000);
  long n = 0;
  while (dlc_now_ns() < a->until && n < 100000000L) {
    one(c, a->f);
    n++;
  }
  a->count = n;
  redisFree(c);
  return NULL;
}

/* N connections, one thread each, for --many-secs: total req/s. */
static double conc_phase(const bench_opts *o, const fmtcmd *f, int n,
                         double secs) {
  conc_arg *args = calloc((size_t)n, sizeof *args);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  atomic_int ready = 0, go = 0;
  if (!args || !th)
    bench_die("out of memory");
  for (int i = 0; i < n; i++) {
    args[i].o = o;
    args[i].f = f;
    args[i].ready = &ready;
    args[i].go = &go;
    args[i].until = INT64_MAX;
  }
  for (int i = 0; i < n; i++)
    if (pthread_create(&th[i], NULL, conc_thread, &args[i]) != 0)
      bench_die("pthread_create failed");
  while (atomic_load(&ready) < n)
    dlc_sleep_ns(1000000);
  int64_t t0 = dlc_now_ns();
  int64_t until = t0 + (int64_t)(secs * 1e9);
  for (int i = 0; i < n; i++)
    args[i].until = until;
  atomic_store(&go, 1);
  long total = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    total += args[i].count;
  }
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  free(args);
  free(th);
  return (double)total / wall;
}

/* One connection, `depth` requests written before the replies are read. */
static double pipe_phase(const bench_opts *o, redisContext *c,
                         const fmtcmd *f) {
  int depth = o->pipeline_depth > 0 ? o->pipeline_depth : 1;
  int64_t t0 = dlc_now_ns();
  int64_t until = t0 + (int64_t)(o->many_secs * 1e9);
  long n = 0;
  while (dlc_now_ns() < until) {
    for (int i = 0; i < depth; i++)
      if (redisAppendFormattedCommand(c, f->p, (size_t)f->len) != REDIS_OK)
        bench_die("pipeline: %s", c->errstr);
    for (int i = 0; i < depth; i++) {
      void *r = NULL;
      if (redisGetReply(c, &r) != REDIS_OK || !r)
        bench_die("pipeline: %s", c->errstr);
      freeReplyObject(r);
    }
    n += depth;
  }
  return (double)n / ((double)(dlc_now_ns() - t0) / 1e9);
}

void scen_baseline(const bench_opts *o) {
  bench_log("baseline: hiredis PING / EVALSHA round trips on %s",
            o->private_server ? "the private server's unix socket" : o->url);
  redisContext *c = bench_connect(o);
  redisReply *r = bench_cmdf(c, "SCRIPT LOAD %s", BASE_SCRIPT);
  if (r->type != REDIS_REPLY_STRING)
    bench_die("SCRIPT LOAD: %s",
              r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
  char sha[41];
  snprintf(sha, sizeof sha, "%s", r->str);
  freeReplyObject(r);

  char key[96];
  snprintf(key, sizeof key, "%s:base:1", o->run_id);
  /* A holder field as long as the library's: "<uuid>:<tid>". */
  const char *field = "00000000-0000-4000-8000-000000000000:1";
  const char *eargv[6] = {"EVALSHA", sha, "1", key, "30000", field};
  const char *pargv[1] = {"PING"};
  fmtcmd ping = format(1, pargv), ev = format(6, eargv);

  long n = o->pairs;
  rtt_phase(o, c, &ping, &ev, n);

  bench_log("baseline: %d connections, %.1f s each for PING and EVALSHA",
            o->threads, o->many_secs);
  char label[128];
  snprintf(label, sizeof label, "PING req/s, %d connections", o->threads);
  bm_put(SCEN, "ping_n_rps", label,
         conc_phase(o, &ping, o->threads, o->many_secs), "req/s");
  snprintf(label, sizeof label, "EVALSHA req/s, %d connections", o->threads);
  bm_put(SCEN, "evalsha_n_rps", label,
         conc_phase(o, &ev, o->threads, o->many_secs), "req/s");
  snprintf(label, sizeof label, "EVALSHA req/s, 1 connection pipelined %d deep",
           o->pipeline_depth);
  bm_put(SCEN, "evalsha_pipe_rps", label, pipe_phase(o, c, &ev), "req/s");

  r = bench_cmdf(c, "DEL %s", key);
  freeReplyObject(r);
  redisFreeCommand(ping.p);
  redisFreeCommand(ev.p);
  redisFree(c);
}

struct bench_floor {
  redisContext *c;
  fmtcmd f;
};

bench_floor *bench_floor_open(const bench_opts *o) {
  bench_floor *b = calloc(1, sizeof *b);
  if (!b)
    bench_die("out of memory");
  b->c = bench_connect(o);
  redisReply *r = bench_cmdf(b->c, "SCRIPT LOAD %s", BASE_SCRIPT);
  if (r->type != REDIS_REPLY_STRING)
    bench_die("SCRIPT LOAD: %s",
              r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
  char sha[41], key[96];
  snprintf(sha, sizeof sha, "%s", r->str);
  freeReplyObject(r);
  snprintf(key, sizeof key, "%s:base:conc", o->run_id);
  const char *field = "00000000-0000-4000-8000-000000000000:1";
  const char *eargv[6] = {"EVALSHA", sha, "1", key, "30000", field};
  b->f = format(6, eargv);
  return b;
}

void bench_floor_one(bench_floor *b) { one(b->c, &b->f); }

void bench_floor_close(bench_floor *b) {
  redisFreeCommand(b->f.p);
  redisFree(b->c);
  free(b);
}

double bench_evalsha_conc_rps(const bench_opts *o, int conns, double secs) {
  redisContext *c = bench_connect(o);
  redisReply *r = bench_cmdf(c, "SCRIPT LOAD %s", BASE_SCRIPT);
  if (r->type != REDIS_REPLY_STRING)
    bench_die("SCRIPT LOAD: %s",
              r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
  char sha[41];
  snprintf(sha, sizeof sha, "%s", r->str);
  freeReplyObject(r);
  char key[96];
  snprintf(key, sizeof key, "%s:base:conc", o->run_id);
  const char *field = "00000000-0000-4000-8000-000000000000:1";
  const char *eargv[6] = {"EVALSHA", sha, "1", key, "30000", field};
  fmtcmd ev = format(6, eargv);
  double rps = conc_phase(o, &ev, conns, secs);
  freeReplyObject(bench_cmdf(c, "DEL %s", key));
  redisFreeCommand(ev.p);
  redisFree(c);
  return rps;
}
