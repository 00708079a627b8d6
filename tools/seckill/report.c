/* report.c -- the results of dlock-seckill as a table with one lesson
 * under each failing strategy, as one JSON object, and as a standalone SVG
 * chart (chart.c) with this run as its one column. */
#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "json.h"
#include "seckill.h"

const char *sk_lesson(const sk_result *r, char *buf, size_t len,
                      const sk_opts *o) {
  const sk_strategy *s = r->s;
  (void)o;
  if (r->lesson[0]) /* the scenario's own (failover.c) */
    snprintf(buf, len, "%s", r->lesson);
  else if (r->oversold > 0 || r->lost_updates > 0)
    snprintf(buf, len, "%s", s->lesson_race);
  else if (r->dup_users > 0)
    snprintf(buf, len, "%s", s->lesson_dup);
  else if (r->deadlocked > 0)
    snprintf(buf, len, "%s%s", s->lesson_dead,
             r->stuck_lock ? " (the lock key is still there, no TTL)" : "");
  else if (r->stuck_lock)
    snprintf(buf, len,
             "the lock key was left behind with no expiry: the "
             "next buyer would wait forever");
  else if (r->unfinished > 0)
    snprintf(buf, len,
             "%lld requests were still queued at --deadline-ms while the "
             "run was making progress: too slow for the deadline, not stuck",
             r->unfinished);
  else if (r->errors > 0)
    snprintf(buf, len, "errors: %s",
             r->first_error[0] ? r->first_error : "see stderr");
  else if (o && o->kill_holder && r->victim_killed)
    snprintf(buf, len, "survived the kill: %s",
             s->kind == SK_NONE || s->kind == SK_ATOMIC
                 ? "there is no lock a dead process could leave behind"
             : s->kind == SK_LOCAL ? "the lock died with its process"
             : s->uses_lease || s->kind == SK_GETSET
                 ? "the dead holder's lock expired after --lease-ms"
                 : "the dead holder's lock expired after the watchdog "
                   "lease (--watchdog-ms)");
  else if (s->kind == SK_LOCAL && o && o->procs == 1)
    snprintf(buf, len,
             "passed because there is one process (--procs 1): "
             "run several and it oversells");
  else if (s->hint && !(o && o->kill_holder))
    snprintf(buf, len, "%s", s->hint);
  else
    buf[0] = '\0';
  return buf;
}

static const char *verdict(const sk_result *r) {
  if (!r->ran)
    return "-";
  return r->correct ? "yes" : "NO";
}

void sk_report_table(const sk_opts *o, const sk_result *res, int n,
                     double total_s) {
  printf("\n%-13s %-8s %6s %6s %8s %6s %8s %6s %10s %9s %8s %8s", "strategy",
         "correct?", "orders", "stock", "oversold", "lost", "rejected",
         "errors", "deadlocked", "req/s", "p50 ms", "p99 ms");
  if (o->users)
    printf(" %9s", "dup-users");
  if (o->kill_holder)
    printf(" %6s", "killed");
  printf("\n");
  char buf[512];
  for (int i = 0; i < n; i++) {
    const sk_result *r = &res[i];
    if (!r->ran)
      continue;
    printf("%-13s %-8s %6lld %6lld %8lld %6lld %8lld %6lld %10lld %9.0f "
           "%8.2f %8.2f",
           r->s->name, verdict(r), r->orders, r->final_stock, r->oversold,
           r->lost_updates, r->soldout + r->duplicates_rejected, r->errors,
           r->deadlocked, r->throughput, r->p50_ms, r->p99_ms);
    if (o->users)
      printf(" %9lld", r->dup_users);
    if (o->kill_holder)
      printf(" %6lld", r->killed);
    printf("\n");
    sk_lesson(r, buf, sizeof buf, o);
    if (buf[0])
      printf("  %s %s\n", r->correct ? "note:" : "lesson:", buf);
  }
  for (int i = 0; i < n; i++)
    if (!res[i].ran)
      printf("%s: %s\n", res[i].s->name, res[i].skipped);
  int bad = 0, good = 0;
  for (int i = 0; i < n; i++) {
    if (!res[i].ran)
      continue;
    if (res[i].correct)
      good++;
    else
      bad++;
  }
  printf("\n%d correct, %d failed, in %.1f s. oversold = orders beyond the "
         "stock (or negative stock); lost = orders - (initial - final "
         "stock)\n",
         good, bad, total_s);
}

void sk_report_json_body(const sk_opts *o, const sk_result *res, int n,
                         double total_s) {
  printf("\"params\":{\"stock\":%lld,\"procs\":%lld,\"threads\":%lld,"
         "\"requests\":%lld,\"work_ms\":[%g,%g],\"lease_ms\":%lld,"
         "\"watchdog_ms\":%lld,\"deadline_ms\":%lld,\"kill_holder\":%s,"
         "\"users\":%lld,\"segments\":%lld},",
         o->stock, o->procs, o->threads, o->requests, o->work_min_ms,
         o->work_max_ms, o->lease_ms, o->watchdog_ms, o->deadline_ms,
         o->kill_holder ? "true" : "false", o->users, o->segments);
  printf("\"seconds\":%.3f,\"strategies\":[", total_s);
  char buf[512];
  int first = 1;
  for (int i = 0; i < n; i++) {
    const sk_result *r = &res[i];
    if (!r->ran)
      continue;
    printf("%s{\"name\":", first ? "" : ",");
    first = 0;
    dlc_json_str(stdout, r->s->name);
    printf(",\"correct\":%s,\"orders\":%lld,\"final_stock\":%lld,"
           "\"oversold\":%lld,\"lost_updates\":%lld,\"rejected\":%lld,"
           "\"rejected_soldout\":%lld,\"rejected_duplicate\":%lld,"
           "\"errors\":%lld,\"deadlocked\":%lld,\"unfinished\":%lld,"
           "\"killed\":%lld,"
           "\"victim_killed\":%s,\"stuck_lock\":%s,\"duplicate_users\":%lld,"
           "\"duplicate_orders\":%lld,\"throughput\":%.1f,\"p50_ms\":%.3f,"
           "\"p99_ms\":%.3f,\"wall_ms\":%.1f,\"stopped_at_deadline\":%s,"
           "\"lesson\":",
           r->correct ? "true" : "false", r->orders, r->final_stock,
           r->oversold, r->lost_updates, r->soldout + r->duplicates_rejected,
           r->soldout, r->duplicates_rejected, r->errors, r->deadlocked,
           r->unfinished, r->killed, r->victim_killed ? "true" : "false",
           r->stuck_lock ? "true" : "false", r->dup_users, r->dup_orders,
           r->throughput, r->p50_ms, r->p99_ms, r->wall_ms,
           r->stopped ? "true" : "false");
    dlc_json_str(stdout, sk_lesson(r, buf, sizeof buf, o));
    if (r->cell[0]) { /* a scenario's own label (failover.c) */
      printf(",\"cell\":");
      dlc_json_str(stdout, r->cell);
    }
    printf(",\"first_error\":");
    dlc_json_str(stdout, r->first_error);
    printf("}");
  }
  printf("],\"skipped\":[");
  first = 1;
  for (int i = 0; i < n; i++) {
    if (res[i].ran)
      continue;
    printf("%s{\"name\":", first ? "" : ",");
    first = 0;
    dlc_json_str(stdout, res[i].s->name);
    printf(",\"reason\":");
    dlc_json_str(stdout, res[i].skipped);
    printf("}");
  }
  printf("]");
}

void sk_report_json(const sk_opts *o, const sk_result *res, int n,
                    double total_s) {
  printf("{\"tool\":\"dlock-seckill\",\"version\":");
  dlc_json_str(stdout, dlock_version_string());
  printf(",");
  sk_report_json_body(o, res, n, total_s);
  printf("}\n");
}

void sk_settings_line(const sk_opts *o, char *buf, size_t len) {
  snprintf(buf, len,
           "stock %lld, %lld processes x %lld threads, %lld requests, work "
           "%g-%g ms, lease %lld ms, watchdog %lld ms%s%s, %s",
           o->stock, o->procs, o->threads, o->requests, o->work_min_ms,
           o->work_max_ms, o->lease_ms, o->watchdog_ms,
           o->kill_holder ? ", --kill-holder" : "",
           o->users ? ", one order per user" : "", o->url_shown);
}

int sk_report_svg(const sk_opts *o, const sk_result *res, int n,
                  const char *path) {
  sk_chart_col col = {"this run", o, res};
  return sk_chart_svg(path, "dlock-seckill: what each lock did", &col, 1, n);
}
