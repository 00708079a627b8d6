/*
 * counters.c -- the client's counters (dlock__stats: one relaxed atomic per
 * dlock_client_stats field, bumped where the event happens): the ones an
 * acquisition and a wait bump together. The public calls that copy them
 * out are api/stats.c.
 */
#include <stdint.h>

#include "util/util.h"

void dlock__stat_wait(dlock__stats *s, int64_t wait_ms) {
  if (wait_ms < 0)
    wait_ms = 0;
  int b = 0;
  for (int64_t bound = 1; b < DLOCK_STATS_WAIT_BUCKETS - 1 && wait_ms >= bound;
       bound *= 4)
    b++;
  dlock__stat_add(s, DLOCK__ST_WAITS, 1);
  dlock__stat_add(s, (dlock__stat)(DLOCK__ST_WAIT_HIST0 + b), 1);
  dlock__stat_add(s, DLOCK__ST_WAIT_MS_TOTAL, (uint64_t)wait_ms);
  uint64_t cur =
      atomic_load_explicit(&s->v[DLOCK__ST_WAIT_MS_MAX], memory_order_relaxed);
  while ((uint64_t)wait_ms > cur &&
         !atomic_compare_exchange_weak_explicit(
             &s->v[DLOCK__ST_WAIT_MS_MAX], &cur, (uint64_t)wait_ms,
             memory_order_relaxed, memory_order_relaxed))
    ;
}

int64_t dlock__stat_acquired(dlock__stats *s, int handover, int waited,
                             int64_t started) {
  dlock__stat_add(s, DLOCK__ST_ACQUIRED, 1);
  dlock__stat_add(
      s, handover ? DLOCK__ST_ACQUIRED_HANDOVER : DLOCK__ST_ACQUIRED_DIRECT, 1);
  if (!waited)
    return 0;
  int64_t wait_ms = dlock__now_ms() - started;
  dlock__stat_wait(s, wait_ms);
  return wait_ms;
}
