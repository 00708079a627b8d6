/*
 * sim_calls_fair.c -- the fair lock's script calls (Redisson's RFairLock
 * layout), KEYS and ARGV built exactly as src/ builds them. It MIRRORS (a
 * change there must be made here too):
 *   src/kinds/fair.c   fair_keys_init / fair_keys_init_req (KEYS: the lock,
 *                redisson_lock_queue:{name}, redisson_lock_timeout:{name},
 *                the channel prefix redisson_lock__channel:{name}, and the
 *                attempt's tombstone dlock__req_tomb_key or the release's
 *                dlock__unlock_latch_key), fair_attempt (fair_acquire when
 *                the attempt joins the queue, else fair_try; the queue's
 *                wait is FAIR_LIVE_MS), fair_cancel, fair_release (ARGV[7]
 *                the committing copy's tombstone TTL, else 0);
 *   src/names.c  dlock__prefix_name, dlock__req_tomb_key,
 *                dlock__unlock_latch_key.
 * Replies: an attempt's as the mutex's (sim_acq_answer: nil held, -3 the
 * hold gone, -4 a late copy, else the wake-up hint); a release's as the
 * mutex's (sim_rel_answer); a cancel's 1 = the lock is ours after all.
 */
#include <string.h>

#include "sim.h"

#define SET(dst, ...) snprintf((dst), SIM_STR, __VA_ARGS__)
#define FAIR_LIVE_MS 5000 /* fair.c */

const char *sim_lock_name(int kind) {
  return kind == K_MUTEX  ? SIM_MUTEX_NAME
         : kind == K_FAIR ? SIM_FAIR_NAME
                          : SIM_RW_NAME;
}

static void keys4(sim_call *c) {
  SET(c->k[0], "%s", SIM_FAIR_NAME);
  SET(c->k[1], "redisson_lock_queue:{%s}", SIM_FAIR_NAME);
  SET(c->k[2], "redisson_lock_timeout:{%s}", SIM_FAIR_NAME);
  SET(c->k[3], "redisson_lock__channel:{%s}", SIM_FAIR_NAME);
  c->nk = 4;
}

void sim_fair_acquire_call(const char *field, int target, int64_t lease,
                           int queue, const char *rid, int64_t now,
                           sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = queue ? "fair_acquire" : "fair_try";
  keys4(c);
  SET(c->k[c->nk++], "dlock_tomb:{%s}:%s", SIM_FAIR_NAME, rid);
  SET(c->a[0], "%lld", (long long)lease);
  SET(c->a[1], "%s", field);
  SET(c->a[queue ? 2 : 3], "%d", FAIR_LIVE_MS);
  SET(c->a[queue ? 3 : 2], "%lld", (long long)now);
  SET(c->a[4], "%d", target);
  SET(c->a[5], "PUBLISH");
  c->na = 6;
}

void sim_fair_release_call(const char *field, const dlock__eng_unlock *u,
                           int64_t tomb_ttl, int64_t now, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "fair_unlock";
  keys4(c);
  SET(c->k[c->nk++], "redisson_unlock_latch:{%s}:%s", SIM_FAIR_NAME, u->rid);
  SET(c->a[0], "0");
  SET(c->a[1], "%lld", (long long)u->lease);
  SET(c->a[2], "%s", field);
  SET(c->a[3], "%lld", (long long)now);
  SET(c->a[4], "PUBLISH");
  SET(c->a[5], "%d", u->expected);
  SET(c->a[6], "%lld", (long long)(u->commit ? tomb_ttl : 0));
  c->na = 7;
}

void sim_fair_cancel_call(const char *field, int64_t now, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "fair_cancel";
  keys4(c);
  SET(c->a[0], "%s", field);
  SET(c->a[1], "%d", FAIR_LIVE_MS);
  SET(c->a[2], "PUBLISH");
  SET(c->a[3], "%lld", (long long)now);
  c->na = 4;
}
