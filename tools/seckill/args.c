/*
 * args.c -- dlock-seckill's command line: the option table (which also
 * gives the option lines of --help), applying each option to sk_opts,
 * the --strategy list, and the checks across options.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "opts.h"
#include "seckill.h"

enum {
  OPT_STRATEGY,
  OPT_STOCK,
  OPT_PROCS,
  OPT_THREADS,
  OPT_REQUESTS,
  OPT_WORK,
  OPT_LEASE,
  OPT_WATCHDOG,
  OPT_KILL,
  OPT_SCENARIOS,
  OPT_USERS,
  OPT_SEGMENTS,
  OPT_STALL,
  OPT_DEADLINE,
  OPT_JSON,
  OPT_CHART,
  OPT_URL,
  OPT_ETCD_URL,
  OPT_HELP,
  OPT_VERSION
};

static const dlc_opt g_opts[] = {
    {"strategy", 0, "LIST", OPT_STRATEGY, 0,
     "strategies to run, comma-separated, or 'all'\n"
     "(default all); see the list below"},
    {"stock", 0, "N", OPT_STOCK, 0, "initial stock (100)"},
    {"procs", 0, "N", OPT_PROCS, 0, "worker processes, 1-64 (4)"},
    {"threads", 0, "N", OPT_THREADS, 0, "threads per process, 1-256 (16)"},
    {"requests", 0, "N", OPT_REQUESTS, 0, "purchase requests in total (1000)"},
    {"work-ms", 0, "MIN-MAX", OPT_WORK, 0,
     "business work per request, random in the range,\n"
     "ms, fractions allowed; one number = fixed (0-2)"},
    {"lease-ms", 0, "N", OPT_LEASE, 0,
     "lease of the expiring naive locks (setnx-expire,\n"
     "getset, set-nx-px, owner-lua); set it shorter\n"
     "than the work to see why fixed leases fail (2000)"},
    {"watchdog-ms", 0, "N", OPT_WATCHDOG, 0,
     "dlock's watchdog lease (dlock, segmented, fair,\n"
     "redlock); a dead holder's lock frees after it (2000)"},
    {"kill-holder", 0, NULL, OPT_KILL, 0,
     "kill -9 worker 0 while it holds the lock (at the\n"
     "worst point of each scheme): shows the setnx\n"
     "deadlock and the lease-based recovery"},
    {"scenarios", 0, "LIST", OPT_SCENARIOS, 0,
     "run every strategy in each scenario: normal,\n"
     "kill-holder, short-lease (work 2-4 ms, lease 1\n"
     "ms), failover (the lock store fails over: dlock\n"
     "on Redis Sentinel, etcd on 3 members) or 'all';\n"
     "one table, a column per scenario"},
    {"users", 0, "N", OPT_USERS, 0,
     "'one order per user': requests come from N users,\n"
     "each may buy once; reports users with more (0=off)"},
    {"segments", 0, "N", OPT_SEGMENTS, 0,
     "stock segments of 'segmented', 1-64 (10)"},
    {"stall-ms", 0, "N", OPT_STALL, 0,
     "no request finished for this long = deadlocked;\n"
     "the run is stopped (default: the longer lease\n"
     "+ 2500)"},
    {"deadline-ms", 0, "N", OPT_DEADLINE, 0,
     "hard time limit per strategy (20000)"},
    {"json", 0, NULL, OPT_JSON, 0,
     "print one JSON object instead of the tables"},
    {"chart", 0, "FILE.svg", OPT_CHART, 0,
     "write a bar chart (throughput, oversold)"},
    {"url", 0, "URL", OPT_URL, 0,
     "use this server (redis://[:pass@]host[:port][/db]\n"
     "or unix:///path); default: a private redis-server"},
    {"etcd-url", 0, "URL", OPT_ETCD_URL, 0,
     "the etcd strategy's lock store (etcd://host:port);\n"
     "default: a private etcd member (if installed)"},
    {"help", 'h', NULL, OPT_HELP, 0, "this text"},
    {"version", 0, NULL, OPT_VERSION, 0,
     "the tool's and the library's version"},
};

static const dlc_optset g_optset = {g_opts, sizeof g_opts / sizeof g_opts[0],
                                    20, 0, 1};

void sk_usage(FILE *f) {
  fputs("usage: dlock-seckill [options]\n"
        "\n"
        "A flash sale: --procs worker processes (service instances) with\n"
        "--threads threads each send --requests purchase requests for one\n"
        "product whose stock starts at --stock in Redis. A request reads the\n"
        "stock, checks it is > 0, does the business work (--work-ms), writes\n"
        "stock-1 and records an order. Each strategy protects (or fails to\n"
        "protect) that read-check-write; the table shows which ones oversell,\n"
        "which ones deadlock, and how fast each is.\n"
        "\n"
        "options:\n",
        f);
  dlc_opt_help(f, &g_optset);
  fputs("\nstrategies:\n", f);
  for (int i = 0; i < sk_n_strategies; i++) {
    const sk_strategy *s = &sk_strategies[i];
    const char *note = "";
    fprintf(f, "  %-13s %s%s\n", s->name, s->summary, note);
  }
  fputs("\n"
        "exit status: 0 done (a strategy failing is its lesson, not an\n"
        "error), 64 bad usage, 69 Redis unreachable, 70 internal error.\n"
        "examples:\n"
        "  dlock-seckill                          all strategies, defaults\n"
        "  dlock-seckill --strategy setnx --kill-holder\n"
        "  dlock-seckill --strategy set-nx-px,owner-lua --lease-ms 1 "
        "--work-ms 1-3\n"
        "  dlock-seckill --strategy dlock,atomic --users 50 --json\n",
        f);
}

/* ---- values ------------------------------------------------------------- */

static int parse_ms(const char *s, double *v) {
  char *end = NULL;
  errno = 0;
  *v = strtod(s, &end);
  if (end == s || errno || !isfinite(*v) || *v < 0 || *v > 600000)
    return -1;
  return (int)(end - s);
}

/* "MIN-MAX" or "N" */
static int parse_work(const char *s, double *lo, double *hi) {
  int n = parse_ms(s, lo);
  if (n < 0)
    return -1;
  if (s[n] == '\0') {
    *hi = *lo;
    return 0;
  }
  if (s[n] != '-')
    return -1;
  int m = parse_ms(s + n + 1, hi);
  if (m < 0 || s[n + 1 + m] != '\0' || *hi < *lo)
    return -1;
  return 0;
}

/* --scenarios: "all" or a comma list of sk_scenario_names. */
static int parse_scenarios(sk_opts *o, const char *arg, char *err, size_t el) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  char *save = NULL;
  o->scenarios = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = strcmp(t, "all") == 0;
    if (found)
      o->scenarios |= (1u << SK_N_SCENARIOS) - 1;
    for (int i = 0; i < SK_N_SCENARIOS && !found; i++)
      if (strcmp(t, sk_scenario_names[i]) == 0) {
        o->scenarios |= 1u << i;
        found = 1;
      }
    if (!found)
      return dlc_opt_fail(err, el,
                          "unknown scenario '%s'; known: normal, kill-holder, "
                          "short-lease, failover, all",
                          t);
  }
  if (!o->scenarios)
    return dlc_opt_fail(err, el, "--scenarios: no scenario in '%s'", arg);
  return 0;
}

static void add_strategy(sk_opts *o, const sk_strategy *s) {
  for (int i = 0; i < o->n_list; i++)
    if (o->list[i] == s)
      return;
  if (o->n_list < SK_MAX_STRATEGIES)
    o->list[o->n_list++] = s;
}

static int parse_strategies(sk_opts *o, const char *arg, char *err, size_t el) {
  char buf[512];
  if (!*arg || strlen(arg) >= sizeof buf)
    return dlc_opt_fail(err, el, "--strategy: '%s' is not a strategy list",
                        arg);
  snprintf(buf, sizeof buf, "%s", arg);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (strcmp(t, "all") == 0) {
      for (int i = 0; i < sk_n_strategies; i++)
        add_strategy(o, &sk_strategies[i]);
      continue;
    }
    const sk_strategy *s = sk_strategy_find(t);
    if (!s)
      return dlc_opt_fail(err, el,
                          "unknown strategy '%s'; known: none, local, setnx, "
                          "setnx-expire, getset, set-nx-px, owner-lua, dlock, "
                          "segmented, atomic, fair, redlock, all",
                          t);
    add_strategy(o, s); /* redlock without src/kinds/redlock.c: "not built" */
  }
  return 0;
}

/* ---- options ------------------------------------------------------------ */

typedef struct pctx {
  sk_opts *o;
  const char *strategies;
  int action; /* OPT_HELP / OPT_VERSION, or -1 */
} pctx;

/* The numeric options: where they go and their range (NULL: not one). */
static long long *num_field(sk_opts *o, int id, long long *lo, long long *hi) {
  const struct {
    int id;
    long long lo, hi, *field;
  } r[] = {{OPT_STOCK, 1, 1000000000LL, &o->stock},
           {OPT_PROCS, 1, 64, &o->procs},
           {OPT_THREADS, 1, 256, &o->threads},
           {OPT_REQUESTS, 1, 10000000LL, &o->requests},
           {OPT_LEASE, 1, 3600000LL, &o->lease_ms},
           {OPT_WATCHDOG, 30, 3600000LL, &o->watchdog_ms},
           {OPT_USERS, 0, 10000000LL, &o->users},
           {OPT_SEGMENTS, 1, SK_MAX_SEGMENTS, &o->segments},
           {OPT_STALL, 100, 3600000LL, &o->stall_ms},
           {OPT_DEADLINE, 100, 3600000LL, &o->deadline_ms}};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (r[i].id == id) {
      *lo = r[i].lo;
      *hi = r[i].hi;
      return r[i].field;
    }
  return NULL;
}

static int apply(void *arg, const dlc_opt *op, const char *val, char *err,
                 size_t el) {
  pctx *p = arg;
  sk_opts *o = p->o;
  long long lo, hi, *num = num_field(o, op->id, &lo, &hi);
  char name[32];
  snprintf(name, sizeof name, "--%s", op->lng);
  if (num)
    return dlc_opt_ll(name, val, lo, hi, num, err, el);
  switch (op->id) {
  case OPT_STRATEGY:
    p->strategies = val;
    return 0;
  case OPT_WORK:
    if (parse_work(val, &o->work_min_ms, &o->work_max_ms))
      return dlc_opt_fail(err, el,
                          "--work-ms: '%s' is not MIN-MAX milliseconds with "
                          "0 <= MIN <= MAX <= 600000",
                          val);
    return 0;
  case OPT_SCENARIOS:
    return parse_scenarios(o, val, err, el);
  case OPT_KILL:
    o->kill_holder = 1;
    return 0;
  case OPT_JSON:
    o->json = 1;
    return 0;
  case OPT_CHART:
    if (!*val)
      return dlc_opt_fail(err, el, "--chart needs a file name");
    o->chart = val;
    return 0;
  case OPT_URL:
    if (!*val)
      return dlc_opt_fail(err, el, "--url needs a URL");
    if (strncmp(val, "redis://", 8) != 0 && strncmp(val, "unix://", 7) != 0 &&
        strncmp(val, "redis-sentinel://", 17) != 0 &&
        strncmp(val, "redis-cluster://", 16) != 0)
      return dlc_opt_fail(
          err, el,
          "--url: '%s' is not a redis://, unix://, redis-cluster:// or "
          "redis-sentinel:// URL",
          val);
    o->url = val;
    return 0;
  case OPT_ETCD_URL:
    if (strncmp(val, "etcd://", 7) != 0 && strncmp(val, "etcds://", 8) != 0)
      return dlc_opt_fail(err, el, "--etcd-url: '%s' is not an etcd:// URL",
                          val);
    o->etcd_url = val;
    return 0;
  default: /* --help, --version: acted on at once, as getopt's users do */
    p->action = op->id;
    return 1;
  }
}

/* Derived settings: the stall bound and a deadline beyond it. */
static void derive(sk_opts *o) {
  if (o->stall_ms == 0) {
    long long l = o->lease_ms > o->watchdog_ms ? o->lease_ms : o->watchdog_ms;
    o->stall_ms = l + 2500;
    o->stall_auto = 1;
  }
  for (int i = 0; i < o->n_list; i++)
    if (o->deadline_ms <= sk_stall_ms(o, o->list[i]))
      o->deadline_ms = sk_stall_ms(o, o->list[i]) + 1000;
}

/* --help / --version: prints, and the exit status. */
static int act(int action) {
  if (action == OPT_HELP)
    sk_usage(stdout);
  else
    printf("dlock-seckill %s (libdlock %s)\n", DLOCK_VERSION_STRING,
           dlock_version_string());
  return fflush(stdout) == 0 ? 0 : SK_EX_SOFTWARE;
}

int sk_parse_args(int argc, char **argv, sk_opts *o, int *exit_now) {
  pctx p = {o, "all", -1};
  char err[512] = "";
  *exit_now = 0;
  int rc = dlc_opt_parse_all(&g_optset, argc, argv, apply, &p, err, sizeof err);
  if (rc == 0)
    rc = parse_strategies(o, p.strategies, err, sizeof err);
  if (rc == 0 && o->scenarios && o->kill_holder)
    rc = dlc_opt_fail(err, sizeof err,
                      "--kill-holder cannot be combined with --scenarios "
                      "(use --scenarios kill-holder)");
  if (rc < 0) {
    fprintf(stderr, "dlock-seckill: %s (try --help)\n", err);
    return SK_EX_USAGE;
  }
  if (rc > 0) {
    *exit_now = 1;
    return act(p.action);
  }
  derive(o);
  return 0;
}
