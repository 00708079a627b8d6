/*
 * scenario.c -- "dlock-seckill --scenarios": every strategy in each of the
 * three scenarios that make the naive locks fail (normal, a killed holder,
 * a lease shorter than the work), and ONE table with a column per scenario:
 * every naive strategy of the articles' evolution fails in at least one,
 * only the correct ones stay "ok" in all three. Also the JSON form and the
 * chart (a column per scenario, chart.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "json.h"
#include "seckill.h"

const char *const sk_scenario_names[SK_N_SCENARIOS] = {
    "normal", "kill-holder", "short-lease", "failover"};

static const char *const g_what[SK_N_SCENARIOS] = {
    "the options as given",
    "as normal, and a worker is killed (SIGKILL) at the worst point of each "
    "scheme, holding the lock",
    "work 2-4 ms under a 1 ms lease: every fixed lease runs out inside the "
    "critical section (dlock's watchdog renews its own)",
    "the last item; buyer A holds the lock while the lock store fails over "
    "(dlock: Redis master killed, its lagging replica promoted by Sentinel; "
    "etcd: the leader of 3 members killed); buyer B asks for the lock"};

typedef struct sc_all {
  sk_opts o[SK_N_SCENARIOS];
  sk_result res[SK_N_SCENARIOS][SK_MAX_STRATEGIES];
  int on[SK_N_SCENARIOS];
  int all_ok[SK_MAX_STRATEGIES];
  int first; /* the scenario whose speed is shown (normal if chosen) */
  double secs[SK_N_SCENARIOS];
} sc_all;

/* The options of scenario i. */
static void scenario_opts(const sk_opts *base, int i, sk_opts *o) {
  *o = *base;
  o->scenarios = 0;
  o->chart = NULL;
  if (i == 1)
    o->kill_holder = 1;
  if (i == 2) {
    o->lease_ms = 1;
    o->work_min_ms = 2;
    o->work_max_ms = 4;
  }
  if (i == SK_SC_FAILOVER) /* the buyers' lease outlasts a failover */
    o->watchdog_ms = 10000;
}

/* "ok", or "NO" and what went wrong first. */
static void cell(const sk_result *r, char *buf, size_t len) {
  if (!r->ran)
    snprintf(buf, len, "-");
  else if (r->correct)
    snprintf(buf, len, "ok");
  else if (r->oversold > 0)
    snprintf(buf, len, "NO oversold %lld", r->oversold);
  else if (r->lost_updates > 0)
    snprintf(buf, len, "NO lost %lld", r->lost_updates);
  else if (r->dup_users > 0)
    snprintf(buf, len, "NO dup-users %lld", r->dup_users);
  else if (r->deadlocked > 0)
    snprintf(buf, len, "NO deadlocked %lld", r->deadlocked);
  else if (r->stuck_lock)
    snprintf(buf, len, "NO lock left");
  else if (r->unfinished > 0)
    snprintf(buf, len, "NO too slow");
  else
    snprintf(buf, len, "NO errors %lld", r->errors);
}

/* Strategy i's lessons, one line per distinct lesson with the scenarios
 * it came from. */
static void print_lessons(const sc_all *a, int i) {
  char l[SK_N_SCENARIOS][512];
  int done[SK_N_SCENARIOS] = {0};
  for (int s = 0; s < SK_N_SCENARIOS; s++) {
    const sk_result *r = &a->res[s][i];
    l[s][0] = '\0';
    if (a->on[s] && r->ran && (!r->correct || r->lesson[0]))
      sk_lesson(r, l[s], sizeof l[s], &a->o[s]);
  }
  for (int s = 0; s < SK_N_SCENARIOS; s++) {
    if (!l[s][0] || done[s])
      continue;
    printf("  %s (%s", a->res[s][i].s->name, sk_scenario_names[s]);
    for (int t = s + 1; t < SK_N_SCENARIOS; t++)
      if (!done[t] && strcmp(l[s], l[t]) == 0) {
        printf(", %s", sk_scenario_names[t]);
        done[t] = 1;
      }
    printf("): %s\n", l[s]);
  }
}

static void print_table(const sc_all *a, int n, double total_s) {
  printf("\n%-13s", "strategy");
  for (int s = 0; s < SK_N_SCENARIOS; s++)
    if (a->on[s])
      printf(" %-18s", sk_scenario_names[s]);
  printf(" %-8s %9s %8s %8s\n", "verdict", "req/s", "p50 ms", "p99 ms");
  int good = 0, bad = 0;
  for (int i = 0; i < n; i++) {
    const sk_result *r0 = &a->res[a->first][i];
    if (!r0->ran)
      continue;
    printf("%-13s", r0->s->name);
    for (int s = 0; s < SK_N_SCENARIOS; s++) {
      char c[64];
      if (!a->on[s])
        continue;
      cell(&a->res[s][i], c, sizeof c);
      printf(" %-18s", c);
    }
    printf(" %-8s %9.0f %8.2f %8.2f\n", a->all_ok[i] ? "correct" : "FAILS",
           r0->throughput, r0->p50_ms, r0->p99_ms);
    good += a->all_ok[i];
    bad += !a->all_ok[i];
  }
  printf("\nlessons:\n");
  for (int i = 0; i < n; i++)
    print_lessons(a, i);
  for (int i = 0; i < n; i++)
    if (!a->res[a->first][i].ran)
      printf("%s: %s\n", a->res[a->first][i].s->name,
             a->res[a->first][i].skipped);
  printf("\n%d correct in every scenario, %d failed in at least one, in %.1f "
         "s. req/s, p50, p99: the %s scenario.\n",
         good, bad, total_s, sk_scenario_names[a->first]);
}

static void print_json(const sc_all *a, int n, double total_s) {
  printf("{\"tool\":\"dlock-seckill\",\"version\":");
  dlc_json_str(stdout, dlock_version_string());
  printf(",\"seconds\":%.3f,\"scenarios\":[", total_s);
  int first = 1;
  for (int s = 0; s < SK_N_SCENARIOS; s++) {
    if (!a->on[s])
      continue;
    printf("%s{\"scenario\":\"%s\",", first ? "" : ",", sk_scenario_names[s]);
    first = 0;
    sk_report_json_body(&a->o[s], a->res[s], n, a->secs[s]);
    printf("}");
  }
  printf("],\"correct_in_all\":[");
  first = 1;
  for (int i = 0; i < n; i++)
    if (a->res[a->first][i].ran && a->all_ok[i]) {
      printf("%s", first ? "" : ",");
      dlc_json_str(stdout, a->res[a->first][i].s->name);
      first = 0;
    }
  printf("]}\n");
}

/* The chart: a column per chosen scenario (chart.c). */
static int chart(const sc_all *a, int n, const char *path) {
  sk_chart_col cols[SK_N_SCENARIOS];
  int k = 0;
  for (int s = 0; s < SK_N_SCENARIOS; s++)
    if (a->on[s])
      cols[k++] = (sk_chart_col){sk_scenario_names[s], &a->o[s], a->res[s]};
  return sk_chart_svg(path, "dlock-seckill: which lock survives which scenario",
                      cols, k, n);
}

int sk_run_scenarios(const sk_opts *o, void (*stop_servers)(void)) {
  static sc_all a;
  memset(&a, 0, sizeof a);
  a.first = -1;
  long long t0 = dlc_now_us();
  for (int s = 0; s < SK_N_SCENARIOS; s++) {
    if (!(o->scenarios & (1u << s)))
      continue;
    a.on[s] = 1;
    if (a.first < 0)
      a.first = s;
    scenario_opts(o, s, &a.o[s]);
    if (!o->json) {
      char line[512];
      sk_settings_line(&a.o[s], line, sizeof line);
      printf("scenario %s: %s\n  %s\n", sk_scenario_names[s], g_what[s], line);
      fflush(stdout);
    }
    long long ts = dlc_now_us();
    for (int i = 0; i < o->n_list; i++)
      if (s == SK_SC_FAILOVER)
        sk_failover_run(&a.o[s], o->list[i], &a.res[s][i]);
      else
        sk_run_strategy(&a.o[s], o->list[i], i, &a.res[s][i]);
    a.secs[s] = (double)(dlc_now_us() - ts) / 1e6;
  }
  double total_s = (double)(dlc_now_us() - t0) / 1e6;
  stop_servers();
  if (a.first < 0) /* sk_parse_args refuses an empty list */
    return SK_EX_USAGE;
  for (int i = 0; i < o->n_list; i++) {
    a.all_ok[i] = 1;
    for (int s = 0; s < SK_N_SCENARIOS; s++)
      if (a.on[s] && a.res[s][i].ran && !a.res[s][i].correct)
        a.all_ok[i] = 0;
  }
  if (o->json)
    print_json(&a, o->n_list, total_s);
  else
    print_table(&a, o->n_list, total_s);
  int ex = 0;
  if (o->chart && chart(&a, o->n_list, o->chart) != 0) {
    fprintf(stderr, "dlock-seckill: cannot write %s: %s\n", o->chart,
            strerror(errno));
    ex = 73;
  }
  return fflush(stdout) == 0 ? ex : SK_EX_SOFTWARE;
}
