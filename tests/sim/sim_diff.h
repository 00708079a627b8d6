/*
 * sim_diff.h -- the Redis model against a real redis-server, in lockstep
 * (test_sim.c): every command goes to both, every reply is compared (type
 * and value), every message a PUBLISH delivers is compared with what the
 * model's subscribers got, and the keyspaces can be compared whole (keys,
 * types, values, PTTL).
 *
 * THE CLOCK. The server runs with tests/clockshim preloaded in its frozen
 * mode: its wall clock stands where sim_diff_set_time puts it, and so does
 * the model's. Expiries, PTTL and TIME inside scripts are then the same
 * instant on both sides and compared exactly (tolerance 0): no timing
 * window, no flake, and a key is observed at its very last millisecond
 * (PTTL 0) and at the first one after.
 *
 * SUBSCRIBERS. A client id that sends SUBSCRIBE / SSUBSCRIBE (and their
 * UNSUBSCRIBE) gets a subscriber connection of its own on the server and
 * the same subscriptions in the model's pub/sub, so PUBLISH answers the
 * same receiver counts on both sides.
 *
 * A difference fails the case (th_fail) after printing the first differing
 * call: its name (the script's name and digest), keys, arguments, both
 * replies, the context set by sim_diff_context (the seed) and the steps
 * before it.
 *
 * Thread-safety: one thread. Memory: owned by the runner (sim_diff_free).
 */
#ifndef DLOCK_SIM_DIFF_H
#define DLOCK_SIM_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "redis_model.h"

typedef struct sim_diff sim_diff;

/* A script the runner knows by name (for messages, coverage and EVAL
 * after NOSCRIPT). */
typedef struct sim_script {
  char *name;
  char sha[41];
  char *body;
  size_t body_len;
  unsigned long runs; /* EVAL or EVALSHA calls that ran it (both sides) */
} sim_script;

/* What sim_diff_exec did with a command. */
enum { SIM_COMPARED = 1, SIM_SUBSCRIPTION = 2, SIM_SKIPPED = 3 };

/* Starts the frozen-clock redis-server (needs the path of the clock shim)
 * and a model, both at time start_ms. */
sim_diff *sim_diff_new(const char *clockshim, int64_t start_ms);
void sim_diff_free(sim_diff *d);

/* The clock of both sides, ms since the epoch. */
void sim_diff_set_time(sim_diff *d, int64_t ms);
int64_t sim_diff_time(const sim_diff *d);
/* A line printed with a failure (printf format). */
void sim_diff_context(sim_diff *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Registers a script (its sha is computed from body). */
void sim_diff_add_script(sim_diff *d, const char *name, const char *body,
                         size_t len);
/* The registered script of a digest (40 hex), or NULL. */
sim_script *sim_diff_script(sim_diff *d, const char *sha, size_t len);
size_t sim_diff_nscripts(const sim_diff *d);
sim_script *sim_diff_script_at(sim_diff *d, size_t i);

/* One command from client `conn`: modelled commands run on both sides and
 * are compared (SIM_COMPARED); the subscribe family updates the client's
 * subscriptions on both sides (SIM_SUBSCRIPTION); anything else (PING,
 * CLIENT, INFO, WAIT, ...) is not sent (SIM_SKIPPED). A copy of the
 * model's reply goes to *out when out is not NULL (cleared first). */
int sim_diff_exec(sim_diff *d, int conn, int argc, const char *const *argv,
                  const size_t *lens, rm_reply *out);
/* Compares the whole keyspaces, and that no subscriber got a message the
 * model did not deliver. */
void sim_diff_check_keyspace(sim_diff *d);
/* FLUSHALL on both; drops every subscription; SCRIPT FLUSH too when
 * scripts is 1. */
void sim_diff_reset(sim_diff *d, int scripts);

/* The model (for its keys, rm_foreach_key), and the channels published
 * to so far (a pool for random subscriptions). */
rm_model *sim_diff_model(sim_diff *d);
size_t sim_diff_nchannels(const sim_diff *d);
const char *sim_diff_channel(const sim_diff *d, size_t i, size_t *len,
                             int *sharded);

/* SHA1 of p[0..n) as 40 lower-case hex digits (what EVALSHA names). */
void sim_sha1_hex(const char *p, size_t n, char out[41]);

/* Counters for the report line. */
typedef struct sim_diff_stats {
  unsigned long compared, subscriptions, skipped, messages, keyspace_checks,
      keys_compared;
} sim_diff_stats;
void sim_diff_stats_get(const sim_diff *d, sim_diff_stats *st);
/* The names of skipped commands with counts, "PING 3, CLIENT 2". */
void sim_diff_skipped_names(const sim_diff *d, char *buf, size_t len);

#endif
