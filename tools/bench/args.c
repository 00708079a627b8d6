/*
 * args.c -- dlock-bench's command line: the option table (which also gives
 * the option lines of --help), applying each option to bench_opts, and the
 * sizes --quick changes (applied after parsing, to what was not given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlock.h>

#include "bench.h"
#include "opts.h"

enum {
  OPT_QUICK,
  OPT_JSON,
  OPT_URL,
  OPT_ETCD_URL,
  OPT_TCP,
  OPT_SCENARIO,
  OPT_REPS,
  OPT_MULTIPLEX,
  OPT_THREADS,
  OPT_PROCS,
  OPT_WORKERS,
  OPT_PAIRS,
  OPT_SECS,
  OPT_CONTENDED_SECS,
  OPT_SERIAL_SECS,
  OPT_WD_LOCKS,
  OPT_WD_TIMEOUT,
  OPT_HANDOFF_ROUNDS,
  OPT_PIPELINE,
  OPT_HELP,
  OPT_VERSION
};

static const dlc_opt g_opts[] = {
    {"quick", 0, NULL, OPT_QUICK, 0,
     "CI smoke sizes (whole run well under 30 s)"},
    {"json", 0, NULL, OPT_JSON, 0, "also print one JSON object (last line)"},
    {"url", 0, "URL", OPT_URL, 0,
     "use this server (redis://host:port[/db],\n"
     "unix:///path, redis-cluster://h:p[,h:p]:\n"
     "'many' per master); default: a private one"},
    {"etcd-url", 0, "URL", OPT_ETCD_URL, 0,
     "the etcd scenario's cluster (etcd://h:p[,h:p]);\n"
     "default: a private member (fsync on)"},
    {"tcp", 0, NULL, OPT_TCP, 0,
     "private server over loopback TCP instead of\n"
     "its unix socket"},
    {"scenario", 0, "LIST", OPT_SCENARIO, 0,
     "scenarios to run, comma-separated: baseline,\n"
     "uncontended,many,contended,contended-spin,\n"
     "watchdog,handoff,async,etcd\n"
     "(default all; --only is the same)"},
    {"scenarios", 0, "LIST", OPT_SCENARIO, 0, NULL},
    {"only", 0, "LIST", OPT_SCENARIO, 0, NULL},
    {"reps", 0, "N", OPT_REPS, 0,
     "repetitions of the cheap phases (baseline,\n"
     "uncontended); medians are reported (5;\n"
     "quick 3)"},
    {"multiplex", 0, "0|1", OPT_MULTIPLEX, 0,
     "the library's transport (default: the\n"
     "library's default, multiplexed)"},
    {"threads", 0, "N", OPT_THREADS, 0, "many/baseline concurrency (8)"},
    {"procs", 0, "N", OPT_PROCS, 0, "many: processes (8)"},
    {"workers", 0, "N", OPT_WORKERS, 0, "contended: processes on one lock (8)"},
    {"pairs", 0, "N", OPT_PAIRS, 0, "uncontended pairs per phase (20000)"},
    {"secs", 0, "S", OPT_SECS, 0, "each throughput phase (3; quick 1)"},
    {"contended-secs", 0, "S", OPT_CONTENDED_SECS, 0,
     "contended phase (10; quick 2)"},
    {"serial-secs", 0, "S", OPT_SERIAL_SECS, 0,
     "serial reference (5; quick 1)"},
    {"wd-locks", 0, "N", OPT_WD_LOCKS, 0,
     "locks held under the watchdog (100000;\n"
     "quick 20000)"},
    {"wd-timeout-ms", 0, "N", OPT_WD_TIMEOUT, 0,
     "their lease (9000: period 3 s; quick 3000)"},
    {"handoff-rounds", 0, "N", OPT_HANDOFF_ROUNDS, 0,
     "hand-overs measured (2000; quick 300)"},
    {"pipeline", 0, "N", OPT_PIPELINE, 0,
     "depth of the pipelined baseline (32)"},
    {"help", 'h', NULL, OPT_HELP, 0, "this text"},
    {"version", 0, NULL, OPT_VERSION, 0,
     "the tool's and the library's version"},
};

static const dlc_optset g_optset = {g_opts, sizeof g_opts / sizeof g_opts[0],
                                    22, 0, 0};

static void usage(FILE *f) {
  fputs("usage: dlock-bench [options]\n", f);
  dlc_opt_help(f, &g_optset);
  fputs("Other Redis lock libraries side by side on the same server:\n"
        "tools/bench/peers/run_peers.sh (make bench-peers).\n"
        "Exit status 0 when every selected scenario ran (a missed target is\n"
        "a result, shown as MISS); 2 on an error.\n",
        f);
}

typedef struct pctx {
  bench_opts *o;
  int *tcp;
  int action; /* OPT_HELP / OPT_VERSION */
} pctx;

/* The integer options: their range and where they go. 1: not one. */
static int int_opt(bench_opts *o, int id, const char *name, const char *val,
                   char *err, size_t el) {
  const struct {
    int id;
    long long lo, hi;
    int *i;  /* an int field, */
    long *l; /* or a long one */
  } r[] = {{OPT_REPS, 1, 99, &o->reps, NULL},
           {OPT_MULTIPLEX, 0, 1, &o->multiplex, NULL},
           {OPT_THREADS, 1, 512, &o->threads, NULL},
           {OPT_PROCS, 1, 256, &o->procs, NULL},
           {OPT_WORKERS, 1, 256, &o->workers, NULL},
           {OPT_PAIRS, 10, 100000000L, NULL, &o->pairs},
           {OPT_WD_LOCKS, 1, 10000000L, NULL, &o->wd_locks},
           {OPT_WD_TIMEOUT, 300, 600000, &o->wd_timeout_ms, NULL},
           {OPT_HANDOFF_ROUNDS, 10, 10000000L, NULL, &o->handoff_rounds},
           {OPT_PIPELINE, 1, 100000, &o->pipeline_depth, NULL}};
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    if (r[k].id != id)
      continue;
    long long v;
    if (dlc_opt_ll(name, val, r[k].lo, r[k].hi, &v, err, el))
      return -1;
    if (r[k].i)
      *r[k].i = (int)v;
    else if (r[k].l)
      *r[k].l = (long)v;
    return 0;
  }
  return 1;
}

static int secs_opt(const char *name, const char *val, double *out, char *err,
                    size_t el) {
  char *end;
  double v = strtod(val, &end);
  if (!*val || *end || !(v > 0 && v <= 3600))
    return dlc_opt_fail(err, el, "%s: expected seconds in (0, 3600]", name);
  *out = v;
  return 0;
}

static int apply(void *arg, const dlc_opt *op, const char *val, char *err,
                 size_t el) {
  bench_opts *o = ((pctx *)arg)->o;
  char name[32];
  snprintf(name, sizeof name, "--%s", op->lng);
  int rc = int_opt(o, op->id, name, val, err, el);
  if (rc <= 0)
    return rc;
  switch (op->id) {
  case OPT_QUICK:
    o->quick = 1;
    return 0;
  case OPT_JSON:
    o->json = 1;
    return 0;
  case OPT_TCP:
    *((pctx *)arg)->tcp = 1;
    return 0;
  case OPT_URL:
    snprintf(o->url, sizeof o->url, "%s", val);
    return 0;
  case OPT_ETCD_URL:
    if (strncmp(val, "etcd://", 7) != 0)
      return dlc_opt_fail(err, el, "--etcd-url: '%s' is not an etcd:// URL",
                          val);
    snprintf(o->etcd_url, sizeof o->etcd_url, "%s", val);
    return 0;
  case OPT_SCENARIO:
    snprintf(o->only, sizeof o->only, "%s", val);
    return 0;
  case OPT_SECS:
    return secs_opt(name, val, &o->many_secs, err, el);
  case OPT_CONTENDED_SECS:
    return secs_opt(name, val, &o->contended_secs, err, el);
  case OPT_SERIAL_SECS:
    return secs_opt(name, val, &o->serial_secs, err, el);
  default: /* OPT_HELP, OPT_VERSION: acted on at once */
    ((pctx *)arg)->action = op->id;
    return 1;
  }
}

/* What was not given: the defaults, smaller with --quick. */
static void defaults(bench_opts *o) {
  int q = o->quick;
  const struct {
    double *d; /* a double field, */
    long *l;   /* a long one, */
    int *i;    /* or an int one */
    double normal, quick;
  } t[] = {
      {NULL, NULL, &o->threads, 8, 8},
      {NULL, NULL, &o->procs, 8, 8},
      {NULL, NULL, &o->workers, 8, 8},
      {NULL, &o->pairs, NULL, 20000, 3000},
      {&o->many_secs, NULL, NULL, 3, 1},
      {&o->contended_secs, NULL, NULL, 10, 2},
      {&o->serial_secs, NULL, NULL, 5, 1},
      {NULL, &o->wd_locks, NULL, 100000, 20000},
      /* A 3 s lease loses locks when a renewal pass over 100k holds stalls
       * for ~2 s on a loaded machine (seen here); 9 s keeps the run short
       * and still renews 100k locks every 3 s. */
      {NULL, NULL, &o->wd_timeout_ms, 9000, 3000},
      {NULL, &o->handoff_rounds, NULL, 2000, 300},
      {NULL, NULL, &o->pipeline_depth, 32, 32},
      {NULL, NULL, &o->reps, 5, 3},
  };
  for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
    double v = q ? t[k].quick : t[k].normal;
    if (t[k].d && *t[k].d == 0)
      *t[k].d = v;
    else if (t[k].l && *t[k].l == 0)
      *t[k].l = (long)v;
    else if (t[k].i && *t[k].i == 0)
      *t[k].i = (int)v;
  }
}

void bench_parse_args(int argc, char **argv, bench_opts *o, int *tcp) {
  memset(o, 0, sizeof *o);
  o->multiplex = -1;
  *tcp = 0;
  pctx p = {o, tcp, 0};
  char err[512] = "";
  int rc = dlc_opt_parse_all(&g_optset, argc, argv, apply, &p, err, sizeof err);
  if (rc > 0 && p.action == OPT_VERSION) {
    printf("dlock-bench %s (libdlock %s)\n", DLOCK_VERSION_STRING,
           dlock_version_string());
    exit(fflush(stdout) == 0 ? 0 : 2);
  }
  if (rc > 0) {
    usage(stdout);
    exit(0);
  }
  if (rc < 0) {
    usage(stderr);
    bench_die("%s", err);
  }
  defaults(o);
}
