/*
 * map.c -- a small string-keyed hash map (chaining; keys are borrowed).
 */
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- hash map ----------------------------------------------------------- */

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

int dlock__map_init(dlock__map *m, size_t nb) {
  m->nb = nb ? nb : 16;
  m->n = 0;
  m->b = dlock__calloc(m->nb, sizeof(dlock__map_ent *));
  return m->b ? 0 : DLOCK_ENOMEM;
}

void dlock__map_free(dlock__map *m) {
  if (!m->b)
    return;
  for (size_t i = 0; i < m->nb; i++) {
    dlock__map_ent *e = m->b[i];
    while (e) {
      dlock__map_ent *nx = e->next;
      free(e);
      e = nx;
    }
  }
  free(m->b);
  m->b = NULL;
  m->n = 0;
}

void *dlock__map_get(const dlock__map *m, const char *key, size_t klen) {
  uint64_t h = fnv1a(key, klen);
  for (dlock__map_ent *e = m->b[h % m->nb]; e; e = e->next)
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
      return e->val;
  return NULL;
}

static void map_grow(dlock__map *m) {
  size_t nb = m->nb * 2;
  dlock__map_ent **b = dlock__calloc(nb, sizeof(dlock__map_ent *));
  if (!b)
    return; /* keep working with longer chains */
  for (size_t i = 0; i < m->nb; i++) {
    dlock__map_ent *e = m->b[i];
    while (e) {
      dlock__map_ent *nx = e->next;
      e->next = b[e->hash % nb];
      b[e->hash % nb] = e;
      e = nx;
    }
  }
  free(m->b);
  m->b = b;
  m->nb = nb;
}

int dlock__map_put(dlock__map *m, const char *key, size_t klen, void *val) {
  uint64_t h = fnv1a(key, klen);
  dlock__map_ent *e = dlock__malloc(sizeof *e);
  if (!e)
    return DLOCK_ENOMEM;
  e->key = key;
  e->klen = klen;
  e->hash = h;
  e->val = val;
  e->next = m->b[h % m->nb];
  m->b[h % m->nb] = e;
  if (++m->n > m->nb * 2)
    map_grow(m);
  return 0;
}

void *dlock__map_del(dlock__map *m, const char *key, size_t klen) {
  uint64_t h = fnv1a(key, klen);
  for (dlock__map_ent **pp = &m->b[h % m->nb]; *pp; pp = &(*pp)->next) {
    dlock__map_ent *e = *pp;
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) {
      void *v = e->val;
      *pp = e->next;
      free(e);
      m->n--;
      return v;
    }
  }
  return NULL;
}
