/* outcome.c -- what one run did, from the shared result mapping: the
 * outcome of every request (orders, rejections, errors, deadlocked,
 * killed with the victim, unfinished), throughput and latency
 * percentiles, and the first reason a worker failed. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "seckill.h"

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* A request that never finished: killed with the victim, cut by the
 * deadline, stuck, or lost with a worker that died. */
static void count_unfinished(sk_result *res, int in_victim) {
  if (in_victim)
    res->killed++;
  else if (res->stopped == 2)
    res->unfinished++;
  else if (res->stopped == 1)
    res->deadlocked++;
  else
    res->errors++; /* its worker died or never started */
}

/* Counts every request's outcome; the latencies of the finished ones go
 * into lat (may be NULL). Returns how many finished. */
static long long count_outcomes(const sk_run *r, sk_result *res, uint32_t *lat,
                                size_t *nl) {
  const sk_shared *sh = r->sh;
  long long vfirst = 0, vcount = 0, finished = 0;
  if (res->victim_killed)
    sk_request_range(r->o, 0, &vfirst, &vcount);
  for (long long i = 0; i < r->o->requests; i++) {
    int out = sh->outcome[i];
    if (out == SK_O_DEADLOCK) {
      res->deadlocked++;
      continue;
    }
    if (out == SK_O_PENDING) {
      count_unfinished(res, res->victim_killed && i >= vfirst &&
                                i < vfirst + vcount);
      continue;
    }
    res->soldout += out == SK_O_SOLDOUT;
    res->duplicates_rejected += out == SK_O_DUPLICATE;
    res->errors += out == SK_O_ERROR;
    finished++;
    if (lat)
      lat[(*nl)++] = sh->lat_us[i];
  }
  return finished;
}

/* A deadline while requests still finished: they were slow, not stuck. */
static void settle_deadline(const sk_run *r, long long t_stop, sk_result *res) {
  if (res->stopped != 2)
    return;
  long long idle_ms = (t_stop - atomic_load(&r->sh->last_end_us)) / 1000;
  if (idle_ms < sk_stall_ms(r->o, r->s)) {
    res->unfinished += res->deadlocked;
    res->deadlocked = 0;
  } else {
    res->deadlocked += res->unfinished;
    res->unfinished = 0;
  }
}

/* The first worker that exited non-zero (not the victim), and the first
 * error message a worker wrote, which wins. */
static void worker_errors(const sk_run *r, const sk_procs *ps, sk_result *res) {
  for (int w = 0; w < ps->n; w++) {
    if (w == 0 && res->victim_killed)
      continue;
    int st = ps->status[w];
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && !res->first_error[0])
      snprintf(res->first_error, sizeof res->first_error,
               "worker %d exited with status %d", w, WEXITSTATUS(st));
  }
  if (r->sh->errmsg[0])
    snprintf(res->first_error, sizeof res->first_error, "%s", r->sh->errmsg);
}

void sk_tally(const sk_run *r, const sk_procs *ps, long long t_start,
              long long t_stop, sk_result *res) {
  const sk_shared *sh = r->sh;
  uint32_t *lat = malloc((size_t)r->o->requests * sizeof *lat);
  size_t nl = 0;
  long long finished = count_outcomes(r, res, lat, &nl);
  settle_deadline(r, t_stop, res);
  res->errors += atomic_load(&sh->unlock_errors);
  worker_errors(r, ps, res);
  double secs = (double)(atomic_load(&sh->last_end_us) - sh->go_us) / 1e6;
  res->wall_ms = (double)(t_stop - t_start) / 1000.0;
  res->throughput = secs > 0 ? (double)finished / secs : 0;
  if (lat && nl > 0) {
    qsort(lat, nl, sizeof *lat, cmp_u32);
    size_t mid = (nl - 1) / 2;
    res->p50_ms = lat[mid] / 1000.0;
    res->p99_ms = lat[(size_t)((double)(nl - 1) * 0.99)] / 1000.0;
  }
  free(lat);
}
