/*
 * sim_calls_mutex.c -- the plain mutex's script calls and the watchdog's
 * renewal, KEYS and ARGV built exactly as src/ builds them. It MIRRORS (a
 * change there must be made here too; test_sim's differential test and
 * this simulator run the same script bodies, but the shapes are restated):
 *   src/engine/calls.c:
 *                 dlock__acq_call_init (acquire / acquire_first, queue 0),
 *                 queue_entry, dlock__req_tomb_key,
 *                 dlock__rel_call_init (unlock / unlock_last),
 *                 dlock__rel_call_commit (the committing copy),
 *                 dlock__tombstone_ttl,
 *                 dlock__acq_reply, dlock__rel_reply (what answers mean);
 *   src/kinds/mutex.c:
 *                 dlock__commit_tomb / rel_commit / commit_attempt (SET of a
 *                 tombstone PX dlock__tombstone_ttl);
 *   src/proto/names.c:
 *                 dlock__own_name, dlock__prefix_name,
 *                 dlock__unlock_latch_key;
 *   src/client/client.c:
 *                 dlock__field;
 *   src/client/watchdog.c:
 *                 send_chunk (the batched `renew`: KEYS the names, ARGV[1]
 *                 the watchdog lease, ARGV[i+1] the fields with the kind's
 *                 suffix -- ":write" for a write hold), item_field.
 * Lock names here never contain '{' (the ":{name}" forms).
 */
#include <string.h>

#include "sim.h"

#define SET(dst, ...) snprintf((dst), SIM_STR, __VA_ARGS__)

/* queue_entry's wait id: 16 lowercase hex digits. */
static void wid_hex(uint64_t id, char out[17]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++)
    out[i] = hx[(id >> (4 * (15 - i))) & 15];
  out[16] = '\0';
}

void sim_mutex_acquire_call(const char *name, const char *field, int target,
                            int64_t lease, const dlock__wait *wt, int64_t now,
                            sim_call *c) {
  memset(c, 0, sizeof *c);
  char tomb[SIM_STR], mk[SIM_STR], wid[17];
  SET(tomb, "dlock_tomb:{%s}:%s", name,
      wt->rid[0] ? wt->rid : "00000000000000000000000000000000");
  SET(mk, "dlock_lock_granted:{%s}", name);
  if (target == 1 && !wt->queued) { /* queue 0 in this simulator */
    c->script = "acquire_first";
    c->nk = 3;
    SET(c->k[0], "%s", name);
    SET(c->k[1], "%s", mk);
    SET(c->k[2], "%s", tomb);
    c->na = 2;
    SET(c->a[0], "%lld", (long long)lease);
    SET(c->a[1], "%s", field);
    return;
  }
  c->script = "acquire";
  c->nk = 5;
  SET(c->k[0], "%s", name);
  SET(c->k[1], "dlock_lock_queue:{%s}", name);
  SET(c->k[2], "dlock_lock_waits:{%s}", name);
  SET(c->k[3], "%s", mk);
  SET(c->k[4], "%s", tomb);
  wid_hex(wt->id, wid);
  c->na = 8;
  SET(c->a[0], "%lld", (long long)lease);
  SET(c->a[1], "%s", field);
  SET(c->a[2], "%d", target);
  SET(c->a[3], "0");
  SET(c->a[4], "%s|%lld|%s", field, (long long)lease, wid);
  SET(c->a[5], "%s", wt->queued ? "1" : "0");
  SET(c->a[6], "%lld",
      (long long)dlock__eng_entry_ttl(wt->deadline,
                                      wt->deadline >= 0 ? now : 0));
  SET(c->a[7], "%s", wid);
}

void sim_mutex_release_call(const char *name, const char *field,
                            const dlock__eng_unlock *u, int64_t tomb_ttl,
                            sim_call *c) {
  memset(c, 0, sizeof *c);
  char tomb[SIM_STR], ch[SIM_STR], q[SIM_STR];
  SET(tomb, "redisson_unlock_latch:{%s}:%s", name, u->rid);
  SET(ch, "redisson_lock__channel:{%s}", name);
  SET(q, "dlock_lock_queue:{%s}", name);
  if (u->expected == 1 && !u->commit) {
    c->script = "unlock_last";
    c->nk = 4;
    SET(c->k[0], "%s", name);
    SET(c->k[1], "%s", ch);
    SET(c->k[2], "%s", q);
    SET(c->k[3], "%s", tomb);
    c->na = 2;
    SET(c->a[0], "%s", field);
    SET(c->a[1], "PUBLISH");
    return;
  }
  c->script = "unlock";
  c->nk = 7;
  SET(c->k[0], "%s", name);
  SET(c->k[1], "%s", ch);
  SET(c->k[2], "%s", q);
  SET(c->k[3], "dlock_grant__channel:{%s}", name);
  SET(c->k[4], "dlock_lock_waits:{%s}", name);
  SET(c->k[5], "dlock_lock_granted:{%s}", name);
  SET(c->k[6], "%s", tomb);
  c->na = u->commit ? 7 : 6;
  SET(c->a[0], "0");
  SET(c->a[1], "%lld", (long long)u->lease);
  SET(c->a[2], "%s", field);
  SET(c->a[3], "PUBLISH");
  SET(c->a[4], "%d", u->expected);
  SET(c->a[5], "%s", u->rid);
  SET(c->a[6], "%lld", (long long)tomb_ttl);
}

/* dlock__commit_tomb's SET: an acquire attempt's tombstone
 * (dlock__req_tomb_key) or a release's (dlock__unlock_latch_key). */
void sim_call_tomb(sim_world *w, int kind, const char *rid, int release,
                   sim_call *c) {
  memset(c, 0, sizeof *c);
  const char *name = sim_lock_name(kind);
  c->na = 5;
  SET(c->a[0], "SET");
  if (release)
    SET(c->a[1], "redisson_unlock_latch:{%s}:%s", name, rid);
  else
    SET(c->a[1], "dlock_tomb:{%s}:%s", name, rid);
  SET(c->a[2], "1");
  SET(c->a[3], "PX");
  SET(c->a[4], "%lld", (long long)w->cfg.tomb_ttl);
}

/* watchdog.c send_chunk: one `renew` of the standard holds (mutex, write). */
void sim_call_renew(sim_world *w, const sim_client *cl, sim_wd_item *items,
                    int n, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "renew";
  c->na = 1;
  SET(c->a[0], "%lld", (long long)w->cfg.wd_lease);
  for (int i = 0; i < n && c->nk < SIM_MAXK - 1; i++) {
    const sim_actor *a = &cl->actors[items[i].actor];
    SET(c->k[c->nk++], "%s",
        items[i].kind == K_MUTEX ? SIM_MUTEX_NAME : SIM_RW_NAME);
    SET(c->a[c->na++], "%s%s", a->field,
        items[i].kind == K_WRITE ? ":write" : "");
  }
}

int sim_acq_answer(int kind, const sim_rep *r, int64_t *ttl) {
  if (r->type == RM_REPLY_NIL)
    return 1;
  if (r->type != RM_REPLY_INTEGER)
    return DLOCK_EREDIS;
  long long v = r->integer;
  if (v == -3)
    return DLOCK_ELOST;
  if ((kind != K_WRITE && v == -4) || (kind == K_WRITE && v == -5))
    return DLOCK_EPROTO; /* dlock__late_answer: a request id repeated */
  if (kind == K_WRITE && v == -4)
    return DLOCK_EDEADLK;
  *ttl = v;
  return 0;
}

int sim_rel_answer(const sim_rep *r) {
  if (r->type == RM_REPLY_NIL)
    return DLOCK_ELOST;
  if (r->type != RM_REPLY_INTEGER)
    return DLOCK_EREDIS;
  return r->integer == 1 ? 1 : 0;
}

void sim_call_acquire(sim_world *w, const sim_actor *a, int kind, int target,
                      sim_call *c) {
  if (kind == K_MUTEX)
    sim_mutex_acquire_call(SIM_MUTEX_NAME, a->field, target, a->lease, &a->wt,
                           w->now, c);
  else if (kind == K_FAIR)
    sim_fair_acquire_call(a->field, target, a->lease, a->fair_queue, a->wt.rid,
                          w->now, c);
  else
    sim_rw_acquire_call(kind, SIM_RW_NAME, a->field, target, a->lease,
                        a->wt.rid, c);
}

void sim_call_release(sim_world *w, const sim_actor *a, int kind,
                      const dlock__eng_unlock *u, sim_call *c) {
  if (kind == K_MUTEX)
    sim_mutex_release_call(SIM_MUTEX_NAME, a->field, u, w->cfg.tomb_ttl, c);
  else if (kind == K_FAIR)
    sim_fair_release_call(a->field, u, w->cfg.tomb_ttl, w->now, c);
  else
    sim_rw_release_call(kind, SIM_RW_NAME, a->field, u, w->cfg.tomb_ttl, c);
}
