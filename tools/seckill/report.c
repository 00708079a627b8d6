/* report.c -- the results of dlock-seckill as a table with one lesson
 * under each failing strategy, as one JSON object, and as a standalone SVG
 * bar chart (throughput and oversold per strategy). */
#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "json.h"
#include "seckill.h"

const char *sk_lesson(const sk_result *r, char *buf, size_t len,
                      const sk_opts *o) {
  const sk_strategy *s = r->s;
  (void)o;
  if (r->oversold > 0 || r->lost_updates > 0)
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

void sk_report_json(const sk_opts *o, const sk_result *res, int n,
                    double total_s) {
  printf("{\"tool\":\"dlock-seckill\",\"version\":");
  dlc_json_str(stdout, dlock_version_string());
  printf(",\"params\":{\"stock\":%lld,\"procs\":%lld,\"threads\":%lld,"
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
  printf("]}\n");
}

static void xml_str(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '&':
      fputs("&amp;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    default:
      fputc(*s, f);
    }
  }
}

/* Two horizontal bar panels side by side: throughput (green when correct,
 * red when not) and oversold (red bars; "0" printed when none). */
int sk_report_svg(const sk_opts *o, const sk_result *res, int n,
                  const char *path) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  int rows = 0;
  double max_tp = 1, max_os = 1;
  for (int i = 0; i < n; i++) {
    if (!res[i].ran)
      continue;
    rows++;
    if (res[i].throughput > max_tp)
      max_tp = res[i].throughput;
    if ((double)res[i].oversold > max_os)
      max_os = (double)res[i].oversold;
  }
  const int row_h = 28, top = 70, label_w = 120, bar_w = 300, gap = 150;
  int width = label_w + 2 * bar_w + gap + 90; /* room for the labels */
  int height = top + rows * row_h + 50;
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
          "font-size=\"13\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">"
          "dlock-seckill: stock %lld, %lld requests, %lld procs x %lld "
          "threads</text>\n"
          "<text x=\"%d\" y=\"55\" font-weight=\"bold\">throughput "
          "(requests/s; green = correct, red = wrong)</text>\n"
          "<text x=\"%d\" y=\"55\" font-weight=\"bold\">oversold "
          "(items)</text>\n",
          width, height, width, height, o->stock, o->requests, o->procs,
          o->threads, label_w, label_w + bar_w + gap);
  int y = top;
  for (int i = 0; i < n; i++) {
    const sk_result *r = &res[i];
    if (!r->ran)
      continue;
    int w1 = (int)(r->throughput / max_tp * bar_w);
    int w2 = (int)((double)r->oversold / max_os * bar_w);
    fprintf(f, "<text x=\"10\" y=\"%d\">", y + 17);
    xml_str(f, r->s->name);
    fprintf(f, "</text>\n");
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"%s\"/>\n<text x=\"%d\" y=\"%d\">%.0f%s</text>\n",
            label_w, y + 4, w1 > 0 ? w1 : 1, row_h - 8,
            r->correct ? "#3a9d4a" : "#d0453a", label_w + (w1 > 0 ? w1 : 1) + 5,
            y + 17, r->throughput, r->deadlocked ? " (deadlocked)" : "");
    int x2 = label_w + bar_w + gap;
    if (w2 > 0)
      fprintf(f,
              "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
              "fill=\"#d0453a\"/>\n",
              x2, y + 4, w2, row_h - 8);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%lld</text>\n", x2 + w2 + 5, y + 17,
            r->oversold);
    y += row_h;
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? 0 : -1;
}
