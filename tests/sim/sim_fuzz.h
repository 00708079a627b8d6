/*
 * sim_fuzz.h -- random command sequences for the Redis model's
 * differential test (test_sim.c), built from the shapes of real calls: the
 * script calls and direct commands of a trace of the library's traffic are
 * the templates; each random step takes one and varies it the way other
 * clients and other moments would -- another lock name (so kinds collide
 * on one name), another holder field, other counts, leases and now-values
 * (epoch times follow the simulated clock), now and then an argument from
 * another call (type errors, garbage) -- in random order, interleaved with
 * clock moves (to a key's last millisecond of life and the one after),
 * reads of random keys, subscriptions of simulated clients to the channels
 * the scripts publish on, and SCRIPT FLUSH (EVALSHA answers NOSCRIPT, the
 * body follows with EVAL, as the library does). Every step goes through
 * sim_diff (both sides compared); each round starts from an empty server
 * and ends with a keyspace comparison. WINDOWS keep what single calls
 * lose: a few consecutive recorded commands (a holder, a waiter queuing
 * and subscribing, the unlock that hands over) replayed with one
 * substitution for all of them and their time gaps shrunk or kept, so the
 * states the library builds come back on other names and moments.
 *
 * Deterministic: the same trace and seed give the same steps.
 * Thread-safety: one thread.
 */
#ifndef DLOCK_SIM_FUZZ_H
#define DLOCK_SIM_FUZZ_H

#include <stdint.h>

#include "sim_diff.h"
#include "sim_trace.h"

typedef struct sim_fuzz_cfg {
  uint64_t seed;
  int rounds, steps; /* steps per round */
  /* the lock names the trace's calls use: swapped for one another in keys
   * and arguments (none may contain another) */
  const char *const *names;
  int nnames;
  /* names[i]'s class (the kinds whose keys have one type: locks' hashes,
   * counters' strings): a swap stays in the class mostly. NULL: one. */
  const int *classes;
  /* th_now_ms() after which no further round starts, once min_rounds have
   * run (0: all rounds): each call is a round trip to a real server, so a
   * loaded machine runs fewer rounds inside the case's limit, not a
   * timeout. The rounds run are in the stats. */
  int64_t stop_at_ms;
  int min_rounds;
} sim_fuzz_cfg;

typedef struct sim_fuzz_stats {
  unsigned long calls, evals, direct, errors, clock_moves, at_expiry, observes,
      subscriptions, script_flushes, templates, groups, windows, rounds;
} sim_fuzz_stats;

/* Runs the rounds on d with the calls of trace as templates (an EVAL's
 * script d does not know yet is registered as "unnamed"). */
void sim_fuzz_run(sim_diff *d, const sim_trace *trace, const sim_fuzz_cfg *cfg,
                  sim_fuzz_stats *st);

#endif
