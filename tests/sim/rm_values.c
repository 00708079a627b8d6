/*
 * rm_values.c -- the storage of the Redis model's value types (rm_int.h):
 * owned byte strings, hashes (field/value vectors in insertion order, the
 * order of a small hash's listpack, which is what HGETALL and HKEYS show
 * for every hash a lock writes), lists (a vector with a moving head) and
 * sorted sets (a vector sorted by score, then member bytes, Redis's order).
 * Linear searches: the model's values are small (a lock's fields, a queue
 * of waiters); the simulator wants simple, not asymptotic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_int.h"

void *rm_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "redis model: out of memory\n");
    abort();
  }
  return p;
}

void *rm_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "redis model: out of memory\n");
    abort();
  }
  return q;
}

char *rm_xmemdup(const char *p, size_t n) {
  char *q = rm_xmalloc(n + 1);
  if (n)
    memcpy(q, p, n);
  q[n] = '\0';
  return q;
}

void rm_bytes_set(rm_bytes *b, const char *p, size_t n) {
  char *q = rm_xmemdup(p, n); /* p may point into b */
  free(b->p);
  b->p = q;
  b->len = n;
}

void rm_bytes_free(rm_bytes *b) {
  free(b->p);
  b->p = NULL;
  b->len = 0;
}

int rm_arg_eq(rm_arg a, const char *p, size_t n) {
  return a.len == n && (n == 0 || memcmp(a.p, p, n) == 0);
}

int rm_arg_is(rm_arg a, const char *lower_word) {
  size_t n = strlen(lower_word);
  if (a.len != n)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = a.p[i];
    if (ch >= 'A' && ch <= 'Z')
      ch = (char)(ch - 'A' + 'a');
    if (ch != lower_word[i])
      return 0;
  }
  return 1;
}

/* sdscmp: memcmp of the common prefix, then the shorter is smaller. */
int rm_bytes_cmp(const char *a, size_t al, const char *b, size_t bl) {
  size_t n = al < bl ? al : bl;
  int c = n ? memcmp(a, b, n) : 0;
  if (c)
    return c;
  return al < bl ? -1 : al > bl ? 1 : 0;
}

/* ---- hash ---- */

long rm_hash_find(const rm_hash *h, const char *f, size_t n) {
  for (size_t i = 0; i < h->n; i++)
    if (h->f[i].len == n && (n == 0 || memcmp(h->f[i].p, f, n) == 0))
      return (long)i;
  return -1;
}

int rm_hash_set(rm_hash *h, const char *f, size_t fl, const char *v,
                size_t vl) {
  long i = rm_hash_find(h, f, fl);
  if (i >= 0) {
    rm_bytes_set(&h->v[i], v, vl); /* in place: listpack keeps its slot */
    return 0;
  }
  if (h->n == h->cap) {
    h->cap = h->cap ? h->cap * 2 : 4;
    h->f = rm_xrealloc(h->f, h->cap * sizeof *h->f);
    h->v = rm_xrealloc(h->v, h->cap * sizeof *h->v);
  }
  h->f[h->n] = (rm_bytes){NULL, 0};
  h->v[h->n] = (rm_bytes){NULL, 0};
  rm_bytes_set(&h->f[h->n], f, fl);
  rm_bytes_set(&h->v[h->n], v, vl);
  h->n++;
  return 1;
}

int rm_hash_del(rm_hash *h, const char *f, size_t n) {
  long i = rm_hash_find(h, f, n);
  if (i < 0)
    return 0;
  rm_bytes_free(&h->f[i]);
  rm_bytes_free(&h->v[i]);
  size_t rest = h->n - (size_t)i - 1;
  memmove(&h->f[i], &h->f[i + 1], rest * sizeof *h->f);
  memmove(&h->v[i], &h->v[i + 1], rest * sizeof *h->v);
  h->n--;
  return 1;
}

void rm_hash_free(rm_hash *h) {
  for (size_t i = 0; i < h->n; i++) {
    rm_bytes_free(&h->f[i]);
    rm_bytes_free(&h->v[i]);
  }
  free(h->f);
  free(h->v);
  *h = (rm_hash){0};
}

/* ---- list ---- */

void rm_list_push_tail(rm_list *l, const char *p, size_t n) {
  if (l->head + l->n == l->cap) {
    if (l->head > 0 && l->head >= l->n) { /* room at the front: compact */
      memmove(l->a, l->a + l->head, l->n * sizeof *l->a);
      l->head = 0;
    } else {
      l->cap = l->cap ? l->cap * 2 : 4;
      l->a = rm_xrealloc(l->a, l->cap * sizeof *l->a);
    }
  }
  rm_bytes *b = &l->a[l->head + l->n];
  *b = (rm_bytes){NULL, 0};
  rm_bytes_set(b, p, n);
  l->n++;
}

rm_bytes *rm_list_at(const rm_list *l, size_t i) { return &l->a[l->head + i]; }

void rm_list_pop_head(rm_list *l, rm_bytes *out) {
  *out = l->a[l->head];
  l->head++;
  l->n--;
  if (l->n == 0)
    l->head = 0;
}

void rm_list_remove_at(rm_list *l, size_t i) {
  rm_bytes_free(rm_list_at(l, i));
  memmove(&l->a[l->head + i], &l->a[l->head + i + 1],
          (l->n - i - 1) * sizeof *l->a);
  l->n--;
  if (l->n == 0)
    l->head = 0;
}

void rm_list_free(rm_list *l) {
  for (size_t i = 0; i < l->n; i++)
    rm_bytes_free(rm_list_at(l, i));
  free(l->a);
  *l = (rm_list){0};
}

/* ---- sorted set ---- */

long rm_zset_find(const rm_zset *z, const char *m, size_t n) {
  for (size_t i = 0; i < z->n; i++)
    if (z->e[i].m.len == n && (n == 0 || memcmp(z->e[i].m.p, m, n) == 0))
      return (long)i;
  return -1;
}

static int zless(double s, const char *m, size_t n, const rm_zent *e) {
  if (s != e->score)
    return s < e->score;
  return rm_bytes_cmp(m, n, e->m.p, e->m.len) < 0;
}

/* Where (score, m) goes: the first entry it sorts before. */
static size_t zpos(const rm_zset *z, double s, const char *m, size_t n) {
  size_t lo = 0, hi = z->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (zless(s, m, n, &z->e[mid]))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

void rm_zset_insert(rm_zset *z, double score, const char *m, size_t n) {
  if (z->n == z->cap) {
    z->cap = z->cap ? z->cap * 2 : 4;
    z->e = rm_xrealloc(z->e, z->cap * sizeof *z->e);
  }
  size_t at = zpos(z, score, m, n);
  memmove(&z->e[at + 1], &z->e[at], (z->n - at) * sizeof *z->e);
  z->e[at].score = score;
  z->e[at].m = (rm_bytes){NULL, 0};
  rm_bytes_set(&z->e[at].m, m, n);
  z->n++;
}

void rm_zset_remove_at(rm_zset *z, size_t i) {
  rm_bytes_free(&z->e[i].m);
  memmove(&z->e[i], &z->e[i + 1], (z->n - i - 1) * sizeof *z->e);
  z->n--;
}

void rm_zset_rescore(rm_zset *z, size_t i, double score) {
  rm_bytes m = z->e[i].m;
  memmove(&z->e[i], &z->e[i + 1], (z->n - i - 1) * sizeof *z->e);
  z->n--;
  size_t at = zpos(z, score, m.p, m.len);
  memmove(&z->e[at + 1], &z->e[at], (z->n - at) * sizeof *z->e);
  z->e[at].score = score;
  z->e[at].m = m;
  z->n++;
}

void rm_zset_free(rm_zset *z) {
  for (size_t i = 0; i < z->n; i++)
    rm_bytes_free(&z->e[i].m);
  free(z->e);
  *z = (rm_zset){0};
}
