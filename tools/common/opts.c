/*
 * opts.c -- the table-driven option parser and the --help generator of the
 * tools (see opts.h). Hand-written rather than getopt_long: the CLI's
 * grammar mixes a subcommand, options before and after the lock name and a
 * command that starts at "--" or at the first free word, so each tool owns
 * its positional words and this file owns the option words.
 */
#include "opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int dlc_opt_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* The option named name[0..n): an exact match, else (when the table
 * allows it) the only option the name is a prefix of. */
static const dlc_opt *find_long(const dlc_optset *s, const char *name,
                                size_t n) {
  const dlc_opt *pre = NULL;
  int npre = 0;
  for (size_t i = 0; i < s->n; i++) {
    const dlc_opt *o = &s->opts[i];
    if (strncmp(o->lng, name, n) != 0)
      continue;
    if (o->lng[n] == '\0')
      return o;
    if (!pre || pre->id != o->id) /* aliases of one option are one */
      npre++;
    pre = o;
  }
  return s->prefixes && npre == 1 && n > 0 ? pre : NULL;
}

static const dlc_opt *find_short(const dlc_optset *s, char c) {
  for (size_t i = 0; i < s->n; i++)
    if (s->opts[i].shrt == c)
      return &s->opts[i];
  return NULL;
}

/* --name, --name=VALUE, --name VALUE */
static int long_word(const dlc_optset *s, int argc, char **argv, int *i,
                     dlc_opt_fn fn, void *ctx, char *err, size_t el) {
  const char *nm = argv[*i] + 2, *eq = strchr(nm, '=');
  size_t n = eq ? (size_t)(eq - nm) : strlen(nm);
  const dlc_opt *o = find_long(s, nm, n);
  if (!o)
    return dlc_opt_fail(err, el, "unknown option '--%.*s'", (int)n, nm);
  const char *val = NULL;
  if (o->arg) {
    if (eq)
      val = eq + 1;
    else if (*i + 1 < argc)
      val = argv[++*i];
    else
      return dlc_opt_fail(err, el, "option '--%s' needs a value", o->lng);
  } else if (eq) {
    return dlc_opt_fail(err, el, "option '--%s' takes no value", o->lng);
  }
  return fn(ctx, o, val, err, el);
}

/* -x, -xVALUE, -x VALUE, -vq */
static int short_word(const dlc_optset *s, int argc, char **argv, int *i,
                      dlc_opt_fn fn, void *ctx, char *err, size_t el) {
  for (const char *p = argv[*i] + 1; *p; p++) {
    const dlc_opt *o = find_short(s, *p);
    if (!o)
      return dlc_opt_fail(err, el, "unknown option '-%c'", *p);
    if (!o->arg) {
      int rc = fn(ctx, o, NULL, err, el);
      if (rc)
        return rc;
      continue;
    }
    const char *val;
    if (p[1])
      val = p + 1;
    else if (*i + 1 < argc)
      val = argv[++*i];
    else
      return dlc_opt_fail(err, el, "option '-%c' needs a value", *p);
    return fn(ctx, o, val, err, el);
  }
  return 0;
}

int dlc_opt_word(const dlc_optset *s, int argc, char **argv, int *i,
                 dlc_opt_fn fn, void *ctx, char *err, size_t errlen) {
  if (argv[*i][1] == '-')
    return long_word(s, argc, argv, i, fn, ctx, err, errlen);
  return short_word(s, argc, argv, i, fn, ctx, err, errlen);
}

int dlc_opt_parse_all(const dlc_optset *s, int argc, char **argv, dlc_opt_fn fn,
                      void *ctx, char *err, size_t errlen) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      if (i + 1 < argc)
        return dlc_opt_fail(err, errlen, "unexpected argument '%s'",
                            argv[i + 1]);
      return 0;
    }
    if (a[0] != '-' || a[1] == '\0')
      return dlc_opt_fail(err, errlen, "unexpected argument '%s'", a);
    int rc = dlc_opt_word(s, argc, argv, &i, fn, ctx, err, errlen);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- --help ------------------------------------------------------------- */

/* "-x, --name ARG", "    --name ARG" or "--name ARG", or the label. */
static int left_column(const dlc_optset *s, const dlc_opt *o, char *buf,
                       size_t len) {
  if (o->label)
    return snprintf(buf, len, "%s", o->label);
  const char *arg = o->arg ? o->arg : "";
  const char *sp = o->arg ? " " : "";
  if (o->shrt)
    return snprintf(buf, len, "-%c, --%s%s%s", o->shrt, o->lng, sp, arg);
  return snprintf(buf, len, "%s--%s%s%s", s->indent_long ? "    " : "", o->lng,
                  sp, arg);
}

/* The description: its first line after the left column, the others
 * starting at the description column. */
static void description(FILE *f, const char *help, int col) {
  for (const char *p = help;;) {
    size_t n = strcspn(p, "\n");
    fprintf(f, "%.*s", (int)n, p);
    if (!p[n])
      return;
    p += n + 1;
    fprintf(f, "\n%*s", col, "");
  }
}

void dlc_opt_help(FILE *f, const dlc_optset *s) {
  int open = 0; /* a line is being written */
  for (size_t i = 0; i < s->n; i++) {
    const dlc_opt *o = &s->opts[i];
    if (!o->help)
      continue;
    char left[128];
    int w = left_column(s, o, left, sizeof left);
    int join = open && (o->flags & DLC_OPT_JOIN);
    if (!join && open)
      fputc('\n', f);
    fprintf(f, "%s%s", join ? "   " : "  ", left);
    if (o->help[0]) {
      int pad = join || 2 + w >= s->help_col ? 2 : s->help_col - 2 - w;
      fprintf(f, "%*s", pad, "");
      description(f, o->help, s->help_col);
    }
    open = 1;
  }
  if (open)
    fputc('\n', f);
}

/* ---- values ------------------------------------------------------------- */

int dlc_opt_ll(const char *name, const char *s, long long lo, long long hi,
               long long *out, char *err, size_t errlen) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno)
    return dlc_opt_fail(err, errlen, "%s: not a number: '%s'", name, s);
  if (v < lo || v > hi)
    return dlc_opt_fail(err, errlen, "%s: %lld is out of range %lld..%lld",
                        name, v, lo, hi);
  *out = v;
  return 0;
}
