/*
 * test_sim.c -- the simulator's Redis model (tests/sim, issue 41) checked
 * against the real redis-server, command by command (docs/sim.md).
 *
 * model_rules_match_redis: hand-written probes of what the model must get
 * exactly right -- the Lua <-> Redis conversions, redis.call / pcall
 * errors and their "script: ..., on @user_script:N." suffix, NOSCRIPT,
 * each modelled command's options and error replies in Redis's order,
 * expiry at the last millisecond and the one after -- run on both sides.
 *
 * model_matches_redis: the library itself, every kind (mutex with queued
 * waits, hand-over, cancel, decline, renewals, status, force unlock; fair,
 * fenced, spin, read-write lock, semaphore, latch, expirable permits,
 * Redlock on one master, the client info key, the event-loop client),
 * runs against a redis-server whose commands are recorded through MONITOR
 * in the server's order. The recording is replayed into the model and into
 * a second, fresh redis-server in lockstep (its clock frozen by the clock
 * shim and moved to each command's recorded time, so both sides see the
 * same instants), every reply compared, the keyspaces compared. The
 * scripts come from the library's own traffic (the first EVALSHA on a
 * fresh server is answered NOSCRIPT and the body follows in an EVAL), so
 * they track src/ without an edit; the list of scripts src/ declares
 * (tests/sim/lib_scripts.py) must be exactly what was sent and run, or the
 * case fails naming the script the scenario below does not reach yet.
 * Then a seeded random phase (tests/sim/sim_fuzz.c) varies the recorded
 * calls (names, holders, counts, leases, clock, subscribers, order) and
 * compares again. A failure prints the first differing call, both replies
 * and the seed; DLOCK_SIM_SEED=<n> and DLOCK_SIM_TRACE=<file> (the
 * recording, written as sim_trace.txt in the working directory) replay a
 * run exactly; DLOCK_SIM_ROUNDS=<n> runs more random rounds (default 30).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_diff.h"
#include "sim_fuzz.h"
#include "sim_lib_scripts.h"
#include "sim_trace.h"
#include "th.h"
#include "th_drive.h"

/* The scenario's lock names: none contains another (the random phase
 * swaps them for one another in keys and arguments). */
static const char *const g_names[] = {"Qk0", "Qk1", "Qk2", "Qk3", "Qk4",  "Qk5",
                                      "Qk6", "Qk7", "Qk8", "Qk9", "Qb{t}"};
#define NNAMES ((int)(sizeof g_names / sizeof g_names[0]))
/* Their classes: 1 = a counter's string (semaphore, latch, permits), 0 =
 * a lock's hash. */
static const int g_classes[NNAMES] = {0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0};

static int64_t ms(int64_t v) { return v * th_timeout_mult(); }

static const sim_lib_script *lib_script(const char *name) {
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++)
    if (strcmp(sim_lib_scripts[i].name, name) == 0)
      return &sim_lib_scripts[i];
  th_fail(__FILE__, __LINE__, "src/ declares no script '%s'", name);
}

/* ---- the recorder: MONITOR on a thread ---- */

typedef struct rec {
  th_redis *r;
  redisContext *mon;
  pthread_t thr;
  pthread_mutex_t mu;
  sim_trace tr;
  atomic_int done;
  char err[256];
} rec;

#define END_MARKER "sim-recording-ends-here"

static void *rec_main(void *arg) {
  rec *x = arg;
  for (;;) {
    redisReply *r = NULL;
    if (redisGetReply(x->mon, (void **)&r) != REDIS_OK || !r) {
      snprintf(x->err, sizeof x->err, "MONITOR: %s", x->mon->errstr);
      break;
    }
    int end = r->type == REDIS_REPLY_STATUS && strstr(r->str, END_MARKER);
    if (!end && r->type == REDIS_REPLY_STATUS) {
      pthread_mutex_lock(&x->mu);
      sim_trace_add_monitor_line(&x->tr, r->str, r->len);
      pthread_mutex_unlock(&x->mu);
    }
    freeReplyObject(r);
    if (end)
      break;
  }
  atomic_store(&x->done, 1);
  return NULL;
}

static void rec_start(rec *x, th_redis *r) {
  memset(x, 0, sizeof *x);
  x->r = r;
  sim_trace_init(&x->tr);
  pthread_mutex_init(&x->mu, NULL);
  x->mon = th_monitor_start(r);
  struct timeval tv = {(long)(110 * th_timeout_mult()), 0};
  redisSetTimeout(x->mon, tv);
  CHECK_EQ(pthread_create(&x->thr, NULL, rec_main, x), 0);
}

static void rec_stop(rec *x) {
  freeReplyObject(th_cmd(x->r, "ECHO %s", END_MARKER));
  pthread_join(x->thr, NULL);
  CHECK_MSG(x->err[0] == '\0', "%s", x->err);
  redisFree(x->mon);
}

/* Calls of the script `name` recorded so far that ran it: EVALs of its
 * body, and EVALSHAs once a copy of the body reached the server (an
 * EVALSHA before is answered NOSCRIPT). */
static int rec_count(rec *x, const char *name) {
  const sim_lib_script *s = lib_script(name);
  size_t bl = strlen(s->body);
  int n = 0, loaded = 0;
  pthread_mutex_lock(&x->mu);
  for (size_t i = 0; i < x->tr.n; i++) {
    const sim_cmd *c = &x->tr.cmd[i];
    const int b = c->argc - 1; /* EVAL's body is argv[1], SCRIPT LOAD's [2] */
    if (c->argc < 2)
      continue;
    if (sim_cmd_is(c, "evalsha"))
      n += loaded && c->lens[1] == 40 &&
           strncasecmp(c->argv[1], s->sha, 40) == 0;
    else if ((sim_cmd_is(c, "eval") && c->lens[1] == bl &&
              memcmp(c->argv[1], s->body, bl) == 0))
      n++, loaded = 1;
    else if (sim_cmd_is(c, "script") && c->argc == 3 && c->lens[b] == bl &&
             memcmp(c->argv[b], s->body, bl) == 0)
      loaded = 1;
  }
  pthread_mutex_unlock(&x->mu);
  return n;
}

/* Waits (bounded) until the library ran `name` at least once more than
 * `before` times: what a background thread (watchdog, decline) does. */
static void rec_wait(rec *x, const char *name, int before) {
  int64_t end = th_now_ms() + ms(15000);
  while (rec_count(x, name) <= before) {
    CHECK_MSG(th_now_ms() < end,
              "the library never sent the script '%s' in %lld ms", name,
              (long long)ms(15000));
    th_sleep_ms(10);
  }
}

/* ---- the scenario: every kind of lock, driven through the library ---- */

static dlock_client *client(th_redis *r, int watchdog_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url; /* TCP: MONITOR tells the connections apart */
  cfg.retry_interval_ms = 100;
  cfg.watchdog_timeout_ms = watchdog_ms;
  return th_client_cfg(r, &cfg);
}

typedef struct waiter {
  dlock_client *c;
  const char *name;
  int fair;
  long long wait_ms, lease_ms;
  char field[64];
  atomic_int ready;
  int rc;
  pthread_t t;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  dlock_mutex *m = NULL;
  w->rc = w->fair ? dlock_mutex_new_fair(w->c, w->name, &m)
                  : dlock_mutex_new(w->c, w->name, &m);
  if (w->rc == 0) {
    dlock_mutex_owner(m, w->field, sizeof w->field);
    atomic_store(&w->ready, 1);
    w->rc = dlock_mutex_timedlock(m, w->wait_ms, w->lease_ms);
    if (w->rc == 0)
      dlock_mutex_unlock(m);
  }
  atomic_store(&w->ready, 1);
  dlock_mutex_free(m);
  return NULL;
}

static void waiter_go(waiter *w, dlock_client *c, const char *name, int fair,
                      long long wait_ms) {
  memset(w, 0, sizeof *w);
  w->c = c, w->name = name, w->fair = fair;
  w->wait_ms = wait_ms, w->lease_ms = 10000;
  CHECK_EQ(pthread_create(&w->t, NULL, waiter_main, w), 0);
  int64_t end = th_now_ms() + ms(10000);
  while (!atomic_load(&w->ready) && th_now_ms() < end)
    th_sleep_ms(1);
}

static int waiter_end(waiter *w) {
  pthread_join(w->t, NULL);
  return w->rc;
}

static dlock_mutex *mutex(dlock_client *c, const char *name, int kind) {
  dlock_mutex *m = NULL;
  if (kind == 0)
    CHECK_OK(dlock_mutex_new(c, name, &m));
  else if (kind == 1)
    CHECK_OK(dlock_mutex_new_fair(c, name, &m));
  else if (kind == 2)
    CHECK_OK(dlock_mutex_new_fenced(c, name, &m));
  else
    CHECK_OK(dlock_mutex_new_spin(c, name, &m));
  return m;
}

/* Plain mutex: first hold, reentry, the two unlocks, a watchdog hold and
 * its renewal, status, force unlock, and a read-write lock refused on its
 * name. */
static void sc_plain(rec *x, dlock_client *a, dlock_client *b) {
  dlock_mutex *m = mutex(a, "Qk0", 0), *mb = mutex(b, "Qk0", 0);
  CHECK_OK(dlock_mutex_trylock(m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 10000));
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(dlock_mutex_unlock(m));
  int renews = rec_count(x, "renew");
  CHECK_OK(dlock_mutex_lock(m)); /* watchdog lease */
  dlock_status st;
  CHECK_OK(dlock_status_query(b, "Qk0", &st));
  dlock_status_clear(&st);
  CHECK_RC(dlock_mutex_trylock(mb), DLOCK_EBUSY);
  dlock_rwlock *rw = NULL;
  CHECK_OK(dlock_rwlock_new(b, "Qk0", &rw));
  CHECK(dlock_rwlock_tryrdlock(rw) != DLOCK_OK); /* a mutex's name */
  dlock_rwlock_free(rw);
  rec_wait(x, "renew", renews);
  dlock_mutex_unlock(m);
  CHECK_OK(dlock_mutex_timedlock(m, 0, 10000));
  CHECK(dlock_mutex_force_unlock(mb) == 1);
  dlock_mutex_unlock(m); /* DLOCK_ELOST: forced */
  dlock_mutex_free(m);
  dlock_mutex_free(mb);
}

/* Queues a wait of client b on name behind m's hold: *w runs it. */
static void queue_behind(rec *x, waiter *w, dlock_client *b, const char *name,
                         int ahead) {
  waiter_go(w, b, name, 0, ms(10000));
  char q[64];
  snprintf(q, sizeof q,
           strchr(name, '{') ? "dlock_lock_queue::%s" : "dlock_lock_queue:{%s}",
           name);
  th_wait_llen(x->r, q, ahead + 1, ms(10000));
}

/* PUBLISH "<tid>|<wid>" on the grant channel of w's client. */
static void grant(rec *x, const waiter *w, const char *name, const char *wid) {
  char ch[128], msg[64];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{%s}:%.36s", name, w->field);
  snprintf(msg, sizeof msg, "%s|%s", strchr(w->field, ':') + 1, wid);
  freeReplyObject(th_cmd(x->r, "PUBLISH %s %s", ch, msg));
}

/* Declines: a grant naming no wait of the client (nothing to give back),
 * then a hand-over to a wait of the waiter that already ended -- the state
 * an unlock's hand-over leaves (the waiter's field with count 1, the
 * marker "<field>|<wid>"), written by a script of the test as
 * test_grants.c does, and its grant: the client gives the lock back (to
 * the queue, or free: its own queued entry is skipped), and its live wait
 * then takes the lock. The holder's hold is gone (its unlock:
 * DLOCK_ELOST). */
static void sc_declines(rec *x, dlock_client *a, dlock_client *b) {
  dlock_mutex *m = mutex(a, "Qk1", 0);
  char holder[64];
  CHECK_OK(dlock_mutex_owner(m, holder, sizeof holder));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 10000));
  waiter w;
  queue_behind(x, &w, b, "Qk1", 0);
  int declines = rec_count(x, "decline");
  grant(x, &w, "Qk1", "00000000000000ee");
  rec_wait(x, "decline", declines);
  /* in one script, as an unlock's hand-over does it: no attempt of the
   * waiter sees a state in between */
  char ch[128], msg[64];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{Qk1}:%.36s", w.field);
  snprintf(msg, sizeof msg, "%s|00000000000000ef", strchr(w.field, ':') + 1);
  redisReply *r = th_cmd(
      x->r, "EVAL %s 3 %s %s %s %s %s %s %s",
      "redis.call('hdel', KEYS[1], ARGV[1]) "
      "redis.call('hset', KEYS[1], ARGV[2], 1) "
      "redis.call('pexpire', KEYS[1], 10000) "
      "redis.call('set', KEYS[2], ARGV[2] .. '|' .. ARGV[3], 'px', 10000) "
      "return redis.call('publish', KEYS[3], ARGV[4])",
      "Qk1", "dlock_lock_granted:{Qk1}", ch, holder, w.field,
      "00000000000000ef", msg);
  CHECK_MSG(r->type == REDIS_REPLY_INTEGER && r->integer == 1,
            "the grant reached no subscriber");
  freeReplyObject(r);
  rec_wait(x, "decline", declines + 1);
  CHECK_OK(waiter_end(&w));
  dlock_mutex_unlock(m); /* DLOCK_ELOST: handed away by the test */
  dlock_mutex_free(m);
}

/* Queued waits: the hand-over to the queue's head, a wait that times out
 * and leaves the queue (cancel). */
static void sc_queue(rec *x, dlock_client *a, dlock_client *b, dlock_client *c,
                     const char *name) {
  dlock_mutex *m = mutex(a, name, 0);
  CHECK_OK(dlock_mutex_timedlock(m, 0, 10000));
  waiter w;
  queue_behind(x, &w, b, name, 0);
  th_sleep_ms(25); /* the head's age passes the policy's starvation bound */
  CHECK_OK(dlock_mutex_unlock(m)); /* handed over to the waiter */
  CHECK_OK(waiter_end(&w));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 10000));
  waiter_go(&w, c, name, 0, 300);
  CHECK_RC(waiter_end(&w), DLOCK_ETIMEDOUT); /* cancel */
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
}

/* Fair: a waiting acquire queued behind the holder, a single attempt, a
 * wait that times out (cancel), the unlock that wakes the head, force. */
static void sc_fair(rec *x, dlock_client *a, dlock_client *b, dlock_client *c) {
  dlock_mutex *m = mutex(a, "Qk2", 1), *mc = mutex(c, "Qk2", 1);
  CHECK_OK(dlock_mutex_timedlock(m, ms(5000), 10000));
  waiter w, w2;
  waiter_go(&w, b, "Qk2", 1, ms(10000));
  th_wait_llen(x->r, "redisson_lock_queue:{Qk2}", 1, ms(10000));
  CHECK_RC(dlock_mutex_trylock(mc), DLOCK_EBUSY);
  waiter_go(&w2, c, "Qk2", 1, 300);
  CHECK_RC(waiter_end(&w2), DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(waiter_end(&w));
  CHECK_OK(dlock_mutex_timedlock(m, ms(5000), 10000));
  CHECK(dlock_mutex_force_unlock(mc) == 1);
  dlock_mutex_unlock(m);
  dlock_mutex_free(m);
  dlock_mutex_free(mc);
}

static void sc_fenced_spin(dlock_client *a, dlock_client *b) {
  dlock_mutex *f = mutex(a, "Qk3", 2);
  uint64_t token = 0;
  CHECK_OK(dlock_mutex_timedlock(f, 0, 10000));
  CHECK_OK(dlock_mutex_token(f, &token));
  CHECK_OK(dlock_mutex_timedlock(f, 0, 10000));
  CHECK_OK(dlock_mutex_unlock(f));
  CHECK_OK(dlock_mutex_unlock(f));
  dlock_mutex_free(f);
  dlock_mutex *s = mutex(a, "Qk8", 3), *sb = mutex(b, "Qk8", 3);
  CHECK_OK(dlock_mutex_timedlock(s, 0, 10000));
  CHECK_RC(dlock_mutex_timedlock(sb, 50, 10000), DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_mutex_unlock(s));
  CHECK_OK(dlock_mutex_timedlock(s, 0, 10000));
  CHECK(dlock_mutex_force_unlock(sb) == 1);
  dlock_mutex_unlock(s);
  dlock_mutex_free(s);
  dlock_mutex_free(sb);
}

/* Read-write lock: readers (reentrant), a writer refused meanwhile, the
 * writer (reentrant), a downgrade, a watchdog read hold and its renewal. */
static void sc_rwlock(rec *x, dlock_client *a, dlock_client *b) {
  dlock_rwlock *ra = NULL, *rb = NULL;
  CHECK_OK(dlock_rwlock_new(a, "Qk4", &ra));
  CHECK_OK(dlock_rwlock_new(b, "Qk4", &rb));
  CHECK_OK(dlock_rwlock_timedrdlock(ra, 0, 10000));
  CHECK_OK(dlock_rwlock_timedrdlock(rb, 0, 10000));
  CHECK_OK(dlock_rwlock_timedrdlock(ra, 0, 10000));
  CHECK_RC(dlock_rwlock_timedwrlock(rb, 50, 10000), DLOCK_EDEADLK);
  CHECK_OK(dlock_rwlock_unlock(ra));
  CHECK_OK(dlock_rwlock_unlock(ra));
  CHECK_OK(dlock_rwlock_unlock(rb));
  CHECK_OK(dlock_rwlock_timedwrlock(ra, 0, 10000));
  CHECK_OK(dlock_rwlock_timedwrlock(ra, 0, 10000));
  CHECK_RC(dlock_rwlock_timedrdlock(rb, 50, 10000), DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_rwlock_unlock(ra));
  CHECK_OK(dlock_rwlock_downgrade(ra, 10000));
  CHECK_OK(dlock_rwlock_unlock(ra));
  int renews = rec_count(x, "rw_read_renew");
  CHECK_OK(dlock_rwlock_rdlock(rb)); /* watchdog lease */
  rec_wait(x, "rw_read_renew", renews);
  dlock_rwlock_unlock(rb);
  dlock_rwlock_free(ra);
  dlock_rwlock_free(rb);
}

/* Semaphore and latch (and a mutex refused on the semaphore's name). */
static void sc_counters(dlock_client *a, dlock_client *b) {
  dlock_sem *s = NULL;
  long long v = 0;
  CHECK_OK(dlock_sem_new(a, "Qk5", &s));
  CHECK_OK(dlock_sem_init(s, 2));
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_RC(dlock_sem_trywait(s), DLOCK_EBUSY);
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_timedwait(s, ms(2000)));
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_value(s, &v));
  dlock_sem_free(s);
  dlock_mutex *m = mutex(b, "Qk5", 0);
  CHECK(dlock_mutex_trylock(m) != DLOCK_OK); /* the semaphore's string */
  dlock_mutex_free(m);
  dlock_latch *l = NULL;
  CHECK_OK(dlock_latch_new(b, "Qk6", &l));
  CHECK_OK(dlock_latch_init(l, 2));
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_count(l, &v));
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_timedawait(l, ms(2000)));
  dlock_latch_free(l);
}

static void sc_permits(rec *x, dlock_client *a) {
  dlock_permits *p = NULL;
  char id1[DLOCK_PERMIT_ID_LEN + 1], id2[DLOCK_PERMIT_ID_LEN + 1],
      id3[DLOCK_PERMIT_ID_LEN + 1];
  long long n = 0;
  CHECK_OK(dlock_permits_new(a, "Qk7", &p));
  CHECK_OK(dlock_permits_try_set_permits(p, 3));
  CHECK_OK(dlock_permits_try_acquire(p, 5000, id1));
  int renews = rec_count(x, "permits_update_lease");
  CHECK_OK(dlock_permits_acquire(p, ms(1000), -1, id2)); /* watchdog */
  /* a second watchdog permit: the renewal batches both ids in one call,
   * as the simulator's renewer does (sim_permits.c) */
  CHECK_OK(dlock_permits_acquire(p, ms(1000), -1, id3));
  CHECK_OK(dlock_permits_update_lease(p, id1, 8000));
  CHECK_OK(dlock_permits_available(p, &n));
  dlock_permit *list = NULL;
  size_t nl = 0;
  CHECK(dlock_permits_list(p, &list, &nl, &n) >= 0);
  dlock_permits_list_free(list);
  rec_wait(x, "permits_update_lease", renews + 2); /* the update, a batch */
  CHECK_OK(dlock_permits_release(p, id1));
  CHECK_OK(dlock_permits_release(p, id2));
  CHECK_OK(dlock_permits_release(p, id3));
  CHECK_OK(dlock_permits_set_permits(p, 5));
  dlock_permits_free(p);
}

static void sc_redlock(rec *x, dlock_client *a) {
  dlock_redlock *rl = NULL;
  dlock_client *cs[1] = {a};
  CHECK_OK(dlock_redlock_new(cs, 1, "Qk9", &rl));
  uint64_t token = 0;
  int renews = rec_count(x, "redlock_renew");
  CHECK_OK(dlock_redlock_lock(rl)); /* watchdog lease */
  CHECK_OK(dlock_redlock_token(rl, &token));
  rec_wait(x, "redlock_renew", renews);
  dlock_redlock_unlock(rl);
  dlock_redlock_free(rl);
}

/* The event-loop client: its acquire, and a wait of it that ends with
 * the holder's unlock (a hold belongs to its thread: the holder runs on a
 * thread of its own). */
typedef struct holder {
  dlock_client *c;
  atomic_int held;
  int rc;
} holder;

static void *hold_a_while(void *arg) {
  holder *h = arg;
  dlock_mutex *m = mutex(h->c, "Qk1", 0);
  h->rc = dlock_mutex_timedlock(m, 0, 10000);
  atomic_store(&h->held, 1);
  th_sleep_ms(300); /* the event-loop client's wait has begun */
  if (h->rc == 0)
    h->rc = dlock_mutex_unlock(m);
  dlock_mutex_free(m);
  return NULL;
}

static void sc_async(rec *x, dlock_client *a) {
  th_drive *d = th_drive_at(TH_DRIVE_ASYNC, x->r->tcp_url);
  CHECK_OK(th_drive_lock(d, "Qk1", 1, 0, 10000));
  CHECK_OK(th_drive_unlock(d, "Qk1", 1));
  holder h = {a, 0, -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, hold_a_while, &h), 0);
  int64_t end = th_now_ms() + ms(10000);
  while (!atomic_load(&h.held) && th_now_ms() < end)
    th_sleep_ms(1);
  CHECK_OK(th_drive_lock(d, "Qk1", 1, ms(10000), 10000));
  pthread_join(t, NULL);
  CHECK_OK(h.rc);
  CHECK_OK(th_drive_unlock(d, "Qk1", 1));
  th_drive_free(d);
}

static void scenario(rec *x) {
  /* watchdog holds renewed every 0.5 s: the scenario waits for one */
  int wd = 1500 * th_timeout_mult();
  dlock_client *a = client(x->r, wd), *b = client(x->r, wd),
               *c = client(x->r, wd);
  sc_plain(x, a, b);
  sc_declines(x, a, b);
  sc_queue(x, a, b, c, "Qk1");
  sc_queue(x, a, b, c, "Qb{t}");
  sc_fair(x, a, b, c);
  sc_fenced_spin(a, b);
  sc_rwlock(x, a, b);
  sc_counters(a, b);
  sc_permits(x, a);
  sc_redlock(x, a);
  sc_async(x, a);
  rec_wait(x, "client_info", 0);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c);
}

/* ---- replay, coverage, the random phase ---- */

static sim_diff *new_diff(int64_t start_ms) {
  sim_diff *d = sim_diff_new(DLOCK_SIM_CLOCKSHIM, start_ms);
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++)
    sim_diff_add_script(d, sim_lib_scripts[i].name, sim_lib_scripts[i].body,
                        strlen(sim_lib_scripts[i].body));
  return d;
}

static int is_library_conn(const sim_trace *t, const sim_cmd *c) {
  return strncmp(t->conns[c->conn], "unix:", 5) != 0; /* ours: unix */
}

/* Every script the library sent is one src/ declares (else the reader of
 * the sources missed one and the coverage check below would be blind). */
static void check_known(sim_diff *d, const sim_trace *t) {
  for (size_t i = 0; i < t->n; i++) {
    const sim_cmd *c = &t->cmd[i];
    if (!is_library_conn(t, c) || c->argc < 2)
      continue;
    char sha[41];
    if (sim_cmd_is(c, "eval"))
      sim_sha1_hex(c->argv[1], c->lens[1], sha);
    else if (sim_cmd_is(c, "script") && c->argc == 3)
      sim_sha1_hex(c->argv[2], c->lens[2], sha);
    else if (sim_cmd_is(c, "evalsha"))
      snprintf(sha, sizeof sha, "%.40s", c->argv[1]);
    else
      continue;
    CHECK_MSG(sim_diff_script(d, sha, 40) != NULL,
              "the library sent a script (sha %s) that tests/sim/"
              "lib_scripts.py did not find in src/",
              sha);
  }
}

static void replay(sim_diff *d, const sim_trace *t) {
  int64_t now = t->cmd[0].t_us / 1000;
  for (size_t i = 0; i < t->n; i++) {
    const sim_cmd *c = &t->cmd[i];
    if (c->t_us / 1000 > now)
      now = c->t_us / 1000;
    sim_diff_set_time(d, now);
    sim_diff_context(d, "replay of the recording: command %zu of %zu", i + 1,
                     t->n);
    sim_diff_exec(d, c->conn, c->argc, (const char *const *)c->argv, c->lens,
                  NULL);
    if (i % 400 == 399)
      sim_diff_check_keyspace(d);
  }
  sim_diff_check_keyspace(d);
}

/* rw_force: no public call sends it (a read-write lock has no force
 * unlock; see the report in docs/sim.md). Its calls are made from the
 * shape its caller in src/kinds/rwlock.c (force_mode) gives them -- KEYS lock,
 * channel; ARGV mode, message, publish command -- with the keys and the
 * publish command of recorded read-write unlocks, after recorded acquires:
 * both modes, the right one and the wrong one. Appended to the trace (the
 * random phase varies them too). */
static void synthesize_rw_force(sim_diff *d, sim_trace *t) {
  const sim_lib_script *f = lib_script("rw_force");
  const char *wu = lib_script("rw_write_unlock")->sha;
  const char *wa = lib_script("rw_write_acquire")->sha;
  const char *ra = lib_script("rw_read_acquire")->sha;
  size_t unl = t->n, wacq = t->n, racq = t->n;
  for (size_t i = 0; i < t->n; i++) {
    const sim_cmd *c = &t->cmd[i];
    if (!sim_cmd_is(c, "evalsha") || c->lens[1] != 40)
      continue;
    if (unl == t->n && strncmp(c->argv[1], wu, 40) == 0 && c->argc >= 10)
      unl = i;
    if (wacq == t->n && strncmp(c->argv[1], wa, 40) == 0)
      wacq = i;
    if (racq == t->n && strncmp(c->argv[1], ra, 40) == 0)
      racq = i;
  }
  CHECK_MSG(unl < t->n && wacq < t->n && racq < t->n,
            "no recorded read-write lock calls");
  /* a write hold, forced in the wrong mode then the right one; a read
   * hold, the same */
  sim_trace syn;
  sim_trace_init(&syn);
  const sim_cmd *u = &t->cmd[unl];
  int64_t t_us = t->cmd[t->n - 1].t_us;
  const char *modes[2][2] = {{"read", "write"}, {"write", "read"}};
  for (int k = 0; k < 2; k++) {
    const sim_cmd *acq = &t->cmd[k == 0 ? wacq : racq];
    sim_trace_add(&syn, t_us, "synthesized", acq->argc,
                  (const char *const *)acq->argv, acq->lens);
    for (int j = 0; j < 2; j++) {
      const char *mode = modes[k][j];
      const char *msg = strcmp(mode, "read") == 0 ? "0" : "1";
      const char *av[8] = {"EVALSHA",  f->sha, "2", u->argv[3],
                           u->argv[4], mode,   msg, u->argv[9]};
      size_t al[8] = {7,          40,           1, u->lens[3],
                      u->lens[4], strlen(mode), 1, u->lens[9]};
      sim_trace_add(&syn, t_us, "synthesized", 8, av, al);
    }
  }
  for (size_t i = 0; i < syn.n; i++) {
    const sim_cmd *c = &syn.cmd[i];
    rm_reply r = {0};
    sim_diff_context(d, "the synthesized rw_force calls: %zu of %zu", i + 1,
                     syn.n);
    sim_diff_exec(d, c->conn, c->argc, (const char *const *)c->argv, c->lens,
                  &r);
    if (r.type == RM_REPLY_ERROR && strncmp(r.str, "NOSCRIPT", 8) == 0) {
      const char *av[16];
      size_t al[16];
      CHECK(c->argc <= 16);
      for (int k = 0; k < c->argc; k++)
        av[k] = c->argv[k], al[k] = c->lens[k];
      sim_script *sc = sim_diff_script(d, c->argv[1], c->lens[1]);
      CHECK(sc != NULL);
      av[0] = "EVAL", al[0] = 4;
      av[1] = sc->body, al[1] = sc->body_len;
      sim_diff_exec(d, c->conn, c->argc, av, al, NULL);
    }
    rm_reply_clear(&r);
    sim_trace_add(t, c->t_us, "synthesized", c->argc,
                  (const char *const *)c->argv, c->lens);
  }
  sim_trace_free(&syn);
  sim_diff_check_keyspace(d);
}

/* Every script src/ declares ran (on both sides, compared). */
static void check_coverage(sim_diff *d) {
  char missing[2048] = "";
  size_t at = 0, ran = 0;
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++) {
    sim_script *s = sim_diff_script(d, sim_lib_scripts[i].sha, 40);
    if (s && s->runs)
      ran++;
    else
      at += (size_t)snprintf(missing + at, sizeof missing - at, " %s",
                             sim_lib_scripts[i].name);
  }
  CHECK_MSG(ran == SIM_LIB_NSCRIPTS,
            "scripts of src/ that the scenario of tests/test_sim.c never "
            "ran:%s -- drive the library so that it sends them",
            missing);
  printf("coverage: all %d scripts of src/ ran on both sides:",
         SIM_LIB_NSCRIPTS);
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++) {
    sim_script *s = sim_diff_script(d, sim_lib_scripts[i].sha, 40);
    printf(" %s(%lu)", s->name, s->runs);
  }
  printf("\n");
}

/* How much of the scripts the comparisons ran: of the lines that issue a
 * command (redis.call / redis.pcall) or leave the script (return), the
 * share that ran -- per script, and the lines that never did with
 * DLOCK_SIM_COVERAGE=1. */
static void report_lines(sim_diff *d) {
  int verbose = getenv("DLOCK_SIM_COVERAGE") != NULL;
  int all = 0, all_hit = 0;
  char line[4096];
  size_t at = 0;
  for (int i = 0; i < SIM_LIB_NSCRIPTS; i++) {
    unsigned char hit[1024];
    rm_line_coverage(sim_diff_model(d), sim_lib_scripts[i].sha, hit, 1024);
    const char *p = sim_lib_scripts[i].body;
    int ln = 1, n = 0, h = 0;
    char missed[400] = "";
    size_t mat = 0;
    while (*p) {
      const char *e = strchr(p, '\n');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      if ((memmem(p, len, "redis.call", 10) ||
           memmem(p, len, "redis.pcall", 11) || memmem(p, len, "return", 6)) &&
          ln < 1024) {
        n++;
        if (hit[ln])
          h++;
        else if (mat + 8 < sizeof missed)
          mat += (size_t)snprintf(missed + mat, sizeof missed - mat, " %d", ln);
      }
      ln++;
      p += len + (e ? 1 : 0);
    }
    all += n, all_hit += h;
    if (at + 64 < sizeof line)
      at += (size_t)snprintf(line + at, sizeof line - at, " %s %d/%d",
                             sim_lib_scripts[i].name, h, n);
    if (verbose && h < n)
      printf("  %s: lines never run:%s\n", sim_lib_scripts[i].name, missed);
  }
  printf("script lines run (those with redis.call/pcall or return): %d of %d "
         "(%.0f%%):%s\n",
         all_hit, all, all ? 100.0 * all_hit / all : 0.0, line);
}

static uint64_t seed_of(void) {
  const char *s = getenv("DLOCK_SIM_SEED");
  return s && *s ? strtoull(s, NULL, 0) : 41;
}

/* Rounds of the random phase: DLOCK_SIM_ROUNDS (a longer hunt), else 30
 * (the case's budget: a few seconds). */
static int rounds_of(void) {
  const char *s = getenv("DLOCK_SIM_ROUNDS");
  int n = s && *s ? atoi(s) : 0;
  return n > 0 ? n : 30;
}

TH_CASE_T(model_matches_redis, 120, "sim") {
  int64_t t0 = th_now_ms();
  sim_trace t;
  sim_trace_init(&t);
  const char *from = getenv("DLOCK_SIM_TRACE");
  if (from && *from) {
    CHECK_MSG(sim_trace_load(&t, from) == 0, "cannot read %s", from);
    printf("trace: %zu commands from %s\n", t.n, from);
  } else {
    th_redis *r = th_redis_new(1, NULL);
    rec x;
    rec_start(&x, r);
    scenario(&x);
    rec_stop(&x);
    t = x.tr;
    CHECK_MSG(sim_trace_save(&t, "sim_trace.txt") == 0,
              "cannot write sim_trace.txt");
    printf("recorded: %zu commands from %zu clients in %lld ms (saved as "
           "sim_trace.txt)\n",
           t.n, t.nconns, (long long)(th_now_ms() - t0));
  }
  CHECK(t.n > 0);
  uint64_t seed = seed_of();
  int64_t t1 = th_now_ms();
  sim_diff *d = new_diff(t.cmd[0].t_us / 1000);
  rm_line_coverage_on(sim_diff_model(d));
  check_known(d, &t);
  replay(d, &t);
  synthesize_rw_force(d, &t);
  check_coverage(d);
  sim_diff_stats st;
  sim_diff_stats_get(d, &st);
  char skipped[512];
  sim_diff_skipped_names(d, skipped, sizeof skipped);
  printf("replayed: %lu calls compared, %lu subscriptions, %lu messages "
         "compared, %lu keyspace checks (%lu keys) in %lld ms; not modelled, "
         "not sent: %s\n",
         st.compared, st.subscriptions, st.messages, st.keyspace_checks,
         st.keys_compared, (long long)(th_now_ms() - t1), skipped);
  int64_t t2 = th_now_ms();
  /* New rounds start until half the case's limit (120 s x the build's
   * multiplier) has passed, and 3 always run: at a load average of 10 the
   * 30 rounds took 84 s after a 6 s replay and the case ran out of its
   * 120 s. DLOCK_SIM_ROUNDS asks for all of its rounds. */
  int want = rounds_of();
  int64_t half = 60000LL * th_timeout_mult();
  sim_fuzz_cfg fc = {seed,
                     want,
                     600,
                     g_names,
                     NNAMES,
                     g_classes,
                     getenv("DLOCK_SIM_ROUNDS") ? 0 : t0 + half,
                     3};
  sim_fuzz_stats fs;
  sim_fuzz_run(d, &t, &fc, &fs);
  sim_diff_stats st2;
  sim_diff_stats_get(d, &st2);
  printf("random: seed %llu (DLOCK_SIM_SEED), %lu of %d rounds x %d steps "
         "(%s) from %lu "
         "templates of %lu scripts/commands: %lu calls (%lu direct, %lu EVAL "
         "after NOSCRIPT, %lu error replies, %lu recorded windows), %lu clock "
         "moves (%lu to an expiry), %lu reads, %lu subscription changes, %lu "
         "script flushes; %lu messages and %lu keyspace checks compared in "
         "%lld ms\n",
         (unsigned long long)seed, fs.rounds, fc.rounds, fc.steps,
         fs.rounds < (unsigned long)fc.rounds ? "the rest past half the case's "
                                                "limit"
                                              : "all",
         fs.templates, fs.groups, fs.calls, fs.direct, fs.evals, fs.errors,
         fs.windows, fs.clock_moves, fs.at_expiry, fs.observes,
         fs.subscriptions, fs.script_flushes, st2.messages - st.messages,
         st2.keyspace_checks - st.keyspace_checks,
         (long long)(th_now_ms() - t2));
  report_lines(d);
  sim_diff_free(d);
  sim_trace_free(&t);
}

/* ---- hand-written rules ---- */

/* Runs one command given as words (NULL-terminated) on both sides. */
#define RUN(d, ...)                                                            \
  do {                                                                         \
    const char *av_[] = {__VA_ARGS__, NULL};                                   \
    size_t al_[64];                                                            \
    int n_ = 0;                                                                \
    while (av_[n_]) {                                                          \
      al_[n_] = strlen(av_[n_]);                                               \
      n_++;                                                                    \
    }                                                                          \
    sim_diff_exec(d, 0, n_, av_, al_, NULL);                                   \
  } while (0)

static void rules_conversions(sim_diff *d) {
  static const char *const scripts[] = {
      "return 3.99",
      "return -3.99",
      "return 2^63",
      "return 0/0",
      "return true",
      "return false",
      "return nil",
      "return {1, 2, nil, 4}",
      "return {1, 'a', false, true, {ok='s'}, {err='E x'}, 2.5}",
      "return {err='x y'}",
      "return {ok='fine\\r\\nline'}",
      "return {double=1.5}",
      "return redis.status_reply('FINE')",
      "return redis.error_reply('FOO')",
      "return redis.error_reply('-FOO bar')",
      "return redis.error_reply('X y\\n')",
      "return redis.error_reply(5)",
      "return redis.call('set', 'a', 'b')",
      "return redis.call('get', 'nokey')",
      "return redis.pcall('hget', 'a', 'f')",
      "return redis.call('hget', 'a', 'f')",
      "error({err='MYERR boom'})",
      "error('plain')",
      "error({err=5})",
      "error()",
      "local x = nil\nreturn x + 1",
      "x = 1",
      "return y",
      "return redis.call('get')",
      "return redis.call('get', {})",
      "return redis.call()",
      "return redis.pcall('get', 'a', 'b')",
      "return redis.call('pubsub')",
      "return redis.call('pubsub', 'nosub')",
      "return redis.pcall('nosuchcmd', 'a')",
      "return redis.call('nosuchcmd')",
      "return redis.call('eval', 'return 1', 0)",
      "return redis.pcall('script', 'load', 'return 1')",
      "local ok, e = pcall(redis.call, 'hget', 'a', 'f') return {ok, e.err}",
      "return redis.call('time')",
      "return {redis.call('type', 'a')['ok']}",
      "return {KEYS[1], ARGV[1], #KEYS, #ARGV}",
      "return 1 +",
      "return redis.call('set', 'n', 1.5)",
      "return redis.call('get', 'n')",
      "return redis.call('set', 'n', 0.1 + 0.2)",
      "return redis.call('get', 'n')",
      "return redis.call('hset', 'h', 'f', 12345678901234)",
      "return redis.call('hget', 'h', 'f')",
      NULL};
  for (int i = 0; scripts[i]; i++)
    RUN(d, "EVAL", scripts[i], "1", "k1", "a1", "a2");
  RUN(d, "EVAL", "return 1", "-1");
  RUN(d, "EVAL", "return 1", "2", "a");
  RUN(d, "EVAL", "return 1", "x");
  RUN(d, "EVALSHA", "0123456789012345678901234567890123456789", "0");
  RUN(d, "EVALSHA", "abc", "0");
  RUN(d, "SCRIPT", "LOAD", "return 'loaded'");
  char sha[41], up[41];
  sim_sha1_hex("return 'loaded'", 15, sha);
  for (int i = 0; i < 41; i++)
    up[i] = (char)(sha[i] >= 'a' && sha[i] <= 'f' ? sha[i] - 32 : sha[i]);
  RUN(d, "EVALSHA", up, "0"); /* the digest in any case */
  RUN(d, "SCRIPT", "EXISTS", sha, up, "0123");
  RUN(d, "SCRIPT", "FLUSH");
  RUN(d, "SCRIPT", "LOAD", "return 1 +");
}

static void rules_keys_and_time(sim_diff *d) {
  int64_t t = sim_diff_time(d);
  RUN(d, "SET", "s", "v", "PX", "100");
  RUN(d, "HSET", "h2", "a", "1", "b", "2");
  RUN(d, "PEXPIRE", "h2", "50");
  sim_diff_set_time(d, t + 50); /* the last millisecond of h2 */
  RUN(d, "PTTL", "h2");
  const char *both = "return {redis.call('pttl', KEYS[1]), "
                     "redis.call('exists', KEYS[1])}";
  RUN(d, "EVAL", both, "1", "h2");
  sim_diff_set_time(d, t + 51);
  RUN(d, "EXISTS", "h2", "h2", "s");
  RUN(d, "TYPE", "h2");
  RUN(d, "PTTL", "s");
  sim_diff_set_time(d, t + 100);
  RUN(d, "GET", "s");
  sim_diff_set_time(d, t + 101);
  RUN(d, "GET", "s");
  RUN(d, "SET", "s", "v");
  for (const char *const *o =
           (const char *const[]){"NX", "XX", "GT", "LT", "NX XX", "GT LT",
                                 "FOO", NULL};
       *o; o++) {
    char a[16], b[16];
    int n = sscanf(*o, "%15s %15s", a, b);
    if (n == 2)
      RUN(d, "PEXPIRE", "s", "1000", a, b);
    else
      RUN(d, "PEXPIRE", "s", "1000", a);
    RUN(d, "PTTL", "s");
  }
  RUN(d, "PEXPIRE", "s", "x");
  RUN(d, "PEXPIRE", "s", "9223372036854775807");
  RUN(d, "PEXPIRE", "nokey", "10");
  RUN(d, "PEXPIRE", "s", "0");
  RUN(d, "EXISTS", "s");
  RUN(d, "SET", "s", "v", "PX", "0");
  RUN(d, "SET", "s", "v", "PX", "x");
  RUN(d, "SET", "s", "v", "FOO");
  RUN(d, "SET", "s", "v", "NX", "PX", "10");
  RUN(d, "SET", "s", "w", "NX");
  RUN(d, "SET", "s", "w", "XX", "GET");
  RUN(d, "SET", "s", "w", "PX", "10", "PX", "20");
  RUN(d, "SET", "s", "w", "KEEPTTL");
  RUN(d, "PTTL", "s");
  RUN(d, "SET", "s", "w2"); /* a SET without KEEPTTL drops the TTL */
  RUN(d, "PTTL", "s");
  RUN(d, "INCR", "s2");
  RUN(d, "PEXPIRE", "s2", "500");
  RUN(d, "INCRBY", "s2", "2"); /* the TTL stays */
  RUN(d, "PTTL", "s2");
  RUN(d, "SET", "s", "w", "EX", "1", "PX", "5");
  RUN(d, "SET", "s", "w", "PXAT", "1");
  RUN(d, "GET", "s");
  RUN(d, "DEL", "s", "h2", "nokey");
  RUN(d, "TIME");
  RUN(d, "PUBSUB", "NUMSUB", "c1", "c2");
  RUN(d, "PUBSUB", "SHARDNUMSUB", "c1");
  RUN(d, "PUBSUB", "FOO");
  RUN(d, "GET");
}

static void rules_strings_hashes(sim_diff *d) {
  RUN(d, "SET", "n", "10");
  RUN(d, "INCRBY", "n", "5");
  RUN(d, "DECRBY", "n", "-5");
  RUN(d, "DECR", "n");
  RUN(d, "INCR", "nn");
  RUN(d, "INCRBY", "n", "x");
  RUN(d, "INCRBY", "n", "1.5");
  RUN(d, "SET", "bad", "012");
  RUN(d, "INCR", "bad");
  RUN(d, "SET", "big", "9223372036854775807");
  RUN(d, "INCR", "big");
  RUN(d, "DECRBY", "n", "-9223372036854775808");
  RUN(d, "SET", "neg", "-9223372036854775808");
  RUN(d, "DECR", "neg");
  RUN(d, "HSET", "h", "f", "1", "g");
  RUN(d, "HSET", "h", "f", "1", "g", "2", "f", "3");
  RUN(d, "HGETALL", "h");
  RUN(d, "HDEL", "h", "f", "x");
  RUN(d, "HSET", "h", "f", "4");
  RUN(d, "HKEYS", "h");
  RUN(d, "HLEN", "h");
  RUN(d, "HEXISTS", "h", "g");
  RUN(d, "HGET", "n", "f");
  RUN(d, "GET", "h");
  RUN(d, "INCR", "h");
  RUN(d, "HDEL", "h", "f", "g");
  RUN(d, "EXISTS", "h");
  RUN(d, "HGETALL", "nokey");
}

static void rules_lists_zsets(sim_diff *d) {
  RUN(d, "RPUSH", "l", "a", "b", "a", "c", "a");
  RUN(d, "LPOS", "l", "a");
  RUN(d, "LPOS", "l", "a", "RANK", "-1");
  RUN(d, "LPOS", "l", "a", "RANK", "2", "COUNT", "0");
  RUN(d, "LPOS", "l", "a", "COUNT", "2", "MAXLEN", "3");
  RUN(d, "LPOS", "l", "a", "RANK", "0");
  RUN(d, "LPOS", "l", "a", "COUNT", "-1");
  RUN(d, "LPOS", "l", "a", "FOO");
  RUN(d, "LPOS", "nol", "a", "COUNT", "1");
  RUN(d, "LINDEX", "l", "-1");
  RUN(d, "LINDEX", "l", "x");
  RUN(d, "LINDEX", "nol", "x");
  RUN(d, "LRANGE", "l", "1", "-2");
  RUN(d, "LRANGE", "l", "-2", "-1");
  RUN(d, "LRANGE", "l", "-100", "1");
  RUN(d, "LINDEX", "l", "-5");
  RUN(d, "LRANGE", "l", "5", "1");
  RUN(d, "LRANGE", "nol", "x", "1");
  RUN(d, "LREM", "l", "-1", "a");
  RUN(d, "LRANGE", "l", "0", "-1");
  RUN(d, "LREM", "l", "0", "a");
  RUN(d, "LPOP", "l");
  RUN(d, "LPOP", "l", "0");
  RUN(d, "LPOP", "l", "x");
  RUN(d, "LPOP", "l", "5");
  RUN(d, "LPOP", "l", "1", "2");
  RUN(d, "EXISTS", "l");
  RUN(d, "LPOP", "nol", "2");
  RUN(d, "ZADD", "t", "1", "b", "1", "a", "1", "c", "0", "bb", "1", "ab");
  RUN(d, "ZRANGE", "t", "0", "-1", "WITHSCORES");
  RUN(d, "ZADD", "t", "1", "b", "1", "a", "1", "c", "0", "bb", "1", "ab");
  RUN(d, "ZINCRBY", "t", "0", "bb");
  RUN(d, "ZRANGEBYSCORE", "t", "(0", "1");
  RUN(d, "ZADD", "z", "1", "a", "2", "b", "2", "c", "1.5", "d");
  RUN(d, "ZADD", "z", "x", "m");
  RUN(d, "ZADD", "z", "nan", "m");
  RUN(d, "ZADD", "z", "NX", "XX", "1", "a");
  RUN(d, "ZADD", "z", "GT", "NX", "1", "a");
  RUN(d, "ZADD", "z", "INCR", "1", "a", "2", "b");
  RUN(d, "ZADD", "z", "1", "a", "2");
  RUN(d, "ZADD", "z", "GT", "CH", "0", "a", "5", "b");
  RUN(d, "ZADD", "z", "XX", "INCR", "1", "zz");
  RUN(d, "ZADD", "z", "LT", "INCR", "1", "a");
  RUN(d, "ZINCRBY", "z", "-inf", "a");
  RUN(d, "ZINCRBY", "z", "inf", "a");
  RUN(d, "ZINCRBY", "z", "0.1", "d");
  RUN(d, "ZSCORE", "z", "d");
  RUN(d, "ZRANGE", "z", "0", "-1", "WITHSCORES");
  RUN(d, "ZRANGE", "z", "-2", "10", "REV", "WITHSCORES");
  RUN(d, "ZRANGE", "z", "0", "1", "LIMIT", "0", "1");
  RUN(d, "ZRANGE", "z", "(1", "5", "BYSCORE", "LIMIT", "1", "2");
  RUN(d, "ZRANGE", "z", "5", "(1", "BYSCORE", "REV");
  RUN(d, "ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES");
  RUN(d, "ZRANGEBYSCORE", "z", "", "2");
  RUN(d, "ZRANGEBYSCORE", "z", "0", "10", "LIMIT", "-1", "2");
  RUN(d, "ZRANGEBYSCORE", "z", "0", "10", "LIMIT", "1", "-1");
  RUN(d, "ZRANGEBYSCORE", "z", "0", "10", "LIMIT", "9", "1");
  RUN(d, "ZRANGEBYSCORE", "z", "a", "b");
  RUN(d, "ZRANGEBYSCORE", "z", "0", "1", "LIMIT");
  RUN(d, "ZRANGEBYSCORE", "z", "0", "1", "REV");
  RUN(d, "ZREM", "z", "a", "nope");
  RUN(d, "ZCARD", "z");
  RUN(d, "ZSCORE", "l", "a");
  RUN(d, "ZADD", "n", "1", "a");
  RUN(d, "ZREM", "z", "b", "c", "d", "x");
  RUN(d, "EXISTS", "z");
}

/* Subscribers on both sides: receiver counts, NUMSUB, messages. */
static void rules_pubsub(sim_diff *d) {
  const char *sub[] = {"SUBSCRIBE", "c1", "c2"};
  size_t sl[] = {9, 2, 2};
  sim_diff_exec(d, 7, 3, sub, sl, NULL);
  const char *ss[] = {"SSUBSCRIBE", "c1"};
  size_t ssl[] = {10, 2};
  sim_diff_exec(d, 8, 2, ss, ssl, NULL);
  sim_diff_exec(d, 8, 3, sub, sl, NULL);
  RUN(d, "PUBLISH", "c1", "hello");
  RUN(d, "SPUBLISH", "c1", "shard");
  const char *pub = "return {redis.call('publish', KEYS[1], ARGV[1]), "
                    "redis.call('SPUBLISH', KEYS[1], 7), "
                    "redis.call('pubsub', 'numsub', KEYS[1], 'c3')}";
  RUN(d, "EVAL", pub, "1", "c2", "m");
  const char *un[] = {"UNSUBSCRIBE"};
  size_t ul[] = {11};
  sim_diff_exec(d, 8, 1, un, ul, NULL);
  RUN(d, "PUBLISH", "c2", "x");
  RUN(d, "PUBSUB", "NUMSUB", "c1", "c2");
  RUN(d, "PUBSUB", "SHARDNUMSUB", "c1");
  sim_diff_check_keyspace(d);
}

TH_CASE(model_rules_match_redis) {
  sim_diff *d = new_diff(1800000000000LL);
  sim_diff_context(d, "model_rules_match_redis: conversions");
  rules_conversions(d);
  sim_diff_context(d, "model_rules_match_redis: keys and time");
  rules_keys_and_time(d);
  sim_diff_context(d, "model_rules_match_redis: strings and hashes");
  rules_strings_hashes(d);
  sim_diff_context(d, "model_rules_match_redis: lists and sorted sets");
  rules_lists_zsets(d);
  sim_diff_check_keyspace(d);
  sim_diff_context(d, "model_rules_match_redis: pub/sub");
  rules_pubsub(d);
  /* what is not modelled is said, never ignored */
  rm_model *m = rm_new(NULL);
  rm_reply r = {0};
  const char *sadd[] = {"EVAL", "return redis.pcall('sadd', 'k', 'v')", "0",
                        NULL};
  CHECK_EQ(rm_commandv(m, &r, sadd), RM_EMODEL);
  CHECK(strstr(rm_model_error(m), "sadd") != NULL);
  const char *cj[] = {"EVAL", "return cjson.encode({})", "0", NULL};
  CHECK_EQ(rm_commandv(m, &r, cj), RM_EMODEL);
  const char *keys[] = {"KEYS", "*", NULL};
  CHECK_EQ(rm_commandv(m, &r, keys), RM_EMODEL);
  CHECK(r.type == RM_REPLY_ERROR && strncmp(r.str, "MODELERR", 8) == 0);
  rm_reply_clear(&r);
  rm_free(m);
  sim_diff_stats st;
  sim_diff_stats_get(d, &st);
  printf("rules: %lu calls compared, %lu messages, %lu keyspace checks\n",
         st.compared, st.messages, st.keyspace_checks);
  sim_diff_free(d);
}

TH_MAIN()
