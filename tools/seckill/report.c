/* report.c -- the results of dlock-seckill as a table with one lesson
 * under each failing strategy, as one JSON object, and as a standalone SVG
 * bar chart (throughput on a log scale and oversold per strategy, the
 * settings in the title, the notes under it). */
#include <math.h>
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

void sk_settings_line(const sk_opts *o, char *buf, size_t len) {
  snprintf(buf, len,
           "stock %lld, %lld processes x %lld threads, %lld requests, work "
           "%g-%g ms, lease %lld ms, watchdog %lld ms%s%s, %s",
           o->stock, o->procs, o->threads, o->requests, o->work_min_ms,
           o->work_max_ms, o->lease_ms, o->watchdog_ms,
           o->kill_holder ? ", --kill-holder" : "",
           o->users ? ", one order per user" : "", o->url_shown);
}

/* Throughput bar length on a log scale: 1 req/s is 0, top is bar_w. */
static int log_len(double v, double top, int bar_w) {
  if (v <= 1)
    return 0;
  return (int)(log10(v) / log10(top) * bar_w);
}

/* The decade gridlines and labels of the throughput panel. */
static void svg_grid(FILE *f, double top, int x0, int bar_w, int y0, int y1) {
  static const char *const lab[] = {"1",   "10",   "100", "1k",
                                    "10k", "100k", "1M",  "10M"};
  for (int d = 0; d < 8 && pow(10, d) <= top; d++) {
    int x = x0 + log_len(pow(10, d), top, bar_w);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ccc\"/>\n"
            "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#666\" "
            "text-anchor=\"middle\">%s</text>\n",
            x, y0, x, y1, x, y1 + 12, lab[d]);
  }
}

/* One strategy's row: name, throughput bar (log), oversold bar. */
static void svg_row(FILE *f, const sk_result *r, int ok, int y, double top,
                    double max_os, int label_w, int bar_w, int x2, int row_h) {
  int w1 = log_len(r->throughput, top, bar_w);
  int w2 = (int)((double)r->oversold / max_os * bar_w);
  fprintf(f, "<text x=\"10\" y=\"%d\">", y + 17);
  xml_str(f, r->s->name);
  fprintf(f, "</text>\n");
  fprintf(f,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
          "fill=\"%s\"/>\n<text x=\"%d\" y=\"%d\">%.0f%s</text>\n",
          label_w, y + 4, w1 > 0 ? w1 : 1, row_h - 8,
          ok ? "#3a9d4a" : "#d0453a", label_w + (w1 > 0 ? w1 : 1) + 5, y + 17,
          r->throughput, r->deadlocked ? " (deadlocked)" : "");
  if (w2 > 0)
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"#d0453a\"/>\n",
            x2, y + 4, w2, row_h - 8);
  fprintf(f, "<text x=\"%d\" y=\"%d\">%lld</text>\n", x2 + w2 + 5, y + 17,
          r->oversold);
}

/* Two horizontal bar panels side by side: throughput on a log scale
 * (green when correct, red when not) and oversold (red bars; "0" printed
 * when none); the run's settings in the title, the notes under it. */
int sk_report_svg_ex(const sk_opts *o, const sk_result *res, int n,
                     const char *path, const int *all_ok, const char *title,
                     const char *const *notes, int n_notes) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  int rows = 0;
  double top = 10, max_os = 1;
  for (int i = 0; i < n; i++) {
    if (!res[i].ran)
      continue;
    rows++;
    while (res[i].throughput > top)
      top *= 10; /* the scale ends at the decade above the fastest */
    if ((double)res[i].oversold > max_os)
      max_os = (double)res[i].oversold;
  }
  const int row_h = 28, top_y = 90, label_w = 120, bar_w = 300, gap = 150;
  int width = label_w + 2 * bar_w + gap + 90; /* room for the labels */
  int notes_y = top_y + rows * row_h + 40;
  int height = notes_y + n_notes * 16 + 20;
  char settings[512];
  sk_settings_line(o, settings, sizeof settings);
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
          "font-size=\"13\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">",
          width, height, width, height);
  xml_str(f, title);
  fprintf(f, "</text>\n<text x=\"10\" y=\"42\" font-size=\"12\">");
  xml_str(f, settings);
  fprintf(f,
          "</text>\n<text x=\"%d\" y=\"72\" font-weight=\"bold\">throughput "
          "(requests/s, log scale; green = correct, red = wrong)</text>\n"
          "<text x=\"%d\" y=\"72\" font-weight=\"bold\">oversold "
          "(items)</text>\n",
          label_w, label_w + bar_w + gap);
  svg_grid(f, top, label_w, bar_w, top_y, top_y + rows * row_h);
  int y = top_y;
  for (int i = 0; i < n; i++) {
    if (!res[i].ran)
      continue;
    svg_row(f, &res[i], all_ok ? all_ok[i] : res[i].correct, y, top, max_os,
            label_w, bar_w, label_w + bar_w + gap, row_h);
    y += row_h;
  }
  for (int i = 0; i < n_notes; i++) {
    fprintf(f, "<text x=\"10\" y=\"%d\" font-size=\"11\">", notes_y + i * 16);
    xml_str(f, notes[i]);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? 0 : -1;
}

int sk_report_svg(const sk_opts *o, const sk_result *res, int n,
                  const char *path) {
  char lines[SK_MAX_STRATEGIES][600];
  const char *notes[SK_MAX_STRATEGIES];
  int k = 0;
  for (int i = 0; i < n; i++) {
    char buf[512];
    if (!res[i].ran || !sk_lesson(&res[i], buf, sizeof buf, o)[0])
      continue;
    snprintf(lines[k], sizeof lines[k], "%s -- %s %s", res[i].s->name,
             res[i].correct ? "note:" : "lesson:", buf);
    notes[k] = lines[k];
    k++;
  }
  return sk_report_svg_ex(o, res, n, path, NULL, "dlock-seckill", notes, k);
}
