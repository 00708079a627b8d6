/*
 * test_engine.c -- the lock engine (src/engine/engine.c) on its own: it does no
 * I/O and reads no clock for its decisions, so its rules are checked here
 * with made-up times and answers, no server. What both clients decide
 * through it: the local loss deadline and the next one, request ids kept
 * across an unlock's retries, reentrancy and the unlock's count, replica
 * sync's verdicts, what a grant-channel message means, what an attempt's
 * answer and a cancel's mean for a wait.
 */
#include <string.h>

#include "kinds/kinds.h"
#include "th.h"

static dlock__hold hold0(void) {
  dlock__hold h;
  memset(&h, 0, sizeof h);
  return h;
}

/* sent + lease - (lease/100 + 2); the next deadline; lost at it. */
TH_CASE(deadline_next_and_loss) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 3000, 1000, 0);
  CHECK_EQ(h.count, 1);
  CHECK_EQ(h.valid_until, 1000 + 3000 - 32);
  CHECK_EQ(dlock__eng_deadline(1000, 3000), 3968);
  int64_t next = INT64_MAX;
  CHECK_EQ(dlock__eng_expiry(&h, 2000, &next), DLOCK__ENG_KEEP);
  CHECK_EQ(next, 3968);
  /* an earlier deadline elsewhere stays the next one */
  next = 2500;
  CHECK_EQ(dlock__eng_expiry(&h, 2000, &next), DLOCK__ENG_KEEP);
  CHECK_EQ(next, 2500);
  next = INT64_MAX;
  CHECK_EQ(dlock__eng_expiry(&h, 3968, &next), DLOCK__ENG_LOST);
  CHECK_EQ(h.lost, DLOCK__LOST_UNRENEWED);
  CHECK(!dlock__eng_valid(&h, 3000)); /* lost: invalid at any time */
}

/* A confirmed renewal moves the deadline on, never back; an unanswered
 * one is retried until the deadline, then lost; "0" is gone at once. */
TH_CASE(renewal_answers) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 3000, 1000, 0);
  CHECK_EQ(dlock__eng_renew_answer(&h, 1, 1, 2000, 3000, 2100),
           DLOCK__ENG_KEEP);
  CHECK_EQ(h.valid_until, 2000 + 3000 - 32);
  CHECK_EQ(h.renewed_at, 2000);
  CHECK_EQ(dlock__eng_renew_answer(&h, 1, 1, 1500, 3000, 2100),
           DLOCK__ENG_KEEP);
  CHECK_EQ(h.valid_until, 2000 + 3000 - 32); /* not back */
  CHECK_EQ(dlock__eng_renew_answer(&h, 0, 0, 3000, 3000, 4000),
           DLOCK__ENG_RETRY);
  CHECK_EQ(h.lost, 0);
  CHECK_EQ(dlock__eng_renew_answer(&h, 0, 0, 3000, 3000, 4968),
           DLOCK__ENG_LOST);
  CHECK_EQ(h.lost, DLOCK__LOST_UNRENEWED);
  dlock__hold g = hold0();
  dlock__hold_note(&g, 1, 1, 3000, 1000, 0);
  CHECK_EQ(dlock__eng_renew_answer(&g, 1, 0, 2000, 3000, 2100),
           DLOCK__ENG_LOST);
  CHECK_EQ(g.lost, DLOCK__LOST_GONE);
}

/* A final unlock in flight, sent before the deadline: a key found gone is
 * not a loss; past the deadline the renewals just end. */
TH_CASE(final_unlock_in_flight_is_not_a_loss) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 3000, 1000, 0);
  dlock__eng_unlock u;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 2000, 3000, &u), 0);
  CHECK(h.releasing);
  /* gone, but the unlock is in flight: no loss, looked at again at the
   * retry pace (not at once) */
  CHECK_EQ(dlock__eng_renew_answer(&h, 1, 0, 2000, 3000, 2100),
           DLOCK__ENG_RETRY);
  CHECK_EQ(h.lost, 0);
  int64_t next = INT64_MAX;
  CHECK_EQ(dlock__eng_expiry(&h, 2100, &next), DLOCK__ENG_SETTLING);
  CHECK_EQ(next, 2110);
  h.releasing = 0;
  h.unlock_pending = 1; /* ended without an answer */
  CHECK_EQ(dlock__eng_expiry(&h, 3968, &next), DLOCK__ENG_END_QUIET);
  CHECK_EQ(h.lost, 0);
}

/* Reentrancy: the count the acquire expects, and a re-entry into a hold
 * that is gone. */
TH_CASE(reentry) {
  int prior = -1;
  CHECK_EQ(dlock__eng_reenter(NULL, 0, &prior), 0);
  CHECK_EQ(prior, 0);
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 3000, 1000, 0);
  CHECK_EQ(dlock__eng_reenter(&h, 2000, &prior), 0);
  CHECK_EQ(prior, 1);
  CHECK_EQ(dlock__eng_reenter(&h, 3968, &prior), DLOCK__ENG_RAN_OUT);
  h.lost = DLOCK__LOST_GONE;
  CHECK_EQ(dlock__eng_reenter(&h, 2000, &prior), DLOCK__LOST_GONE);
  uint32_t gen = h.gen;
  dlock__eng_forget(&h);
  CHECK_EQ(h.count, 0);
  CHECK_EQ(h.lost, 0);
  CHECK(h.gen != gen);
  CHECK_EQ(dlock__eng_reenter(&h, 2000, &prior), 0);
  CHECK_EQ(prior, 0);
}

/* A partial unlock that leaves only watchdog holds resets the key's TTL to
 * the watchdog lease (remaining_ttl, Redisson's exact reset): the record's
 * deadline -- a released longer fixed hold's -- comes down to what that
 * TTL keeps, before the unlock is sent. Found by make sim (a holder with
 * 5 s of local deadline left on a key that expired in 3 s); on a1a2e80
 * the deadline stayed at the fixed hold's. A fixed hold left below keeps
 * it (its TTL is only extended). */
TH_CASE(partial_unlock_to_watchdog_holds_lowers_the_deadline) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 3000, 1000, 0);  /* the watchdog's */
  dlock__hold_note(&h, 2, 0, 60000, 1100, 0); /* a fixed 60 s above it */
  CHECK_EQ(h.valid_until, 1100 + 60000 - 602);
  dlock__eng_unlock u;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 2000, 3000, &u), 0);
  CHECK_EQ(u.lease, 3000); /* exact: only the watchdog's hold remains */
  CHECK_EQ(h.valid_until, 2000 + 3000 - 32);
  /* whatever the answer: an unknown one keeps it low (a copy may run) */
  dlock__eng_rel_out o = dlock__eng_unlock_end(&h, &u, DLOCK_ECONN, 0, 2010);
  CHECK_EQ(o.action, DLOCK__ENG_REL_KEEP);
  CHECK_EQ(h.valid_until, 2000 + 3000 - 32);
  dlock__hold f = hold0();
  dlock__hold_note(&f, 1, 0, 60000, 1000, 0); /* fixed below */
  dlock__hold_note(&f, 2, 1, 3000, 1100, 0);  /* the watchdog's above */
  int64_t until = f.valid_until;
  CHECK_EQ(dlock__eng_unlock_begin(&f, 2000, 3000, &u), 0);
  CHECK(u.lease < 0); /* extend only */
  CHECK_EQ(f.valid_until, until);
}

/* An unlock that ended without an answer keeps its count and request id:
 * the caller's retry is its second copy. A new unlock draws a new id. */
TH_CASE(unlock_retry_keeps_request_id_and_count) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 30000, 1000, 0);
  dlock__hold_note(&h, 2, 1, 30000, 1100, 0);
  dlock__eng_unlock u1, u2, u3;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 2000, 30000, &u1), 0);
  CHECK_EQ(u1.expected, 2);
  CHECK_EQ(strlen(u1.rid), 32);
  dlock__eng_rel_out o = dlock__eng_unlock_end(&h, &u1, DLOCK_ECONN, 0, 2500);
  CHECK_EQ(o.rc, DLOCK_ECONN);
  CHECK_EQ(o.action, DLOCK__ENG_REL_KEEP);
  CHECK_EQ(h.count, 2);
  CHECK_EQ(dlock__eng_unlock_begin(&h, 3000, 30000, &u2), 0);
  CHECK(u2.resent);
  CHECK(u2.commit); /* the retry is the committing copy */
  CHECK_EQ(u2.expected, 2);
  CHECK_STR(u2.rid, u1.rid);
  o = dlock__eng_unlock_end(&h, &u2, 0, 0, 3100);
  CHECK_EQ(o.rc, 0);
  CHECK_EQ(o.action, DLOCK__ENG_REL_ONE);
  CHECK_EQ(dlock__hold_drop_one(&h), 0);
  CHECK_EQ(h.count, 1);
  /* the final release: its reply lost, the retry finds the hold gone:
   * that copy released it, and a tombstone is due */
  CHECK_EQ(dlock__eng_unlock_begin(&h, 4000, 30000, &u3), 0);
  CHECK(strcmp(u3.rid, u1.rid) != 0);
  CHECK_EQ(u3.expected, 1);
  o = dlock__eng_unlock_end(&h, &u3, DLOCK_ECONN, 0, 4100);
  CHECK_EQ(o.action, DLOCK__ENG_REL_KEEP);
  dlock__eng_unlock u4;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 5000, 30000, &u4), 0);
  CHECK_STR(u4.rid, u3.rid);
  CHECK_EQ(u4.sent, 4000); /* the first copy's send time */
  CHECK(u4.commit);        /* it writes its tombstone: no copy acts after it */
  o = dlock__eng_unlock_end(&h, &u4, DLOCK_ELOST, 0, 5100);
  CHECK_EQ(o.rc, 0);
  CHECK_EQ(h.unlock_pending, 0);
  CHECK_EQ(o.action, DLOCK__ENG_REL_FORGET);
  /* nothing held: EPERM */
  dlock__eng_forget(&h);
  CHECK_EQ(dlock__eng_unlock_begin(&h, 6000, 30000, &u4), DLOCK_EPERM);
}

/* Safety round 4 (issue 38.2): an acquire after an unlock whose outcome is
 * unknown settles that unlock first -- nothing is built on the count it may
 * have changed -- and a pending release outlives the hold it was for. */
TH_CASE(pending_release_is_settled_before_any_acquire) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 30000, 1000, 0);
  dlock__eng_unlock u, s;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 2000, 30000, &u), 0);
  CHECK(!u.commit); /* a first send is no committing copy */
  dlock__eng_rel_out o = dlock__eng_unlock_end(&h, &u, DLOCK_ECONN, 0, 2500);
  CHECK_EQ(o.rc, DLOCK_ECONN);
  CHECK_EQ(h.unlock_pending, 1);
  int prior = -1;
  CHECK_EQ(dlock__eng_reenter(&h, 2600, &prior), DLOCK__ENG_SETTLE);
  /* the hold forgotten (a loss reported meanwhile): still pending */
  dlock__eng_forget(&h);
  CHECK_EQ(h.unlock_pending, 1);
  CHECK_EQ(dlock__eng_reenter(&h, 2700, &prior), DLOCK__ENG_SETTLE);
  dlock__eng_settle_begin(&h, &s);
  CHECK(s.commit && s.settle && !s.undo);
  CHECK_STR(s.rid, u.rid);
  CHECK_EQ(s.expected, 1);
  /* still unknown: still pending; then answered: settled */
  o = dlock__eng_unlock_end(&h, &s, DLOCK_ECONN, 1, 2800);
  CHECK_EQ(h.unlock_pending, 1);
  dlock__eng_settle_begin(&h, &s);
  o = dlock__eng_unlock_end(&h, &s, DLOCK_ELOST, 1, 2900);
  CHECK_EQ(o.rc, 0);
  CHECK_EQ(h.unlock_pending, 0);
  CHECK_EQ(dlock__eng_reenter(&h, 3000, &prior), 0);
  CHECK_EQ(prior, 0);
}

/* The undo of an acquisition (DLOCK_ENOSYNC) is a release bound like any
 * other (issue 38.4): unknown -> pending, settled before the retry. A
 * caller's unlock of the record settles it before its own release. */
TH_CASE(pending_undo_is_settled_first) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 1, 30000, 1000, 0); /* prior hold: count 1 */
  dlock__eng_unlock u, s, v;
  dlock__eng_undo_begin(&h, 1, -30000, 1500, &u);
  CHECK(u.undo && !u.commit);
  CHECK_EQ(u.expected, 2);
  dlock__eng_rel_out o = dlock__eng_unlock_end(&h, &u, DLOCK_ECONN, 1, 1600);
  CHECK_EQ(o.action, DLOCK__ENG_REL_PUT);
  CHECK_EQ(h.count, 1); /* the undo changes no count */
  CHECK_EQ(h.unlock_pending, 2);
  CHECK(h.pend_undo);
  int prior;
  CHECK_EQ(dlock__eng_reenter(&h, 1700, &prior), DLOCK__ENG_SETTLE);
  CHECK_EQ(dlock__eng_unlock_begin(&h, 1700, 30000, &v), DLOCK__ENG_SETTLE);
  dlock__eng_settle_begin(&h, &s);
  CHECK(s.undo && s.commit);
  o = dlock__eng_unlock_end(&h, &s, 0, 1, 1800);
  CHECK_EQ(h.unlock_pending, 0);
  CHECK_EQ(h.count, 1);
  CHECK_EQ(dlock__eng_unlock_begin(&h, 1900, 30000, &v), 0);
  CHECK_EQ(v.expected, 1);
  /* a release answered after two sends is committed first; a committing
   * copy, or one send, needs nothing more */
  CHECK_EQ(dlock__eng_commit_due(&v, 1, 2), 1);
  CHECK_EQ(dlock__eng_commit_due(&v, DLOCK_ELOST, 2), 1);
  CHECK_EQ(dlock__eng_commit_due(&v, 1, 1), 0);
  CHECK_EQ(dlock__eng_commit_due(&v, DLOCK_ECONN, 2), 0);
  CHECK_EQ(dlock__eng_commit_due(&s, 1, 2), 0);
}

/* Past the local deadline an unlock's success is reported as a loss: the
 * hold was not ours for sure. */
TH_CASE(unlock_after_deadline_is_lost) {
  dlock__hold h = hold0();
  dlock__hold_note(&h, 1, 0, 1000, 1000, 0);
  dlock__eng_unlock u;
  CHECK_EQ(dlock__eng_unlock_begin(&h, 1500, 30000, &u), 0);
  dlock__eng_rel_out o = dlock__eng_unlock_end(&h, &u, 1, 0, 1990);
  CHECK_EQ(o.rc, DLOCK_ELOST);
  CHECK(o.expired);
  CHECK_EQ(o.action, DLOCK__ENG_REL_FORGET);
}

/* What a grant-channel message is (engine.h (e)), one parser for both
 * clients: "<owner>|<16 lowercase hex>" a hand-over, "...|r" a retry;
 * anything else is malformed and ignored by both. */
static int parse(const char *m, dlock__grant *g) {
  return dlock__eng_grant_parse(m, strlen(m), g);
}

TH_CASE(grant_parse) {
  dlock__grant g;
  CHECK_EQ(parse("42|00000000000000ab", &g), 1);
  CHECK(g.valid && !g.retry && g.owner_num);
  CHECK_EQ(g.owner_id, 42);
  CHECK_EQ(g.owner_len, 2);
  CHECK(memcmp(g.owner, "42", 2) == 0);
  CHECK_EQ(g.wid, 0xab);
  CHECK_STR(g.wid_hex, "00000000000000ab");
  /* a retry; the whole range of hex digits; a negative async owner */
  CHECK_EQ(parse("-7|0123456789abcdef|r", &g), 1);
  CHECK(g.retry && g.owner_num);
  CHECK_EQ(g.owner_id, -7);
  CHECK_EQ(g.wid, 0x0123456789abcdefULL);
  CHECK_STR(g.wid_hex, "0123456789abcdef");
  CHECK_EQ(parse("0|ffffffffffffffff", &g), 1);
  CHECK_EQ(g.owner_id, 0);
  CHECK_EQ(g.wid, UINT64_MAX);
  CHECK_EQ(parse("9223372036854775807|0000000000000001", &g), 1);
  CHECK_EQ(g.owner_id, INT64_MAX);
  CHECK_EQ(parse("-9223372036854775808|0000000000000001", &g), 1);
  CHECK(g.owner_num);
  CHECK_EQ(g.owner_id, INT64_MIN);
  /* an owner that is no number as a field writes it: valid, names no wait */
  const char *odd[] = {"x|0000000000000001",
                       "007|0000000000000001",
                       "-0|0000000000000001",
                       "+1|0000000000000001",
                       "9223372036854775808|0000000000000001",
                       "1:2|0000000000000001"};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    CHECK_MSG(parse(odd[i], &g) == 1 && !g.owner_num, "%s", odd[i]);
    CHECK_EQ(dlock__eng_grant_unclaimed(&g), DLOCK__GRANT_NONE);
  }
  /* malformed: 15 / 17 hex digits, uppercase, no bar, an empty owner, a
   * bad flag, a bare thread id (the payload before wait ids), empty */
  const char *bad[] = {"42|00000000000000a",
                       "42|00000000000000abc",
                       "42|00000000000000AB",
                       "4200000000000000ab",
                       "|00000000000000ab",
                       "|00000000000000ab|r",
                       "42|00000000000000ab|x",
                       "42|00000000000000ab|",
                       "42|00000000000000ab|rr",
                       "42|0000000000000g0b",
                       "42",
                       ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_MSG(parse(bad[i], &g) == 0 && !g.valid, "'%s' parsed", bad[i]);
    CHECK_EQ(dlock__eng_grant_verdict(&g, 42, 0xab), DLOCK__GRANT_NONE);
    CHECK_EQ(dlock__eng_grant_unclaimed(&g), DLOCK__GRANT_NONE);
  }
  CHECK_EQ(dlock__eng_grant_parse(NULL, 0, &g), 0);
}

/* The verdict table: a message is taken only by the wait it names (wait id
 * and owner); a grant or a retry for another wait of the same owner (an
 * ended one) is no wait's, and any message no wait took is declined. */
TH_CASE(grant_verdict_table) {
  dlock__grant g;
  const long long me = 42;
  const uint64_t wid = 0xab, old = 0xaa;
  struct {
    const char *msg;
    int verdict; /* for the waiting wait (42, 0xab) */
  } t[] = {
      {"42|00000000000000ab", DLOCK__GRANT_GRANTED}, /* for the wait */
      {"42|00000000000000ab|r", DLOCK__GRANT_RETRY}, /* retry, the wait */
      {"42|00000000000000aa", DLOCK__GRANT_NONE},    /* older wait, owner */
      {"42|00000000000000aa|r", DLOCK__GRANT_NONE},  /* retry, another */
      {"43|00000000000000ab", DLOCK__GRANT_NONE},    /* another owner */
      {"43|00000000000000ab|r", DLOCK__GRANT_NONE},
      {"43|00000000000000cc", DLOCK__GRANT_NONE}, /* no wait at all */
  };
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
    CHECK_EQ(parse(t[i].msg, &g), 1);
    CHECK_MSG(dlock__eng_grant_verdict(&g, me, wid) == t[i].verdict,
              "%s: verdict %d, want %d", t[i].msg,
              dlock__eng_grant_verdict(&g, me, wid), t[i].verdict);
    /* taken by its wait, or declined when no wait took it */
    CHECK_EQ(dlock__eng_grant_unclaimed(&g), DLOCK__GRANT_DECLINE);
  }
  /* the older wait, were it still waiting, takes its own grant */
  CHECK_EQ(parse("42|00000000000000aa", &g), 1);
  CHECK_EQ(dlock__eng_grant_verdict(&g, me, old), DLOCK__GRANT_GRANTED);
  /* a wait id is never 0: a message naming 0 is no wait's */
  CHECK_EQ(parse("42|0000000000000000", &g), 1);
  CHECK_EQ(dlock__eng_grant_verdict(&g, me, 0), DLOCK__GRANT_NONE);
  CHECK_EQ(dlock__eng_grant_unclaimed(&g), DLOCK__GRANT_DECLINE);
  /* an owner that is no number is no wait's, and nothing to decline */
  CHECK_EQ(parse("042|00000000000000ab", &g), 1);
  CHECK_EQ(dlock__eng_grant_verdict(&g, me, wid), DLOCK__GRANT_NONE);
  CHECK_EQ(dlock__eng_grant_unclaimed(&g), DLOCK__GRANT_NONE);
  /* blocking thread ids and async owners compare as numbers */
  CHECK_EQ(parse("-3|00000000000000ab|r", &g), 1);
  CHECK_EQ(dlock__eng_grant_verdict(&g, -3, wid), DLOCK__GRANT_RETRY);
}

/* ---- (f) waits ----------------------------------------------------------- */

static dlock__wait wait_of(int queued, int64_t deadline) {
  dlock__wait w;
  memset(&w, 0, sizeof w);
  w.id = 0x11;
  w.queued = queued;
  w.deadline = deadline;
  return w;
}

/* What an attempt's answer means for a wait, one table for both clients
 * (mutex.c's wait loop, async_lock.c's attempt_done): held, gone, a
 * try-lock's busy, sleep until the earliest of the TTL (at least 1 ms),
 * the kind's longest sleep and the deadline, or the end -- cancelling
 * first whenever the wait may be queued. */
TH_CASE(wait_answer_table) {
  static const struct { // NOLINT(clang-analyzer-optin.performance.Padding)
    int rc;
    int64_t ttl;
    long long wait_ms;
    int queued;
    int64_t deadline, now, max_sleep;
    int want;
    int64_t until;
  } t[] = {
      /* held / gone, whatever the rest */
      {1, -1, 5000, 1, 6000, 9000, 0, DLOCK__WAIT_HELD, -1},
      {1, -1, 0, 0, -1, 1000, 0, DLOCK__WAIT_HELD, -1},
      {DLOCK_ELOST, -1, 5000, 0, 6000, 1000, 0, DLOCK__WAIT_GONE, -1},
      /* a try-lock never waits nor queues */
      {0, 300, 0, 0, -1, 1000, 0, DLOCK__WAIT_BUSY, -1},
      /* the holder's TTL (or the slice's "retry in N ms"), bounded */
      {0, 300, 5000, 1, 6000, 1000, 0, DLOCK__WAIT_SLEEP, 1300},
      {0, 0, 5000, 1, 6000, 1000, 0, DLOCK__WAIT_SLEEP, 1001},
      {0, 6, -1, 1, -1, 1000, 0, DLOCK__WAIT_SLEEP, 1006},
      {0, 9000, 5000, 1, 6000, 1000, 0, DLOCK__WAIT_SLEEP, 6000},
      {0, 9000, 5000, 1, 6000, 1000, 200, DLOCK__WAIT_SLEEP, 1200},
      {0, -1, 5000, 1, 6000, 1000, 200, DLOCK__WAIT_SLEEP, 1200},
      /* no TTL, no deadline, no longest sleep: a wake-up only */
      {0, -1, -1, 1, -1, 1000, 0, DLOCK__WAIT_SLEEP, -1},
      /* no TTL: until the deadline */
      {0, -1, 5000, 0, 6000, 1000, 0, DLOCK__WAIT_SLEEP, 6000},
      /* the deadline passed: cancel first when queued */
      {0, 300, 5000, 1, 6000, 6000, 0, DLOCK__WAIT_CANCEL, -1},
      {0, 300, 5000, 0, 6000, 6001, 0, DLOCK__WAIT_TIMED_OUT, -1},
      /* an error ends it: cancel first when queued (both clients) */
      {DLOCK_ECONN, -1, 5000, 1, 6000, 1000, 0, DLOCK__WAIT_CANCEL, -1},
      {DLOCK_EREDIS, -1, -1, 1, -1, 1000, 0, DLOCK__WAIT_CANCEL, -1},
      {DLOCK_ECONN, -1, 5000, 0, 6000, 1000, 0, DLOCK__WAIT_FAILED, -1},
      {DLOCK_ETIMEDOUT, -1, 5000, 0, 6000, 6000, 0, DLOCK__WAIT_TIMED_OUT, -1},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    dlock__wait w = wait_of(t[i].queued, t[i].deadline);
    int64_t until = 77;
    int v = dlock__eng_wait_answer(t[i].rc, t[i].ttl, t[i].wait_ms, &w,
                                   t[i].now, t[i].max_sleep, &until);
    CHECK_MSG(v == t[i].want, "row %zu: verdict %d, want %d", i, v, t[i].want);
    CHECK_MSG(until == t[i].until, "row %zu: until %lld, want %lld", i,
              (long long)until, (long long)t[i].until);
  }
}

/* How a wait ends, whatever ended it; what the cancel's answer and the
 * confirming attempt's mean. */
TH_CASE(wait_end_and_cancel_table) {
  dlock__wait q = wait_of(1, 6000), n = wait_of(0, 6000);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ETIMEDOUT, &q), DLOCK__WAIT_CANCEL);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ECANCELED, &q), DLOCK__WAIT_CANCEL);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ECONN, &q), DLOCK__WAIT_CANCEL);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ETIMEDOUT, &n), DLOCK__WAIT_TIMED_OUT);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ECONN, &n), DLOCK__WAIT_FAILED);
  CHECK_EQ(dlock__eng_wait_end(DLOCK_ELOST, &q), DLOCK__WAIT_GONE);
  /* cancel: 1 handed to this wait -> confirm; 0 or an error -> end */
  CHECK_EQ(dlock__eng_cancel_answer(1), DLOCK__WAIT_CONFIRM);
  CHECK_EQ(dlock__eng_cancel_answer(0), DLOCK__WAIT_END);
  CHECK_EQ(dlock__eng_cancel_answer(DLOCK_ECONN), DLOCK__WAIT_END);
  CHECK_EQ(dlock__eng_cancel_answer(DLOCK_EREDIS), DLOCK__WAIT_END);
  /* the confirming attempt: held, or the wait's own code (not its error) */
  CHECK_EQ(dlock__eng_confirm_answer(1), DLOCK__WAIT_HELD);
  CHECK_EQ(dlock__eng_confirm_answer(0), DLOCK__WAIT_END);
  CHECK_EQ(dlock__eng_confirm_answer(DLOCK_ECONN), DLOCK__WAIT_END);
}

/* The queue flag and the entry's deadline (the acquire script's ARGV[4]
 * and ARGV[7]). */
TH_CASE(wait_queue_and_entry_ttl) {
  CHECK_EQ(dlock__eng_wait_queue(0, 1, 1), 0); /* try-lock: never */
  CHECK_EQ(dlock__eng_wait_queue(5000, 0, 0), 0);
  CHECK_EQ(dlock__eng_wait_queue(5000, 1, 0), 1);
  CHECK_EQ(dlock__eng_wait_queue(-1, 1, 0), 1);
  CHECK_EQ(dlock__eng_wait_queue(5000, 0, 1), 1); /* fair: first attempt */
  CHECK_EQ(dlock__eng_entry_ttl(-1, 1000), 0);    /* no deadline */
  CHECK_EQ(dlock__eng_entry_ttl(6000, 1000), 5000);
  CHECK_EQ(dlock__eng_entry_ttl(6000, 6000), 1); /* at least 1 ms */
  CHECK_EQ(dlock__eng_entry_ttl(6000, 9000), 1);
}

TH_MAIN()

/* Replica sync (cfg.sync_replicas), one rule for both clients: a WAIT
 * answer confirms a write when it reaches what was asked; with -1 a count
 * that changed is read again and the answer judged by it; an undone
 * acquisition is retried under the policy within the call's budget. */
TH_CASE(replica_sync_rules) {
  CHECK_EQ(dlock__eng_sync_verdict(1, 1, 1, -1), DLOCK__ENG_SYNC_OK);
  CHECK_EQ(dlock__eng_sync_verdict(2, 2, 3, -1), DLOCK__ENG_SYNC_OK);
  CHECK_EQ(dlock__eng_sync_verdict(1, 1, 0, -1), DLOCK__ENG_SYNC_SHORT);
  CHECK_EQ(dlock__eng_sync_verdict(1, 1, -1, -1), DLOCK__ENG_SYNC_SHORT);
  /* -1: as many as counted */
  CHECK_EQ(dlock__eng_sync_verdict(-1, 2, 2, -1), DLOCK__ENG_SYNC_OK);
  CHECK_EQ(dlock__eng_sync_verdict(-1, 2, 1, -1), DLOCK__ENG_SYNC_RECOUNT);
  CHECK_EQ(dlock__eng_sync_verdict(-1, 2, 1, 1), DLOCK__ENG_SYNC_OK);
  CHECK_EQ(dlock__eng_sync_verdict(-1, 2, 1, 2), DLOCK__ENG_SYNC_SHORT);
  CHECK_EQ(dlock__eng_sync_verdict(-1, 1, 2, 3), DLOCK__ENG_SYNC_SHORT);
  CHECK_EQ(dlock__eng_sync_verdict(-1, 1, -1, 0), DLOCK__ENG_SYNC_SHORT);
  CHECK(!dlock__eng_sync_stale(5000, 5999));
  CHECK(dlock__eng_sync_stale(5000, 6000));
  CHECK(dlock__eng_sync_stale(0, 6000)); /* never read */
  /* trylock: one attempt; policy exhausted: none more */
  CHECK(!dlock__eng_sync_retry(0, 3, 0, 0, 10));
  CHECK(!dlock__eng_sync_retry(3, 3, -1, 0, 10));
  /* for ever: the whole policy; timed: while the budget outlasts it */
  CHECK(dlock__eng_sync_retry(2, 3, -1, 0, 10));
  CHECK(dlock__eng_sync_retry(0, 3, 1000, 11, 10));
  CHECK(!dlock__eng_sync_retry(0, 3, 1000, 10, 10));
}
