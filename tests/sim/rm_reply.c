/*
 * rm_reply.c -- the Redis model's replies (redis_model.h): rm_reply trees,
 * the tree sink that commands write a client's reply through (rm_int.h),
 * and the reply helpers every command uses (rm_out_*: the texts of Redis's
 * common error replies live here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

void rm_reply_clear(rm_reply *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->elements; i++)
    rm_reply_clear(&r->element[i]);
  free(r->element);
  free(r->str);
  *r = (rm_reply){RM_REPLY_NIL, 0, NULL, 0, 0, NULL};
}

void rm_reply_copy(rm_reply *dst, const rm_reply *src) {
  *dst = *src;
  if (src->str)
    dst->str = rm_xmemdup(src->str, src->len);
  if (src->elements) {
    dst->element = rm_xmalloc(src->elements * sizeof *dst->element);
    for (size_t i = 0; i < src->elements; i++)
      rm_reply_copy(&dst->element[i], &src->element[i]);
  }
}

/* ---- the tree sink ---- */

void rm_tree_begin(rm_tree *t, rm_reply *out) {
  memset(t, 0, sizeof *t);
  t->root = out;
  rm_reply_clear(out);
}

static rm_reply *slot(rm_tree *t) {
  if (t->depth == 0) {
    t->started = 1;
    return t->root;
  }
  int d = t->depth - 1;
  return &t->arr[d]->element[t->filled[d]++];
}

static void complete(rm_tree *t) {
  while (t->depth > 0 &&
         t->filled[t->depth - 1] == t->arr[t->depth - 1]->elements)
    t->depth--;
}

static void t_str(void *st, int type, const char *p, size_t n) {
  rm_tree *t = st;
  rm_reply *r = slot(t);
  *r = (rm_reply){type, 0, rm_xmemdup(p, n), n, 0, NULL};
  complete(t);
}

static void t_integer(void *st, long long v) {
  rm_tree *t = st;
  rm_reply *r = slot(t);
  *r = (rm_reply){RM_REPLY_INTEGER, v, NULL, 0, 0, NULL};
  complete(t);
}

static void t_bulk(void *st, const char *p, size_t n) {
  t_str(st, RM_REPLY_STRING, p, n);
}

static void t_nil(void *st) {
  rm_tree *t = st;
  rm_reply *r = slot(t);
  *r = (rm_reply){RM_REPLY_NIL, 0, NULL, 0, 0, NULL};
  complete(t);
}

static void t_status(void *st, const char *p, size_t n) {
  t_str(st, RM_REPLY_STATUS, p, n);
}

static void t_error(void *st, const char *p, size_t n) {
  t_str(st, RM_REPLY_ERROR, p, n);
}

static void t_array(void *st, size_t n) {
  rm_tree *t = st;
  rm_reply *r = slot(t);
  *r = (rm_reply){RM_REPLY_ARRAY, 0, NULL, 0, n, NULL};
  if (n) {
    r->element = rm_xmalloc(n * sizeof *r->element);
    for (size_t i = 0; i < n; i++)
      r->element[i] = (rm_reply){RM_REPLY_NIL, 0, NULL, 0, 0, NULL};
    if (t->depth == (int)(sizeof t->arr / sizeof t->arr[0])) {
      fprintf(stderr, "redis model: reply nested too deep\n");
      abort();
    }
    t->arr[t->depth] = r;
    t->filled[t->depth] = 0;
    t->depth++;
  } else {
    complete(t);
  }
}

const rm_sink rm_tree_sink = {t_integer, t_bulk,  t_nil,  t_nil,
                              t_status,  t_error, t_array};

/* ---- helpers ---- */

void rm_out_int(rm_ctx *c, long long v) { c->sink->integer(c->st, v); }
void rm_out_bulk(rm_ctx *c, const char *p, size_t n) {
  c->sink->bulk(c->st, p, n);
}
void rm_out_nil(rm_ctx *c) { c->sink->nil(c->st); }
void rm_out_nil_array(rm_ctx *c) { c->sink->nil_array(c->st); }
void rm_out_status(rm_ctx *c, const char *s) {
  c->sink->status(c->st, s, strlen(s));
}
void rm_out_array(rm_ctx *c, size_t n) { c->sink->array(c->st, n); }

void rm_out_double(rm_ctx *c, double d) {
  char buf[64];
  size_t n = rm_fmt_double(buf, d);
  c->sink->bulk(c->st, buf, n);
}

void rm_out_error(rm_ctx *c, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    n = 0;
  if ((size_t)n >= sizeof buf)
    n = (int)sizeof buf - 1;
  /* Redis's addReplyErrorFormat: no newlines in an error line */
  for (int i = 0; i < n; i++)
    if (buf[i] == '\r' || buf[i] == '\n')
      buf[i] = ' ';
  c->sink->error(c->st, buf, (size_t)n);
}

void rm_out_wrongtype(rm_ctx *c) {
  rm_out_error(c, "WRONGTYPE Operation against a key holding the wrong kind "
                  "of value");
}

void rm_out_syntax(rm_ctx *c) { rm_out_error(c, "ERR syntax error"); }

void rm_out_arity(rm_ctx *c, const char *name) {
  rm_out_error(c, "ERR wrong number of arguments for '%s' command", name);
}

void rm_model_note(rm_model *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->model_err_text, sizeof m->model_err_text, fmt, ap);
  va_end(ap);
  m->model_err = 1;
  m->running = 1;
}

void rm_model_fail(rm_ctx *c, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  rm_model_note(c->m, "%s", what);
  rm_out_error(c, "MODELERR %s", what);
}

int rm_lookup_typed(rm_ctx *c, int i, int type, rm_obj **o) {
  *o = rm_ks_lookup(c->m, c->argv[i].p, c->argv[i].len);
  if (*o && (*o)->type != type) {
    rm_out_wrongtype(c);
    return -1;
  }
  return 0;
}
