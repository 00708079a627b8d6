/*
 * dlock-seckill -- the flash-sale strategy lab (issue 3). See
 * docs/seckill.md.
 *
 *   dlock-seckill [--strategy NAME[,NAME...]|all] [--stock N] [--procs N]
 *                 [--threads N] [--requests N] [--work-ms MIN-MAX] ...
 *
 * Without --url it starts a private redis-server (unix socket in a temp
 * dir, no persistence) and stops it at the end; redlock always gets three
 * more private servers. With --url it only touches keys under
 * "seckill:<pid>-" and deletes them after each run.
 *
 * Exit: 0 done (whatever the strategies did: failing is their lesson),
 * 64 bad command line, 69 Redis unreachable or a strategy unavailable,
 * 70 internal failure.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "redis_spawn.h"
#include "seckill.h"

#define EX_USAGE_ 64
#define EX_UNAVAILABLE_ 69
#define EX_SOFTWARE_ 70

static tool_redis g_main;
static tool_redis g_rl[SK_REDLOCK_SERVERS];

static void stop_servers(void) {
  tool_redis_stop(&g_main);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    tool_redis_stop(&g_rl[i]);
}

static void on_signal(int sig) {
  /* the servers also die with us (parent-death signal); be quick */
  if (g_main.pid > 1)
    kill(g_main.pid, SIGKILL);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    if (g_rl[i].pid > 1)
      kill(g_rl[i].pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: dlock-seckill [options]\n"
      "\n"
      "A flash sale: --procs worker processes (service instances) with\n"
      "--threads threads each send --requests purchase requests for one\n"
      "product whose stock starts at --stock in Redis. A request reads the\n"
      "stock, checks it is > 0, does the business work (--work-ms), writes\n"
      "stock-1 and records an order. Each strategy protects (or fails to\n"
      "protect) that read-check-write; the table shows which ones oversell,\n"
      "which ones deadlock, and how fast each is.\n"
      "\n"
      "options:\n"
      "  --strategy LIST   strategies to run, comma-separated, or 'all'\n"
      "                    (default all); see the list below\n"
      "  --stock N         initial stock (100)\n"
      "  --procs N         worker processes, 1-64 (4)\n"
      "  --threads N       threads per process, 1-256 (16)\n"
      "  --requests N      purchase requests in total (1000)\n"
      "  --work-ms MIN-MAX business work per request, random in the range,\n"
      "                    ms, fractions allowed; one number = fixed (0-2)\n"
      "  --lease-ms N      lease of the expiring naive locks (setnx-expire,\n"
      "                    getset, set-nx-px, owner-lua); set it shorter\n"
      "                    than the work to see why fixed leases fail (2000)\n"
      "  --watchdog-ms N   dlock's watchdog lease (dlock, segmented, fair,\n"
      "                    redlock); a dead holder's lock frees after it "
      "(2000)\n"
      "  --kill-holder     kill -9 worker 0 while it holds the lock (at the\n"
      "                    worst point of each scheme): shows the setnx\n"
      "                    deadlock and the lease-based recovery\n"
      "  --users N         'one order per user': requests come from N users,\n"
      "                    each may buy once; reports users with more (0=off)\n"
      "  --segments N      stock segments of 'segmented', 1-64 (10)\n"
      "  --stall-ms N      no request finished for this long = deadlocked;\n"
      "                    the run is stopped (default: the longer lease\n"
      "                    + 2500)\n"
      "  --deadline-ms N   hard time limit per strategy (20000)\n"
      "  --json            print one JSON object instead of the tables\n"
      "  --chart FILE.svg  write a bar chart (throughput, oversold)\n"
      "  --url URL         use this server (redis://[:pass@]host[:port][/db]\n"
      "                    or unix:///path); default: a private redis-server\n"
      "  -h, --help        this text\n"
      "  --version         the tool's and the library's version\n"
      "\n"
      "strategies:\n");
  for (int i = 0; i < sk_n_strategies; i++) {
    const sk_strategy *s = &sk_strategies[i];
    const char *note = "";
#ifndef SK_HAVE_REDLOCK
    if (s->kind == SK_REDLOCK)
      note = " [not in this build]";
#endif
    fprintf(f, "  %-13s %s%s\n", s->name, s->summary, note);
  }
  fprintf(f,
          "\n"
          "exit status: 0 done (a strategy failing is its lesson, not an\n"
          "error), 64 bad usage, 69 Redis unreachable, 70 internal error.\n"
          "examples:\n"
          "  dlock-seckill                          all strategies, defaults\n"
          "  dlock-seckill --strategy setnx --kill-holder\n"
          "  dlock-seckill --strategy set-nx-px,owner-lua --lease-ms 1 "
          "--work-ms 1-3\n"
          "  dlock-seckill --strategy dlock,atomic --users 50 --json\n");
}

static int bad(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "dlock-seckill: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (try --help)\n");
  return EX_USAGE_;
}

/* Whole-string integer in [lo, hi]. */
static int parse_ll(const char *opt, const char *s, long long lo, long long hi,
                    long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno) {
    fprintf(stderr, "dlock-seckill: %s: not a number: '%s'\n", opt, s);
    return -1;
  }
  if (v < lo || v > hi) {
    fprintf(stderr, "dlock-seckill: %s: %lld is out of range %lld..%lld\n", opt,
            v, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

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

long long sk_stall_ms(const sk_opts *o, const sk_strategy *s) {
  /* a fair lock skips each dead waiter of the killed worker only when its
   * deadline passes: one wait slice per queued thread of that worker */
  if (o->stall_auto && s->kind == SK_FAIR)
    return o->stall_ms + o->threads * SK_FAIR_SLICE_MS;
  return o->stall_ms;
}

static int add_strategy(sk_opts *o, const sk_strategy *s) {
  for (int i = 0; i < o->n_list; i++)
    if (o->list[i] == s)
      return 0;
  if (o->n_list >= SK_MAX_STRATEGIES)
    return -1;
  o->list[o->n_list++] = s;
  return 0;
}

static int parse_strategies(sk_opts *o, const char *arg) {
  char buf[512];
  if (!*arg || strlen(arg) >= sizeof buf)
    return bad("--strategy: '%s' is not a strategy list%s", arg, "");
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
      return bad("unknown strategy '%s'%s; known: none, local, setnx, "
                 "setnx-expire, getset, set-nx-px, owner-lua, dlock, "
                 "segmented, atomic, fair, redlock, all",
                 t, "");
    add_strategy(o, s); /* redlock without src/redlock.c: "not built" */
  }
  return 0;
}

/* redis://user:SECRET@host -> redis://user:***@host; ?password=SECRET too */
static void redact(const char *url, char *buf, size_t len) {
  const char *sch = strstr(url, "://");
  const char *auth = sch ? sch + 3 : url;
  size_t alen = strcspn(auth, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@')
      at = auth + i;
  if (at)
    snprintf(buf, len, "%.*s***%s", (int)(auth - url), url, at);
  else
    snprintf(buf, len, "%s", url);
  char *p = strstr(buf, "password=");
  if (p) {
    p += 9;
    char tail[160];
    snprintf(tail, sizeof tail, "%s", p + strcspn(p, "&#"));
    snprintf(p, len - (size_t)(p - buf), "***%s", tail);
  }
}

enum {
  OPT_STRATEGY = 256,
  OPT_STOCK,
  OPT_PROCS,
  OPT_THREADS,
  OPT_REQUESTS,
  OPT_WORK,
  OPT_LEASE,
  OPT_WATCHDOG,
  OPT_KILL,
  OPT_USERS,
  OPT_SEGMENTS,
  OPT_STALL,
  OPT_DEADLINE,
  OPT_JSON,
  OPT_CHART,
  OPT_URL,
  OPT_VERSION
};

static int parse_args(int argc, char **argv, sk_opts *o) {
  static const struct option longopts[] = {
      {"strategy", required_argument, NULL, OPT_STRATEGY},
      {"stock", required_argument, NULL, OPT_STOCK},
      {"procs", required_argument, NULL, OPT_PROCS},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"requests", required_argument, NULL, OPT_REQUESTS},
      {"work-ms", required_argument, NULL, OPT_WORK},
      {"lease-ms", required_argument, NULL, OPT_LEASE},
      {"watchdog-ms", required_argument, NULL, OPT_WATCHDOG},
      {"kill-holder", no_argument, NULL, OPT_KILL},
      {"users", required_argument, NULL, OPT_USERS},
      {"segments", required_argument, NULL, OPT_SEGMENTS},
      {"stall-ms", required_argument, NULL, OPT_STALL},
      {"deadline-ms", required_argument, NULL, OPT_DEADLINE},
      {"json", no_argument, NULL, OPT_JSON},
      {"chart", required_argument, NULL, OPT_CHART},
      {"url", required_argument, NULL, OPT_URL},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0}};
  opterr = 0;
  int c, rc;
  const char *strategies = "all";
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case OPT_STRATEGY:
      strategies = optarg;
      break;
    case OPT_STOCK:
      if (parse_ll("--stock", optarg, 1, 1000000000LL, &o->stock))
        return EX_USAGE_;
      break;
    case OPT_PROCS:
      if (parse_ll("--procs", optarg, 1, 64, &o->procs))
        return EX_USAGE_;
      break;
    case OPT_THREADS:
      if (parse_ll("--threads", optarg, 1, 256, &o->threads))
        return EX_USAGE_;
      break;
    case OPT_REQUESTS:
      if (parse_ll("--requests", optarg, 1, 10000000LL, &o->requests))
        return EX_USAGE_;
      break;
    case OPT_WORK:
      if (parse_work(optarg, &o->work_min_ms, &o->work_max_ms))
        return bad("--work-ms: '%s' is not MIN-MAX milliseconds with "
                   "0 <= MIN <= MAX <= 600000%s",
                   optarg, "");
      break;
    case OPT_LEASE:
      if (parse_ll("--lease-ms", optarg, 1, 3600000LL, &o->lease_ms))
        return EX_USAGE_;
      break;
    case OPT_WATCHDOG:
      if (parse_ll("--watchdog-ms", optarg, 30, 3600000LL, &o->watchdog_ms))
        return EX_USAGE_;
      break;
    case OPT_KILL:
      o->kill_holder = 1;
      break;
    case OPT_USERS:
      if (parse_ll("--users", optarg, 0, 10000000LL, &o->users))
        return EX_USAGE_;
      break;
    case OPT_SEGMENTS:
      if (parse_ll("--segments", optarg, 1, SK_MAX_SEGMENTS, &o->segments))
        return EX_USAGE_;
      break;
    case OPT_STALL:
      if (parse_ll("--stall-ms", optarg, 100, 3600000LL, &o->stall_ms))
        return EX_USAGE_;
      break;
    case OPT_DEADLINE:
      if (parse_ll("--deadline-ms", optarg, 100, 3600000LL, &o->deadline_ms))
        return EX_USAGE_;
      break;
    case OPT_JSON:
      o->json = 1;
      break;
    case OPT_CHART:
      if (!*optarg)
        return bad("--chart needs a file name%s%s", "", "");
      o->chart = optarg;
      break;
    case OPT_URL:
      if (!*optarg)
        return bad("--url needs a URL%s%s", "", "");
      if (strncmp(optarg, "redis://", 8) != 0 &&
          strncmp(optarg, "unix://", 7) != 0)
        return bad("--url: '%s' is not a redis:// or unix:// URL%s", optarg,
                   "");
      o->url = optarg;
      break;
    case 'h':
      usage(stdout);
      exit(fflush(stdout) == 0 ? 0 : EX_SOFTWARE_);
    case OPT_VERSION:
      printf("dlock-seckill %s (libdlock %s)\n", DLOCK_VERSION_STRING,
             dlock_version_string());
      exit(fflush(stdout) == 0 ? 0 : EX_SOFTWARE_);
    case ':':
      return bad("option '%s' needs a value%s", argv[optind - 1], "");
    default:
      return bad("unknown option '%s'%s", argv[optind - 1], "");
    }
  }
  if (optind < argc)
    return bad("unexpected argument '%s'%s", argv[optind], "");
  if ((rc = parse_strategies(o, strategies)) != 0)
    return rc;
  if (o->stall_ms == 0) {
    long long l = o->lease_ms > o->watchdog_ms ? o->lease_ms : o->watchdog_ms;
    o->stall_ms = l + 2500;
    o->stall_auto = 1;
  }
  for (int i = 0; i < o->n_list; i++)
    if (o->deadline_ms <= sk_stall_ms(o, o->list[i]))
      o->deadline_ms = sk_stall_ms(o, o->list[i]) + 1000;
  return 0;
}

int main(int argc, char **argv) {
  static sk_opts o;
  o.stock = 100;
  o.procs = 4;
  o.threads = 16;
  o.requests = 1000;
  o.work_min_ms = 0;
  o.work_max_ms = 2;
  o.lease_ms = 2000;
  o.watchdog_ms = 2000;
  o.segments = 10;
  o.deadline_ms = 20000;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  o.tty = isatty(2);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);

  if (o.url) {
    redact(o.url, o.url_shown, sizeof o.url_shown);
    char err[256];
    redisContext *c = sk_connect(o.url, err, sizeof err);
    redisReply *r = c ? redisCommand(c, "PING") : NULL;
    if (c && !r)
      snprintf(err, sizeof err, "%s", c->errstr);
    else if (r && r->type == REDIS_REPLY_ERROR)
      snprintf(err, sizeof err, "%s", r->str);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r)
      freeReplyObject(r);
    if (c)
      redisFree(c);
    if (!ok) {
      fprintf(stderr, "dlock-seckill: cannot reach Redis at %s: %s\n",
              o.url_shown, err);
      return EX_UNAVAILABLE_;
    }
  } else {
    if (tool_redis_start(&g_main, 0, NULL) != 0) {
      fprintf(stderr, "dlock-seckill: could not start a private "
                      "redis-server (give --url to use a running one)\n");
      return EX_UNAVAILABLE_;
    }
    o.url = g_main.url;
    o.private_server = 1;
    snprintf(o.url_shown, sizeof o.url_shown, "private redis-server");
  }
  for (int i = 0; i < o.n_list; i++) {
#ifndef SK_HAVE_REDLOCK
    break;
#endif
    if (o.list[i]->kind != SK_REDLOCK)
      continue;
    for (int j = 0; j < SK_REDLOCK_SERVERS; j++) {
      if (tool_redis_start(&g_rl[j], 0, NULL) != 0) {
        fprintf(stderr, "dlock-seckill: could not start the private "
                        "redis-servers redlock needs\n");
        stop_servers();
        return EX_UNAVAILABLE_;
      }
      o.redlock_urls[j] = g_rl[j].url;
    }
  }

  if (!o.json) {
    printf("dlock-seckill: stock %lld, %lld processes x %lld threads, %lld "
           "requests, work %g-%g ms, lease %lld ms, watchdog %lld ms%s%s, "
           "%s\n",
           o.stock, o.procs, o.threads, o.requests, o.work_min_ms,
           o.work_max_ms, o.lease_ms, o.watchdog_ms,
           o.kill_holder ? ", --kill-holder" : "",
           o.users ? ", one order per user" : "", o.url_shown);
    fflush(stdout);
  }
  static sk_result res[SK_MAX_STRATEGIES];
  long long t0 = sk_now_us();
  for (int i = 0; i < o.n_list; i++)
    sk_run_strategy(&o, o.list[i], i, &res[i]);
  double total_s = (sk_now_us() - t0) / 1e6;
  stop_servers();

  if (o.json)
    sk_report_json(&o, res, o.n_list, total_s);
  else
    sk_report_table(&o, res, o.n_list, total_s);
  int ex = 0;
  if (o.chart && sk_report_svg(&o, res, o.n_list, o.chart) != 0) {
    fprintf(stderr, "dlock-seckill: cannot write %s: %s\n", o.chart,
            strerror(errno));
    ex = 73;
  }
  if (fflush(stdout) != 0)
    ex = EX_SOFTWARE_;
  return ex;
}
