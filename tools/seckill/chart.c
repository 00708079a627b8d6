/* chart.c -- dlock-seckill's --chart: one standalone SVG that tells the
 * story at a glance. A matrix strategy x scenario: each cell coloured by
 * what happened (green ok, red oversold / lost, orange deadlocked, grey
 * anything else) and labelled with it ("oversold 900", "deadlocked after 6
 * sold"), with that run's throughput under the label; a verdict column; the
 * first scenario's throughput as a log-scale bar beside each row; each
 * scenario's settings in its column header; under the matrix each distinct
 * lesson once, with the strategies and scenarios it came from.
 *
 * Every text is laid out with a conservative width estimate (DejaVu Sans /
 * Verdana metrics, the widest common sans-serif faces) and wrapped to its
 * box, so nothing overflows or overlaps whatever the strategy set;
 * tests/seckill/chart_test.py renders the file in headless Chromium and
 * checks every text's box against its neighbours, its cell and the canvas.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "seckill.h"

/* ---- text ---------------------------------------------------------------- */

/* The advance of one character in em, a little above DejaVu Sans'. */
static double char_em(unsigned char c) {
  if (c >= 0x80)
    return 0.5; /* a byte of a multi-byte character: wide enough in sum */
  if (strchr("iljI.,:;!'|", c))
    return 0.34;
  if (c == ' ')
    return 0.34;
  if (strchr("ft()[]-/", c))
    return 0.42;
  if (c == 'r')
    return 0.45;
  if (c == 'm' || c == 'M')
    return 1.0;
  if (c == 'w' || c == 'W')
    return 0.9;
  if (c >= 'A' && c <= 'Z')
    return 0.76;
  if (c >= '0' && c <= '9')
    return 0.66;
  if (c >= 'a' && c <= 'z')
    return 0.64;
  return 0.84; /* = + < > % & # @ ... */
}

/* Estimated width in px of the first n bytes of s at font size fs. */
static double text_w(const char *s, size_t n, double fs, int bold) {
  double w = 0;
  for (size_t i = 0; i < n && s[i]; i++)
    w += char_em((unsigned char)s[i]);
  return w * fs * (bold ? 1.12 : 1.0) * 1.04;
}

static void xml_str(FILE *f, const char *s, size_t n) {
  for (size_t i = 0; i < n && s[i]; i++) {
    switch (s[i]) {
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
      fputc(s[i], f);
    }
  }
}

/* How many bytes of s fit on one line of width w (breaking at a space,
 * else anywhere); *next: where the next line starts. */
static size_t fit(const char *s, double w, double fs, int bold,
                  const char **next) {
  size_t len = strcspn(s, "\n"), best = 0;
  if (text_w(s, len, fs, bold) <= w) {
    *next = s + len + (s[len] == '\n');
    return len;
  }
  for (size_t i = 1; i < len; i++)
    if (s[i] == ' ' && text_w(s, i, fs, bold) <= w)
      best = i;
  if (best == 0) { /* one long word: cut it */
    best = 1;
    while (best < len && text_w(s, best + 1, fs, bold) <= w)
      best++;
    *next = s + best;
    return best;
  }
  *next = s + best + 1;
  return best;
}

typedef struct txt {
  double size;
  int bold;
  const char *fill;
  const char *anchor; /* start, middle, end */
  const char *cls;    /* class attribute (the test's handle), or NULL */
} txt;

/* s wrapped to width w, the first baseline at y, each line its own
 * <text> (so that each box can be checked). With dry set nothing is
 * written. Returns the number of lines. */
static int wrapped(FILE *f, int dry, double x, double y, double w, const txt *t,
                   const char *s) {
  int lines = 0;
  const double lh = t->size * 1.3;
  while (*s) {
    const char *next;
    size_t n = fit(s, w, t->size, t->bold, &next);
    if (!dry) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\"", x,
              y + lines * lh, t->size);
      if (t->bold)
        fputs(" font-weight=\"bold\"", f);
      if (t->fill)
        fprintf(f, " fill=\"%s\"", t->fill);
      if (t->anchor)
        fprintf(f, " text-anchor=\"%s\"", t->anchor);
      if (t->cls)
        fprintf(f, " class=\"%s\"", t->cls);
      fputc('>', f);
      xml_str(f, s, n);
      fputs("</text>\n", f);
    }
    lines++;
    s = next;
  }
  return lines;
}

/* ---- what each cell says --------------------------------------------------
 */

enum cell_kind { C_OK, C_WRONG, C_STUCK, C_OTHER, C_NOTRUN };

static const char *const g_fill[] = {"#2e8b3e", "#c8372d", "#d9822b", "#6b6b6b",
                                     "#bdbdbd"};

static enum cell_kind cell_label(const sk_result *r, char *buf, size_t len) {
  if (!r->ran)
    return snprintf(buf, len, "not run"), C_NOTRUN;
  if (r->cell[0]) /* the scenario's own words (failover.c) */
    return snprintf(buf, len, "%s", r->cell), r->correct ? C_OK : C_WRONG;
  if (r->correct)
    return snprintf(buf, len, "ok"), C_OK;
  if (r->oversold > 0)
    return snprintf(buf, len, "oversold %lld", r->oversold), C_WRONG;
  if (r->lost_updates > 0)
    return snprintf(buf, len, "lost %lld", r->lost_updates), C_WRONG;
  if (r->dup_users > 0)
    return snprintf(buf, len, "%lld users bought twice", r->dup_users), C_WRONG;
  if (r->deadlocked > 0)
    return snprintf(buf, len, "deadlocked after %lld sold", r->orders), C_STUCK;
  if (r->stuck_lock)
    return snprintf(buf, len, "lock left behind, no TTL"), C_STUCK;
  if (r->unfinished > 0)
    return snprintf(buf, len, "too slow: %lld unfinished", r->unfinished),
           C_OTHER;
  return snprintf(buf, len, "errors %lld", r->errors), C_OTHER;
}

/* ---- lessons ------------------------------------------------------------ */

#define MAX_LESSONS (SK_MAX_STRATEGIES * SK_N_SCENARIOS)

typedef struct lesson {
  char text[512];
  char who[400]; /* "none (normal, short-lease); local (normal)" */
  int note;      /* a hint for a strategy that passed */
  int last_i;    /* the strategy the who list ends with */
} lesson;

static lesson *lesson_add(lesson *ls, int *n, const char *text, int note) {
  for (int k = 0; k < *n; k++)
    if (ls[k].note == note && strcmp(ls[k].text, text) == 0)
      return &ls[k];
  if (*n >= MAX_LESSONS)
    return NULL;
  lesson *l = &ls[(*n)++];
  memset(l, 0, sizeof *l);
  snprintf(l->text, sizeof l->text, "%s", text);
  l->note = note;
  l->last_i = -1;
  return l;
}

/* Adds "name (scenario" or ", scenario" to l's list. */
static void lesson_who(lesson *l, int i, const char *name, const char *scen) {
  size_t n = strlen(l->who);
  if (l->last_i == i && scen) {
    n -= 1; /* reopen the ")" */
    snprintf(l->who + n, sizeof l->who - n, ", %s)", scen);
    return;
  }
  if (scen)
    snprintf(l->who + n, sizeof l->who - n, "%s%s (%s)", n ? "; " : "", name,
             scen);
  else
    snprintf(l->who + n, sizeof l->who - n, "%s%s", n ? ", " : "", name);
  l->last_i = i;
}

static int collect_lessons(const sk_chart_col *cols, int ncols, int n,
                           const int *all_ok, lesson *ls) {
  int k = 0;
  char buf[512];
  for (int i = 0; i < n; i++)
    for (int s = 0; s < ncols; s++) {
      const sk_result *r = &cols[s].res[i];
      if (!r->ran || (r->correct && !r->lesson[0]) ||
          !sk_lesson(r, buf, sizeof buf, cols[s].o)[0])
        continue;
      lesson *l = lesson_add(ls, &k, buf, 0);
      if (l)
        lesson_who(l, i, r->s->name, ncols > 1 ? cols[s].name : NULL);
    }
  for (int i = 0; i < n; i++) {
    const sk_result *r = &cols[0].res[i];
    if (!r->ran || !all_ok[i] || !r->s->hint ||
        !sk_lesson(r, buf, sizeof buf, cols[0].o)[0])
      continue;
    lesson *l = lesson_add(ls, &k, buf, 1);
    if (l)
      lesson_who(l, i, r->s->name, NULL);
  }
  for (int i = 0; i < n; i++) {
    const sk_result *r = &cols[0].res[i];
    if (r->ran)
      continue;
    lesson *l = lesson_add(ls, &k, r->skipped, 1);
    if (l)
      lesson_who(l, i, r->s->name, NULL);
  }
  return k;
}

/* ---- the picture ------------------------------------------------------- */

#define MARGIN 16.0
#define NAME_W 112.0
#define CELL_W 168.0
#define GAP 6.0
#define VERDICT_W 78.0
#define BAR_W 150.0
#define SPEED_W (BAR_W + 92.0)
#define CELL_FS 13.0
#define SUB_FS 11.0

/* Throughput bar length on a log scale: 1 req/s is 0, top is BAR_W. */
static double log_len(double v, double top) {
  return v <= 1 ? 0 : log10(v) / log10(top) * BAR_W;
}

/* One pass of the layout: with dry set it only measures. Returns the
 * height. */
/* The title, the settings every column shares, and the legend; the y
 * below them. */
static double draw_title(FILE *f, int dry, double width, const char *title,
                         const sk_chart_col *cols) {
  const double inner = width - 2 * MARGIN;
  double y = MARGIN + 16;
  txt t_title = {18, 1, "#111", NULL, "title"};
  txt t_sub = {12, 0, "#333", NULL, "subtitle"};
  y += wrapped(f, dry, MARGIN, y, inner, &t_title, title) * 18 * 1.3;
  char common[512];
  const sk_opts *o = cols[0].o;
  snprintf(common, sizeof common,
           "%lld in stock, %lld purchase requests from %lld processes x %lld "
           "threads%s, %s. Each cell: what happened, and that run's "
           "requests/s.",
           o->stock, o->requests, o->procs, o->threads,
           o->users ? ", one order per user" : "", o->url_shown);
  y += wrapped(f, dry, MARGIN, y, inner, &t_sub, common) * 12 * 1.3 + 4;

  /* legend */
  static const char *const leg[] = {"ok", "oversold / lost updates",
                                    "deadlocked / lock left behind",
                                    "too slow / errors"};
  double lx = MARGIN;
  for (int k = 0; k < 4; k++) {
    double w = text_w(leg[k], strlen(leg[k]), 12, 0);
    if (lx + 18 + w > width - MARGIN) {
      lx = MARGIN;
      y += 18;
    }
    if (!dry) {
      fprintf(f,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" "
              "fill=\"%s\"/>\n",
              lx, y - 10, g_fill[k]);
      txt t = {12, 0, "#333", NULL, "legend"};
      wrapped(f, 0, lx + 16, y, w + 4, &t, leg[k]);
    }
    lx += 16 + w + 18;
  }
  y += 22;

  return y;
}

/* The column headers (scenario names and settings, verdict, speed) at y;
 * the y below the tallest. */
static double draw_headers(FILE *f, int dry, const sk_chart_col *cols,
                           int ncols, double y) {
  /* column headers: scenario names and settings */
  const double x_cells = MARGIN + NAME_W;
  const double x_verdict = x_cells + ncols * (CELL_W + GAP);
  const double x_speed = x_verdict + VERDICT_W;
  txt t_head = {13, 1, "#111", NULL, "head"};
  txt t_set = {SUB_FS, 0, "#555", NULL, "settings"};
  double head_h = 0; /* the last baseline of the headers, below y */
  for (int s = 0; s < ncols; s++) {
    char set[300];
    const sk_opts *so = cols[s].o;
    snprintf(set, sizeof set,
             "work %g-%g ms\nlease %lld ms\nwatchdog %lld ms%s",
             so->work_min_ms, so->work_max_ms, so->lease_ms, so->watchdog_ms,
             so->kill_holder ? "\na holder is killed" : "");
    double cx = x_cells + s * (CELL_W + GAP);
    int l = wrapped(f, dry, cx + 4, y, CELL_W - 8, &t_head, cols[s].name);
    int lset =
        wrapped(f, dry, cx + 4, y + l * 13 * 1.3, CELL_W - 8, &t_set, set);
    double h = l * 13 * 1.3 + (lset - 1) * SUB_FS * 1.3;
    if (h > head_h)
      head_h = h;
  }
  wrapped(f, dry, MARGIN, y, NAME_W - 8, &t_head, "strategy");
  wrapped(f, dry, x_verdict + 4, y, VERDICT_W - 8, &t_head, "verdict");
  char sp[120];
  snprintf(sp, sizeof sp, "speed in %s", cols[0].name);
  int sl = wrapped(f, dry, x_speed + 4, y, SPEED_W - 8, &t_head, sp);
  int ss = wrapped(f, dry, x_speed + 4, y + sl * 13 * 1.3, SPEED_W - 8, &t_set,
                   "requests/s, log scale");
  double h = sl * 13 * 1.3 + (ss - 1) * SUB_FS * 1.3;
  if (h > head_h)
    head_h = h;
  y += head_h + 8;

  return y;
}

/* The rows (one per strategy: a cell per scenario, the verdict, the speed
 * bar) and the speed column's decade gridlines, from y; the y below. */
static double draw_rows(FILE *f, int dry, const sk_chart_col *cols, int ncols,
                        int n, const int *all_ok, double y) {
  const double x_cells = MARGIN + NAME_W;
  const double x_verdict = x_cells + ncols * (CELL_W + GAP);
  const double x_speed = x_verdict + VERDICT_W;
  /* rows */
  double top = 10;
  for (int i = 0; i < n; i++)
    while (cols[0].res[i].ran && cols[0].res[i].throughput > top)
      top *= 10;
  const double grid_y0 = y;
  txt t_cell = {CELL_FS, 1, "#fff", NULL, "cell"};
  int lines = 1; /* every row as high as the tallest cell */
  for (int i = 0; i < n; i++)
    for (int s = 0; s < ncols; s++) {
      char lab[96];
      cell_label(&cols[s].res[i], lab, sizeof lab);
      int l = wrapped(f, 1, 0, 0, CELL_W - 12, &t_cell, lab);
      if (l > lines)
        lines = l;
    }
  const double row_h = 8 + lines * CELL_FS * 1.3 + SUB_FS * 1.3 + 4;
  for (int i = 0; i < n; i++) {
    char lab[SK_N_SCENARIOS][96];
    enum cell_kind kind[SK_N_SCENARIOS];
    for (int s = 0; s < ncols; s++)
      kind[s] = cell_label(&cols[s].res[i], lab[s], sizeof lab[s]);
    const sk_result *r0 = &cols[0].res[i];
    txt t_name = {13, 1, "#111", NULL, "name"};
    wrapped(f, dry, MARGIN, y + 20, NAME_W - 8, &t_name, r0->s->name);
    for (int s = 0; s < ncols; s++) {
      const sk_result *r = &cols[s].res[i];
      double cx = x_cells + s * (CELL_W + GAP);
      if (!dry) {
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "rx=\"4\" fill=\"%s\" data-cell=\"%d,%d\" data-strategy=\"%s\" "
                "data-scenario=\"%s\"/>\n",
                cx, y + 1, CELL_W, row_h - 2, g_fill[kind[s]], i, s, r->s->name,
                cols[s].name);
        fprintf(f, "<g data-cell=\"%d,%d\">\n", i, s);
      }
      int l = wrapped(f, dry, cx + 6, y + 6 + CELL_FS, CELL_W - 12, &t_cell,
                      lab[s]);
      if (r->ran) {
        char tp[64];
        if (r->cell[0]) /* a story, not a load (failover.c) */
          snprintf(tp, sizeof tp, "%.1f s", r->wall_ms / 1000);
        else
          snprintf(tp, sizeof tp, "%.0f req/s", r->throughput);
        txt t_tp = {SUB_FS, 0, "#fff", NULL, "cell-speed"};
        wrapped(f, dry, cx + 6, y + 6 + CELL_FS + l * CELL_FS * 1.3,
                CELL_W - 12, &t_tp, tp);
      }
      if (!dry)
        fputs("</g>\n", f);
    }
    txt t_v = {13, 1, all_ok[i] ? "#2e8b3e" : "#c8372d", NULL, "verdict"};
    wrapped(f, dry, x_verdict + 4, y + 20, VERDICT_W - 8, &t_v,
            !r0->ran    ? "-"
            : all_ok[i] ? "correct"
                        : "FAILS");
    if (r0->ran && !dry) {
      double w = log_len(r0->throughput, top);
      fprintf(f,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"14\" "
              "fill=\"#5b7db1\"/>\n",
              x_speed + 4, y + 9, w > 1 ? w : 1);
      char tp[64];
      snprintf(tp, sizeof tp, "%.0f", r0->throughput);
      txt t_tp = {12, 0, "#111", NULL, "speed"};
      wrapped(f, 0, x_speed + 4 + (w > 1 ? w : 1) + 4, y + 20,
              SPEED_W - BAR_W - 12, &t_tp, tp);
    }
    y += row_h;
  }
  /* decade gridlines of the speed column */
  static const char *const dec[] = {"1",   "10",   "100", "1k",
                                    "10k", "100k", "1M",  "10M"};
  for (int d = 0; d < 8 && pow(10, d) <= top; d++) {
    double x = x_speed + 4 + log_len(pow(10, d), top);
    if (!dry) {
      fprintf(f,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"#ccc\"/>\n",
              x, grid_y0, x, y);
      txt t = {10, 0, "#666", "middle", "grid"};
      wrapped(f, 0, x, y + 12, 40, &t, dec[d]);
    }
  }
  y += 20;

  return y;
}

/* "Why they failed": each lesson once, from y; the y below. */
static double draw_lessons(FILE *f, int dry, double inner, const lesson *ls,
                           int nls, double y) {
  txt t_head = {13, 1, "#111", NULL, "head"};
  /* lessons */
  int failures = 0;
  for (int k = 0; k < nls; k++)
    failures += !ls[k].note;
  if (nls > 0) {
    y += 14;
    wrapped(f, dry, MARGIN, y, inner, &t_head,
            failures ? "Why they failed (each lesson once)" : "Notes");
    y += 20;
  }
  for (int k = 0; k < nls; k++) {
    char line[sizeof ls->who + sizeof ls->text + 16];
    snprintf(line, sizeof line, "%s%.399s: %.511s", ls[k].note ? "note, " : "",
             ls[k].who, ls[k].text);
    char cls[32]; /* "lesson lesson-<k>": the lines of one lesson */
    snprintf(cls, sizeof cls, "lesson lesson-%d", k);
    txt t = {12, 0, ls[k].note ? "#555" : "#222", NULL, cls};
    y += wrapped(f, dry, MARGIN, y, inner, &t, line) * 12 * 1.3 + 4;
  }
  return y;
}

static double draw(FILE *f, int dry, double width, const char *title,
                   const sk_chart_col *cols, int ncols, int n,
                   const int *all_ok, const lesson *ls, int nls) {
  double y = draw_title(f, dry, width, title, cols);
  y = draw_headers(f, dry, cols, ncols, y);
  y = draw_rows(f, dry, cols, ncols, n, all_ok, y);
  y = draw_lessons(f, dry, width - 2 * MARGIN, ls, nls, y);
  return y + MARGIN - 8;
}

int sk_chart_svg(const char *path, const char *title, const sk_chart_col *cols,
                 int ncols, int n) {
  if (ncols < 1 || ncols > SK_N_SCENARIOS)
    return -1;
  int all_ok[SK_MAX_STRATEGIES];
  for (int i = 0; i < n; i++) {
    all_ok[i] = cols[0].res[i].ran;
    for (int s = 0; s < ncols; s++)
      if (cols[s].res[i].ran && !cols[s].res[i].correct)
        all_ok[i] = 0;
  }
  static lesson ls[MAX_LESSONS];
  int nls = collect_lessons(cols, ncols, n, all_ok, ls);
  double width =
      MARGIN + NAME_W + ncols * (CELL_W + GAP) + VERDICT_W + SPEED_W + MARGIN;
  if (width < 640)
    width = 640;
  double height = draw(NULL, 1, width, title, cols, ncols, n, all_ok, ls, nls);
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
          "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "font-family=\"DejaVu Sans, Verdana, sans-serif\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          width, ceil(height), width, ceil(height));
  draw(f, 0, width, title, cols, ncols, n, all_ok, ls, nls);
  fputs("</svg>\n", f);
  return fclose(f) == 0 ? 0 : -1;
}
