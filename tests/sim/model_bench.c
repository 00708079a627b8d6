/*
 * model_bench.c -- how fast the Redis model runs the library's scripts
 * (docs/sim.md): the simulator will run millions of steps, each a script
 * call or two. Not a test (no bound is asserted): it prints pairs per
 * second of the two paths the library takes most --
 *   fast:   acquire_first + unlock_last (a free lock, no queue)
 *   full:   acquire + unlock (the full scripts, which a call that may
 *           wait sends)
 * -- over a few locks, with the clock moving 1 ms per pair, using the
 * scripts' real bodies (tests/sim/lib_scripts.py) through EVALSHA.
 *
 * usage: sim_model_bench [seconds per path, default 2]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_model.h"
#include "sim_lib_scripts.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *sha_of(const char *name) {
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++)
    if (strcmp(sim_lib_scripts[i].name, name) == 0)
      return sim_lib_scripts[i].sha;
  fprintf(stderr, "no script %s in src/\n", name);
  exit(1);
}

static void load(rm_model *m, const char *name) {
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++)
    if (strcmp(sim_lib_scripts[i].name, name) == 0) {
      rm_reply r = {0};
      const char *av[] = {"SCRIPT", "LOAD", sim_lib_scripts[i].body, NULL};
      rm_commandv(m, &r, av);
      rm_reply_clear(&r);
    }
}

/* One call; exits on a reply other than the expected type. */
static void call(rm_model *m, rm_reply *r, int argc, const char **av,
                 int want_type) {
  if (rm_command(m, argc, av, NULL, r) != RM_OK || r->type != want_type) {
    fprintf(stderr, "unexpected reply (type %d): %s\n", r->type,
            r->str ? r->str : "");
    exit(1);
  }
}

#define NLOCKS 8
#define FIELD "2b4e5b1c-8f7d-4c1a-9f3e-0d6a7b8c9d0e:1"

typedef struct lock_keys {
  char name[24], ch[64], queue[64], waits[64], marker[64], tomb[96];
} lock_keys;

static void keys_of(lock_keys *k, int i) {
  snprintf(k->name, sizeof k->name, "bench%d", i);
  snprintf(k->ch, sizeof k->ch, "redisson_lock__channel:{%.20s}", k->name);
  snprintf(k->queue, sizeof k->queue, "dlock_lock_queue:{%.20s}", k->name);
  snprintf(k->waits, sizeof k->waits, "dlock_lock_waits:{%.20s}", k->name);
  snprintf(k->marker, sizeof k->marker, "dlock_lock_granted:{%.20s}", k->name);
  snprintf(k->tomb, sizeof k->tomb,
           "redisson_unlock_latch:{%.20s}:00000000000000000000000000000001",
           k->name);
}

static double fast(rm_model *m, double secs, long *pairs) {
  const char *af = sha_of("acquire_first"), *ul = sha_of("unlock_last");
  lock_keys k[NLOCKS];
  for (int i = 0; i < NLOCKS; i++)
    keys_of(&k[i], i);
  rm_reply r = {0};
  double t0 = now_s(), t = t0;
  long n = 0;
  int64_t clock = rm_time(m);
  while (t - t0 < secs) {
    for (int j = 0; j < 1000; j++, n++) {
      lock_keys *x = &k[n % NLOCKS];
      rm_set_time(m, ++clock);
      const char *a[] = {"EVALSHA", af,      "2",  x->name,
                         x->marker, "30000", FIELD};
      call(m, &r, 7, a, RM_REPLY_NIL);
      const char *u[] = {"EVALSHA", ul,      "4",   x->name,  x->ch,
                         x->queue,  x->tomb, FIELD, "PUBLISH"};
      call(m, &r, 9, u, RM_REPLY_INTEGER);
    }
    t = now_s();
  }
  rm_reply_clear(&r);
  *pairs = n;
  return t - t0;
}

/* The full scripts (what a call that may wait sends: its helper
 * functions, the queue's keys) on free locks. */
static double full(rm_model *m, double secs, long *pairs) {
  const char *aq = sha_of("acquire"), *un = sha_of("unlock");
  lock_keys k[NLOCKS];
  for (int i = 0; i < NLOCKS; i++)
    keys_of(&k[i], i);
  rm_reply r = {0};
  double t0 = now_s(), t = t0;
  long n = 0;
  int64_t clock = rm_time(m);
  while (t - t0 < secs) {
    for (int j = 0; j < 1000; j++, n++) {
      lock_keys *x = &k[n % NLOCKS];
      rm_set_time(m, ++clock);
      const char *a[] = {"EVALSHA", aq,        "4",     x->name, x->queue,
                         x->waits,  x->marker, "30000", FIELD,   "1",
                         "0",       "",        "0",     "0",     "0"};
      call(m, &r, 15, a, RM_REPLY_NIL);
      const char *u[] = {"EVALSHA",
                         un,
                         "7",
                         x->name,
                         x->ch,
                         x->queue,
                         "dlock_grant__channel:{x}",
                         x->waits,
                         x->marker,
                         x->tomb,
                         "0",
                         "0",
                         FIELD,
                         "PUBLISH",
                         "1",
                         "00000000000000000000000000000001"};
      call(m, &r, 16, u, RM_REPLY_INTEGER);
    }
    t = now_s();
  }
  rm_reply_clear(&r);
  *pairs = n;
  return t - t0;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 2.0;
  if (secs <= 0)
    secs = 2.0;
  rm_model *m = rm_new(NULL);
  rm_set_time(m, 1800000000000LL);
  load(m, "acquire_first");
  load(m, "unlock_last");
  load(m, "acquire");
  load(m, "unlock");
  long pairs;
  double t = fast(m, secs, &pairs);
  printf("fast path (acquire_first + unlock_last, EVALSHA): %.0f pairs/s, "
         "%.0f script calls/s (%ld pairs in %.2f s)\n",
         (double)pairs / t, 2.0 * (double)pairs / t, pairs, t);
  t = full(m, secs, &pairs);
  printf("full scripts (acquire + unlock, EVALSHA): %.0f "
         "pairs/s, %.0f script calls/s (%ld pairs in %.2f s)\n",
         (double)pairs / t, 2.0 * (double)pairs / t, pairs, t);
  rm_free(m);
  return 0;
}
