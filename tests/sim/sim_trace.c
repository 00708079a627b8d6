/*
 * sim_trace.c -- traces of server commands (sim_trace.h): parsing MONITOR
 * lines (Redis 7.0's format: "<sec>.<usec> [<db> <client>] "<arg>" ...",
 * arguments escaped as sdscatrepr does: \\ \" \n \r \t \a \b \xHH), and
 * the trace file (one command a line: time, client, then hex arguments).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_trace.h"
#include "th.h"

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q)
    th_fail(__FILE__, __LINE__, "out of memory");
  return q;
}

void sim_trace_init(sim_trace *t) { memset(t, 0, sizeof *t); }

void sim_trace_free(sim_trace *t) {
  for (size_t i = 0; i < t->n; i++) {
    for (int j = 0; j < t->cmd[i].argc; j++)
      free(t->cmd[i].argv[j]);
    free(t->cmd[i].argv);
    free(t->cmd[i].lens);
  }
  free(t->cmd);
  for (size_t i = 0; i < t->nconns; i++)
    free(t->conns[i]);
  free(t->conns);
  memset(t, 0, sizeof *t);
}

static int conn_index(sim_trace *t, const char *conn) {
  for (size_t i = 0; i < t->nconns; i++)
    if (strcmp(t->conns[i], conn) == 0)
      return (int)i;
  t->conns = xrealloc(t->conns, (t->nconns + 1) * sizeof *t->conns);
  t->conns[t->nconns] = strdup(conn);
  if (!t->conns[t->nconns])
    th_fail(__FILE__, __LINE__, "out of memory");
  return (int)t->nconns++;
}

void sim_trace_add(sim_trace *t, int64_t t_us, const char *conn, int argc,
                   const char *const *argv, const size_t *lens) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 256;
    t->cmd = xrealloc(t->cmd, t->cap * sizeof *t->cmd);
  }
  sim_cmd *c = &t->cmd[t->n++];
  c->t_us = t_us;
  c->conn = conn_index(t, conn);
  c->argc = argc;
  c->argv = xrealloc(NULL, (size_t)argc * sizeof *c->argv);
  c->lens = xrealloc(NULL, (size_t)argc * sizeof *c->lens);
  for (int i = 0; i < argc; i++) {
    c->argv[i] = xrealloc(NULL, lens[i] + 1);
    memcpy(c->argv[i], argv[i], lens[i]);
    c->argv[i][lens[i]] = '\0';
    c->lens[i] = lens[i];
  }
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

/* One quoted argument at *pp (just past the opening quote) into out;
 * returns its length, *pp past the closing quote; -1 if unterminated. */
static long unquote(const char **pp, const char *end, char *out) {
  const char *p = *pp;
  size_t o = 0;
  while (p < end && *p != '"') {
    if (*p == '\\' && p + 1 < end) {
      char e = p[1];
      if (e == 'x' && p + 3 < end && hexval(p[2]) >= 0 && hexval(p[3]) >= 0) {
        out[o++] = (char)(hexval(p[2]) * 16 + hexval(p[3]));
        p += 4;
        continue;
      }
      out[o++] = (char)(e == 'n'   ? '\n'
                        : e == 'r' ? '\r'
                        : e == 't' ? '\t'
                        : e == 'a' ? '\a'
                        : e == 'b' ? '\b'
                                   : e);
      p += 2;
      continue;
    }
    out[o++] = *p++;
  }
  if (p >= end)
    return -1;
  *pp = p + 1;
  return (long)o;
}

int sim_trace_add_monitor_line(sim_trace *t, const char *line, size_t len) {
  const char *end = line + len, *p = line;
  char *dot = NULL;
  long long sec = strtoll(p, &dot, 10);
  if (!dot || *dot != '.')
    return -1;
  long long usec = strtoll(dot + 1, NULL, 10);
  const char *lb = memchr(p, '[', len),
             *rb = lb ? memchr(lb, ']', (size_t)(end - lb)) : NULL;
  const char *sp = lb ? memchr(lb, ' ', (size_t)(end - lb)) : NULL;
  if (!lb || !rb || !sp || sp > rb)
    return -1;
  char conn[256];
  size_t cl = (size_t)(rb - sp - 1);
  if (cl >= sizeof conn)
    cl = sizeof conn - 1;
  memcpy(conn, sp + 1, cl);
  conn[cl] = '\0';
  if (strcmp(conn, "lua") == 0)
    return 0;
  int argc = 0, cap = 16;
  char **argv = xrealloc(NULL, (size_t)cap * sizeof *argv);
  size_t *lens = xrealloc(NULL, (size_t)cap * sizeof *lens);
  p = rb + 1;
  while ((p = memchr(p, '"', (size_t)(end - p))) != NULL) {
    p++;
    char *out = xrealloc(NULL, (size_t)(end - p) + 1);
    long n = unquote(&p, end, out);
    if (n < 0) {
      free(out);
      break;
    }
    out[n] = '\0';
    if (argc == cap) {
      cap *= 2;
      argv = xrealloc(argv, (size_t)cap * sizeof *argv);
      lens = xrealloc(lens, (size_t)cap * sizeof *lens);
    }
    argv[argc] = out;
    lens[argc++] = (size_t)n;
  }
  if (argc > 0)
    sim_trace_add(t, sec * 1000000LL + usec, conn, argc,
                  (const char *const *)argv, lens);
  for (int i = 0; i < argc; i++)
    free(argv[i]);
  free(argv);
  free(lens);
  return argc > 0 ? 1 : -1;
}

static void put_hex(FILE *f, const char *p, size_t n) {
  static const char hx[] = "0123456789abcdef";
  if (n == 0)
    fputc('-', f); /* an empty argument */
  for (size_t i = 0; i < n; i++) {
    fputc(hx[(unsigned char)p[i] >> 4], f);
    fputc(hx[(unsigned char)p[i] & 15], f);
  }
}

int sim_trace_save(const sim_trace *t, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  for (size_t i = 0; i < t->n; i++) {
    const sim_cmd *c = &t->cmd[i];
    fprintf(f, "%lld ", (long long)c->t_us);
    put_hex(f, t->conns[c->conn], strlen(t->conns[c->conn]));
    fprintf(f, " %d", c->argc);
    for (int j = 0; j < c->argc; j++) {
      fputc(' ', f);
      put_hex(f, c->argv[j], c->lens[j]);
    }
    fputc('\n', f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

/* A hex word at *pp into a malloc'd buffer; its length, -1 if malformed. */
static long get_hex(char **pp, char **out) {
  char *p = *pp;
  while (*p == ' ')
    p++;
  char *w = p;
  while (*p && *p != ' ' && *p != '\n')
    p++;
  size_t wl = (size_t)(p - w);
  *pp = p;
  *out = xrealloc(NULL, wl / 2 + 1);
  if (wl == 1 && w[0] == '-') {
    (*out)[0] = '\0';
    return 0;
  }
  if (wl % 2)
    return -1;
  for (size_t i = 0; i < wl / 2; i++) {
    int a = hexval(w[2 * i]), b = hexval(w[2 * i + 1]);
    if (a < 0 || b < 0)
      return -1;
    (*out)[i] = (char)(a * 16 + b);
  }
  (*out)[wl / 2] = '\0';
  return (long)(wl / 2);
}

static int load_line(sim_trace *t, char *line) {
  char *p = line, *conn = NULL;
  long long tus = strtoll(p, &p, 10);
  if (get_hex(&p, &conn) < 0) {
    free(conn);
    return -1;
  }
  int argc = (int)strtol(p, &p, 10);
  if (argc <= 0 || argc > 100000) {
    free(conn);
    return -1;
  }
  char **argv = xrealloc(NULL, (size_t)argc * sizeof *argv);
  size_t *lens = xrealloc(NULL, (size_t)argc * sizeof *lens);
  int ok = 1, got = 0;
  for (; got < argc && ok; got++) {
    long n = get_hex(&p, &argv[got]);
    ok = n >= 0;
    lens[got] = ok ? (size_t)n : 0;
  }
  if (ok)
    sim_trace_add(t, tus, conn, argc, (const char *const *)argv, lens);
  for (int i = 0; i < got; i++)
    free(argv[i]);
  free(argv);
  free(lens);
  free(conn);
  return ok ? 0 : -1;
}

int sim_trace_load(sim_trace *t, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  while (rc == 0 && getline(&line, &cap, f) > 0)
    rc = load_line(t, line);
  free(line);
  fclose(f);
  if (rc)
    errno = EINVAL;
  return rc;
}

int sim_cmd_is(const sim_cmd *c, const char *lower_name) {
  size_t n = strlen(lower_name);
  if (c->argc < 1 || c->lens[0] != n)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = c->argv[0][i];
    if (ch >= 'A' && ch <= 'Z')
      ch = (char)(ch - 'A' + 'a');
    if (ch != lower_name[i])
      return 0;
  }
  return 1;
}
