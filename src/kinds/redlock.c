/*
 * redlock.c -- Redlock: a lock held by a majority of N independent Redis
 * masters (the algorithm of "Distributed Locks with Redis"; docs/redlock.md
 * has the guarantees and the hazards).
 *
 * DATA on every master: the ordinary mutex hash under exactly `name` (field
 * "<that master's client uuid>:<tid>" = 1, TTL = lease), so Redisson and
 * dlock mutexes see the lock; the fencing counter redisson_lock_token:{name}
 * (a plain number, no TTL).
 *
 * ONE ROUND (acquire):
 *   t0 = monotonic now; every master gets one attempt AT THE SAME TIME (one
 *   short-lived thread per master), without the client's retry policy
 *   (dlock__cmd.no_retry), bounded by that client's command_timeout_ms. A
 *   master that is down, slow or replies an error is a failed vote. The
 *   acquire script also returns that master's token counter. The round
 *   waits for every vote, but once the outcome is decided (a majority said
 *   yes, or too few are left to reach one) at most lease/20 more: a paused
 *   master's vote thread then finishes on its own (detached; the object
 *   waits for such threads when freed) and, if the acquisition failed and
 *   its late answer is yes, releases that master itself.
 *   With a majority (n/2+1) of votes, the token is drawn: proposed = 1 + the
 *   highest counter any master reported; written to every master at once
 *   ("set if higher", each returns what it then holds); it counts when a
 *   majority holds exactly the proposed value (a higher answer means a
 *   concurrent or unseen draw: propose above it, at most 3 times).
 *   validity = lease - (now - t0) - (lease/100 + 2 ms). Success needs the
 *   majority, the token and validity > 0; otherwise every master is
 *   released at once (even those that did not vote yes) before returning.
 *   Between rounds: a random pause (20-200 ms, within the wait budget).
 *
 * RENEWAL (lease_ms <= 0): a per-object thread pushes the TTL back to the
 * lease every lease/3 on every master at once, only where our field still
 * is; with a majority renewed the validity restarts from that round's t0.
 * If more than n - majority masters say the field is gone, or no majority
 * answered before the validity ran out, the hold is lost: on_lock_lost of
 * the first client runs (on the renewal thread) and the next unlock
 * returns DLOCK_ELOST.
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* The attempts of one round, one per master. */
enum { OP_ACQUIRE, OP_RELEASE, OP_RENEW, OP_TOKEN };

/* Release rounds in doubt whose tombstones an acquisition writes. */
#define DLOCK__RL_RELS 6

struct dlock_redlock {
  size_t n, quorum;
  dlock_client **clients;
  char *name, *token_key, *channel;
  size_t name_len, token_key_len, channel_len;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* The hold (a Redlock is exclusive: one record, count 0 or 1; tid the
   * owner, wd_count 1 with the watchdog, valid_until the local deadline,
   * renewed_at the t0 of the last majority). Guarded by mu. */
  dlock__hold hold;
  int inflight; /* vote threads still running (free waits for them) */
  /* Per master: its vote threads still running. An acquire vote is not
   * sent to a master whose earlier vote still runs (a paused or slow
   * master): that earlier vote, if its round was abandoned, releases the
   * key when it ends -- the same key (same field) a newer vote there
   * would have set, so a newer hold could count a vote that is then
   * taken back. Such a master counts as a failed vote until it is done. */
  int running[64];
  unsigned fork_gen; /* dlock__fork_gen() at creation */
  /* Request binding (safety round 4, docs/guarantees.md "Rules"): the
   * request id of the last acquisition round and of the last release
   * rounds. An acquire vote writes the last release rounds' tombstones
   * before it acts, a release vote the acquisition's, and each does
   * nothing once its own exists: a copy of either that arrives late on a
   * master (its vote timed out, the copy still on the wire) cannot act on
   * a later hold. rel_rids are the release rounds in doubt (a vote sent
   * and not answered: its copy may still arrive), not only the last one:
   * refused rounds' clean-up releases follow the held hold's release. A
   * round leaves the set once every master answered it, or once an
   * acquisition that every master answered wrote its tombstone; past
   * DLOCK__RL_RELS rounds in doubt the oldest is forgotten. Guarded by
   * mu. */
  char acq_rid[33], rel_rids[DLOCK__RL_RELS][33];
  unsigned rel_next;
  /* Renewal thread. */
  pthread_t rn_thread;
  int rn_started;
  int rn_stop;
  /* On the process's list of Redlock holds (g_holds) while hold.count is
   * set: reg_tid the holding thread. Guarded by g_holds_mu. */
  dlock_redlock *reg_next;
  uint64_t reg_tid;
  int reg_in;
};

/* ---- holds per (name, thread) across objects (issue 25.4) ---------------
 * The server knows a hold by its field "<client uuid>:<tid>". Two Redlock
 * objects of one name that share a client give one thread the same field on
 * that master: the second object's acquire would find its field there and
 * take the first one's key as its own, and its unlock delete it while the
 * first still holds. So a thread's holds are kept per name across objects,
 * as the mutex keeps them (holds.c): an acquire through another object of
 * that name sharing a client with it is DLOCK_EDEADLK (a Redlock is not
 * reentrant), and so is one while the thread holds a mutex or read-write
 * lock of that name on one of the clients (same field; and a lock() would
 * wait for itself). Every object with a recorded hold is on g_holds. */
static pthread_mutex_t g_holds_mu = PTHREAD_MUTEX_INITIALIZER;
static dlock_redlock *g_holds;
static pthread_once_t g_holds_once = PTHREAD_ONCE_INIT;

/* In a fork child the list names objects of the parent (unusable there:
 * EFORK) and the mutex may be a copy of a locked one: both start afresh. */
static void holds_child(void) {
  pthread_mutex_init(&g_holds_mu, NULL);
  g_holds = NULL;
}

static void holds_init(void) { pthread_atfork(NULL, NULL, holds_child); }

static int share_client(const dlock_redlock *a, const dlock_redlock *b) {
  for (size_t i = 0; i < a->n; i++)
    for (size_t j = 0; j < b->n; j++)
      if (a->clients[i] == b->clients[j])
        return 1;
  return 0;
}

/* 0, or DLOCK_EDEADLK when thread tid holds the name through another
 * object or lock kind that shares a field with rl's. */
static int holds_check(dlock_redlock *rl, uint64_t tid) {
  pthread_once(&g_holds_once, holds_init);
  dlock__mu_lock(&g_holds_mu);
  const dlock_redlock *other = NULL;
  for (const dlock_redlock *x = g_holds; x && !other; x = x->reg_next)
    if (x != rl && x->reg_tid == tid && x->name_len == rl->name_len &&
        memcmp(x->name, rl->name, rl->name_len) == 0 && share_client(x, rl))
      other = x;
  dlock__mu_unlock(&g_holds_mu);
  if (other)
    return dlock__fail(DLOCK_EDEADLK,
                       "redlock '%s' is already held by this thread through "
                       "another object with a client in common (a Redlock is "
                       "not reentrant)",
                       rl->name);
  for (size_t i = 0; i < rl->n; i++)
    if (dlock__reg_thread_holds(rl->clients[i], rl->name, rl->name_len, tid))
      return dlock__fail(DLOCK_EDEADLK,
                         "redlock '%s': this thread holds a lock of that name "
                         "on client %zu (the same field on that master)",
                         rl->name, i);
  return 0;
}

/* Records rl's hold by tid (rl not on the list). */
static void holds_add(dlock_redlock *rl, uint64_t tid) {
  pthread_once(&g_holds_once, holds_init);
  dlock__mu_lock(&g_holds_mu);
  rl->reg_tid = tid;
  rl->reg_next = g_holds;
  rl->reg_in = 1;
  g_holds = rl;
  dlock__mu_unlock(&g_holds_mu);
}

static void holds_del(dlock_redlock *rl) {
  pthread_once(&g_holds_once, holds_init);
  dlock__mu_lock(&g_holds_mu);
  if (rl->reg_in) {
    dlock_redlock **pp = &g_holds;
    while (*pp && *pp != rl)
      pp = &(*pp)->reg_next;
    if (*pp)
      *pp = rl->reg_next;
    rl->reg_in = 0;
    rl->reg_next = NULL;
  }
  dlock__mu_unlock(&g_holds_mu);
}

static dlock__script g_acquire = {
    "redlock_acquire",
    /* KEYS[1] lock, KEYS[2] token counter, KEYS[3] this round's tombstone,
     * KEYS[4..] the last release rounds' tombstones. ARGV[1] lease ms, ARGV[2]
     * field, ARGV[3] tombstone life. {1, counter} = locked; {0, counter,
     * pttl} = held elsewhere (also a late copy: it does nothing). Same hash
     * as the mutex (field count 1); the TTL of a field found ours is only
     * extended. */
    DLOCK__LUA_TTL DLOCK__LUA_KIND DLOCK__LUA_LATE(
        "KEYS[3]",
        "{0, 0, 1000}") "for i = 4, #KEYS do\n"
                        "  redis.call('set', KEYS[i], '1', 'px', ARGV[3])\n"
                        "end\n"
                        "local t = tonumber(redis.call('get', KEYS[2]) or '0') "
                        "or 0\n"
                        /* held by another kind of lock: a no vote (issue 25.6)
                         */
                        "local kd = kind_of(KEYS[1])\n"
                        "if kd ~= 'none' and kd ~= 'mutex' then\n"
                        "  return {0, t, busy_ttl(KEYS[1])}\n"
                        "end\n"
                        "if redis.call('exists', KEYS[1]) == 0 then\n"
                        "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
                        "  pexpire_new(KEYS[1], ARGV[1])\n"
                        "  return {1, t}\n"
                        "end\n"
                        "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
                        "  extend(KEYS[1], ARGV[1])\n"
                        "  return {1, t}\n"
                        "end\n"
                        "return {0, t, redis.call('pttl', KEYS[1])}\n",
    {0}};

static dlock__script g_release = {
    "redlock_release",
    /* KEYS[1] lock, KEYS[2] channel, KEYS[3] this round's tombstone, KEYS[4]
     * the released acquisition's tombstone. ARGV[1] field, [2] publish
     * command, [3] tombstone life. 1 = deleted (publishes "0" so waiters
     * retry), 0 = not ours / absent / a late copy. */
    DLOCK__LUA_LATE("KEYS[3]", "0") DLOCK__LUA_COMMIT(
        "KEYS[4]",
        "ARGV[3]") "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"
                   "  redis.call('del', KEYS[1])\n"
                   "  redis.call(ARGV[2], KEYS[2], '0')\n"
                   "  return 1\n"
                   "end\n"
                   "return 0\n",
    {0}};

static dlock__script g_renew = {
    "redlock_renew",
    /* KEYS[1] lock. ARGV[1] lease, ARGV[2] field. 1 renewed, 0 gone. The
     * TTL is pushed back to the lease, never below what it is (a late copy
     * must not shorten a later hold's). */
    DLOCK__LUA_TTL "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
                   "  extend(KEYS[1], ARGV[1])\n"
                   "  return 1\n"
                   "end\n"
                   "return 0\n",
    {0}};

static dlock__script g_token = {
    "redlock_token",
    /* KEYS[1] counter. ARGV[1] proposed. Sets the counter to
     * max(current, proposed) and returns it. */
    "local cur = tonumber(redis.call('get', KEYS[1]) or '0') or 0\n"
    "local p = tonumber(ARGV[1])\n"
    "if p > cur then\n"
    "  redis.call('set', KEYS[1], ARGV[1])\n"
    "  return p\n"
    "end\n"
    "return cur\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_scripts(void) {
  dlock__script_init(&g_acquire);
  dlock__script_init(&g_release);
  dlock__script_init(&g_renew);
  dlock__script_init(&g_token);
}

/* ---- one attempt per master, all masters at once ------------------------ */

typedef struct vote {
  dlock_redlock *rl;
  size_t i;
  uint64_t tid;
  int64_t lease;
  uint64_t proposed;
  struct round *round;
  int op;
  /* acquire and release: the request's id (its tombstone) and the
   * counterpart whose tombstone it writes (engine.h request binding) */
  char rid[33], other[DLOCK__RL_RELS * 32 + 1];
  int sent; /* asked (not skipped, not busy) */
  /* results */
  int rc;          /* 1 yes / renewed / released, 0 no, < 0 error */
  long long value; /* counter (acquire, token) */
  long long pttl;  /* holder's TTL when busy */
  char err[160];
} vote;

/* One script call on master i, no retry, bounded by command_timeout_ms. */
static int eval_once(dlock_client *c, const dlock__script *s, int nkeys,
                     const char **keys, const size_t *klens, int nargs,
                     const char **args, const size_t *alens, redisReply **out) {
  const char *av[16];
  size_t al[16];
  char nk[4];
  int argc = 3 + nkeys + nargs;
  nk[0] = (char)('0' + nkeys);
  nk[1] = '\0';
  av[0] = "EVALSHA";
  al[0] = 7;
  av[1] = s->sha;
  al[1] = 40;
  av[2] = nk;
  al[2] = 1;
  for (int k = 0; k < nkeys; k++) {
    av[3 + k] = keys[k];
    al[3 + k] = klens[k];
  }
  for (int k = 0; k < nargs; k++) {
    av[3 + nkeys + k] = args[k];
    al[3 + nkeys + k] = alens[k];
  }
  dlock__cmd cmd = {keys[0], s, argc, av, al, 1};
  return dlock__exec(c, &cmd, out);
}

/* An acquire or release vote on v's master: the script with its own
 * request's tombstone and the tombstones it must write (v->other: one or
 * more 32-character request ids -- an acquisition's, the last release
 * rounds'). 0 with *r, or a code. */
static int send_bound(vote *v, dlock_client *c, const char *field, size_t fl,
                      redisReply **r) {
  dlock_redlock *rl = v->rl;
  char num[24];
  int acq = v->op == OP_ACQUIRE;
  size_t nother = strlen(v->other) / 32, oom = 0;
  dlock__sb own, other[DLOCK__RL_RELS];
  dlock__sb_init(&own);
  (acq ? dlock__req_tomb_key : dlock__unlock_latch_key)(&own, rl->name, v->rid);
  const char *k[3 + DLOCK__RL_RELS] = {
      rl->name, acq ? rl->token_key : rl->channel, own.p};
  size_t kl[3 + DLOCK__RL_RELS] = {
      rl->name_len, acq ? rl->token_key_len : rl->channel_len, own.len};
  for (size_t o = 0; o < nother; o++) {
    char one[33];
    memcpy(one, v->other + 32 * o, 32);
    one[32] = '\0';
    dlock__sb_init(&other[o]);
    (acq ? dlock__unlock_latch_key : dlock__req_tomb_key)(&other[o], rl->name,
                                                          one);
    oom |= (size_t)other[o].oom;
    k[3 + o] = other[o].p;
    kl[3 + o] = other[o].len;
  }
  char ts[24];
  size_t tl = dlock__fmt_i64(ts, dlock__tombstone_ttl(&c->cfg));
  size_t nl = dlock__fmt_i64(num, v->lease);
  const char *pub = dlock__publish_cmd(c);
  const char *a[3] = {acq ? num : field, acq ? field : pub, ts};
  size_t alen[3] = {acq ? nl : fl, acq ? fl : strlen(pub), tl};
  int rc = own.oom || oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                          : eval_once(c, acq ? &g_acquire : &g_release,
                                      (int)(3 + nother), k, kl, 3, a, alen, r);
  dlock__sb_free(&own);
  for (size_t o = 0; o < nother; o++)
    dlock__sb_free(&other[o]);
  return rc;
}

static void run_vote(vote *v) {
  dlock_redlock *rl = v->rl;
  dlock_client *c = rl->clients[v->i];
  v->rc = dlock__client_check(c);
  if (v->rc) {
    snprintf(v->err, sizeof v->err, "%s", dlock_last_error());
    return;
  }
  char field[DLOCK__FIELD_MAX], num[24];
  size_t fl = dlock__field(c, v->tid, field);
  redisReply *r = NULL;
  switch (v->op) {
  case OP_ACQUIRE:
  case OP_RELEASE:
    v->rc = send_bound(v, c, field, fl, &r);
    break;
  case OP_RENEW: {
    size_t nl = dlock__fmt_i64(num, v->lease);
    const char *k[1] = {rl->name};
    size_t kl[1] = {rl->name_len};
    const char *a[2] = {num, field};
    size_t alen[2] = {nl, fl};
    v->rc = eval_once(c, &g_renew, 1, k, kl, 2, a, alen, &r);
    break;
  }
  default: {
    size_t nl = dlock__fmt_i64(num, (int64_t)v->proposed);
    const char *k[1] = {rl->token_key};
    size_t kl[1] = {rl->token_key_len};
    const char *a[1] = {num};
    size_t alen[1] = {nl};
    v->rc = eval_once(c, &g_token, 1, k, kl, 1, a, alen, &r);
    break;
  }
  }
  if (v->rc || !r) {
    v->rc = v->rc ? v->rc : DLOCK_EPROTO;
    snprintf(v->err, sizeof v->err, "%s", dlock_last_error());
    freeReplyObject(r);
    return;
  }
  if (v->op == OP_ACQUIRE) {
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
      v->rc = r->element[0]->integer == 1;
      v->value = r->element[1]->integer;
      if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER)
        v->pttl = r->element[2]->integer;
    } else {
      v->rc = DLOCK_EPROTO;
      snprintf(v->err, sizeof v->err, "unexpected reply");
    }
  } else {
    long long x = 0;
    v->rc = dlock__reply_int(r, &x);
    if (v->rc == 0) {
      v->value = x;
      v->rc = v->op == OP_TOKEN ? 1 : x == 1;
    } else {
      snprintf(v->err, sizeof v->err, "%s", dlock_last_error());
    }
  }
  freeReplyObject(r);
}

/* A round in flight: one vote per master, each on its own detached thread.
 * The caller may stop waiting before every master answered (a paused
 * master); the stragglers finish on their own (bounded by their command
 * timeout) and drop their reference. Guarded by mu. */
typedef struct round {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  size_t started, done, wins;
  int abandoned; /* the acquisition failed: a late yes releases itself */
  unsigned char finished[64];
  vote vs[64];
} round;

static void round_unref(round *r) {
  dlock__mu_lock(&r->mu);
  int last = --r->refs == 0;
  dlock__mu_unlock(&r->mu);
  if (last) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
  }
}

static void *vote_main(void *p) {
  vote *v = p;
  round *r = v->round;
  dlock_redlock *rl = v->rl;
  run_vote(v);
  dlock__mu_lock(&r->mu);
  r->done++;
  r->finished[v->i] = 1;
  if (v->op == OP_TOKEN ? v->rc == 1 && (uint64_t)v->value == v->proposed
                        : v->rc == 1)
    r->wins++;
  int release = r->abandoned && v->op == OP_ACQUIRE && v->rc == 1;
  pthread_cond_broadcast(&r->cv);
  dlock__mu_unlock(&r->mu);
  if (release) {
    /* A late yes after the acquisition gave up: take it back (a release
     * of its own, bound to that acquisition). */
    vote rv = *v;
    rv.op = OP_RELEASE;
    memcpy(rv.other, v->rid, sizeof rv.other);
    dlock__request_id(rv.rid);
    run_vote(&rv);
  }
  const size_t mi = v->i; /* v lives in r, which round_unref may free */
  round_unref(r);
  dlock__mu_lock(&rl->mu);
  rl->running[mi]--;
  if (--rl->inflight == 0)
    pthread_cond_broadcast(&rl->cv);
  dlock__mu_unlock(&rl->mu);
  return NULL;
}

/* Starts op on every master (except those with skip[i] set: failed votes)
 * at once. NULL on out of memory. */
static round *round_start(dlock_redlock *rl, int op, uint64_t tid,
                          int64_t lease, uint64_t proposed,
                          const unsigned char *skip, const char *rid,
                          const char *other) {
  pthread_once(&g_once, init_scripts);
  round *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return NULL;
  pthread_mutex_init(&r->mu, NULL);
  dlock__cond_init_mono(&r->cv);
  r->refs = 1;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (size_t i = 0; i < rl->n; i++) {
    vote *v = &r->vs[i];
    v->rl = rl;
    v->round = r;
    v->i = i;
    v->op = op;
    v->tid = tid;
    v->lease = lease;
    v->proposed = proposed;
    snprintf(v->rid, sizeof v->rid, "%s", rid ? rid : "");
    snprintf(v->other, sizeof v->other, "%s",
             other && other[0] ? other : "00000000000000000000000000000000");
    if (skip && skip[i]) {
      v->rc = DLOCK_ECONN;
      snprintf(v->err, sizeof v->err, "failed earlier in this acquisition");
      r->finished[i] = 1;
      continue;
    }
    dlock__mu_lock(&rl->mu);
    int busy = op == OP_ACQUIRE && rl->running[i] > 0;
    if (!busy) {
      rl->inflight++;
      rl->running[i]++;
    }
    dlock__mu_unlock(&rl->mu);
    if (busy) {
      v->rc = DLOCK_ECONN;
      snprintf(v->err, sizeof v->err,
               "its vote of an earlier round is still running (a paused or "
               "slow master)");
      r->finished[i] = 1;
      continue;
    }
    dlock__mu_lock(&r->mu);
    r->refs++;
    r->started++;
    dlock__mu_unlock(&r->mu);
    v->sent = 1;
    pthread_t th;
    if (pthread_create(&th, &attr, vote_main, v) != 0)
      vote_main(v); /* no thread: this master is asked inline */
  }
  pthread_attr_destroy(&attr);
  return r;
}

/* Waits for the round: until every started vote is in, or -- when early
 * -- until grace_ms after the outcome was decided (wins >= quorum, or too
 * few votes left to reach it), so a paused master costs at most the grace,
 * not its command timeout. Copies the results to out[0..n); a vote still
 * pending reads as a failed vote. */
static void round_wait(dlock_redlock *rl, round *r, int early, int64_t grace_ms,
                       int64_t until, vote *out) {
  dlock__mu_lock(&r->mu);
  int64_t decided_at = -1;
  while (r->done < r->started) {
    size_t pending = r->started - r->done;
    int64_t now = dlock__now_ms();
    if (early && decided_at < 0 &&
        (r->wins >= rl->quorum || r->wins + pending < rl->quorum))
      decided_at = now;
    if (decided_at >= 0 && now >= decided_at + grace_ms)
      break;
    if (until >= 0 && now >= until)
      break; /* the answers would come too late to matter */
    int64_t wake = decided_at >= 0 ? decided_at + grace_ms : -1;
    if (until >= 0 && (wake < 0 || until < wake))
      wake = until;
    if (wake >= 0) {
      struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, wake - now);
      pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    } else {
      pthread_cond_wait(&r->cv, &r->mu);
    }
  }
  for (size_t i = 0; i < rl->n; i++) {
    if (r->finished[i]) {
      out[i] = r->vs[i];
    } else { /* its thread is still writing r->vs[i] */
      memset(&out[i], 0, sizeof out[i]);
      out[i].i = i;
      out[i].sent = 1;
      out[i].rc = DLOCK_ETIMEDOUT;
      snprintf(out[i].err, sizeof out[i].err, "no answer within the round");
    }
  }
  dlock__mu_unlock(&r->mu);
}

/* Adds (doubt) or removes a release round's id from the rounds in doubt.
 * Called with rl->mu held. */
static void rel_doubt(dlock_redlock *rl, const char *rid, int doubt) {
  for (size_t i = 0; i < DLOCK__RL_RELS; i++) {
    if (doubt && !rl->rel_rids[i][0]) {
      memcpy(rl->rel_rids[i], rid, 32);
      rl->rel_rids[i][32] = '\0';
      return;
    }
    if (!doubt && memcmp(rl->rel_rids[i], rid, 32) == 0) {
      rl->rel_rids[i][0] = '\0';
      return;
    }
  }
  if (doubt) { /* full: the oldest in doubt is forgotten */
    char *slot = rl->rel_rids[rl->rel_next++ % DLOCK__RL_RELS];
    memcpy(slot, rid, 32);
    slot[32] = '\0';
  }
}

/* 1 when no vote of the round was sent and left unanswered (a Redis reply,
 * yes or no, on every master asked). */
static int all_answered(const dlock_redlock *rl, const vote *vs) {
  for (size_t i = 0; i < rl->n; i++)
    if (vs[i].sent && vs[i].rc < 0)
      return 0;
  return 1;
}

/* Runs op on every master (skip as round_start) and waits (early as
 * round_wait; never past until, monotonic ms, when until >= 0). */
static void round_some(dlock_redlock *rl, vote *vs, int op, uint64_t tid,
                       int64_t lease, uint64_t proposed,
                       const unsigned char *skip, int early, int64_t grace,
                       int64_t until) {
  /* a release round: bound to the last acquisition (its own request id,
   * and the acquisition's tombstone to write) */
  char rid[33] = "", other[33] = "";
  if (op == OP_RELEASE) {
    dlock__request_id(rid);
    dlock__mu_lock(&rl->mu);
    memcpy(other, rl->acq_rid, sizeof other);
    rel_doubt(rl, rid, 1);
    dlock__mu_unlock(&rl->mu);
  }
  round *r = round_start(rl, op, tid, lease, proposed, skip, rid, other);
  if (!r) {
    for (size_t i = 0; i < rl->n; i++) {
      memset(&vs[i], 0, sizeof vs[i]);
      vs[i].rc = DLOCK_ENOMEM;
      snprintf(vs[i].err, sizeof vs[i].err, "out of memory");
    }
    return;
  }
  round_wait(rl, r, early, grace, until, vs);
  round_unref(r);
  if (op == OP_RELEASE && all_answered(rl, vs)) {
    dlock__mu_lock(&rl->mu);
    rel_doubt(rl, rid, 0); /* no copy of it left on any wire */
    dlock__mu_unlock(&rl->mu);
  }
}

static void round_all(dlock_redlock *rl, vote *vs, int op, uint64_t tid,
                      int64_t lease, uint64_t proposed) {
  round_some(rl, vs, op, tid, lease, proposed, NULL, 0, 0, -1);
}

/* ---- objects ------------------------------------------------------------- */

static void *renew_main(void *arg);

int dlock_redlock_new(dlock_client **clients, size_t n, const char *name,
                      dlock_redlock **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!clients || n == 0)
    return dlock__fail(DLOCK_EINVAL, "no masters");
  if (n > 64)
    return dlock__fail(DLOCK_EINVAL, "too many masters (%zu > 64)", n);
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL or empty");
  for (size_t i = 0; i < n; i++) {
    if (!clients[i])
      return dlock__fail(DLOCK_EINVAL, "client %zu is NULL", i);
    if (clients[i]->fork_gen != dlock__fork_gen())
      return dlock__client_check(clients[i]);
    if (clients[i]->etcd)
      return dlock__etcd_notsup("Redlock",
                                "an etcd cluster is a quorum already: use "
                                "dlock_mutex_new on one etcd:// client "
                                "listing every member");
    int rc = dlock__cluster_name_check(clients[i], name, "redlock");
    if (rc)
      return rc;
    for (size_t j = 0; j < i; j++)
      if (clients[j] == clients[i])
        return dlock__fail(DLOCK_EINVAL,
                           "client %zu is the same as client %zu (each "
                           "master needs its own client)",
                           i, j);
  }
  dlock_redlock *rl = dlock__calloc(1, sizeof *rl);
  if (rl)
    rl->fork_gen = dlock__fork_gen();
  dlock__sb tk, ch;
  dlock__sb_init(&tk);
  dlock__sb_init(&ch);
  dlock__prefix_name(&tk, "redisson_lock_token", name);
  dlock__prefix_name(&ch, "redisson_lock__channel", name);
  if (rl) {
    rl->clients = dlock__calloc(n, sizeof(dlock_client *));
    rl->name = dlock__strdup(name);
    rl->token_key = tk.oom ? NULL : dlock__strndup(tk.p, tk.len);
    rl->channel = ch.oom ? NULL : dlock__strndup(ch.p, ch.len);
  }
  if (!rl || !rl->clients || !rl->name || !rl->token_key || !rl->channel) {
    dlock__sb_free(&tk);
    dlock__sb_free(&ch);
    if (rl) {
      free(rl->clients);
      free(rl->name);
      free(rl->token_key);
      free(rl->channel);
      free(rl);
    }
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  memcpy(rl->clients, clients, n * sizeof(dlock_client *));
  rl->n = n;
  rl->quorum = n / 2 + 1;
  rl->name_len = strlen(name);
  rl->token_key_len = tk.len;
  rl->channel_len = ch.len;
  dlock__sb_free(&tk);
  dlock__sb_free(&ch);
  pthread_mutex_init(&rl->mu, NULL);
  dlock__cond_init_mono(&rl->cv);
  *out = rl;
  return 0;
}

static int forked(const dlock_redlock *rl) {
  return rl->fork_gen != dlock__fork_gen();
}

static int fail_forked(const dlock_redlock *rl) {
  return dlock__fail(DLOCK_EFORK,
                     "redlock '%s' was created before fork(); a child process "
                     "must create its own clients and objects",
                     rl->name);
}

void dlock_redlock_free(dlock_redlock *rl) {
  if (!rl)
    return;
  if (!forked(rl)) {
    holds_del(rl); /* an abandoned hold */
    dlock__mu_lock(&rl->mu);
    rl->rn_stop = 1;
    pthread_cond_broadcast(&rl->cv);
    int started = rl->rn_started;
    dlock__mu_unlock(&rl->mu);
    if (started)
      pthread_join(rl->rn_thread, NULL);
    /* Votes still running (a paused master) end within their command
     * timeout; they use the object until then. Waited for after the
     * renewal thread is gone: a round it started just before stopping
     * counts its votes after rn_stop was set (issue 10). */
    dlock__mu_lock(&rl->mu);
    while (rl->inflight > 0)
      pthread_cond_wait(&rl->cv, &rl->mu);
    dlock__mu_unlock(&rl->mu);
    pthread_cond_destroy(&rl->cv);
    pthread_mutex_destroy(&rl->mu);
  }
  /* In a fork child the threads do not exist and the mutex may be a copy
   * of a locked one: only the memory is freed. */
  free(rl->clients);
  free(rl->name);
  free(rl->token_key);
  free(rl->channel);
  free(rl);
}

/* ---- acquire ------------------------------------------------------------- */

/* A Redlock's validity ends where a single lock's local deadline does: the
 * engine's (engine.c dlock__eng_deadline: t0 + lease - lease/100 - 2). */

/* Describes a failed round into buf. */
static void describe(dlock_redlock *rl, const vote *vs, size_t yes,
                     const char *extra, char *buf, size_t len) {
  size_t busy = 0, failed = 0;
  const char *first_err = NULL;
  for (size_t i = 0; i < rl->n; i++) {
    if (vs[i].rc == 0)
      busy++;
    else if (vs[i].rc < 0) {
      failed++;
      if (!first_err)
        first_err = vs[i].err;
    }
  }
  snprintf(buf, len,
           "redlock '%.100s': %zu of %zu masters voted, %zu needed (%zu held "
           "elsewhere, %zu failed or unreachable%s%.160s)%s",
           rl->name, yes, rl->n, rl->quorum, busy, failed,
           first_err ? ": " : "", first_err ? first_err : "", extra);
}

/* Draws the fencing token after a successful vote: 1 if *token is set. */
static int draw_token(dlock_redlock *rl, vote *vs, uint64_t tid, int64_t grace,
                      uint64_t *token) {
  /* Masters that failed the vote (down, paused: a command timeout) are not
   * asked again in this acquisition. */
  unsigned char skip[64];
  long long hi = 0;
  for (size_t i = 0; i < rl->n; i++) {
    skip[i] = vs[i].rc < 0;
    if (vs[i].rc >= 0 && vs[i].value > hi)
      hi = vs[i].value;
  }
  uint64_t proposed = (uint64_t)hi + 1;
  for (int tries = 0; tries < 3; tries++) {
    round_some(rl, vs, OP_TOKEN, tid, 0, proposed, skip, 1, grace, -1);
    size_t acks = 0;
    long long top = 0;
    for (size_t i = 0; i < rl->n; i++) {
      if (vs[i].rc != 1)
        continue;
      if ((uint64_t)vs[i].value == proposed)
        acks++;
      if (vs[i].value > top)
        top = vs[i].value;
    }
    if (acks >= rl->quorum) {
      *token = proposed;
      return 1;
    }
    if ((uint64_t)top <= proposed)
      return 0; /* no majority reachable */
    proposed = (uint64_t)top + 1;
  }
  return 0;
}

/* How long a round keeps waiting for the remaining masters once a majority
 * said yes: they add redundancy (and their token counters), but a paused
 * master must not eat the lease. */
static int64_t grace_ms(int64_t lease) {
  return lease / 20 > 1 ? lease / 20 : 1;
}

/* One round. 1 held (*token, *valid_until set), 0 refused (buf says why),
 * and every master is released on refusal. */
static int one_round(dlock_redlock *rl, uint64_t tid, int64_t lease,
                     uint64_t *token, int64_t *t0_out, int64_t *valid_until,
                     char *why, size_t why_len) {
  vote vs[64];
  /* this round's request id; its votes write the last release's
   * tombstone before they act */
  char rid[33], prev[DLOCK__RL_RELS * 32 + 1] = "";
  dlock__request_id(rid);
  dlock__mu_lock(&rl->mu);
  for (size_t i = 0, n = 0; i < DLOCK__RL_RELS; i++)
    if (rl->rel_rids[i][0])
      memcpy(prev + 32 * n++, rl->rel_rids[i], 32);
  memcpy(rl->acq_rid, rid, sizeof rid);
  dlock__mu_unlock(&rl->mu);
  const int64_t t0 = dlock__now_ms();
  round *r = round_start(rl, OP_ACQUIRE, tid, lease, 0, NULL, rid, prev);
  if (!r) {
    snprintf(why, why_len, "redlock '%.100s': out of memory", rl->name);
    return 0;
  }
  round_wait(rl, r, 1, grace_ms(lease), -1, vs);
  size_t yes = 0, heard = 0;
  for (size_t i = 0; i < rl->n; i++) {
    yes += vs[i].rc == 1;
    heard += vs[i].sent && vs[i].rc >= 0;
  }
  if (heard == rl->n) { /* every master has the tombstones: none in doubt */
    dlock__mu_lock(&rl->mu);
    for (size_t o = 0; prev[32 * o]; o++)
      rel_doubt(rl, prev + 32 * o, 0);
    dlock__mu_unlock(&rl->mu);
  }
  const char *extra = "";
  int ok = yes >= rl->quorum;
  if (ok) {
    vote tv[64];
    memcpy(tv, vs, rl->n * sizeof *vs);
    ok = draw_token(rl, tv, tid, grace_ms(lease), token);
    if (!ok)
      extra = "; no majority for the fencing token counter";
  }
  int64_t validity = dlock__eng_deadline(t0, lease) - dlock__now_ms();
  if (ok && validity <= 0) {
    ok = 0;
    extra = "; the votes took longer than the lease";
  }
  if (ok) {
    round_unref(r); /* late yes votes stay: unlock releases every master */
    *t0_out = t0;
    *valid_until = dlock__eng_deadline(t0, lease);
    return 1;
  }
  describe(rl, vs, yes, extra, why, why_len);
  /* Release every master at once, also those that did not vote yes (a
   * reply may have been lost after the script ran) -- except those whose
   * vote is still running: from now on such a vote takes itself back when
   * it ends (abandoned), so nobody waits for a paused master here. */
  unsigned char skip[64];
  dlock__mu_lock(&r->mu);
  r->abandoned = 1;
  for (size_t i = 0; i < rl->n; i++)
    skip[i] = !r->finished[i];
  dlock__mu_unlock(&r->mu);
  round_unref(r);
  vote rv[64];
  round_some(rl, rv, OP_RELEASE, tid, 0, 0, skip, 0, 0, -1);
  return 0;
}

static int start_renewal(dlock_redlock *rl) {
  /* mu held */
  if (rl->rn_started)
    return 0;
  if (dlock__thread_start(&rl->rn_thread, renew_main, rl) != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot start the renewal thread");
  rl->rn_started = 1;
  return 0;
}

int dlock_redlock_timedlock(dlock_redlock *rl, long long wait_ms,
                            long long lease_ms) {
  dlock__clear_error();
  if (!rl)
    return dlock__fail(DLOCK_EINVAL, "redlock is NULL");
  if (forked(rl))
    return fail_forked(rl);
  int rc0 = dlock__check_lease(lease_ms, "redlock", rl->name);
  if (rc0)
    return rc0;
  const uint64_t tid = dlock__tid();
  const int wd = lease_ms <= 0;
  const int64_t lease = wd ? rl->clients[0]->cfg.watchdog_timeout_ms : lease_ms;
  dlock__mu_lock(&rl->mu);
  int mine = rl->hold.count && rl->hold.tid == tid;
  dlock__mu_unlock(&rl->mu);
  if (mine)
    return dlock__fail(DLOCK_EDEADLK,
                       "redlock '%s' is already held by this thread (a "
                       "Redlock is not reentrant)",
                       rl->name);
  int rc1 = holds_check(rl, tid);
  if (rc1)
    return rc1;
  /* One budget per client: each one's close and cancel end the wait. */
  dlock__budget b[64];
  for (size_t i = 0; i < rl->n; i++)
    dlock__budget_start(&b[i], rl->clients[i], wait_ms);
  char why[512] = "";
  for (;;) {
    uint64_t token = 0;
    int64_t t0 = 0, valid_until = 0;
    if (one_round(rl, tid, lease, &token, &t0, &valid_until, why, sizeof why)) {
      dlock__mu_lock(&rl->mu);
      rl->hold.count = 1;
      rl->hold.tid = tid;
      rl->hold.gen++;
      rl->hold.wd_count = wd;
      rl->hold.lost = 0;
      rl->hold.lease_ms = lease;
      rl->hold.renewed_at = t0;
      rl->hold.valid_until = valid_until;
      rl->hold.token = token;
      holds_add(rl, tid);
      int rc = wd ? start_renewal(rl) : 0;
      pthread_cond_broadcast(&rl->cv);
      dlock__mu_unlock(&rl->mu);
      return rc;
    }
    if (wait_ms == 0)
      return dlock__fail(DLOCK_EBUSY, "%s", why);
    for (size_t i = 0; i < rl->n; i++) {
      char what[400];
      snprintf(what, sizeof what, "redlock '%.200s' (client %zu); %.150s",
               rl->name, i, why);
      int rc = dlock__budget_over(&b[i], what);
      if (rc == DLOCK_ETIMEDOUT)
        return dlock__fail(DLOCK_ETIMEDOUT, "%s; gave up after %lld ms", why,
                           wait_ms);
      if (rc == DLOCK_ECLOSED)
        return dlock__fail(DLOCK_ECLOSED, "client %zu is closing", i);
      if (rc)
        return rc;
    }
    int64_t now = dlock__now_ms();
    int64_t pause = 20 + (int64_t)(dlock__rand64() % 181);
    pause = dlock__budget_clamp(&b[0], now + pause) - now;
    dlock__sleep_ms(pause);
  }
}

/* Shorthands: wait for ever, or not at all; the watchdog keeps the lease. */
int dlock_redlock_lock(dlock_redlock *rl) {
  return dlock_redlock_timedlock(rl, -1, -1);
}

int dlock_redlock_trylock(dlock_redlock *rl) {
  return dlock_redlock_timedlock(rl, 0, -1);
}

int dlock_redlock_unlock(dlock_redlock *rl) {
  dlock__clear_error();
  if (!rl)
    return dlock__fail(DLOCK_EINVAL, "redlock is NULL");
  if (forked(rl))
    return fail_forked(rl);
  const uint64_t tid = dlock__tid();
  dlock__mu_lock(&rl->mu);
  if (!rl->hold.count || rl->hold.tid != tid) {
    dlock__mu_unlock(&rl->mu);
    return dlock__fail(DLOCK_EPERM, "redlock '%s' is not held by this thread",
                       rl->name);
  }
  int lost = rl->hold.lost;
  rl->hold.count = 0;
  rl->hold.gen++;
  dlock__mu_unlock(&rl->mu);
  holds_del(rl);
  vote vs[64];
  round_all(rl, vs, OP_RELEASE, tid, 0, 0);
  if (lost)
    return dlock__fail(DLOCK_ELOST,
                       "redlock '%s' was lost while held (renewal could not "
                       "keep a majority of masters)",
                       rl->name);
  return 0;
}

int dlock_redlock_token(dlock_redlock *rl, uint64_t *token) {
  dlock__clear_error();
  if (!rl || !token)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (forked(rl))
    return fail_forked(rl);
  dlock__mu_lock(&rl->mu);
  int mine = rl->hold.count && rl->hold.tid == dlock__tid();
  if (mine)
    *token = rl->hold.token;
  dlock__mu_unlock(&rl->mu);
  return mine
             ? 0
             : dlock__fail(DLOCK_EPERM,
                           "redlock '%s' is not held by this thread", rl->name);
}

int dlock_redlock_validity(dlock_redlock *rl, long long *ms) {
  dlock__clear_error();
  if (!rl || !ms)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (forked(rl))
    return fail_forked(rl);
  dlock__mu_lock(&rl->mu);
  int mine = rl->hold.count && rl->hold.tid == dlock__tid();
  int lost = mine && rl->hold.lost;
  int64_t left = rl->hold.valid_until - dlock__now_ms();
  dlock__mu_unlock(&rl->mu);
  if (!mine)
    return dlock__fail(DLOCK_EPERM, "redlock '%s' is not held by this thread",
                       rl->name);
  if (lost)
    return dlock__fail(DLOCK_ELOST, "redlock '%s' was lost while held",
                       rl->name);
  *ms = left > 0 ? left : 0;
  return 0;
}

/* ---- renewal ------------------------------------------------------------- */

static void *renew_main(void *arg) {
  dlock_redlock *rl = arg;
  dlock__mu_lock(&rl->mu);
  int64_t retry_at = 0;
  while (!rl->rn_stop) {
    if (!rl->hold.count || !rl->hold.wd_count || rl->hold.lost) {
      pthread_cond_wait(&rl->cv, &rl->mu);
      retry_at = 0;
      continue;
    }
    int64_t due = rl->hold.renewed_at + rl->hold.lease_ms / 3;
    if (retry_at > 0)
      due = retry_at;
    int64_t now = dlock__now_ms();
    int64_t next = INT64_MAX;
    if (dlock__eng_expiry(&rl->hold, now, &next) == DLOCK__ENG_LOST) {
      /* The local deadline passed without a confirmed round: lost now,
       * before any other client can have taken the majority (issue 9.1;
       * the engine's rule, as for a single lock). */
      dlock_client *c = rl->clients[0];
      dlock__mu_unlock(&rl->mu);
      dlock__callout_lost(&c->cfg, rl->name);
      dlock__mu_lock(&rl->mu);
      continue;
    }
    if (due > rl->hold.valid_until)
      due = rl->hold.valid_until;
    if (now < due) {
      /* Sleep until due, on the monotonic clock: a step of the wall
       * clock neither stalls nor hurries the renewal (issue 25.14). */
      struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, due - now);
      pthread_cond_timedwait(&rl->cv, &rl->mu, &ts);
      continue;
    }
    uint32_t gen = rl->hold.gen;
    uint64_t tid = rl->hold.tid;
    int64_t lease = rl->hold.lease_ms;
    /* A round never waits past the local deadline: its answers would come
     * too late to matter, and the loss must be reported at the deadline. */
    const int64_t until = rl->hold.valid_until;
    dlock__mu_unlock(&rl->mu);

    vote vs[64];
    const int64_t t0 = dlock__now_ms();
    round_some(rl, vs, OP_RENEW, tid, lease, 0, NULL, 1, grace_ms(lease),
               until);
    size_t ok = 0, gone = 0;
    for (size_t i = 0; i < rl->n; i++) {
      ok += vs[i].rc == 1;
      gone += vs[i].rc == 0;
    }
    int report = 0;
    dlock__mu_lock(&rl->mu);
    if (rl->hold.count && rl->hold.gen == gen && !rl->hold.lost) {
      /* A majority renewed: renewed. A majority can no longer: "gone".
       * Neither: no answer (the engine's rule: lost past the deadline). */
      int v = dlock__eng_renew_answer(
          &rl->hold, ok >= rl->quorum || gone > rl->n - rl->quorum,
          ok >= rl->quorum, t0, lease, dlock__now_ms());
      if (v == DLOCK__ENG_LOST) {
        report = 1;
      } else if (v == DLOCK__ENG_RETRY) {
        int64_t step = lease / 10 > 50 ? lease / 10 : 50;
        retry_at = dlock__now_ms() + step;
      } else {
        retry_at = 0;
      }
    }
    if (report) {
      dlock_client *c = rl->clients[0];
      dlock__mu_unlock(&rl->mu);
      dlock__callout_lost(&c->cfg, rl->name);
      dlock__mu_lock(&rl->mu);
    }
  }
  dlock__mu_unlock(&rl->mu);
  return NULL;
}
