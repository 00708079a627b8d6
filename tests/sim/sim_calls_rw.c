/*
 * sim_calls_rw.c -- the read-write lock's script calls, KEYS and ARGV built
 * exactly as src/kinds/rwlock.c builds them. It MIRRORS:
 *   src/kinds/rwlock.c  rd_attempt (rw_read_acquire), rd_release
 *                 (rw_read_unlock), rd_renew (rw_read_renew, the watchdog's
 *                 lease), wr_attempt (rw_write_acquire), wr_release
 *                 (rw_write_unlock), rw_args_init, timeout_prefix_of,
 *                 rw_channel, attempt_answer / unlock_answer;
 *   src/proto/names.c   dlock__suffix_name, dlock__prefix_name,
 *                 dlock__unlock_latch_key;
 *   src/engine/calls.c  dlock__req_tomb_key.
 * The lock name never contains '{'.
 */
#include <string.h>

#include "sim.h"

#define SET(dst, ...) snprintf((dst), SIM_STR, __VA_ARGS__)

/* timeout_prefix_of: "{name}:<field>:rwlock_timeout". */
void sim_rw_timeout_prefix(const char *name, const char *field, char *out,
                           size_t n) {
  snprintf(out, n, "{%s}:%s:rwlock_timeout", name, field);
}

void sim_rw_acquire_call(int kind, const char *name, const char *field,
                         int target, int64_t lease, const char *rid,
                         sim_call *c) {
  memset(c, 0, sizeof *c);
  char tomb[SIM_STR];
  SET(tomb, "dlock_tomb:{%s}:%s", name, rid);
  SET(c->k[0], "%s", name);
  c->na = 4;
  SET(c->a[0], "%lld", (long long)lease);
  if (kind == K_READ) {
    c->script = "rw_read_acquire";
    c->nk = 3;
    sim_rw_timeout_prefix(name, field, c->k[1], SIM_STR);
    SET(c->k[2], "%s", tomb);
    SET(c->a[1], "%s", field);
    SET(c->a[2], "%s:write", field);
    SET(c->a[3], "%d", target);
  } else {
    c->script = "rw_write_acquire";
    c->nk = 2;
    SET(c->k[1], "%s", tomb);
    SET(c->a[1], "%s:write", field);
    SET(c->a[2], "%d", target);
    SET(c->a[3], "%s", field);
  }
}

void sim_rw_release_call(int kind, const char *name, const char *field,
                         const dlock__eng_unlock *u, int64_t tomb_ttl,
                         sim_call *c) {
  memset(c, 0, sizeof *c);
  char tomb[SIM_STR], cs[24];
  SET(tomb, "redisson_unlock_latch:{%s}:%s", name, u->rid);
  snprintf(cs, sizeof cs, "%lld", u->commit ? (long long)tomb_ttl : 0LL);
  SET(c->k[0], "%s", name);
  SET(c->k[1], "redisson_rwlock:{%s}", name);
  if (kind == K_READ) {
    c->script = "rw_read_unlock";
    c->nk = 5;
    sim_rw_timeout_prefix(name, field, c->k[2], SIM_STR);
    SET(c->k[3], "{%s}", name);
    SET(c->k[4], "%s", tomb);
    c->na = 5;
    SET(c->a[0], "0");
    SET(c->a[1], "%s", field);
    SET(c->a[2], "PUBLISH");
    SET(c->a[3], "%d", u->expected);
    SET(c->a[4], "%s", cs);
  } else {
    c->script = "rw_write_unlock";
    c->nk = 3;
    SET(c->k[2], "%s", tomb);
    c->na = 6;
    SET(c->a[0], "1");
    SET(c->a[1], "%lld", (long long)u->lease);
    SET(c->a[2], "%s:write", field);
    SET(c->a[3], "PUBLISH");
    SET(c->a[4], "%d", u->expected);
    SET(c->a[5], "%s", cs);
  }
}

/* rd_renew: KEYS {name, timeout prefix}, ARGV {watchdog lease, field}. */
void sim_call_read_renew(sim_world *w, const sim_actor *a, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "rw_read_renew";
  c->nk = 2;
  SET(c->k[0], "%s", SIM_RW_NAME);
  sim_rw_timeout_prefix(SIM_RW_NAME, a->field, c->k[1], SIM_STR);
  c->na = 2;
  SET(c->a[0], "%lld", (long long)w->cfg.wd_lease);
  SET(c->a[1], "%s", a->field);
}
