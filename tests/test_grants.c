/*
 * test_grants.c -- what a message on a lock's grant channel does, the same
 * on both clients (issue 26: one rule, in the engine, engine.h (e)). Each
 * case body runs on the blocking and on the event-loop client
 * (tests/harness/th_drive.h: <case>_blocking / <case>_async). The driven
 * call waits on the test's main thread (th_drive_lock); a director thread
 * reads the server's wait queue to learn the wait's id, then crafts the
 * state an unlock script would leave and publishes the message over a raw
 * connection (th_cmd), and the server's state says what the client did:
 *   - a grant for an older wait of the owner, while the owner waits again:
 *     declined -- the lock goes to the queue's head, not to the owner;
 *   - a grant naming no wait: declined -- handed on to the live waiter;
 *   - a retry for another wait of the owner, or for the wait id under
 *     another owner, and malformed messages: not taken (the wait sleeps
 *     on); a retry for the wait: it attempts at once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th.h"
#include "th_drive.h"

/* A holder of no client: what the driven wait queues behind. */
#define GHOST_HOLDER "00000000-0000-4000-8000-000000000000:1"
/* A wait id no wait has (the drawn ones are odd: dlock__eng_wait_id). */
#define OLD_WID "00000000000000ee"

static int64_t ms(int64_t v) { return v * th_timeout_mult(); }

/* The test's client: no pool, short retries. */
static th_drive *drive_new(th_redis *r, int kind) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->url;
  cfg.retry_interval_ms = 50;
  return th_drive_new(kind, &cfg);
}

static void hold_by_ghost(th_redis *r, const char *name) {
  freeReplyObject(th_cmd(r, "HSET %s %s 1", name, GHOST_HOLDER));
  freeReplyObject(th_cmd(r, "PEXPIRE %s 60000", name));
}

/* The wait director: acts while the driven call waits. */
typedef struct dir {
  th_redis *r;
  const char *name;
  char field[128];   /* the driven wait's field "<client id>:<owner>" */
  int ahead;         /* queue entries ahead of it */
  atomic_int t_done; /* the driven call returned (main) */
  /* what it saw */
  char wid[17];  /* the driven wait's id, from its queue entry */
  int published; /* the wait still ran when its messages went out */
  int woken;     /* the free lock was taken while the messages went out */
  int b_first;   /* older_wait: the queue's head got the lock first */
  struct waiter *b;
} dir;

static const char *owner_of(const dir *d) { return strchr(d->field, ':') + 1; }

static void grant_channel(const dir *d, char *buf, size_t n) {
  snprintf(buf, n, "dlock_grant__channel:{%s}:%.*s", d->name,
           (int)(owner_of(d) - 1 - d->field), d->field);
}

/* Polls (bounded) until the driven wait's entry is queued; reads its id. */
static void wait_entry(dir *d) {
  char q[128];
  snprintf(q, sizeof q, "dlock_lock_queue:{%s}", d->name);
  th_wait_llen(d->r, q, d->ahead + 1, ms(10000));
  redisReply *x = th_cmd(d->r, "LINDEX %s %d", q, d->ahead);
  CHECK(x->type == REDIS_REPLY_STRING && x->len > 17);
  /* "<field>|<lease>|<wait id>" */
  CHECK_MSG(strncmp(x->str, d->field, strlen(d->field)) == 0 &&
                x->str[strlen(d->field)] == '|',
            "queue entry '%s' is not the driven wait's (%s)", x->str, d->field);
  memcpy(d->wid, x->str + x->len - 16, 16);
  d->wid[16] = '\0';
  freeReplyObject(x);
}

/* PUBLISH msg on the driven client's grant channel: its receivers. */
static long long publish(dir *d, const char *msg) {
  char ch[200];
  grant_channel(d, ch, sizeof ch);
  return th_cmd_int(d->r, "PUBLISH %s %s", ch, msg);
}

/* What an unlock's hand-over to field's wait wid leaves (the field with
 * count 1, the marker naming the wait), and its grant `msg` -- in one
 * script, as the unlock does it: no attempt sees the lock free between. */
static void hand_over(dir *d, const char *field, const char *wid,
                      const char *msg) {
  char ch[200], mk[128];
  grant_channel(d, ch, sizeof ch);
  snprintf(mk, sizeof mk, "dlock_lock_granted:{%s}", d->name);
  long long n = th_cmd_int(
      d->r, "EVAL %s 3 %s %s %s %s %s %s",
      "redis.call('del', KEYS[1]) redis.call('hset', KEYS[1], ARGV[1], 1) "
      "redis.call('pexpire', KEYS[1], 60000) "
      "redis.call('set', KEYS[2], ARGV[1] .. '|' .. ARGV[2], 'px', 60000) "
      "return redis.call('publish', KEYS[3], ARGV[3])",
      d->name, mk, ch, field, wid, msg);
  CHECK_EQ(n, 1);
}

static pthread_t director(dir *d, void *(*fn)(void *)) {
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, fn, d), 0);
  return t;
}

/* ---- a waiter of another client, queued ahead ------------------------ */

typedef struct waiter {
  dlock_mutex *m;
  char field[128];
  atomic_int state; /* 1 waiting, 2 holds, 3 done */
  atomic_int go;
  int rc, rc2;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->state, 1);
  w->rc = dlock_mutex_timedlock(w->m, ms(20000), 60000);
  if (w->rc == 0) {
    atomic_store(&w->state, 2);
    int64_t t0 = th_now_ms();
    while (!atomic_load(&w->go) && th_now_ms() - t0 < ms(30000))
      th_sleep_ms(2);
    w->rc2 = dlock_mutex_unlock(w->m);
  }
  atomic_store(&w->state, 3);
  return NULL;
}

/* ---- a grant for an older wait of the owner --------------------------- */

static void *older_wait_director(void *arg) {
  dir *d = arg;
  wait_entry(d);
  /* The owner's older wait (OLD_WID, ended, its cancel lost) is handed
   * the lock while the owner waits again (d->wid) behind the head b. */
  char msg[64];
  snprintf(msg, sizeof msg, "%s|%s", owner_of(d), OLD_WID);
  d->published = !atomic_load(&d->t_done); /* before: it may end at once */
  hand_over(d, d->field, OLD_WID, msg);
  int64_t t0 = th_now_ms();
  while (atomic_load(&d->b->state) < 2 && !atomic_load(&d->t_done) &&
         th_now_ms() - t0 < ms(10000))
    th_sleep_ms(2);
  d->b_first = atomic_load(&d->b->state) == 2 && !atomic_load(&d->t_done);
  if (d->b_first) {
    /* declined and handed to the head: the owner's field went with it */
    CHECK_EQ(th_cmd_int(d->r, "HEXISTS %s %s", d->name, d->b->field), 1);
    CHECK_EQ(th_cmd_int(d->r, "HEXISTS %s %s", d->name, d->field), 0);
    CHECK_EQ(th_cmd_int(d->r, "HLEN %s", d->name), 1);
    atomic_store(&d->b->go, 1); /* its unlock passes it to the owner */
  }
  return NULL;
}

/* A grant for an older wait of an owner that waits again is declined: the
 * decline script gives the lock to the queue's head (here another client's
 * waiter, queued first), not to the owner's running wait -- the hand-over
 * served the ended wait's place in the queue (engine.h (e): why not a
 * kick). The owner gets the lock by its own turn, after the head. Fails on
 * a60b902 for the blocking client, which kicked the thread's running wait:
 * its attempt took the lock as its own while the head still waited
 * ("the owner took the hand-over of its older wait"); the async client
 * declined already. */
static void older_wait_grant_goes_to_the_queue_head(int kind) {
  th_redis *r = th_redis_new(0, NULL);
  const char *name = "go";
  hold_by_ghost(r, name);
  dlock_client *cb = th_client(r);
  waiter b = {0};
  CHECK_OK(dlock_mutex_new(cb, name, &b.m));
  pthread_t tb;
  CHECK_EQ(pthread_create(&tb, NULL, waiter_main, &b), 0);
  th_wait_llen(r, "dlock_lock_queue:{go}", 1, ms(10000));
  th_drive *dr = drive_new(r, kind);
  dir d = {.r = r, .name = name, .ahead = 1, .b = &b};
  th_drive_field(dr, name, 1, d.field, sizeof d.field);
  pthread_t t = director(&d, older_wait_director);
  int rc = th_drive_lock(dr, name, 1, ms(20000), 60000);
  atomic_store(&d.t_done, 1);
  pthread_join(t, NULL);
  printf("%s: the owner's wait %s; the queue's head %s first\n",
         th_drive_kind(dr), dlock_err_name(rc), d.b_first ? "got it" : "not");
  CHECK_MSG(d.published, "the grant went out after the wait ended");
  CHECK_MSG(d.b_first,
            "%s: the owner took the hand-over of its older wait (its "
            "running wait returned %s) while the queue's head still waited",
            th_drive_kind(dr), dlock_err_name(rc));
  CHECK_OK(rc);
  CHECK_EQ(th_cmd_int(r, "HEXISTS %s %s", name, d.field), 1);
  CHECK_OK(th_drive_unlock(dr, name, 1));
  atomic_store(&b.go, 1);
  pthread_join(tb, NULL);
  CHECK_OK(b.rc);
  CHECK_OK(b.rc2);
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", name), 0);
  CHECK_EQ(th_drive_lost_count(dr), 0);
  th_drive_free(dr);
  dlock_mutex_free(b.m);
  dlock_client_free(cb);
}

TH_CASE(older_wait_grant_goes_to_the_queue_head_blocking) {
  older_wait_grant_goes_to_the_queue_head(TH_DRIVE_BLOCKING);
}
TH_CASE(older_wait_grant_goes_to_the_queue_head_async) {
  older_wait_grant_goes_to_the_queue_head(TH_DRIVE_ASYNC);
}

/* ---- a grant naming no wait ------------------------------------------- */

static void *no_wait_director(void *arg) {
  dir *d = arg;
  wait_entry(d);
  /* An owner of this client with no wait at all (its wait ended, its
   * cancel lost): handed the lock. */
  char ghost[160], msg[64];
  long long other = atoll(owner_of(d)) + 1000;
  snprintf(ghost, sizeof ghost, "%.*s:%lld", (int)(owner_of(d) - 1 - d->field),
           d->field, other);
  snprintf(msg, sizeof msg, "%lld|%s", other, OLD_WID);
  d->published = !atomic_load(&d->t_done); /* before: it may end at once */
  hand_over(d, ghost, OLD_WID, msg);
  return NULL;
}

/* A grant that reaches no wait is declined by both clients: the lock goes
 * back at once, to the live waiter queued behind (a hand-over to it, whose
 * grant it takes), not left to the ended wait for its 60 s lease. */
static void no_wait_grant_is_declined(int kind) {
  th_redis *r = th_redis_new(0, NULL);
  const char *name = "gn";
  hold_by_ghost(r, name);
  th_drive *dr = drive_new(r, kind);
  dir d = {.r = r, .name = name, .ahead = 0};
  th_drive_field(dr, name, 1, d.field, sizeof d.field);
  pthread_t t = director(&d, no_wait_director);
  int64_t t0 = th_now_ms();
  int rc = th_drive_lock(dr, name, 1, ms(10000), 60000);
  int64_t took = th_now_ms() - t0;
  atomic_store(&d.t_done, 1);
  pthread_join(t, NULL);
  printf("%s: the live wait %s after %lld ms\n", th_drive_kind(dr),
         dlock_err_name(rc), (long long)took);
  CHECK_MSG(d.published, "the grant went out after the wait ended");
  CHECK_OK(rc);
  CHECK_EQ(th_cmd_int(r, "HEXISTS %s %s", name, d.field), 1);
  CHECK_EQ(th_cmd_int(r, "HLEN %s", name), 1);
  CHECK_OK(th_drive_unlock(dr, name, 1));
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", name), 0);
  th_drive_free(dr);
}

TH_CASE(no_wait_grant_is_declined_blocking) {
  no_wait_grant_is_declined(TH_DRIVE_BLOCKING);
}
TH_CASE(no_wait_grant_is_declined_async) {
  no_wait_grant_is_declined(TH_DRIVE_ASYNC);
}

/* ---- retries ------------------------------------------------------------ */

static void *not_for_it_director(void *arg) {
  dir *d = arg;
  wait_entry(d);
  /* The lock is free now, silently (no "0"): only a message that wakes
   * the wait makes it attempt -- and take it. */
  CHECK_EQ(th_cmd_int(d->r, "DEL %s", d->name), 1);
  const char *o = owner_of(d);
  char up[17], m[16][96];
  int n = 0;
  for (int i = 0; i < 17; i++)
    up[i] = (char)(d->wid[i] >= 'a' ? d->wid[i] - 'a' + 'A' : d->wid[i]);
  up[15] = 'A';                                /* at least one letter */
  snprintf(m[n++], 96, "%s|%.15s", o, d->wid); /* 15 hex digits */
  snprintf(m[n++], 96, "%s|%s0", o, d->wid);   /* 17 */
  snprintf(m[n++], 96, "%s|%s", o, up);        /* uppercase */
  snprintf(m[n++], 96, "%s%s", o, d->wid);     /* no bar */
  snprintf(m[n++], 96, "|%s", d->wid);         /* empty owner */
  snprintf(m[n++], 96, "%s|%s|x", o, d->wid);  /* not a retry */
  snprintf(m[n++], 96, "%s|%s|r", o, OLD_WID); /* another wait */
  snprintf(m[n++], 96, "%lld|%s|r", atoll(o) + 1, d->wid); /* owner */
  snprintf(m[n++], 96, "%lld|%s", atoll(o) + 1, d->wid);
  /* the wait ran before and after: nothing of this may end it */
  d->published = !atomic_load(&d->t_done);
  for (int i = 0; i < n; i++)
    d->published &= publish(d, m[i]) == 1; /* still subscribed */
  d->published &= !atomic_load(&d->t_done);
  /* A wake-up would have taken the free lock at once. After a short quiet
   * spell the ghost holds it again -- unless the wait took it: a queued
   * wait also attempts on its own once a second (the backstop of a lock
   * left free, engine.h DLOCK__ENG_QUEUED_RECHECK_MS), and that attempt
   * must find it held, not be mistaken for a wake-up. */
  th_sleep_ms(100);
  d->woken = th_cmd_int(d->r, "EVAL %s 1 %s %s",
                        "if redis.call('exists', KEYS[1]) == 1 then return 1 "
                        "end redis.call('hset', KEYS[1], ARGV[1], 1) "
                        "redis.call('pexpire', KEYS[1], 60000) return 0",
                        d->name, GHOST_HOLDER) == 1;
  return NULL;
}

static void *retry_director(void *arg) {
  dir *d = arg;
  wait_entry(d);
  CHECK_EQ(th_cmd_int(d->r, "DEL %s", d->name), 1);
  char msg[64];
  snprintf(msg, sizeof msg, "%s|%s|r", owner_of(d), d->wid);
  d->published = !atomic_load(&d->t_done); /* before: it may end at once */
  CHECK_EQ(publish(d, msg), 1);
  return NULL;
}

/* A retry is taken only by the wait it names (its wait id and its owner),
 * and a malformed message by none: with the lock freed silently while
 * they go out, a wait sent only such messages sleeps on (a wake-up would
 * have taken the free lock at once) and times out; a retry for the wait
 * makes it attempt at once and
 * take it (its TTL-bound sleep was the holder's 60 s). Fails on a60b902
 * for the async client, which matched the wait id only: "|<wait id>" (an
 * empty owner) and "<another owner>|<wait id>" with or without "|r" each
 * woke the wait, which took the free lock ("a message not for the wait
 * woke it ... (OK, not ETIMEDOUT)"); the blocking client ignored them. */
static void retry_is_taken_only_by_its_wait(int kind) {
  th_redis *r = th_redis_new(0, NULL);
  const char *name = "gr";
  th_drive *dr = drive_new(r, kind);
  /* not for it: nothing wakes it */
  hold_by_ghost(r, name);
  dir d = {.r = r, .name = name, .ahead = 0};
  th_drive_field(dr, name, 1, d.field, sizeof d.field);
  pthread_t t = director(&d, not_for_it_director);
  int rc = th_drive_lock(dr, name, 1, ms(1500), 60000);
  atomic_store(&d.t_done, 1);
  pthread_join(t, NULL);
  printf("%s: the wait sent no message of its own: %s\n", th_drive_kind(dr),
         dlock_err_name(rc));
  CHECK_MSG(!d.woken && rc == DLOCK_ETIMEDOUT,
            "%s: a message not for the wait woke it, and it took the free "
            "lock (%s, not ETIMEDOUT)",
            th_drive_kind(dr), dlock_err_name(rc));
  CHECK_MSG(d.published, "the messages went out after the wait ended");
  CHECK_EQ(th_cmd_int(r, "HEXISTS %s %s", name, GHOST_HOLDER), 1);
  CHECK_EQ(th_cmd_int(r, "DEL %s", name), 1);
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue:{%s}", name), 0);
  /* its own retry: it attempts at once */
  hold_by_ghost(r, name);
  dir e = {.r = r, .name = name, .ahead = 0};
  th_drive_field(dr, name, 1, e.field, sizeof e.field);
  t = director(&e, retry_director);
  int64_t t0 = th_now_ms();
  rc = th_drive_lock(dr, name, 1, ms(10000), 60000);
  int64_t took = th_now_ms() - t0;
  atomic_store(&e.t_done, 1);
  pthread_join(t, NULL);
  printf("%s: the wait sent its retry: %s after %lld ms\n", th_drive_kind(dr),
         dlock_err_name(rc), (long long)took);
  CHECK_MSG(e.published, "the retry went out after the wait ended");
  CHECK_OK(rc);
  CHECK_EQ(th_cmd_int(r, "HEXISTS %s %s", name, e.field), 1);
  CHECK_OK(th_drive_unlock(dr, name, 1));
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", name), 0);
  th_drive_free(dr);
}

TH_CASE(retry_is_taken_only_by_its_wait_blocking) {
  retry_is_taken_only_by_its_wait(TH_DRIVE_BLOCKING);
}
TH_CASE(retry_is_taken_only_by_its_wait_async) {
  retry_is_taken_only_by_its_wait(TH_DRIVE_ASYNC);
}

TH_MAIN()
