/*
 * dlock-bench -- the library's performance measured against the Redis
 * round-trip floor of the same run (issue 4). See docs/bench.md.
 *
 *   dlock-bench [--quick] [--json] [--url URL | --tcp] ...
 *
 * Without --url it starts a private redis-server (unix socket in a temp
 * dir, no persistence) and stops it at the end; with --url it uses that
 * server and only touches keys under "dlock-bench:<pid>:".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"
#include "redis_spawn.h"

static dlc_redis g_redis;

static void on_signal(int sig) {
  if (g_redis.pid > 1)
    kill(g_redis.pid, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

static const char *const k_scenarios[] = {
    "baseline", "uncontended", "many",  "contended", "contended-spin",
    "watchdog", "handoff",     "async", "etcd"};

/* Every name in the --scenario list must be one we know. */
static int check_scenarios(const char *list) {
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    int ok = 0;
    for (size_t k = 0; k < sizeof k_scenarios / sizeof *k_scenarios; k++)
      ok |= strlen(k_scenarios[k]) == l && !strncmp(k_scenarios[k], p, l);
    if (!ok && l > 0) {
      fprintf(stderr,
              "dlock-bench: unknown scenario '%.*s' (known: "
              "baseline,uncontended,many,contended,contended-spin,watchdog,"
              "handoff,async,etcd)\n",
              (int)l, p);
      return -1;
    }
    if (!e)
      break;
    p = e + 1;
  }
  return 0;
}

/* No --url: a private server (its unix socket, or loopback TCP). */
static int start_private(bench_opts *o, int tcp) {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  if (dlc_redis_start_private(&g_redis, tcp, NULL) != 0)
    return -1;
  o->private_server = 1;
  snprintf(o->url, sizeof o->url, "%s", tcp ? g_redis.tcp_url : g_redis.url);
  return 0;
}

static void run_scenarios(const bench_opts *o) {
  static const struct {
    const char *name;
    void (*run)(const bench_opts *);
  } k[] = {{"baseline", scen_baseline},
           {"uncontended", scen_uncontended},
           {"many", scen_many},
           {"contended", scen_contended},
           {"contended-spin", scen_contended_spin},
           {"watchdog", scen_watchdog},
           {"handoff", scen_handoff},
           {"async", scen_async},
           {"etcd", scen_etcd}};
  int cluster = strncmp(o->url, "redis-cluster://", 16) == 0;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (!bench_selected(o, k[i].name))
      continue;
    if (!cluster || k[i].run == scen_etcd)
      k[i].run(o);
    else if (k[i].run == scen_many)
      scen_cluster_many(o);
    else
      bm_note("%s: not run on a cluster (it measures round trips to one "
              "server); 'many' runs per master",
              k[i].name);
  }
}

int main(int argc, char **argv) {
  bench_opts o;
  int tcp = 0;
  bench_parse_args(argc, argv, &o, &tcp);
  if (check_scenarios(o.only) != 0)
    return 2;
  snprintf(o.run_id, sizeof o.run_id, "dlock-bench:%d", (int)getpid());
  if (!o.url[0] && start_private(&o, tcp) != 0)
    return 2;
  bench_log("server: %s%s", o.url, o.private_server ? " (private)" : "");
  int64_t t0 = dlc_now_ns();
  run_scenarios(&o);
  double wall = (double)(dlc_now_ns() - t0) / 1e9;
  bench_report(&o, wall);
  dlc_redis_stop_private(&g_redis);
  bench_etcd_stop();
  /* Missed targets are results, not failures: exit 0 whenever every
   * scenario ran. */
  return 0;
}
