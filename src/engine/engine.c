/*
 * engine.c -- the lock engine (engine.h): the hold decisions both clients
 * share, made here once. It never blocks, never sleeps and does no I/O; it
 * reads no clock for a decision (the drivers pass `now`; the one clock read
 * is the wall-clock stamp of a hold's start, for `dlock status`), and only
 * the per-thread PRNG for ids.
 *
 * It owns: the local loss deadline of a hold and the expiry verdict that
 * says which deadline is next; request ids (drawn here, kept across an
 * unlock's retries in the record); the reentrancy decision and what an
 * unlock's answer does to the count; replica sync's verdicts; what a
 * message on a grant channel means (a hand-over, a retry, declined); what
 * an attempt's answer means for a wait, and its cancel (sleep until when,
 * time out, leave the queue, keep a hand-over the cancel found). Its
 * drivers: mutex.c / holds.c / watchdog.c / pubsub.c (the blocking client,
 * under reg.mu or ps.mu) and async_lock.c / async_wd.c / async_sub.c (the
 * event-loop client, on the loop). docs/design.md, "The engine", has the
 * picture.
 */
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

/* ---- (a) the local loss deadline ----------------------------------------- */

int64_t dlock__lease_margin(int64_t lease) { return lease / 100 + 2; }

int64_t dlock__eng_deadline(int64_t sent, int64_t lease) {
  return sent + lease - dlock__lease_margin(lease);
}

int dlock__eng_in_time(int64_t sent, int64_t lease, int64_t now) {
  return now < dlock__eng_deadline(sent, lease);
}

void dlock__hold_note(dlock__hold *h, int target, int wd, int64_t lease,
                      int64_t sent, uint64_t token) {
  int64_t until = dlock__eng_deadline(sent, lease);
  if (h->count == 0) {
    /* a pending release is settled before any acquire (dlock__eng_reenter) */
    if (h->unlock_pending)
      dlock__never("an acquisition recorded over a pending release");
    h->gen++;
    h->token = 0;
    h->wd_count = 0;
    h->fixed_bits = 0;
    h->lost = 0;
    h->renewed_at = sent;
    h->valid_until = until;
    h->since_ms = dlock__wall_ms();
    h->since_at = sent;
    h->since_pub = 0;
  } else if (until > h->valid_until) {
    /* A reentrant acquire never shortens the key's TTL (scripts.c). */
    h->valid_until = until;
  }
  h->count = target;
  /* Only a fenced acquisition draws a token: a plain reentrant acquire of
   * the same name (same record) keeps the fenced hold's (issue 25.12). */
  if (token)
    h->token = token;
  if (target >= 1 && target <= 64) {
    uint64_t bit = (uint64_t)1 << (target - 1);
    h->fixed_bits = wd ? h->fixed_bits & ~bit : h->fixed_bits | bit;
  }
  if (wd)
    h->wd_count++;
  else
    h->lease_ms = lease;
}

void dlock__eng_renewed(dlock__hold *h, int64_t sent, int64_t lease) {
  int64_t until = dlock__eng_deadline(sent, lease);
  if (until > h->valid_until)
    h->valid_until = until;
  h->renewed_at = sent;
  h->retry_at = 0;
}

int dlock__eng_valid(const dlock__hold *h, int64_t now) {
  return h && h->count > 0 && !h->lost && now < h->valid_until;
}

int dlock__release_may_have_run(const dlock__hold *h) {
  return h->count == 1 &&
         (h->releasing || (h->unlock_pending == 1 && !h->pend_undo)) &&
         h->release_sent < h->valid_until;
}

int dlock__eng_expiry(dlock__hold *h, int64_t now, int64_t *next) {
  if (h->releasing && dlock__release_may_have_run(h)) {
    /* The final unlock in flight settles it; look again soon. */
    if (now + 10 < *next)
      *next = now + 10;
    return DLOCK__ENG_SETTLING;
  }
  if (dlock__release_may_have_run(h) && now >= h->valid_until)
    return DLOCK__ENG_END_QUIET; /* sent in time, outcome unknown */
  if (h->count > 0 && !h->lost && now >= h->valid_until) {
    h->lost = DLOCK__LOST_UNRENEWED;
    return DLOCK__ENG_LOST;
  }
  if (h->lost && now >= h->valid_until)
    return DLOCK__ENG_END_QUIET; /* told already: nothing left to watch */
  if (h->valid_until < *next)
    *next = h->valid_until;
  return DLOCK__ENG_KEEP;
}

int dlock__eng_renew_late(dlock__hold *h, int64_t now, int64_t period,
                          int64_t *next) {
  int64_t late_at = h->renewed_at + period + period / 2;
  if (h->count > 0 && !h->lost && now >= late_at &&
      h->fail_logged < h->renewed_at + period) {
    h->fail_logged = now;
    return 1;
  }
  if (now < late_at && late_at < *next)
    *next = late_at;
  return 0;
}

int dlock__eng_renew_answer(dlock__hold *h, int answered, int renewed,
                            int64_t sent, int64_t lease, int64_t now) {
  if (answered && renewed) {
    dlock__eng_renewed(h, sent, lease);
    return DLOCK__ENG_KEEP;
  }
  if (dlock__release_may_have_run(h)) {
    /* Gone because this owner's final unlock deleted it (its reply is on
     * the way, or was lost): the unlock's answer decides, not the renewal.
     * An unlock no longer in flight: the key is gone or unrenewable either
     * way, stop renewing. */
    if (!h->releasing && (answered || now >= h->valid_until))
      return DLOCK__ENG_END_QUIET;
    /* Answered "gone" while the unlock is in flight: nothing to renew
     * until it answers -- look again at the retry pace, not at once (the
     * blocking watchdog renewed round trip after round trip: 536 renewals
     * in a 1.5 s unlock; found by make sim). */
    return DLOCK__ENG_RETRY;
  }
  if (answered || now >= h->valid_until) {
    /* Answered "0": the key is gone; else no answer came in time. */
    h->lost = answered ? DLOCK__LOST_GONE : DLOCK__LOST_UNRENEWED;
    return DLOCK__ENG_LOST;
  }
  return DLOCK__ENG_RETRY;
}

/* ---- (b) request ids ------------------------------------------------------
 */

int dlock__eng_settle_end(const dlock__hold *h, int rc) {
  if (!h || !h->unlock_pending)
    return 0;
  return rc < 0 && rc != DLOCK_ELOST ? rc : DLOCK_ECONN;
}

int dlock__eng_answered(int rc) {
  return rc >= 0 || (rc != DLOCK_ECONN && rc != DLOCK_ECLOSED &&
                     rc != DLOCK_ETIMEDOUT && rc != DLOCK_ECANCELED);
}

static const char hexdig[] = "0123456789abcdef";

void dlock__request_id(char out[33]) {
  uint64_t a = dlock__rand64(), b = dlock__rand64();
  for (int i = 0; i < 16; i++) {
    out[i] = hexdig[(a >> (i * 4)) & 15];
    out[16 + i] = hexdig[(b >> (i * 4)) & 15];
  }
  out[32] = '\0';
}

uint64_t dlock__eng_wait_id(void) { return dlock__rand64() | 1; }

/* Request ids are 32 hex chars; a record keeps a pending one in 16 bytes. */
static void rid_from_hex(const char *hex, uint64_t out[2]) {
  out[0] = out[1] = 0;
  for (int i = 0; i < 32; i++) {
    char ch = hex[i];
    uint64_t d = (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10) & 15;
    out[i / 16] = (out[i / 16] << 4) | d;
  }
}

static void rid_to_hex(const uint64_t in[2], char out[33]) {
  for (int i = 0; i < 32; i++)
    out[i] = hexdig[(in[i / 16] >> (4 * (15 - i % 16))) & 15];
  out[32] = '\0';
}

/* ---- (c) reentrancy and the unlock's count ---------------------------------
 */

int dlock__eng_reenter(const dlock__hold *h, int64_t now, int *prior) {
  *prior = h ? h->count : 0;
  /* Settle first, whatever else is true of the hold: even a hold reported
   * lost must not let the pending release's late copy act on the next
   * one. */
  if (h && h->unlock_pending > 0)
    return DLOCK__ENG_SETTLE;
  if (*prior == 0 || dlock__eng_valid(h, now))
    return 0;
  return h->lost ? h->lost : DLOCK__ENG_RAN_OUT;
}

int dlock__eng_reenter_answer(const dlock__hold *h, int prior, int64_t now) {
  if (prior == 0)
    return 0; /* a first hold: dlock__eng_in_time judges it */
  /* The hold this acquire re-entered must still be the one it found: a
   * hold lost (or ended) while the acquire was in flight is not revived
   * by its answer -- a lost hold never comes back. */
  if (h->count == prior && dlock__eng_valid(h, now))
    return 0;
  return h->lost ? h->lost : DLOCK__ENG_RAN_OUT;
}

void dlock__eng_forget(dlock__hold *h) {
  h->count = 0;
  h->wd_count = 0;
  h->lost = 0;
  h->releasing = 0;
  h->gen++;
}

/* 1 if the hold number idx+1 has a fixed lease. */
static int hold_is_fixed(const dlock__hold *h, int idx) {
  return idx >= 64 || ((h->fixed_bits >> idx) & 1);
}

int dlock__hold_drop_one(dlock__hold *h) {
  if (!hold_is_fixed(h, h->count - 1) && h->wd_count > 0)
    h->wd_count--;
  h->count--;
  if (h->wd_count > h->count)
    h->wd_count = h->count;
  return h->wd_count == 0;
}

int64_t dlock__remaining_lease(const dlock__hold *h, int64_t wd_lease) {
  int idx = h->count - 1; /* the hold being released */
  int wd_left = h->wd_count - (hold_is_fixed(h, idx) ? 0 : 1);
  uint64_t below = idx >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << idx) - 1);
  int fixed_left = idx > 64 || (h->fixed_bits & below) != 0;
  if (!fixed_left)
    return wd_lease;
  int64_t l = h->lease_ms;
  if (wd_left > 0 && wd_lease > l)
    l = wd_lease;
  return -l;
}

int dlock__eng_unlock_begin(dlock__hold *h, int64_t now, int64_t wd_lease,
                            dlock__eng_unlock *u) {
  /* Another release is pending (an undo, or one of a hold the record no
   * longer has): it is settled before this one is built. */
  if (h && h->unlock_pending > 0 &&
      (h->pend_undo || h->unlock_pending != h->count))
    return DLOCK__ENG_SETTLE;
  if (!h || h->count == 0)
    return DLOCK_EPERM;
  if (h->lost && !h->unlock_pending)
    return DLOCK_ELOST;
  memset(u, 0, sizeof *u);
  u->gen = h->gen;
  u->lease = dlock__remaining_lease(h, wd_lease);
  u->expected = h->count;
  /* A previous unlock at this count ended without a reply: this one is its
   * committing copy (the script makes the copies count once, by state, and
   * writes the tombstone that stops any copy still on its way), with its
   * request id. */
  u->resent = h->unlock_pending > 0;
  u->commit = u->resent;
  u->sent = u->resent && h->count == 1 ? h->release_sent : now;
  if (u->resent) {
    rid_to_hex(h->unlock_rid, u->rid);
    u->lease = h->pend_lease;
  } else {
    dlock__request_id(u->rid);
  }
  /* A partial release that leaves only watchdog holds sets the key's TTL
   * to exactly u->lease when it runs (remaining_ttl: Redisson's reset),
   * below what a released longer fixed hold had promised: the record's
   * one deadline comes down to what that TTL keeps before the release is
   * sent, whatever its answer (a copy may run any time). Found by make
   * sim: a holder with 5 s of local deadline left on a key that expired
   * in 3 s. */
  if (h->count > 1 && u->lease > 0 &&
      dlock__eng_deadline(u->sent, u->lease) < h->valid_until)
    h->valid_until = dlock__eng_deadline(u->sent, u->lease);
  if (h->count == 1) {
    /* The key may vanish under a renewal in flight because of this very
     * unlock: not a loss to report (issue 10: spurious on_lock_lost). Only
     * the final release: a partial one leaves the lock held, and its loss
     * must be told (issue 25.8). */
    h->releasing = 1;
    h->release_sent = u->sent;
  }
  return 0;
}

void dlock__eng_settle_begin(dlock__hold *h, dlock__eng_unlock *u) {
  memset(u, 0, sizeof *u);
  u->gen = h->gen;
  u->lease = h->pend_lease;
  u->expected = h->unlock_pending;
  u->resent = u->commit = u->settle = 1;
  u->undo = h->pend_undo;
  u->sent = h->release_sent;
  rid_to_hex(h->unlock_rid, u->rid);
  if (!u->undo && h->count == 1 && u->expected == 1)
    h->releasing = 1;
}

void dlock__eng_undo_begin(dlock__hold *h, int prior, int64_t lease,
                           int64_t now, dlock__eng_unlock *u) {
  memset(u, 0, sizeof *u);
  u->gen = h ? h->gen : 0;
  u->lease = lease;
  u->expected = prior + 1;
  u->undo = 1;
  u->sent = now;
  dlock__request_id(u->rid);
}

int dlock__eng_commit_due(const dlock__eng_unlock *u, int rc, int sends) {
  return sends > 1 && !u->commit && dlock__eng_answered(rc);
}

/* Records u as the record's pending release (its outcome is unknown). */
static void pend(dlock__hold *h, const dlock__eng_unlock *u) {
  h->unlock_pending = u->expected;
  h->pend_undo = u->undo;
  h->pend_lease = u->lease;
  h->release_sent = u->sent;
  rid_from_hex(u->rid, h->unlock_rid);
}

/* Clears the pending release u settled (if it is the one pending). */
static void unpend(dlock__hold *h, const dlock__eng_unlock *u) {
  uint64_t rid[2];
  rid_from_hex(u->rid, rid);
  if (h->unlock_pending && rid[0] == h->unlock_rid[0] &&
      rid[1] == h->unlock_rid[1])
    h->unlock_pending = h->pend_undo = 0;
}

dlock__eng_rel_out dlock__eng_unlock_end(dlock__hold *h,
                                         const dlock__eng_unlock *u, int rc,
                                         int copy, int64_t now) {
  dlock__eng_rel_out o = {rc, 0, DLOCK__ENG_REL_KEEP, 0};
  h->releasing = 0;
  int answered = dlock__eng_answered(rc);
  /* An undo, or the settling copy of a release whose hold the record no
   * longer has at that count: no count changes, only the obligation. */
  if (u->undo || (u->settle && (h->count != u->expected || h->gen != u->gen))) {
    if (answered)
      unpend(h, u);
    else
      pend(h, u);
    o.action = DLOCK__ENG_REL_PUT;
    o.rc = answered ? 0 : rc;
    return o;
  }
  int mine = h->gen == u->gen;
  copy |= u->resent;
  /* A final release that may have been sent before (by the retry policy,
   * or by the caller's earlier call that ended without a reply) and finds
   * the field gone: that copy released it -- or the hold had vanished by
   * other means (force unlock, an operator) in between, which no state
   * left on the server can tell apart (docs/errors.md). The lock is not
   * held by this owner either way. */
  int released_before = rc == DLOCK_ELOST && u->expected == 1 && copy;
  if (released_before)
    rc = 1;
  /* Past the local deadline the hold was not ours for sure: whatever Redis
   * answered, the caller must treat the critical section as unprotected.
   * A copy that found the field gone says nothing about when the release
   * ran: then what counts is that it was first sent in time. */
  int64_t at = released_before ? u->sent : now;
  int expired = mine && at >= h->valid_until;
  if (rc < 0 && rc != DLOCK_ELOST && !expired) {
    /* still "may have released": the watchdog stays quiet about it, and
     * the owner's next call settles it (pending) */
    pend(h, u);
    o.rc = rc;
    return o;
  }
  if (!answered)
    pend(h, u); /* expired, but a copy may still run: settle it anyway */
  if (!mine) {
    o.action = DLOCK__ENG_REL_PUT;
  } else {
    if (answered)
      unpend(h, u);
    expired |= h->lost != 0;
    o.action = expired || rc == DLOCK_ELOST || rc == 1 || h->count <= 1
                   ? DLOCK__ENG_REL_FORGET
                   : DLOCK__ENG_REL_ONE;
  }
  o.rc = rc == DLOCK_ELOST || expired ? DLOCK_ELOST : 0;
  o.expired = rc != DLOCK_ELOST && expired;
  o.ran_out = expired;
  return o;
}

/* ---- (d) replica sync --------------------------------------------------- */

int dlock__eng_sync_stale(int64_t checked_at, int64_t now) {
  return now - checked_at >= DLOCK__SYNC_REFRESH_MS;
}

int dlock__eng_sync_verdict(int cfg, int want, long long acks, int count) {
  if (cfg < 0 && acks != want) {
    if (count < 0)
      return DLOCK__ENG_SYNC_RECOUNT;
    return acks >= 0 && acks >= count ? DLOCK__ENG_SYNC_OK
                                      : DLOCK__ENG_SYNC_SHORT;
  }
  return acks >= 0 && acks >= want ? DLOCK__ENG_SYNC_OK : DLOCK__ENG_SYNC_SHORT;
}

int dlock__eng_sync_retry(int i, int retry_attempts, long long wait_ms,
                          int64_t budget_left, int64_t pause) {
  if (wait_ms == 0 || i >= retry_attempts)
    return 0;
  return wait_ms < 0 || budget_left > pause;
}

/* ---- (e) hand-over grants ------------------------------------------------ */

/* The owner part as a field writes it: "0", or an optional '-' and a
 * decimal number without leading zeros, within a long long. */
static int owner_number(const char *p, size_t n, long long *out) {
  size_t i = n > 0 && p[0] == '-' ? 1 : 0;
  if (i >= n || n - i > 19 || (p[i] == '0' && n - i > 1) ||
      (i == 1 && p[1] == '0'))
    return 0;
  unsigned long long v = 0,
                     lim = i ? 9223372036854775808ULL : 9223372036854775807ULL;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return 0;
    unsigned d = (unsigned)(p[i] - '0');
    if (v > (lim - d) / 10)
      return 0;
    v = v * 10 + d;
  }
  /* -2^63 has no positive twin: negate in unsigned arithmetic */
  *out = p[0] == '-' ? (long long)(0 - v) : (long long)v;
  return 1;
}

int dlock__eng_grant_parse(const char *p, size_t n, dlock__grant *g) {
  memset(g, 0, sizeof *g);
  const char *bar = p ? memchr(p, '|', n) : NULL;
  if (!bar || bar == p)
    return 0; /* no bar, or an empty owner */
  size_t rest = n - (size_t)(bar - p) - 1;
  const char *w = bar + 1;
  if (rest == 18 && w[16] == '|' && w[17] == 'r')
    g->retry = 1;
  else if (rest != 16)
    return 0;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char c = w[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0)
      return 0;
    v = v << 4 | (uint64_t)d;
    g->wid_hex[i] = c;
  }
  g->wid_hex[16] = '\0';
  g->wid = v;
  g->owner = p;
  g->owner_len = (size_t)(bar - p);
  g->owner_num = owner_number(p, g->owner_len, &g->owner_id);
  g->valid = 1;
  return 1;
}

int dlock__eng_grant_verdict(const dlock__grant *g, long long owner,
                             uint64_t wid) {
  if (!g->valid || !g->owner_num || g->owner_id != owner || wid == 0 ||
      g->wid != wid)
    return DLOCK__GRANT_NONE;
  return g->retry ? DLOCK__GRANT_RETRY : DLOCK__GRANT_GRANTED;
}

int dlock__eng_grant_unclaimed(const dlock__grant *g) {
  return g->valid && g->owner_num ? DLOCK__GRANT_DECLINE : DLOCK__GRANT_NONE;
}

/* ---- (f) waits ----------------------------------------------------------- */

int dlock__eng_wait_end(int rc, const dlock__wait *w) {
  if (rc == DLOCK_ELOST)
    return DLOCK__WAIT_GONE;
  if (w->queued)
    return DLOCK__WAIT_CANCEL;
  return rc == DLOCK_ETIMEDOUT ? DLOCK__WAIT_TIMED_OUT : DLOCK__WAIT_FAILED;
}

int dlock__eng_wait_answer(int rc, int64_t ttl, long long wait_ms,
                           const dlock__wait *w, int64_t now, int64_t max_sleep,
                           int64_t *until) {
  *until = -1;
  if (rc == 1)
    return DLOCK__WAIT_HELD;
  if (rc < 0)
    return dlock__eng_wait_end(rc, w);
  if (wait_ms == 0)
    return DLOCK__WAIT_BUSY;
  if (w->deadline >= 0 && now >= w->deadline)
    return dlock__eng_wait_end(DLOCK_ETIMEDOUT, w);
  int64_t u = ttl >= 0 ? now + (ttl > 0 ? ttl : 1) : -1;
  if (max_sleep > 0 && (u < 0 || u > now + max_sleep))
    u = now + max_sleep;
  if (w->deadline >= 0 && (u < 0 || u > w->deadline))
    u = w->deadline;
  *until = u;
  return DLOCK__WAIT_SLEEP;
}

int dlock__eng_cancel_answer(int cr) {
  return cr == 1 ? DLOCK__WAIT_CONFIRM : DLOCK__WAIT_END;
}

int dlock__eng_confirm_answer(int rc) {
  return rc == 1 ? DLOCK__WAIT_HELD : DLOCK__WAIT_END;
}

int dlock__eng_wait_queue(long long wait_ms, int subscribed, int queue_first) {
  return wait_ms != 0 && (subscribed || queue_first);
}

int64_t dlock__eng_entry_ttl(int64_t deadline, int64_t now) {
  if (deadline < 0)
    return 0;
  return deadline - now < 1 ? 1 : deadline - now;
}

const char *dlock__eng_lost_why(const dlock__eng_rel_out *o, const char *name,
                                char *buf, size_t len) {
  if (!o->expired)
    snprintf(buf, len,
             "lock '%s' was lost while held (expired, deleted or taken)", name);
  else
    snprintf(buf, len,
             "lock '%s': its lease ran out before the unlock (local deadline "
             "passed; another owner may have held it)",
             name);
  return buf;
}
