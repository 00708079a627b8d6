/*
 * async_timer.c -- the event-loop client's timers: a binary min-heap of
 * dlock__atimer records (waits' deadlines, holders' TTLs, re-sends, reply
 * timeouts, the watchdog). The loop sees only one timer, for the heap's
 * first (async.c schedules it); the records live in their owners.
 */
#include <stdlib.h>

#include "async/async.h"

static void put(dlock__aheap *h, size_t i, dlock__atimer *t) {
  h->v[i] = t;
  t->slot = i + 1;
}

static void up(dlock__aheap *h, size_t i) {
  dlock__atimer *t = h->v[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h->v[p]->at <= t->at)
      break;
    put(h, i, h->v[p]);
    i = p;
  }
  put(h, i, t);
}

static void down(dlock__aheap *h, size_t i) {
  dlock__atimer *t = h->v[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n)
      break;
    if (c + 1 < h->n && h->v[c + 1]->at < h->v[c]->at)
      c++;
    if (h->v[c]->at >= t->at)
      break;
    put(h, i, h->v[c]);
    i = c;
  }
  put(h, i, t);
}

void dlock__aheap_del(dlock__aheap *h, dlock__atimer *t) {
  if (!t->slot)
    return;
  size_t i = t->slot - 1;
  t->slot = 0;
  dlock__atimer *last = h->v[--h->n];
  if (i == h->n)
    return;
  put(h, i, last);
  up(h, i);
  down(h, last->slot - 1);
}

int dlock__aheap_add(dlock__aheap *h, dlock__atimer *t, int64_t at) {
  if (t->slot) {
    size_t i = t->slot - 1;
    t->at = at;
    up(h, i);
    down(h, t->slot - 1);
    return 0;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    dlock__atimer **v = realloc(h->v, cap * sizeof(dlock__atimer *));
    if (!v)
      return DLOCK_ENOMEM;
    h->v = v;
    h->cap = cap;
  }
  t->at = at;
  put(h, h->n++, t);
  up(h, h->n - 1);
  return 0;
}

dlock__atimer *dlock__aheap_top(const dlock__aheap *h) {
  return h->n ? h->v[0] : NULL;
}

void dlock__aheap_free(dlock__aheap *h) {
  for (size_t i = 0; i < h->n; i++)
    h->v[i]->slot = 0;
  free(h->v);
  h->v = NULL;
  h->n = h->cap = 0;
}
