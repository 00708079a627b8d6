/* Spin lock tests (issue 31): dlock_mutex_new_spin (Redisson RSpinLock: the
 * mutex's hash, no pub/sub, exponential back-off) and cfg.spin_fallback (a
 * plain mutex whose SUBSCRIBE is refused waits by spinning).
 *
 * Multi-process cases fork their workers before the parent creates a client
 * and gate them on Redis keys. A waiter is known to be waiting (spinning)
 * when the server has run its acquire script a few more times. */
#include "th.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static th_redis *g_r;

static int64_t slow(void) { return th_timeout_mult(); }

/* docs/security.md's rule for names under "app:" without any pub/sub: no
 * SUBSCRIBE, no PUBLISH, no channel (resetchannels). */
#define ACL_RULE_NO_PUBSUB                                                     \
  "~app:* ~{app:* ~redisson_* ~dlock_* resetchannels "                         \
  "-@all +ping +auth +select +evalsha +eval +script|load "                     \
  "+get +set +del +exists +type +pttl +pexpire +time "                         \
  "+incr +incrby +decr +decrby +hset +hget +hgetall +hdel +hexists +hincrby "  \
  "+hkeys +hlen +rpush +lpop +lrange +lrem +lindex +lpos +llen +zadd "         \
  "+zincrby "                                                                  \
  "+zrange +zrem +zscore"

/* The same with SUBSCRIBE and PUBLISH allowed but no channel: the server
 * refuses the channel, not the command. */
#define ACL_RULE_NO_CHANNELS                                                   \
  ACL_RULE_NO_PUBSUB " +subscribe +unsubscribe +publish"

static char g_nosub_url[600];

/* Adds the user "nosub" (rule: ACL_RULE_NO_PUBSUB, or with channels_only
 * ACL_RULE_NO_CHANNELS) and sets g_nosub_url to its URL. */
static void add_user(th_redis *r, int channels_only) {
  redisReply *x =
      channels_only
          ? th_cmd(r, "ACL SETUSER nosub on >pw-nosub " ACL_RULE_NO_CHANNELS)
          : th_cmd(r, "ACL SETUSER nosub on >pw-nosub " ACL_RULE_NO_PUBSUB);
  CHECK_MSG(x && x->type == REDIS_REPLY_STATUS, "ACL SETUSER failed: %s",
            x && x->str ? x->str : "(no reply)");
  freeReplyObject(x);
  snprintf(g_nosub_url, sizeof g_nosub_url,
           "unix://%s?user=nosub&password=pw-nosub", r->sock);
}

static void add_nosub_user(th_redis *r) { add_user(r, 0); }

/* Calls of the acquire scripts so far (EVAL + EVALSHA). */
static long long script_calls(th_redis *r) {
  redisReply *x = th_cmd(r, "INFO commandstats");
  long long n = 0;
  const char *keys[2] = {"cmdstat_eval:calls=", "cmdstat_evalsha:calls="};
  for (int i = 0; i < 2 && x && x->str; i++) {
    const char *p = strstr(x->str, keys[i]);
    if (p)
      n += atoll(p + strlen(keys[i]));
  }
  freeReplyObject(x);
  return n;
}

/* Waits (bounded) until the server has run `more` scripts beyond `base`:
 * a spinning waiter's retries. */
static void wait_scripts(th_redis *r, long long base, long long more) {
  int64_t end = th_now_ms() + 10000 * slow();
  long long n = script_calls(r);
  while (n < base + more && th_now_ms() < end) {
    th_sleep_ms(5);
    n = script_calls(r);
  }
  CHECK_MSG(n >= base + more, "only %lld script calls after %lld (want +%lld)",
            n, base, more);
}

/* ---- a waiter thread ------------------------------------------------------
 */

typedef struct waiter {
  dlock_mutex *m;
  long long wait_ms;
  atomic_int done;
  int rc;
  char err[512];
  int64_t took_ms;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  int64_t t0 = th_now_ms();
  w->rc = dlock_mutex_timedlock(w->m, w->wait_ms, -1);
  w->took_ms = th_now_ms() - t0;
  snprintf(w->err, sizeof w->err, "%s", w->rc ? dlock_last_error() : "");
  if (w->rc == 0)
    w->rc = dlock_mutex_unlock(w->m) ? -1000 : 0;
  atomic_store(&w->done, 1);
  return NULL;
}

static void waiter_join(pthread_t t, waiter *w) {
  int64_t end = th_now_ms() + (w->wait_ms + 5000) * slow();
  while (!atomic_load(&w->done) && th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_MSG(atomic_load(&w->done), "the waiter did not return");
  pthread_join(t, NULL);
}

/* ---- mutual exclusion across processes -------------------------------- */

enum { ME_PROCS = 4, ME_ITERS = 60 };

static int me_proc(void *arg) {
  int idx = (int)(intptr_t)arg;
  redisContext *raw = th_redis_raw(g_r);
  int64_t end = th_now_ms() + 20000 * slow();
  for (;;) {
    redisReply *x = redisCommand(raw, "EXISTS sme:go");
    int go = x && x->type == REDIS_REPLY_INTEGER && x->integer == 1;
    freeReplyObject(x);
    if (go)
      break;
    if (th_now_ms() > end)
      return 20;
    th_sleep_ms(2);
  }
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_spin(c, "sme-lock", &m))
    return 21;
  int errors = 0;
  for (int i = 0; i < ME_ITERS; i++) {
    int rc = dlock_mutex_lock(m);
    if (rc) {
      fprintf(stderr, "lock: %s %s\n", dlock_err_name(rc), dlock_last_error());
      errors++;
      continue;
    }
    redisReply *x = redisCommand(raw, "INCR sme:inside");
    if (!x || x->type != REDIS_REPLY_INTEGER || x->integer != 1)
      freeReplyObject(redisCommand(raw, "INCR sme:overlaps"));
    freeReplyObject(x);
    /* Non-atomic read-modify-write: lost updates if exclusion fails. */
    x = redisCommand(raw, "GET sme:ctr");
    long v = x && x->type == REDIS_REPLY_STRING ? atol(x->str) : 0;
    freeReplyObject(x);
    if ((i + idx) % 8 == 0)
      th_sleep_ms(1); /* widen the window now and then */
    freeReplyObject(redisCommand(raw, "SET sme:ctr %ld", v + 1));
    freeReplyObject(redisCommand(raw, "DECR sme:inside"));
    if ((rc = dlock_mutex_unlock(m)) != 0) {
      fprintf(stderr, "unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      errors++;
    }
  }
  redisFree(raw);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return errors ? 1 : 0;
}

TH_CASE(mutual_exclusion_4procs_no_lost_updates) {
  g_r = th_redis_new(0, NULL);
  pid_t p[ME_PROCS];
  for (int i = 0; i < ME_PROCS; i++)
    p[i] = th_fork(me_proc, (void *)(intptr_t)i);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(g_r, "SET sme:go 1"));
  for (int i = 0; i < ME_PROCS; i++)
    CHECK_EQ(th_wait(p[i], 40000 * slow()), 0);
  redisReply *x = th_cmd(g_r, "MGET sme:ctr sme:overlaps");
  CHECK(x->element[0]->type == REDIS_REPLY_STRING);
  CHECK_EQ(atol(x->element[0]->str), ME_PROCS * ME_ITERS);
  CHECK_MSG(x->element[1]->type == REDIS_REPLY_NIL, "%s overlaps",
            x->element[1]->str);
  freeReplyObject(x);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS sme-lock"), 0);
  /* No pub/sub at all: nothing was ever published or subscribed. */
  redisReply *s = th_cmd(g_r, "INFO commandstats");
  CHECK_MSG(s && s->str && !strstr(s->str, "cmdstat_subscribe") &&
                !strstr(s->str, "cmdstat_publish"),
            "pub/sub used: %s", s && s->str ? s->str : "");
  freeReplyObject(s);
  printf("%d critical sections, 0 lost updates, in %lld ms\n",
         ME_PROCS * ME_ITERS, (long long)(th_now_ms() - t0));
}

/* ---- reentrancy and layout ---------------------------------------------- */

TH_CASE(reentrant_redisson_layout_shared_with_mutex) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r);
  dlock_mutex *s, *m;
  CHECK_OK(dlock_mutex_new_spin(c, "sre", &s));
  CHECK_OK(dlock_mutex_new(c, "sre", &m));
  CHECK_OK(dlock_mutex_lock(s));
  CHECK_OK(dlock_mutex_lock(s));
  char field[128];
  CHECK_OK(dlock_mutex_owner(s, field, sizeof field));
  /* Redisson's RLock/RSpinLock hash: "<uuid>:<tid>" = hold count. */
  CHECK_EQ(strlen(field) > 37 && field[36] == ':', 1);
  redisReply *x = th_cmd(g_r, "HGET sre %s", field);
  CHECK(x && x->type == REDIS_REPLY_STRING && strcmp(x->str, "2") == 0);
  freeReplyObject(x);
  CHECK_EQ(th_cmd_int(g_r, "HLEN sre"), 1);
  long long ttl = th_cmd_int(g_r, "PTTL sre");
  CHECK_MSG(ttl > 20000 && ttl <= 30000, "pttl %lld", ttl);
  /* The plain mutex object of the same name is the same reentrant hold. */
  CHECK_OK(dlock_mutex_trylock(m));
  CHECK_EQ(dlock_mutex_hold_count(s), 3);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(dlock_mutex_unlock(s));
  CHECK_EQ(dlock_mutex_hold_count(s), 1);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS sre"), 1);
  /* Another client is shut out while it is held. */
  dlock_client *c2 = th_client(g_r);
  dlock_mutex *o;
  CHECK_OK(dlock_mutex_new_spin(c2, "sre", &o));
  CHECK_RC(dlock_mutex_trylock(o), DLOCK_EBUSY);
  CHECK_RC(dlock_mutex_timedlock(o, 60, -1), DLOCK_ETIMEDOUT);
  CHECK_RC(dlock_mutex_unlock(o), DLOCK_EPERM);
  CHECK_OK(dlock_mutex_unlock(s));
  CHECK_EQ(th_cmd_int(g_r, "EXISTS sre"), 0);
  CHECK_RC(dlock_mutex_unlock(s), DLOCK_EPERM);
  /* Force unlock deletes without publishing. */
  CHECK_OK(dlock_mutex_lock(o));
  CHECK_EQ(dlock_mutex_force_unlock(s), 1);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS sre"), 0);
  CHECK_RC(dlock_mutex_unlock(o), DLOCK_ELOST);
  dlock_mutex_free(o);
  dlock_client_free(c2);
  dlock_mutex_free(m);
  dlock_mutex_free(s);
  dlock_client_free(c);
}

/* ---- the watchdog ----------------------------------------------------- */

TH_CASE_T(watchdog_keeps_it, 120, "slow") {
  g_r = th_redis_new(0, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.retry_interval_ms = 100;
  cfg.watchdog_timeout_ms = 1500;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_client *c2 = th_client(g_r);
  dlock_mutex *s, *o;
  CHECK_OK(dlock_mutex_new_spin(c, "swd", &s));
  CHECK_OK(dlock_mutex_new_spin(c2, "swd", &o));
  CHECK_OK(dlock_mutex_lock(s));
  /* Over two leases later it is still held (renewed), and still shuts out
   * a spinning waiter for all that time. */
  CHECK_RC(dlock_mutex_timedlock(o, 4000, -1), DLOCK_ETIMEDOUT);
  long long ttl = th_cmd_int(g_r, "PTTL swd");
  CHECK_MSG(ttl > 0 && ttl <= 1500, "pttl %lld", ttl);
  CHECK_EQ(dlock_mutex_is_held(s), 1);
  CHECK_OK(dlock_mutex_unlock(s));
  CHECK_OK(dlock_mutex_trylock(o));
  CHECK_OK(dlock_mutex_unlock(o));
  dlock_mutex_free(o);
  dlock_mutex_free(s);
  dlock_client_free(c2);
  dlock_client_free(c);
}

/* ---- without SUBSCRIBE -------------------------------------------------- */

TH_CASE(spin_waiter_acquires_under_acl_without_subscribe) {
  g_r = th_redis_new(0, NULL);
  add_nosub_user(g_r);
  dlock_client *holder = th_client(g_r); /* the default user: every right */
  dlock_mutex *hm;
  CHECK_OK(dlock_mutex_new(holder, "app:s", &hm));
  CHECK_OK(dlock_mutex_lock(hm));
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g_nosub_url;
  cfg.retry_interval_ms = 100;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  waiter w;
  memset(&w, 0, sizeof w);
  w.wait_ms = 10000 * slow();
  CHECK_OK(dlock_mutex_new_spin(c, "app:s", &w.m));
  long long base = script_calls(g_r);
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  wait_scripts(g_r, base, 3); /* it is spinning */
  CHECK_EQ(atomic_load(&w.done), 0);
  CHECK_OK(dlock_mutex_unlock(hm));
  waiter_join(t, &w);
  CHECK_MSG(w.rc == 0, "rc %d: %s", w.rc, w.err);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS app:s"), 0);
  dlock_mutex_free(w.m);
  dlock_mutex_free(hm);
  dlock_client_free(c);
  dlock_client_free(holder);
}

typedef struct logseen {
  atomic_int fallback;
  atomic_int level;
} logseen;

static void log_hook(void *arg, int level, const char *name, const char *event,
                     const char *msg) {
  (void)name;
  (void)msg;
  logseen *l = arg;
  if (strcmp(event, "spin_fallback") == 0) {
    atomic_fetch_add(&l->fallback, 1);
    atomic_store(&l->level, level);
  }
}

static void fallback_case(int on, int channels_only) {
  g_r = th_redis_new(0, NULL);
  add_user(g_r, channels_only);
  dlock_client *holder = th_client(g_r);
  dlock_mutex *hm;
  CHECK_OK(dlock_mutex_new(holder, "app:f", &hm));
  CHECK_OK(dlock_mutex_lock(hm));
  logseen seen;
  memset(&seen, 0, sizeof seen);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g_nosub_url;
  cfg.retry_interval_ms = 100;
  cfg.spin_fallback = on;
  cfg.log_fn = log_hook;
  cfg.log_arg = &seen;
  cfg.log_level = DLOCK_LOG_WARN;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  waiter w;
  memset(&w, 0, sizeof w);
  w.wait_ms = 10000 * slow();
  CHECK_OK(dlock_mutex_new(c, "app:f", &w.m)); /* the default mutex */
  if (!on) {
    /* As before spin_fallback: a clear DLOCK_EAUTH, no lock. */
    CHECK_RC(dlock_mutex_timedlock(w.m, w.wait_ms, -1), DLOCK_EAUTH);
    CHECK_MSG(strstr(dlock_last_error(), "SUBSCRIBE") != NULL, "%s",
              dlock_last_error());
    CHECK_EQ(atomic_load(&seen.fallback), 0);
    CHECK_OK(dlock_mutex_unlock(hm));
  } else {
    long long base = script_calls(g_r);
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    wait_scripts(g_r, base, 3); /* refused, then spinning */
    CHECK_EQ(atomic_load(&w.done), 0);
    CHECK_OK(dlock_mutex_unlock(hm));
    waiter_join(t, &w);
    CHECK_MSG(w.rc == 0, "rc %d: %s", w.rc, w.err);
    CHECK_EQ(atomic_load(&seen.fallback), 1);
    CHECK_EQ(atomic_load(&seen.level), DLOCK_LOG_WARN);
    CHECK_EQ(th_cmd_int(g_r, "EXISTS app:f"), 0);
    /* The client remembers: the next wait spins at once (no second note),
     * and its unlock works without PUBLISH. */
    CHECK_OK(dlock_mutex_lock(hm));
    CHECK_RC(dlock_mutex_timedlock(w.m, 100, -1), DLOCK_ETIMEDOUT);
    CHECK_OK(dlock_mutex_unlock(hm));
    CHECK_OK(dlock_mutex_timedlock(w.m, w.wait_ms, -1));
    CHECK_OK(dlock_mutex_unlock(w.m));
    CHECK_EQ(atomic_load(&seen.fallback), 1);
    CHECK_EQ(th_cmd_int(g_r, "EXISTS app:f"), 0);
  }
  dlock_mutex_free(w.m);
  dlock_mutex_free(hm);
  dlock_client_free(c);
  dlock_client_free(holder);
}

TH_CASE(fallback_mutex_spins_when_subscribe_refused) { fallback_case(1, 0); }

TH_CASE(no_fallback_is_eauth_as_before) { fallback_case(0, 0); }

/* SUBSCRIBE and PUBLISH allowed, the channels refused (NOPERM ... channel). */
TH_CASE(fallback_when_only_the_channels_are_refused) { fallback_case(1, 1); }

/* A client of a user without PUBLISH whose first lock never waited (so it
 * has not met a refused SUBSCRIBE yet): with spin_fallback its unlock still
 * releases -- the refused PUBLISH after the release is no failure. */
static void unlock_case(int channels_only) {
  g_r = th_redis_new(0, NULL);
  add_user(g_r, channels_only);
  logseen seen;
  memset(&seen, 0, sizeof seen);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g_nosub_url;
  cfg.retry_interval_ms = 100;
  cfg.spin_fallback = 1;
  cfg.log_fn = log_hook;
  cfg.log_arg = &seen;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "app:u", &m));
  for (int i = 0; i < 2; i++) {
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_unlock(m));
    int rc = dlock_mutex_unlock(m);
    CHECK_MSG(rc == 0, "unlock %d: %s: %s", i, dlock_err_name(rc),
              dlock_last_error());
    CHECK_EQ(th_cmd_int(g_r, "EXISTS app:u"), 0);
  }
  CHECK_EQ(atomic_load(&seen.fallback), 1);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_CASE(fallback_unlock_without_publish_right_releases) { unlock_case(0); }

TH_CASE(fallback_unlock_without_channel_right_releases) { unlock_case(1); }

/* ---- interoperation ----------------------------------------------------- */

/* A Redisson-layout holder written with raw commands (what RLock and
 * RSpinLock write) blocks the spin lock until it is gone. */
TH_CASE(raw_redisson_holder_blocks_spin_until_released) {
  g_r = th_redis_new(0, NULL);
  const char *jfield = "c0ffee00-1111-2222-3333-444455556666:1";
  freeReplyObject(th_cmd(g_r, "HSET sri %s 1", jfield));
  freeReplyObject(th_cmd(g_r, "PEXPIRE sri 30000"));
  dlock_client *c = th_client(g_r);
  waiter w;
  memset(&w, 0, sizeof w);
  w.wait_ms = 10000 * slow();
  CHECK_OK(dlock_mutex_new_spin(c, "sri", &w.m));
  CHECK_RC(dlock_mutex_trylock(w.m), DLOCK_EBUSY);
  long long base = script_calls(g_r);
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  wait_scripts(g_r, base, 3);
  CHECK_EQ(atomic_load(&w.done), 0);
  /* Redisson's unlock: the count goes to 0, the key is deleted. */
  CHECK_EQ(th_cmd_int(g_r, "HINCRBY sri %s -1", jfield), 0);
  CHECK_EQ(th_cmd_int(g_r, "DEL sri"), 1);
  waiter_join(t, &w);
  CHECK_MSG(w.rc == 0, "rc %d: %s", w.rc, w.err);
  printf("acquired %lld ms into its wait\n", (long long)w.took_ms);
  dlock_mutex_free(w.m);
  dlock_client_free(c);
}

/* dlock_client_cancel_waits ends a spinning wait (its back-off sleep is
 * cut short) with DLOCK_ECANCELED, the lock not taken. */
TH_CASE(cancel_ends_a_spinning_wait) {
  g_r = th_redis_new(0, NULL);
  freeReplyObject(
      th_cmd(g_r, "HSET scw c0ffee00-1111-2222-3333-444455556666:1 1"));
  dlock_client *c = th_client(g_r);
  waiter w;
  memset(&w, 0, sizeof w);
  w.wait_ms = -1; /* for ever */
  CHECK_OK(dlock_mutex_new_spin(c, "scw", &w.m));
  long long base = script_calls(g_r);
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  wait_scripts(g_r, base, 8); /* at the 128 ms cap by now */
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_client_cancel_waits(c));
  int64_t end = t0 + 5000 * slow();
  while (!atomic_load(&w.done) && th_now_ms() < end)
    th_sleep_ms(2);
  CHECK_MSG(atomic_load(&w.done), "the wait did not end");
  pthread_join(t, NULL);
  printf("canceled after %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(g_r, "HLEN scw"), 1);
  dlock_mutex_free(w.m);
  dlock_client_free(c);
}

/* Redisson's ExponentialBackOff with its defaults: 1, then x2 plus jitter
 * in [0, fails), capped at 128 ms. */
TH_CASE(backoff_sequence_is_redissons) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r);
  dlock_mutex *s;
  CHECK_OK(dlock_mutex_new_spin(c, "sbo", &s));
  /* A timed wait of ~300 ms on a held lock makes few attempts: 1 + 2 + 4
   * + ... + 128 + 128 reaches 300 ms after about 9 sleeps, not 300. */
  freeReplyObject(
      th_cmd(g_r, "HSET sbo c0ffee00-1111-2222-3333-444455556666:1 1"));
  long long base = script_calls(g_r);
  CHECK_RC(dlock_mutex_timedlock(s, 300, -1), DLOCK_ETIMEDOUT);
  long long n = script_calls(g_r) - base;
  CHECK_MSG(n >= 4 && n <= 15, "%lld attempts in 300 ms", n);
  dlock_mutex_free(s);
  dlock_client_free(c);
}

TH_MAIN()
