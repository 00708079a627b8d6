/*
 * engine.h -- the lock engine: the decisions about a hold that the blocking
 * client (mutex.c, holds.c, watchdog.c) and the event-loop client
 * (async_lock.c, async_wd.c) share, made in ONE place (engine.c).
 *
 * The engine is sans-I/O: it never blocks, never sleeps, sends nothing and
 * reads no clock for a decision. It is given times (monotonic ms) and answers
 * (a script's outcome, a renewal's flag) and says what they mean for a hold
 * record (dlock__hold): its count, its local deadline, whether it is lost, what
 * request id an operation carries, when to look again. The drivers do the
 * I/O and the locking around it:
 *
 *   blocking client: the calling thread (acquire, release), the watchdog
 *     thread (renewals) and the expiry thread (deadlines), under reg.mu;
 *   event-loop client: the loop's callbacks and timers (one thread).
 *
 * It owns, once for both:
 *   (a) the LOCAL LOSS DEADLINE of a hold: send time of the last confirmed
 *       acquisition or renewal + lease - dlock__lease_margin(lease)
 *       (dlock__eng_deadline; set by dlock__hold_note and dlock__eng_renewed),
 *       and the expiry verdict that also says which deadline is next
 *       (dlock__eng_expiry: a driver sleeps or arms a timer until then);
 *   (b) REQUEST IDS: every id is drawn by dlock__request_id (32 hex) or
 *       dlock__eng_wait_id (a wait's id); an unlock whose outcome is unknown
 *       keeps its id in the record and its retry sends the same one
 *       (dlock__eng_unlock_begin / dlock__eng_unlock_end);
 *   (c) REENTRANCY: whether an acquire of (client, name, owner) is a
 *       re-entry and which count the script expects (dlock__eng_reenter),
 *       and what an unlock's answer does to the count
 *       (dlock__eng_unlock_end);
 *   (d) REPLICA SYNC (cfg.sync_replicas, docs/sentinel.md): whether a lock
 *       write's WAIT answer confirms it (dlock__eng_sync_verdict), when a
 *       cached replica count is read again (dlock__eng_sync_stale), and
 *       whether an acquisition undone for a shortfall is tried again or
 *       ends with DLOCK_ENOSYNC (dlock__eng_sync_retry). mutex.c/sync.c
 *       and async_conn.c/async_lock.c follow the same three answers;
 *   (e) HAND-OVER GRANTS (docs/design.md, "Acquire, release, hand-over"):
 *       what a message on a lock's grant channel is (dlock__eng_grant_parse:
 *       "<owner>|<wait id>" a hand-over, "<owner>|<wait id>|r" a retry,
 *       anything else ignored), what it means for one waiting wait
 *       (dlock__eng_grant_verdict: not for it, granted, or retry -- by wait
 *       id AND owner, nothing else) and that a message no waiting wait took
 *       is declined (dlock__eng_grant_unclaimed). pubsub.c (on_grant, the
 *       blocking client's slots) and async_sub.c (on_push, the event-loop
 *       client's calls) follow the same three answers;
 *   (f) WAITS (docs/design.md, "Acquire, release, hand-over"): what an
 *       acquire attempt's answer means for a wait -- held, the re-entered
 *       hold gone, a try-lock's "busy", sleep until when (the holder's
 *       PTTL or the policy's "retry in N ms", a kind's longest sleep, the
 *       wait's deadline), timed out or failed, and whether the wait must
 *       leave the server's queue (the cancel script) before it ends
 *       (dlock__eng_wait_answer, dlock__eng_wait_end); what the cancel's
 *       answer and the attempt that confirms a hand-over found by it mean
 *       (dlock__eng_cancel_answer, dlock__eng_confirm_answer); whether an
 *       attempt joins the hand-over queue (dlock__eng_wait_queue) and how
 *       long its entry may be handed the lock (dlock__eng_entry_ttl, the
 *       acquire script's ARGV[7]). The ORDER of a wait's steps is the
 *       wait machine's (waitm.h): mutex.c (drive) and async_lock.c (run)
 *       send what it says; whether a failure is ridden out is its rule
 *       too. Not the engine's: who wakes a wait (the drivers'
 *       subscriptions, condition variables and timers).
 *
 * Thread-safety: none of its own; every call on a record runs under the
 * record's guard (reg.mu for the blocking client, the loop's thread for the
 * event-loop client). dlock__request_id and dlock__eng_wait_id use the
 * per-thread PRNG: any thread.
 */
#ifndef DLOCK_ENGINE_H
#define DLOCK_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "engine/ioverdict.h"

typedef struct dlock__hold dlock__hold;
typedef struct dlock__lockent dlock__lockent;

/* ---- (0) the records the decisions are about --------------------------- */

/* Why a hold was lost (dlock__hold.lost); dlock__lost_why says it. */
enum {
  DLOCK__LOST_GONE = 1,       /* a renewal found the key gone or taken */
  DLOCK__LOST_UNRENEWED = 2,  /* renewals failed until the deadline passed */
  DLOCK__LOST_THREAD_EXIT = 3 /* the holding thread exited holding it */
};
/* The reason as a phrase ("a renewal found ..."); any value. */
const char *dlock__lost_why(int lost);

/* What this process knows about one thread's holds on one lock name.
 * Guarded by c->reg_mu. */
struct dlock__hold {
  dlock__hold *next;              /* in the entry's list (or the grave) */
  dlock__hold *wd_prev, *wd_next; /* in c->wd_head while renewed */
  uint64_t tid;
  uint32_t gen;
  int count;
  int wd_count; /* holds taken with the watchdog */
  int in_wd;
  int lost;         /* 0, or why the hold was lost: DLOCK__LOST_* */
  int64_t lease_ms; /* lease of the most recent explicit acquisition */
  /* Bit i set: hold number i+1 (in acquisition order) has a fixed lease;
   * clear: the watchdog. Holds are released last first, so an unlock knows
   * what remains (dlock__remaining_lease). Holds past 64 count as fixed. */
  uint64_t fixed_bits;
  /* A RELEASE WHOSE OUTCOME IS UNKNOWN (no reply; or answered, but a copy
   * sent before it may still be on its way and its tombstone could not be
   * written): the count it expected (0: none). Safety round 4's rule: it
   * is PENDING -- a copy of it may still arrive and act -- until a
   * committing copy of it (the script writes its tombstone with its effect,
   * so no copy of it can act after that) is answered. The record's next
   * operation sends that copy first (dlock__eng_reenter and
   * dlock__eng_unlock_begin say DLOCK__ENG_SETTLE); a caller's unlock at
   * the same count IS that copy. A pending release outlives the hold it
   * was for (dlock__eng_forget keeps it; holds.c keeps the record): it is
   * an obligation, not a hold. */
  int unlock_pending;
  int pend_undo;          /* the undo of an acquisition (DLOCK_ENOSYNC) */
  int64_t pend_lease;     /* its lease argument (remaining_ttl) */
  uint64_t unlock_rid[2]; /* its request id (32 hex digits) */
  /* Monotonic ms the final release (in flight, or pending as above) was
   * first sent: if that was before valid_until, its outcome can still be
   * "released", and no loss is reported for the hold (watchdog.c). */
  int64_t release_sent;
  int64_t renewed_at;  /* monotonic ms: last acquire or confirmed renewal */
  int64_t fail_logged; /* monotonic ms a failed renewal was last logged */
  int64_t since_ms;    /* wall clock ms of the acquisition that began the hold
                          (count 0 -> 1): the info key's since:<tid>:<name> */
  int64_t since_at;    /* the same moment, monotonic ms */
  int since_pub;       /* since_ms went out with an info write */
  /* Local deadline (monotonic ms): send time of the last confirmed
   * acquisition or renewal + lease - dlock__lease_margin(lease). Past it the
   * hold is lost whatever Redis says later (watchdog.c's expiry thread
   * reports watchdog holds at that moment). */
  int64_t valid_until;
  int64_t retry_at; /* after a failed renewal: retry not before this */
  uint64_t token;   /* fenced locks */
  /* The final unlock (count 1) is in flight: a key found gone is not a
   * loss while dlock__release_may_have_run says so. A partial unlock
   * (count > 1) never sets it: the thread still holds the lock. */
  int releasing;
  dlock__lockent *e; /* the lock: its name and family */
  /* Read-write lock: the modes of the thread's holds in acquisition order
   * ('R' / 'W'), modes[0..nmodes). */
  char *modes;
  size_t nmodes, modes_cap;
  /* Multilock: the members an unfinished unlock released (one byte each),
   * so a retry releases only the rest; NULL = no unlock in progress. */
  unsigned char *marks;
};
/* One waiting acquire call (mutex.c's wait loop) as the scripts see it. */
typedef struct dlock__wait {
  uint64_t id;      /* names this wait in queue entries and grants; 0 none */
  int queued;       /* an attempt of this wait may have left a queue entry */
  int64_t deadline; /* monotonic ms the wait ends; -1 never */
  /* The request id of the attempt being sent (32 hex; drawn per attempt by
   * dlock__request_id): its tombstone dlock_tomb:{name}:<rid>
   * (dlock__req_tomb_key) is KEYS of the acquire scripts, which do nothing
   * once it exists -- written by the client after an attempt it had to
   * send more than once (safety round 4: a late copy of an acquire). */
  char rid[33];
} dlock__wait;

/* ---- (a) the local loss deadline ----------------------------------------- */

/* The clock-drift margin a local deadline keeps from the server's expiry:
 * lease/100 + 2 ms (Redlock's drift factor). */
int64_t dlock__lease_margin(int64_t lease);
/* The local deadline of a hold confirmed by a command sent at `sent` with
 * `lease`: sent + lease - margin. The key's TTL started after the send, so
 * the server cannot expire it before. */
int64_t dlock__eng_deadline(int64_t sent, int64_t lease);

/* 1 when an acquisition sent at `sent` with `lease` and answered "held" at
 * `now` is a hold: its answer came before its local deadline. A FIRST hold
 * answered later may have expired on the server already -- a slow or held
 * reply, a WAIT behind it, a paused client -- and another client may hold
 * the lock: it is no hold. The driver gives it back (a bound release, as an
 * undo) and the wait goes on within its budget, else the call answers
 * DLOCK_ELOST; never "held" with a deadline in the past (issue 38.5's rule
 * for every kind: the soak's wire adversary found an event-loop
 * acquisition answered 2.5 s after its send, its 1 s lease long over,
 * while another client held the lock). A re-entry keeps the hold's own
 * deadline (dlock__hold_note never shortens it). */
int dlock__eng_in_time(int64_t sent, int64_t lease, int64_t now);
/* A driver-internal answer of one acquire try: its answer came past its
 * local deadline (dlock__eng_in_time) and the acquisition was given back. */
#define DLOCK__ENG_LATE 0x300

/* The bookkeeping of one acquisition on a hold record (no lock taken, no
 * watchdog list touched): count = target, the hold's lease kind (fixed_bits,
 * wd_count), lease_ms, and the local deadline sent + lease - margin (a
 * first hold resets the record; a reentrant one never shortens it). */
void dlock__hold_note(dlock__hold *h, int target, int wd, int64_t lease,
                      int64_t sent, uint64_t token);
/* The verdict on a reentrant acquire's success (prior: the count it found
 * and re-entered): 0 to record it (dlock__hold_note), else the hold was
 * lost or ran out while the acquire was in flight -- its loss code, or
 * DLOCK__ENG_RAN_OUT -- and the answer revives nothing: the call answers
 * DLOCK_ELOST (the sim found a late re-entry putting a lost hold back on
 * the watchdog list with its deadline past, and the call said OK). A first
 * hold (prior 0) is judged by dlock__eng_in_time. */
int dlock__eng_reenter_answer(const dlock__hold *h, int prior, int64_t now);
/* A renewal sent at `sent` with `lease` was confirmed: renewed_at and the
 * local deadline move (never back: the renew script never shortens a TTL),
 * the retry schedule ends. */
void dlock__eng_renewed(dlock__hold *h, int64_t sent, int64_t lease);
/* 1 while h is held, not reported lost, and its local deadline not passed. */
int dlock__eng_valid(const dlock__hold *h, int64_t now);

/* What a look at a renewed hold's deadline, or at a renewal's answer, says. */
enum {
  DLOCK__ENG_KEEP = 0,  /* nothing to do (renewed, or not due) */
  DLOCK__ENG_RETRY,     /* no answer yet (or gone while the final unlock is
                         * in flight), deadline not passed: renew again at
                         * the retry pace */
  DLOCK__ENG_SETTLING,  /* its final unlock is in flight: look again soon */
  DLOCK__ENG_END_QUIET, /* stop renewing, report nothing (unlocked in time) */
  DLOCK__ENG_LOST       /* report it lost (h->lost says why) */
};
/* The expiry verdict for a renewed hold at `now` (KEEP, SETTLING,
 * END_QUIET, or LOST with h->lost set); *next is lowered to the hold's
 * deadline when it is still ahead (the driver's next wake-up), or to now +
 * 10 while SETTLING. Called by watchdog.c's expiry thread and async_wd.c's
 * deadline timer: one rule for both clients. */
int dlock__eng_expiry(dlock__hold *h, int64_t now, int64_t *next);
/* A renewal due one period after the hold's last confirmed one and still
 * unconfirmed half a period later has failed, whatever keeps the renewing
 * thread (a connect or a write to a paused server): returns 1 when that is
 * to be told now (once per renewal round: noted in h->fail_logged), else
 * 0, bringing *next forward to when it would be late. The log hook hears
 * of failing renewals while the lease still runs (issue 27). */
int dlock__eng_renew_late(dlock__hold *h, int64_t now, int64_t period,
                          int64_t *next);

/* A renewal sent at `sent` answered: answered = 0 no answer (failure),
 * renewed = its flag. Updates h (dlock__eng_renewed, or h->lost) and
 * returns KEEP (renewed), RETRY, END_QUIET or LOST. */
int dlock__eng_renew_answer(dlock__hold *h, int answered, int renewed,
                            int64_t sent, int64_t lease, int64_t now);
/* 1 while the final release of h (in flight, or sent with its outcome
 * unknown) can still have released the lock: it was first sent before the
 * hold's local deadline. Then a key found gone is not a loss to report. */
int dlock__release_may_have_run(const dlock__hold *h);

/* ---- (b) request ids ------------------------------------------------------
 */

/* 1 when a script call's outcome rc comes from a server answer (rc >= 0, or
 * an error the server or its reply gave: DLOCK_ELOST, DLOCK_EREDIS,
 * DLOCK_EPROTO, ...), 0 when its outcome is unknown (DLOCK_ECONN,
 * DLOCK_ECLOSED, DLOCK_ETIMEDOUT, DLOCK_ECANCELED: a copy may have run, or
 * may still). Request binding (docs/guarantees.md, "Rules") asks it. */
int dlock__eng_answered(int rc);

/* A fresh request id: 32 lowercase hex chars + NUL (per-thread PRNG). The
 * only place ids are drawn (unlocks, undo releases, once keys). */
void dlock__request_id(char out[33]);
/* A fresh wait id (non-zero): names one waiting acquire call in queue
 * entries and grants, kept across all its attempts. */
uint64_t dlock__eng_wait_id(void);

/* ---- (c) reentrancy and the unlock's count ---------------------------------
 */

/* An acquire by the record's owner at `now` (h may be NULL: no record).
 * Returns 0 with *prior = the count the owner holds (the acquire script
 * expects *prior + 1 after it: a re-entry when *prior > 0), or, for a
 * re-entry whose hold is gone, DLOCK__LOST_* (reported lost) or
 * DLOCK__ENG_RAN_OUT (its local deadline passed): the caller forgets the
 * record (dlock__eng_forget) and answers DLOCK_ELOST. */
#define DLOCK__ENG_RAN_OUT 0x100
/* ... or DLOCK__ENG_SETTLE: a release of the record is pending (its
 * outcome unknown, h->unlock_pending): NOTHING may be built on the count it
 * may have changed until it is settled -- the driver sends its committing
 * copy first (dlock__eng_settle_begin, the kind's release with the
 * tombstone written by the script, dlock__eng_unlock_end), then asks
 * again. Safety round 4 (issue 38.2): an acquire after an unlock that
 * answered DLOCK_ECONN was a re-entry on the count the unlock's late copy
 * then deleted. */
#define DLOCK__ENG_SETTLE 0x200
int dlock__eng_reenter(const dlock__hold *h, int64_t now, int *prior);
/* Forgets every hold of the record (count, lease kinds, loss) and bumps
 * its generation: replies about the old holds are ignored. A pending
 * release stays (an obligation that outlives the hold: its late copy could
 * still act on the owner's next hold). The driver takes it off its renewal
 * list. */
void dlock__eng_forget(dlock__hold *h);
/* One hold fewer after a release that leaves holds: count and wd_count.
 * Returns 1 when no watchdog hold remains (leave the watchdog's list). */
int dlock__hold_drop_one(dlock__hold *h);
/* The lease argument of an unlock that leaves holds, for the scripts'
 * remaining_ttl (DLOCK__LUA_TTL). Holds are released last first. Only
 * watchdog holds remain: wd_lease (exact: Redisson resets the TTL to the
 * lease of the remaining holds). A fixed hold remains: minus the longest of
 * the most recent explicit lease and (if watchdog holds remain) wd_lease --
 * extend to at least that, never shorten: the fixed hold's deadline was
 * promised from its own acquisition. */
int64_t dlock__remaining_lease(const dlock__hold *h, int64_t wd_lease);

/* One release as the engine sees it: the caller's unlock, the undo of an
 * acquisition, or the committing copy of a pending one (filled by
 * dlock__eng_unlock_begin, dlock__eng_undo_begin, dlock__eng_settle_begin). */
typedef struct dlock__eng_unlock {
  uint32_t gen;  /* the record's generation when the release began */
  int64_t lease; /* remaining_ttl argument (dlock__remaining_lease) */
  int expected;  /* the hold count before this release */
  int resent;    /* an earlier call sent this release (outcome unknown) */
  int commit;    /* a COMMITTING COPY: the script writes the release's
                    tombstone with its effect (every copy sent after an
                    earlier one whose outcome is unknown) */
  int undo;      /* the undo of an acquisition (DLOCK_ENOSYNC) */
  int settle;    /* settling a pending release (not the caller's own) */
  int64_t sent;  /* when this release was first sent (an earlier call's) */
  char rid[33];  /* its request id (an earlier call's if resent) */
} dlock__eng_unlock;
/* Starts an unlock of h at `now` (h may be NULL). Returns 0 (u filled: send
 * the unlock script with u->lease, u->expected, u->rid, u->commit),
 * DLOCK_EPERM (the owner holds nothing), DLOCK_ELOST (the hold was
 * reported lost: h->lost says why; the caller forgets the record) or
 * DLOCK__ENG_SETTLE (another release of the record is pending: settle it
 * first, then begin again). A retry of an unlock that ended without an
 * answer at the same count is its committing copy: same request id, same
 * first send time, the tombstone written by the script. */
int dlock__eng_unlock_begin(dlock__hold *h, int64_t now, int64_t wd_lease,
                            dlock__eng_unlock *u);
/* Fills u with the committing copy of h's pending release (h->unlock_pending
 * > 0): its count, lease and request id, commit = resent = settle = 1. */
void dlock__eng_settle_begin(dlock__hold *h, dlock__eng_unlock *u);
/* The verdict on a settling copy once dlock__eng_unlock_end applied its
 * answer rc to the record h (the record found again: NULL when it is gone).
 * 0: settled -- nothing is pending any more, the call goes on; else the
 * code the call ends with: the release is still pending (no answer, or a
 * hold past its local deadline whose copy went unanswered, or a refusal)
 * and nothing may be built on its count. Decided by the record's state,
 * never by the answer's code alone: "ELOST, and still pending" is not
 * settled. Every driver's rule (mutex.c, async_lock.c, etcd_lock.c). */
int dlock__eng_settle_end(const dlock__hold *h, int rc);
/* The undo of an acquisition the replicas did not confirm (DLOCK_ENOSYNC):
 * a release of h's field at count prior + 1 (the script writes prior, or
 * releases when prior is 0), with a fresh request id, lease as the kind's
 * release takes it. Its answer goes to dlock__eng_unlock_end, which keeps
 * it pending (h->pend_undo) when its outcome is unknown -- the call's
 * retry, and the owner's next call, settle it first. */
void dlock__eng_undo_begin(dlock__hold *h, int prior, int64_t lease,
                           int64_t now, dlock__eng_unlock *u);
/* 1 when a release answered (rc >= 0 or DLOCK_ELOST) after `sends` sends
 * must be COMMITTED before its answer counts: sent more than once, not as
 * a committing copy -- a copy of it may still be on its way. The driver
 * writes its tombstone (SET, dlock__tombstone_ttl) and waits for the
 * answer; if that fails it passes the failure to dlock__eng_unlock_end
 * instead of rc (the release stays pending). */
int dlock__eng_commit_due(const dlock__eng_unlock *u, int rc, int sends);
/* What to do with the record after the unlock's answer. */
enum {
  DLOCK__ENG_REL_KEEP = 0, /* outcome unknown: the record stays as it is */
  DLOCK__ENG_REL_PUT,      /* not this record's holds any more: free if idle */
  DLOCK__ENG_REL_FORGET,   /* no hold remains: dlock__eng_forget */
  DLOCK__ENG_REL_ONE       /* one hold fewer: dlock__hold_drop_one */
};
typedef struct dlock__eng_rel_out {
  int rc;      /* the call's answer: 0, DLOCK_ELOST, or rc itself */
  int expired; /* DLOCK_ELOST because the local deadline passed */
  int action;  /* DLOCK__ENG_REL_* */
  int ran_out; /* the local deadline had passed, whatever Redis said */
} dlock__eng_rel_out;
/* The release script answered rc (1 released, 0 holds remain, DLOCK_ELOST,
 * or another negative code: outcome unknown); copy = it may have been sent
 * more than once (by the retry policy, or an earlier call). The driver has
 * committed it already when dlock__eng_commit_due said so. Clears
 * h->releasing, records the release as pending (count, request id, lease)
 * for an unknown outcome and clears a pending one that this answer
 * settled, and says what the call answers and what to do with the record
 * (the action is the driver's: it owns the lists). An undo, or a settled
 * release whose hold the record no longer has, changes no count: action
 * DLOCK__ENG_REL_PUT. */
dlock__eng_rel_out dlock__eng_unlock_end(dlock__hold *h,
                                         const dlock__eng_unlock *u, int rc,
                                         int copy, int64_t now);

/* A buffer for dlock__eng_lost_why: dlock_last_error()'s size. */
#define DLOCK__ENG_WHY_LEN 512

/* The one wording of an unlock's DLOCK_ELOST (o from dlock__eng_unlock_end,
 * o.rc == DLOCK_ELOST) for lock name, into buf[len], for every client and
 * store: lost while held (expired, deleted or taken), or its lease ran out
 * before the unlock. Returns buf. */
const char *dlock__eng_lost_why(const dlock__eng_rel_out *o, const char *name,
                                char *buf, size_t len);

/* ---- (d) replica sync --------------------------------------------------- */

/* How often a cached replica count (sync_replicas -1) is read again, ms. */
#define DLOCK__SYNC_REFRESH_MS 1000
/* 1 when a replica count read at checked_at (0: never) is due to be read
 * again at now: replicas that attach later are waited for. */
int dlock__eng_sync_stale(int64_t checked_at, int64_t now);

/* What a WAIT answer says about the write before it. */
enum {
  DLOCK__ENG_SYNC_OK = 0, /* confirmed */
  DLOCK__ENG_SYNC_SHORT,  /* not confirmed: undo the acquisition */
  DLOCK__ENG_SYNC_RECOUNT /* cfg -1 and the count changed: read it again
                             and ask once more with `count` */
};
/* The verdict on a write followed by WAIT want replicas that answered
 * acks (-1: WAIT failed, e.g. an ACL user without +wait). cfg is
 * cfg.sync_replicas; count is the replica count read after the answer
 * (sync_replicas -1), or -1 when not read yet. With cfg -1 an answer that
 * differs from want means replicas came or went: RECOUNT until the caller
 * passes the count it read again, then confirmed when acks reach it (a
 * replica that left is not waited for). Else confirmed when acks >= want. */
int dlock__eng_sync_verdict(int cfg, int want, long long acks, int count);

/* After an acquisition was undone for a shortfall (the i-th, from 0): 1 to
 * try again after `pause` (dlock__retry_pause), 0 to end with
 * DLOCK_ENOSYNC. As Redisson, under the retry policy (retry_attempts) and
 * within the call's wait budget: a trylock (wait_ms 0) is one attempt, a
 * timed call tries again only while its budget left outlasts the pause, a
 * call that waits for ever (wait_ms < 0) has the whole policy. */
int dlock__eng_sync_retry(int i, int retry_attempts, long long wait_ms,
                          int64_t budget_left, int64_t pause);

/* ---- (e) hand-over grants ---------------------------------------------- */

/* A message on a lock's grant channel "dlock_grant__channel:...:<client id>"
 * (scripts: DLOCK__LUA_HANDOVER writes "<owner>|<wait id>", DLOCK__LUA_POLICY
 * "<owner>|<wait id>|r"), parsed. The owner is the lock field's part after
 * "<client id>:": a blocking thread's id, an async call's owner. */
typedef struct dlock__grant {
  int valid;          /* 1: a grant or a retry; 0: malformed, ignored */
  const char *owner;  /* the owner part (points into the message) */
  size_t owner_len;   /* > 0 when valid */
  int owner_num;      /* the owner is a number as a field writes it ("0",
                         "-12", "42": no '+', no leading zero, a long long) */
  long long owner_id; /* its value (when owner_num) */
  uint64_t wid;       /* the wait id named */
  char wid_hex[17];   /* the same, as sent (16 lowercase hex) + NUL */
  int retry;          /* "|r": the queue's head, woken while young */
} dlock__grant;

/* Parses p[0..n) into *g (owner points into p). Returns 1 for a valid
 * message: a non-empty owner, '|', exactly 16 lowercase hex digits, and
 * nothing more or "|r". Else 0 (g->valid 0): both clients ignore it. */
int dlock__eng_grant_parse(const char *p, size_t n, dlock__grant *g);

/* What a grant-channel message means for one waiting wait, and after all. */
enum {
  DLOCK__GRANT_NONE = 0, /* not for this wait (or: nothing more to do) */
  DLOCK__GRANT_GRANTED,  /* the unlock handed the lock to this wait: it holds
                            it; its next attempt finds the field and
                            confirms it (both clients: no hold is taken on a
                            grant alone, safety round 4) */
  DLOCK__GRANT_RETRY,    /* the lock was freed and this wait is the queue's
                            head, woken while young: it attempts again now */
  DLOCK__GRANT_DECLINE   /* no waiting wait took it: send the decline script
                            (field "<client id>:<owner>", the wait id) */
};

/* The verdict of message g for the waiting wait (owner, wid): GRANTED or
 * RETRY when g names exactly that wait (its wait id and its owner), else
 * NONE -- a wait id is never 0, an owner that is not a number is no wait's.
 * In particular a grant or a retry naming ANOTHER wait of the same owner
 * (an older wait, ended, whose queue entry stayed because its cancel could
 * not reach Redis) is NONE for the owner's running wait: it does not wake
 * it, and the message ends declined. Why not kick the owner's running wait
 * (its attempt would find the field and take the hand-over as its own)?
 *   - the hand-over served the ENDED wait's place in the queue; the next
 *     live waiter in that queue is next, not a later wait of the same owner
 *     (the queue's arrival order, as a hand-over to a live wait promises);
 *   - a kicked wait may end without attempting (its budget, a cancel, an
 *     expired async call) and without a queue entry whose cancel would find
 *     the field: the lock would stay with nobody for the ended wait's lease
 *     (the watchdog's 30 s). The decline gives it back at once;
 *   - the decline costs no safety: it does nothing when the owner took the
 *     lock as its own meanwhile (any acquisition of the field deletes the
 *     hand-over's marker, scripts.c), so the race between the decline and
 *     the running wait's own attempt ends with one holder either way.
 * Drivers: pubsub.c on_grant over the entry's slots (owner = the slot's
 * thread id), async_sub.c on_push over the entry's calls (owner = the
 * call's owner); the first wait whose verdict is not NONE takes it. */
int dlock__eng_grant_verdict(const dlock__grant *g, long long owner,
                             uint64_t wid);
/* The rule after every waiting wait of the channel said NONE (or there was
 * none): DLOCK__GRANT_DECLINE for a valid message whose owner is a number
 * (a field this client can have: the decline script gives the lock back
 * unless that field took it as its own since, and drops a retried wait's
 * entry from the queue's head), else DLOCK__GRANT_NONE (nothing to give
 * back). Blocking: queued for the errand thread (errand.c, no WAIT);
 * async: sent at once. Sent once; if it fails, the ended wait's lease ends
 * the hold. */
int dlock__eng_grant_unclaimed(const dlock__grant *g);

/* ---- (f) waits ----------------------------------------------------------- */

/* What an acquire attempt's answer, or the end of a wait, means. */
enum {
  DLOCK__WAIT_HELD = 0,  /* the attempt took the lock (or a hand-over it
                            confirmed): the call holds it */
  DLOCK__WAIT_GONE,      /* a re-entry found the owner's hold gone (the
                            script's -3): DLOCK_ELOST, forget the record;
                            never queued (a re-entry never queues) */
  DLOCK__WAIT_BUSY,      /* a try-lock (wait_ms 0) found it taken:
                            DLOCK_EBUSY; it never waits nor queues */
  DLOCK__WAIT_SLEEP,     /* taken: sleep until *until (-1: until a wake-up
                            message or the deadline, none being set), then
                            attempt again */
  DLOCK__WAIT_TIMED_OUT, /* the deadline passed, not queued: ETIMEDOUT */
  DLOCK__WAIT_FAILED,    /* another code ends it, not queued: that code */
  DLOCK__WAIT_CANCEL,    /* it ends (timed out, or any other code) while an
                            attempt of it may have left a queue entry: send
                            the cancel script first (dlock__eng_cancel_answer
                            says what its answer means), then end with the
                            wait's own code */
  DLOCK__WAIT_CONFIRM,   /* the cancel found the lock handed to this wait:
                            attempt once more, not queueing (its answer:
                            dlock__eng_confirm_answer) */
  DLOCK__WAIT_END        /* end with the wait's own code (not held) */
};

/* How a wait that ends with code rc (< 0: DLOCK_ETIMEDOUT when its
 * deadline passed, DLOCK_ECANCELED, an attempt's error, a subscription
 * that failed, ...) ends: GONE for DLOCK_ELOST from a re-entry, CANCEL
 * when w may be queued (w->queued), else TIMED_OUT or FAILED.
 * ONE RULE FOR EVERY END: until issue 26 the event-loop client ran the
 * cancel only when its deadline passed; a queued call that ended with an
 * error (an attempt's, its subscription's) left its entry in the queue.
 * The blocking client cancelled on every end, and that is the rule now:
 * an entry left behind is handed the lock by a later unlock, and a wait
 * with no deadline (wait_ms < 0) has an entry that never dies by itself --
 * the lock then takes a hand-over and a decline (or, with the client
 * gone, a skipped PUBLISH) to pass on, and the cancel also finds a
 * hand-over made before the end (kept: DLOCK__WAIT_CONFIRM). A cancel
 * that cannot reach Redis costs nothing more than no cancel. */
int dlock__eng_wait_end(int rc, const dlock__wait *w);

/* How long a QUEUED wait of the plain mutex sleeps at most before it
 * attempts again, whatever the holder's TTL said: the backstop of "a lock
 * left free with live waiters is taken or handed on" (safety round 4,
 * issue 38.7). The policy may leave the lock free for the queue's young
 * head and wake only that head; a head that never acts on it -- paused
 * past its deadline, killed -- leaves it free, and the waiters behind it
 * slept until the old holder's lease (20 s seen). Each queued waiter
 * costs at most one attempt per period; hand-overs and wake-ups come
 * first as before. Both clients pass it as max_sleep. */
#define DLOCK__ENG_QUEUED_RECHECK_MS 1000
/* What an attempt's answer rc means for the wait w, at `now`:
 *   rc as dlock__acq_reply answers: 1 held, 0 taken with ttl = the
 *   holder's PTTL or the policy's "retry in N ms" (scripts.c: the
 *   queue's head woken while young), -1 a key with no TTL; DLOCK_ELOST the
 *   script's -3 (a re-entry whose hold is gone); another code < 0 failed.
 *   wait_ms is the call's (0 try-lock, < 0 no deadline), max_sleep the
 *   kind's longest sleep (0 none; > 0 a kind whose waiting attempts keep
 *   its queue place alive: dlock__mutex_ops.max_sleep_ms).
 * Returns HELD, GONE, BUSY (wait_ms 0), SLEEP with *until = the earliest
 * of now + ttl (at least 1 ms; none for ttl < 0), now + max_sleep and the
 * wait's deadline (-1: none of them), or, when the deadline has passed
 * (now >= w->deadline) or rc < 0, dlock__eng_wait_end's verdict. */
int dlock__eng_wait_answer(int rc, int64_t ttl, long long wait_ms,
                           const dlock__wait *w, int64_t now, int64_t max_sleep,
                           int64_t *until);

/* The cancel script's answer cr (1: the lock was handed to this wait
 * before the cancel -- it keeps it; 0: not; < 0: the cancel failed, e.g.
 * Redis unreachable). CONFIRM for 1 (one more attempt, not queueing, takes
 * the lock as the call's own: its lease counted from that attempt's send
 * time, and with replica sync its WAIT -- the hold found may be a
 * hand-over to an OLDER wait of the owner, with that wait's lease); else
 * END: the wait ends with its own code, the cancel's error is not
 * reported (the entry, if it stayed, dies with the wait's deadline). The
 * caller marks the wait not queued either way (sent once). */
int dlock__eng_cancel_answer(int cr);

/* The confirming attempt's answer rc (as dlock__eng_wait_answer's): HELD
 * for 1, else END -- the wait's own code stays the call's answer, whatever
 * the attempt met. ONE RULE: until issue 26 the event-loop client reported
 * the confirming attempt's error (e.g. DLOCK_ECONN) instead; the blocking
 * client's rule is kept: the caller asked for the lock within its wait and
 * is told why that wait ended (a lost reply's hold, if any, is not the
 * call's: no record, its lease ends it). */
int dlock__eng_confirm_answer(int rc);

/* 1 when an attempt of a wait joins the server's hand-over queue (the
 * acquire script's queue flag, ARGV[4]): never for a try-lock (wait_ms 0);
 * else when the wait's subscription is confirmed (a grant can reach it) or
 * the kind queues from the first attempt (queue_first: the fair lock).
 * Waits without pub/sub (spin.c) never queue: nobody hands them the lock.
 * A re-entry never queues (its first attempt succeeds or finds the hold
 * gone). */
int dlock__eng_wait_queue(long long wait_ms, int subscribed, int queue_first);

/* How long a queue entry of w may be handed the lock (the acquire
 * script's ARGV[7], ms, server side): until the wait's deadline, at least
 * 1 ms, so an entry left by a cancel that could not reach Redis dies with
 * the wait; 0 (no limit) for a wait with no deadline. */
int64_t dlock__eng_entry_ttl(int64_t deadline, int64_t now);

/* ---- (g) the plain mutex's script calls (calls.c) -------------------------
 * What the blocking mutex (kinds/mutex.c), the event-loop client
 * (async_lock.c) and the errand thread's declines send, built in one
 * place: KEYS and ARGV only, no I/O. */

/* A script call as sent: which core script, and views of its KEYS and
 * ARGV (pointing into the call structure below that owns them). */
typedef struct dlock__call {
  int script; /* DLOCK__S_* */
  int nkeys, nargs;
  const char **keys;
  const size_t *klens;
  const char **args;
  const size_t *alens;
} dlock__call;

/* DLOCK_ELOST with "<kind> '<name>': this thread's hold is gone ... it was
 * re-acquired in vain" (a reentrant attempt found the hold gone). */
int dlock__reacquired_in_vain(const char *kind, const char *name);
/* A live attempt found its own request's tombstone (-4: the scripts' answer
 * to a late copy), which only the client writes after the attempt ended:
 * DLOCK_EPROTO, "cannot happen", named. */
int dlock__late_answer(const char *kind, const char *name);

/* The KEYS and ARGV of a call's short form (acquire_first, unlock_last:
 * at most 4 and 2), owned by the call structure its view points into. */
typedef struct dlock__short_argv {
  const char *keys[4], *args[2];
  size_t klens[4], alens[2];
} dlock__short_argv;

typedef struct dlock__acq_call {
  /* the queue, its deadlines, the hand-over marker, the attempt's
   * tombstone; the channel and grant channel prefix (cancel only) */
  dlock__sb q, dl, mk, tb, ch, gp;
  char field[DLOCK__FIELD_MAX], entry[DLOCK__FIELD_MAX + 48], wid[17];
  char ls[24], ts[24], ds[24];
  size_t fl, el;
  /* acquire: lock, queue, deadlines, marker, tombstone */
  const char *keys[5];
  size_t klens[5];
  const char *args[8]; /* acquire's ARGV (scripts.c) */
  size_t alens[8];
  /* cancel: lock, queue, deadlines, marker, channel, grant prefix; ARGV
   * field, entry, wait id, publish command (dlock__cancel_call_init) */
  const char *ckeys[6];
  size_t cklens[6];
  const char *cargs[4];
  size_t calens[4];
  /* The acquire as sent: DLOCK__S_ACQUIRE_FIRST (KEYS lock, marker,
   * tombstone; ARGV lease, field: in sh) for a first hold (target 1) of a
   * call that is not queued and does not queue on failure -- the common
   * case, with half the Redis work of the acquire script's KEYS and ARGV --
   * else DLOCK__S_ACQUIRE with keys and args above. */
  dlock__call send;
  dlock__short_argv sh;
} dlock__acq_call;
/* The acquire call of `field` on lock `name`: target = the hold count after
 * it, queue = join the wait queue on failure, w = the wait (its id names
 * the queue entry; its deadline bounds the entry's life; its rid is the
 * attempt's request id). 0 or DLOCK_ENOMEM; free with dlock__acq_call_free
 * either way. */
int dlock__acq_call_init(dlock__acq_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int target,
                         int64_t lease, int queue, const dlock__wait *w);
/* The same, and the cancel script's KEYS and ARGV (ckeys, cargs): pub =
 * the publish command (a cancel may pass a free lock on). */
int dlock__cancel_call_init(dlock__acq_call *k, const char *name,
                            size_t name_len, const char *field, size_t fl,
                            int64_t lease, const dlock__wait *w,
                            const char *pub);
void dlock__acq_call_free(dlock__acq_call *k);
/* The tombstone of request rid on lock name: dlock_tomb:{name}:<rid>
 * (dlock__own_name; one slot with the lock). */
void dlock__req_tomb_key(dlock__sb *b, const char *name, const char *rid);
/* The acquire script's answer (rc, r from the eval; r is freed): 1 held,
 * 0 taken elsewhere (*ttl = the holder's PTTL), DLOCK_ELOST (a reentrant
 * acquire found the hold gone) or another negative code. */
int dlock__acq_reply(int rc, redisReply *r, const char *name, int64_t *ttl);

typedef struct dlock__rel_call {
  dlock__sb ch, gp, q, dl, mk, tomb;
  char field[DLOCK__FIELD_MAX], ls[24], es[24], cs[24], rid[33];
  char mark[DLOCK__FIELD_MAX + 18]; /* decline: "<field>|<wait id>" */
  int nkeys;                        /* 7 */
  int nargs;                        /* 6; 7 for a committing copy */
  const char *keys[7];
  size_t klens[7];
  const char *args[7];
  size_t alens[7];
  /* The unlock as sent: DLOCK__S_UNLOCK_LAST (KEYS lock, channel, queue,
   * tombstone; ARGV field, publish: in sh) for a final
   * release (expected 1), the common case, else DLOCK__S_UNLOCK with keys
   * and args above (the decline and spin scripts use those too). */
  dlock__call send;
  dlock__short_argv sh;
} dlock__rel_call;
/* The unlock call of `field` on lock `name`: lease = the remaining holds'
 * (dlock__remaining_lease), expected = the hold count before this unlock
 * (the script writes expected - 1: idempotent by state, scripts.c), rid =
 * this unlock's request id (32 hex; its tombstone is KEYS[7]), pub = the
 * publish command (dlock__publish_cmd). 0 or DLOCK_ENOMEM; free with
 * dlock__rel_call_free either way. */
int dlock__rel_call_init(dlock__rel_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int64_t lease,
                         int expected, const char *rid, const char *pub);
/* How long a tombstone lives: past any copy still in the network. */
int64_t dlock__tombstone_ttl(const dlock_config *cfg);
/* Makes k a COMMITTING COPY of its release: the full unlock script with
 * ARGV[7] = ttl, which writes the release's tombstone (PX ttl) with its
 * effect, so no copy of it can act afterwards (safety round 4). */
void dlock__rel_call_commit(dlock__rel_call *k, int64_t ttl);
void dlock__rel_call_free(dlock__rel_call *k);

/* A grant that reached no wait of this client: the unlock handed the lock
 * to a queue entry whose wait had already ended (its cancel could not reach
 * Redis). The pub/sub thread queues one (dlock__pubsub.declines), the
 * errand thread sends it (errand.c: the decline script, without WAIT, on
 * its own connection, a few times at most). */
typedef struct dlock__decline {
  struct dlock__decline *next;
  uint64_t tid; /* the thread of the ended wait */
  char wid[17]; /* its wait id, 16 hex digits */
  char name[];  /* the lock */
} dlock__decline;
/* The decline script's call for the hand-over of lock `name` to `field`'s
 * wait `wid` (16 hex digits): k->keys as the unlock's (k->nkeys of them),
 * k->args[0..3] its ARGV. 0 or DLOCK_ENOMEM; free with dlock__rel_call_free
 * either way. */
int dlock__decline_call_init(dlock__rel_call *k, const char *name,
                             size_t name_len, const char *field, size_t fl,
                             const char *wid, const char *pub);
/* The unlock script's answer (r is freed): 1 released (or handed over),
 * 0 holds remain, DLOCK_ELOST (not the owner), or another negative code. */
int dlock__rel_reply(int rc, redisReply *r);

/* The wait machine, which sequences (f): waitm.h. */
#include "engine/waitm.h"

#endif
