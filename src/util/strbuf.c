/*
 * strbuf.c -- memory helpers, the string builder (inline storage, OOM
 * sticky) and integer formatting for the hot path.
 */
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- memory ------------------------------------------------------------- */

void *dlock__malloc(size_t n) { return malloc(n ? n : 1); }

void *dlock__calloc(size_t n, size_t m) {
  if (m != 0 && n > SIZE_MAX / m)
    return NULL;
  return calloc(n ? n : 1, m ? m : 1);
}

char *dlock__strndup(const char *s, size_t n) {
  char *p = dlock__malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

char *dlock__strdup(const char *s) { return dlock__strndup(s, strlen(s)); }

/* ---- string builder ----------------------------------------------------- */

void dlock__sb_init(dlock__sb *b) {
  b->p = b->inl;
  b->len = 0;
  b->cap = sizeof b->inl;
  b->oom = 0;
  b->heap = 0;
  b->inl[0] = '\0';
}

void dlock__sb_init_buf(dlock__sb *b, char *buf, size_t cap) {
  dlock__sb_init(b);
  b->p = buf;
  b->cap = cap;
  buf[0] = '\0';
}

void dlock__sb_free(dlock__sb *b) {
  if (b->heap)
    free(b->p);
  dlock__sb_init(b);
}

void dlock__sb_reset(dlock__sb *b) {
  b->len = 0;
  b->p[0] = '\0';
}

void dlock__sb_add(dlock__sb *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap * 2;
    while (nc < b->len + n + 1)
      nc *= 2;
    char *np = malloc(nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    memcpy(np, b->p, b->len + 1);
    if (b->heap)
      free(b->p);
    b->p = np;
    b->heap = 1;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void dlock__sb_adds(dlock__sb *b, const char *s) {
  dlock__sb_add(b, s, strlen(s));
}

size_t dlock__fmt_i64(char *buf, int64_t v) {
  char tmp[24];
  int i = (int)sizeof tmp;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    tmp[--i] = '-';
  size_t n = sizeof tmp - (size_t)i;
  memcpy(buf, tmp + i, n);
  buf[n] = '\0';
  return n;
}

void dlock__sb_addu64(dlock__sb *b, uint64_t v) {
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  dlock__sb_add(b, tmp + i, sizeof tmp - (size_t)i);
}

void dlock__sb_addi64(dlock__sb *b, int64_t v) {
  if (v < 0) {
    dlock__sb_add(b, "-", 1);
    dlock__sb_addu64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    dlock__sb_addu64(b, (uint64_t)v);
  }
}
