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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "etcd_spawn.h"
#include "redis_spawn.h"
#include "seckill.h"

static dlc_redis g_main;
static dlc_redis g_rl[SK_REDLOCK_SERVERS];
static dlc_etcd g_etcd; /* the etcd strategy's private member */
static char g_etcd_url[64];

static void stop_servers(void) {
  dlc_redis_stop_private(&g_main);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    dlc_redis_stop_private(&g_rl[i]);
  dlc_etcd_remove(&g_etcd);
}

/* The etcd strategy without --etcd-url: a private member, when etcd is
 * installed (else the strategy is skipped, saying so). */
static void start_etcd(sk_opts *o) {
  int want = 0;
  for (int i = 0; i < o->n_list; i++)
    want |= o->list[i]->kind == SK_ETCD;
  if (!want || o->etcd_url || !dlc_etcd_installed())
    return;
  const char *tmp = getenv("TMPDIR");
  if (dlc_etcd_single(&g_etcd, tmp && *tmp ? tmp : "/tmp", 0) != 0) {
    fprintf(stderr,
            "dlock-seckill: could not start a private etcd (see %s/"
            "etcd.log): the etcd strategy is skipped\n",
            g_etcd.dir);
    return;
  }
  snprintf(g_etcd_url, sizeof g_etcd_url, "etcd://%s", g_etcd.ep);
  o->etcd_url = g_etcd_url;
}

static void on_signal(int sig) {
  /* the servers also die with us (parent-death signal); be quick */
  if (g_main.pid > 1)
    kill(g_main.pid, SIGKILL);
  if (g_etcd.pid > 1)
    kill(g_etcd.pid, SIGKILL);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    if (g_rl[i].pid > 1)
      kill(g_rl[i].pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

long long sk_stall_ms(const sk_opts *o, const sk_strategy *s) {
  /* a fair lock skips each dead waiter of the killed worker only when its
   * deadline passes: one wait slice per queued thread of that worker */
  if (o->stall_auto && s->kind == SK_FAIR)
    return o->stall_ms + o->threads * SK_FAIR_SLICE_MS;
  return o->stall_ms;
}

/* --url: check that the server answers, and redact it for messages. */
static int use_url(sk_opts *o) {
  dlc_url_redact(o->url, o->url_shown, sizeof o->url_shown);
  char err[256];
  redisContext *c =
      dlc_redis_connect(o->url, SK_CONNECT_S, SK_COMMAND_S, err, sizeof err);
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
  if (ok)
    return 0;
  fprintf(stderr, "dlock-seckill: cannot reach Redis at %s: %s\n", o->url_shown,
          err);
  return SK_EX_UNAVAILABLE;
}

/* No --url: a private server; redlock: three more, whatever the URL. */
static int start_servers(sk_opts *o) {
  if (!o->url) {
    if (dlc_redis_start_private(&g_main, 0, NULL) != 0) {
      fprintf(stderr, "dlock-seckill: could not start a private "
                      "redis-server (give --url to use a running one)\n");
      return SK_EX_UNAVAILABLE;
    }
    o->url = g_main.url;
    o->private_server = 1;
    snprintf(o->url_shown, sizeof o->url_shown, "private redis-server");
  }
  for (int i = 0; i < o->n_list; i++) {
    if (o->list[i]->kind != SK_REDLOCK)
      continue;
    for (int j = 0; j < SK_REDLOCK_SERVERS; j++) {
      if (dlc_redis_start_private(&g_rl[j], 0, NULL) != 0) {
        fprintf(stderr, "dlock-seckill: could not start the private "
                        "redis-servers redlock needs\n");
        stop_servers();
        return SK_EX_UNAVAILABLE;
      }
      o->redlock_urls[j] = g_rl[j].url;
    }
  }
  return 0;
}

static void print_header(const sk_opts *o) {
  char line[512];
  sk_settings_line(o, line, sizeof line);
  printf("dlock-seckill: %s\n", line);
  fflush(stdout);
}

/* Runs every strategy, stops the servers, prints the report. */
static int run_all(const sk_opts *o) {
  static sk_result res[SK_MAX_STRATEGIES];
  long long t0 = dlc_now_us();
  for (int i = 0; i < o->n_list; i++)
    sk_run_strategy(o, o->list[i], i, &res[i]);
  double total_s = (double)(dlc_now_us() - t0) / 1e6;
  stop_servers();
  if (o->json)
    sk_report_json(o, res, o->n_list, total_s);
  else
    sk_report_table(o, res, o->n_list, total_s);
  int ex = 0;
  if (o->chart && sk_report_svg(o, res, o->n_list, o->chart) != 0) {
    fprintf(stderr, "dlock-seckill: cannot write %s: %s\n", o->chart,
            strerror(errno));
    ex = 73;
  }
  if (fflush(stdout) != 0)
    ex = SK_EX_SOFTWARE;
  return ex;
}

int main(int argc, char **argv) {
  static sk_opts o = {.stock = 100,
                      .procs = 4,
                      .threads = 16,
                      .requests = 1000,
                      .work_min_ms = 0,
                      .work_max_ms = 2,
                      .lease_ms = 2000,
                      .watchdog_ms = 2000,
                      .segments = 10,
                      .deadline_ms = 20000};
  int exit_now = 0;
  int rc = sk_parse_args(argc, argv, &o, &exit_now);
  if (rc != 0 || exit_now)
    return rc;
  o.tty = isatty(2);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  if (o.url && (rc = use_url(&o)) != 0)
    return rc;
  if ((rc = start_servers(&o)) != 0)
    return rc;
  start_etcd(&o);
  if (o.scenarios)
    return sk_run_scenarios(&o, stop_servers);
  if (!o.json)
    print_header(&o);
  return run_all(&o);
}
