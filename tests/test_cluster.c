/* Redis Cluster (issue 13): every lock kind on a real cluster started by
 * the harness -- names spread over the masters, hash tags, names refused
 * before anything is sent, a slot migrated while processes contend (0 lost
 * updates, wake-ups by sharded pub/sub after the move), a master killed
 * under a held lock (its replica takes over, the holder keeps renewing). */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "th.h"
#include "th_cluster.h"

static dlock_client *cl_client(th_cluster *cl) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = cl->url;
  cfg.retry_attempts = 20;
  cfg.retry_interval_ms = 200;
  cfg.command_timeout_ms = 1000;
  cfg.connect_timeout_ms = 500;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_client_new(%s): %s: %s", cl->url,
            dlock_err_name(rc), dlock_last_error());
  return c;
}

/* Names on every master: each lock's key is on the master CLUSTER SLOTS
 * names for its slot, and nowhere else. */
TH_CASE_T(names_spread_over_masters, 120, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_client *c = cl_client(cl);
  int seen[TH_CLUSTER_MAX] = {0};
  for (int i = 0; i < 30; i++) {
    char name[32];
    snprintf(name, sizeof name, "spread-%d", i);
    dlock_mutex *m;
    CHECK_RC(dlock_mutex_new(c, name, &m), DLOCK_OK);
    CHECK_RC(dlock_mutex_timedlock(m, 0, 60000), DLOCK_OK);
    unsigned slot = th_cluster_slot(cl, name);
    int owner = th_cluster_master_of(cl, slot);
    CHECK(owner >= 0);
    seen[owner]++;
    CHECK_EQ(th_cmd_int(cl->node[owner], "EXISTS %s", name), 1);
    for (int k = 0; k < cl->n; k++)
      if (k != owner)
        CHECK_EQ(th_cmd_int(cl->node[k], "CLUSTER COUNTKEYSINSLOT %u", slot),
                 0);
    CHECK_RC(dlock_mutex_unlock(m), DLOCK_OK);
    CHECK_EQ(th_cmd_int(cl->node[owner], "EXISTS %s", name), 0);
    dlock_mutex_free(m);
  }
  for (int k = 0; k < 3; k++)
    CHECK(seen[k] > 0);
  dlock_client_free(c);
}

/* redis-cluster:// URLs: accepted forms, and every malformed one refused
 * with a message that says what is wrong (no server needed: lazy). */
TH_CASE(cluster_urls) {
  const char *good[] = {"redis-cluster://127.0.0.1:7000",
                        "redis-cluster://u:p@127.0.0.1:7000,127.0.0.1:7001",
                        "redis-cluster://:p@h1:1,[::1]:2/0",
                        "rediss-cluster://127.0.0.1:7000"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    cfg.url = good[i];
    cfg.lazy_connect = 1;
    dlock_client *c = NULL;
    int rc = dlock_client_new(&cfg, &c);
    if (rc != DLOCK_OK && strncmp(good[i], "rediss", 6) != 0)
      th_fail(__FILE__, __LINE__, "%s: %s", good[i], dlock_last_error());
    dlock_client_free(c);
  }
  const struct {
    const char *url, *why;
  } bad[] = {{"redis-cluster://", "empty seed"},
             {"redis-cluster://a:1,,b:2", "empty seed"},
             {"redis-cluster://a:1,b:2/3", "only database 0"},
             {"redis-cluster://a:99999", "port"},
             {"redis-cluster://a:1,b:x", "port"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    cfg.url = bad[i].url;
    cfg.lazy_connect = 1;
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
    if (!strstr(dlock_last_error(), bad[i].why))
      th_fail(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", bad[i].url,
              dlock_last_error(), bad[i].why);
  }
  /* Nobody listening: the client says so at creation. */
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = "redis-cluster://127.0.0.1:1,127.0.0.1:2";
  cfg.retry_attempts = 0;
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
  CHECK(strstr(dlock_last_error(), "topology") != NULL);
}

/* A name with its own hash tag lives in the tag's slot; names whose keys
 * would be CROSSSLOT are refused with DLOCK_EINVAL before anything is sent
 * (the same names are fine on a standalone client). */
TH_CASE_T(hash_tags_and_refused_names, 120, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_client *c = cl_client(cl);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "{user42}:lock", &m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 60000));
  unsigned slot = th_cluster_slot(cl, "user42");
  CHECK_EQ(th_cluster_slot(cl, "{user42}:lock"), slot);
  CHECK_EQ(th_cmd_int(cl->node[th_cluster_master_of(cl, slot)],
                      "EXISTS {user42}:lock"),
           1);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  const char *bad[] = {"a{b", "a{}b", "{}x", "a}b", "}x", "x}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    dlock_mutex *x = NULL;
    CHECK_RC(dlock_mutex_new(c, bad[i], &x), DLOCK_EINVAL);
    CHECK(strstr(dlock_last_error(), "CROSSSLOT") != NULL);
    CHECK(x == NULL);
    dlock_rwlock *rw = NULL;
    CHECK_RC(dlock_rwlock_new(c, bad[i], &rw), DLOCK_EINVAL);
  }
  dlock_latch *l = NULL;
  CHECK_RC(dlock_latch_new(c, "{tag}x", &l), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "CROSSSLOT") != NULL);
  dlock_sem *sm = NULL;
  CHECK_OK(dlock_sem_new(c, "{tag}x", &sm)); /* its channel keeps the tag */
  dlock_sem_free(sm);
  dlock_client_free(c);
  /* A redis:// client pointed at a cluster node is told what to use. */
  dlock_client *one = th_client_cfg(cl->node[0], NULL);
  int hit = 0;
  for (int i = 0; i < 20 && !hit; i++) {
    char name[16];
    snprintf(name, sizeof name, "plain-%d", i);
    dlock_mutex *x;
    CHECK_OK(dlock_mutex_new(one, name, &x));
    int rc = dlock_mutex_timedlock(x, 0, 1000);
    if (rc == DLOCK_EREDIS) {
      CHECK(strstr(dlock_last_error(), "redis-cluster://") != NULL);
      hit = 1;
    } else {
      CHECK_OK(rc);
      CHECK_OK(dlock_mutex_unlock(x));
    }
    dlock_mutex_free(x);
  }
  CHECK(hit);
  dlock_client_free(one);
}

/* ---- every kind, with waiters woken by sharded pub/sub ------------------- */

typedef struct waiter {
  dlock_client *c;
  const char *name;
  int kind; /* 0 mutex, 1 fair, 2 fenced, 3 rwlock write, 4 sem, 5 latch */
  int rc;
  int64_t done_at;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  if (w->kind <= 2) {
    dlock_mutex *m;
    int rc = w->kind == 0   ? dlock_mutex_new(w->c, w->name, &m)
             : w->kind == 1 ? dlock_mutex_new_fair(w->c, w->name, &m)
                            : dlock_mutex_new_fenced(w->c, w->name, &m);
    w->rc = rc ? rc : dlock_mutex_timedlock(m, 20000, 30000);
    w->done_at = th_now_ms();
    if (!rc && w->rc == 0)
      dlock_mutex_unlock(m);
    if (!rc)
      dlock_mutex_free(m);
  } else if (w->kind == 3) {
    dlock_rwlock *rw;
    w->rc = dlock_rwlock_new(w->c, w->name, &rw);
    if (!w->rc)
      w->rc = dlock_rwlock_timedwrlock(rw, 20000, 30000);
    w->done_at = th_now_ms();
    if (!w->rc)
      dlock_rwlock_unlock(rw);
    dlock_rwlock_free(rw);
  } else if (w->kind == 4) {
    dlock_sem *sm;
    w->rc = dlock_sem_new(w->c, w->name, &sm);
    if (!w->rc)
      w->rc = dlock_sem_timedwait(sm, 20000);
    w->done_at = th_now_ms();
    dlock_sem_free(sm);
  } else {
    dlock_latch *l;
    w->rc = dlock_latch_new(w->c, w->name, &l);
    if (!w->rc)
      w->rc = dlock_latch_timedawait(l, 20000);
    w->done_at = th_now_ms();
    dlock_latch_free(l);
  }
  return NULL;
}

/* Polls (bounded) until a shard channel of name (any channel with the
 * tag {name}) has a subscriber on the slot's master; returns the first such
 * channel's name in buf, or fails the test. */
static void wait_waiter_subscribed(th_cluster *cl, const char *name, char *buf,
                                   size_t len) {
  int owner = th_cluster_master_of(cl, th_cluster_slot(cl, name));
  int64_t until = th_now_ms() + 10000L * th_timeout_mult();
  for (;;) {
    redisReply *r =
        th_cmd(cl->node[owner], "PUBSUB SHARDCHANNELS *{%s}*", name);
    int found = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    if (found)
      snprintf(buf, len, "%s", r->element[0]->str);
    freeReplyObject(r);
    if (found)
      return;
    if (th_now_ms() > until)
      th_fail(__FILE__, __LINE__, "no subscriber on a channel of '%s'", name);
    usleep(10 * 1000);
  }
}

/* One kind: a holder (client a) blocks, a waiter (client b) waits; the
 * release wakes the waiter by pub/sub: within a second, where the
 * holder's lease (30 s) or the kinds' re-check would take far longer.
 * Released once the waiter is subscribed (old: after a fixed 300 ms, which
 * a loaded machine can outlast: the waiter then may not wait at all). */
static void one_kind(th_cluster *cl, dlock_client *a, dlock_client *b, int kind,
                     const char *name) {
  dlock_mutex *m = NULL;
  dlock_rwlock *rw = NULL;
  dlock_sem *sm = NULL;
  dlock_latch *l = NULL;
  if (kind <= 2) {
    CHECK_OK(kind == 0   ? dlock_mutex_new(a, name, &m)
             : kind == 1 ? dlock_mutex_new_fair(a, name, &m)
                         : dlock_mutex_new_fenced(a, name, &m));
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
  } else if (kind == 3) {
    CHECK_OK(dlock_rwlock_new(a, name, &rw));
    CHECK_OK(dlock_rwlock_timedrdlock(rw, 0, 30000));
  } else if (kind == 4) {
    CHECK_OK(dlock_sem_new(a, name, &sm));
    CHECK_OK(dlock_sem_init(sm, 0));
  } else {
    CHECK_OK(dlock_latch_new(a, name, &l));
    CHECK_OK(dlock_latch_init(l, 1));
  }
  waiter w = {b, name, kind, -100, 0};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  char ch[256];
  wait_waiter_subscribed(cl, name, ch, sizeof ch);
  int64_t released = th_now_ms();
  if (m)
    CHECK_OK(dlock_mutex_unlock(m));
  if (rw)
    CHECK_OK(dlock_rwlock_unlock(rw));
  if (sm)
    CHECK_OK(dlock_sem_post(sm));
  if (l)
    CHECK_OK(dlock_latch_count_down(l));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_OK);
  int64_t lat = w.done_at - released;
  printf("kind %d (%s): woken %lld ms after the release (subscribed: %s)\n",
         kind, name, (long long)lat, ch);
  CHECK(lat < 1000L * th_timeout_mult());
  dlock_mutex_free(m);
  dlock_rwlock_free(rw);
  dlock_sem_free(sm);
  dlock_latch_free(l);
}

TH_CASE_T(every_kind_wakes_by_sharded_pubsub, 180, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_client *a = cl_client(cl), *b = cl_client(cl);
  const char *names[] = {"k-mutex", "k-fair", "k-fenced",
                         "k-rw",    "k-sem",  "k-latch"};
  for (int k = 0; k < 6; k++)
    one_kind(cl, a, b, k, names[k]);
  /* The mutex's channel was subscribed with SSUBSCRIBE on its master. */
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(a, "k-mutex", &m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
  waiter w = {b, "k-mutex", 0, -100, 0};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  int owner = th_cluster_master_of(cl, th_cluster_slot(cl, "k-mutex"));
  int64_t until = th_now_ms() + 5000L * th_timeout_mult();
  long long subs = 0;
  while (subs != 1 && th_now_ms() < until) {
    redisReply *r = th_cmd(
        cl->node[owner], "PUBSUB SHARDNUMSUB redisson_lock__channel:{k-mutex}");
    subs = r && r->elements == 2 ? r->element[1]->integer : 0;
    freeReplyObject(r);
    usleep(20 * 1000);
  }
  CHECK_EQ(subs, 1);
  CHECK_OK(dlock_mutex_unlock(m));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_OK);
  dlock_mutex_free(m);
  /* A multilock over members in different slots. */
  dlock_mutex *mm[3];
  int seen[TH_CLUSTER_MAX] = {0}, masters = 0;
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "ml-%d", i * 7);
    CHECK_OK(dlock_mutex_new(a, name, &mm[i]));
    int o = th_cluster_master_of(cl, th_cluster_slot(cl, name));
    masters += !seen[o]++;
  }
  CHECK(masters >= 2);
  dlock_multilock *ml;
  CHECK_OK(dlock_multilock_new(mm, 3, &ml));
  CHECK_OK(dlock_multilock_timedlock(ml, 0, 30000));
  CHECK_OK(dlock_multilock_unlock(ml));
  dlock_multilock_free(ml);
  for (int i = 0; i < 3; i++)
    dlock_mutex_free(mm[i]);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- contention through a slot migration --------------------------------- */

typedef struct contender {
  const char *url;
  const char *name;
  const char *counter; /* a file: read, +1, write -- not atomic */
  int64_t run_ms;      /* how long to contend, from the start (at most) */
  const char *go;      /* NULL, or a file: start once it exists */
  const char *stop;    /* NULL, or a file: stop once it exists */
} contender;

static int contend(void *arg) {
  const contender *k = arg;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = k->url;
  /* An unlock has only the retry policy to outlast a slot migration
   * (while IMPORTING/MIGRATING is set, every script of the lock answers
   * TRYAGAIN: some of its keys are missing) or a failover; the parent's
   * migration dwells 1.5 s, stretched by a loaded machine (old: 40 tries,
   * about 4 s: 'unlock: EREDIS: TRYAGAIN ...'). 20 s x the slack. A lock
   * rides those out within its wait budget anyway. */
  cfg.retry_attempts = 200 * th_timeout_mult();
  cfg.retry_interval_ms = 100;
  cfg.command_timeout_ms = 1000;
  cfg.watchdog_timeout_ms = 10000;
  dlock_client *c;
  dlock_mutex *m;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new(c, k->name, &m))
    return 10;
  /* Forked before the parent made its own client (a sanitizer's fork
   * rules): the parent says when the others are ready. */
  for (int i = 0; k->go && access(k->go, F_OK) != 0 && i < 6000; i++)
    usleep(10 * 1000);
  int64_t until = th_now_ms() + k->run_ms;
  int n = 0;
  /* At least one increment each, however late this process started. */
  while (n == 0 ||
         (th_now_ms() < until && !(k->stop && access(k->stop, F_OK) == 0))) {
    int rc = dlock_mutex_timedlock(m, 30000, -1);
    if (rc) {
      fprintf(stderr, "lock: %s: %s\n", dlock_err_name(rc), dlock_last_error());
      return 11;
    }
    FILE *f = fopen(k->counter, "r+");
    long v = 0;
    if (!f || fscanf(f, "%ld", &v) != 1)
      return 12;
    usleep(500);
    rewind(f);
    fprintf(f, "%ld\n", v + 1);
    fclose(f);
    n++;
    if ((rc = dlock_mutex_unlock(m)) != 0) {
      fprintf(stderr, "unlock: %s: %s\n", dlock_err_name(rc),
              dlock_last_error());
      return 13;
    }
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  /* How many increments: the exit status is too small, a file per child. */
  char path[512];
  snprintf(path, sizeof path, "%s.%d", k->counter, (int)getpid());
  FILE *f = fopen(path, "w");
  fprintf(f, "%d\n", n);
  fclose(f);
  return 0;
}

static long read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

/* Polls (bounded) until the counter has grown by at least by. */
static void wait_progress(const char *counter, long by) {
  long want = read_long(counter) + by;
  int64_t until = th_now_ms() + 30000L * th_timeout_mult();
  while (read_long(counter) < want && th_now_ms() < until)
    usleep(20 * 1000);
  CHECK_MSG(read_long(counter) >= want, "counter %ld, want %ld",
            read_long(counter), want);
}

/* Waits for the 4 contenders, each of which must finish (exit 0) having
 * done some increments; their sum must be the counter: none was lost. */
static void finish_contenders(const pid_t *pids, const char *counter,
                              const char *through) {
  long total = 0;
  for (int i = 0; i < 4; i++) {
    /* the last lock's wait (30 s) and unlock's retries (20 s) at most */
    CHECK_EQ(th_wait(pids[i], 120000L * th_timeout_mult()), 0);
    char path[512];
    snprintf(path, sizeof path, "%s.%d", counter, (int)pids[i]);
    long n = read_long(path);
    CHECK(n > 0);
    total += n;
  }
  printf("%ld increments by 4 processes through %s\n", total, through);
  fflush(stdout);
  CHECK_EQ(read_long(counter), total);
}

/* 4 processes run a non-atomic read-modify-write under one lock while the
 * lock's slot moves to another master and back (clients meet MOVED, ASK
 * and TRYAGAIN): no increment is lost and every process finishes; then a
 * waiter is still woken by (sharded) pub/sub, in milliseconds. */
TH_CASE_T(slot_migration_under_contention, 240, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  const char *name = "migrating-lock";
  unsigned slot = th_cluster_slot(cl, name);
  int from = th_cluster_master_of(cl, slot), to = (from + 1) % 3;
  const char *counter = th_tmpfile("counter");
  FILE *f = fopen(counter, "w");
  fprintf(f, "0\n");
  fclose(f);
  /* The contenders run until both moves are done (stop), whatever the
   * machine's load: not for a fixed time that a slow start or a slow move
   * could use up before the moves. */
  const char *stop = th_tmpfile("stop");
  contender k = {cl->url, name, counter, 120000L * th_timeout_mult(),
                 NULL,    stop};
  pid_t pids[4];
  for (int i = 0; i < 4; i++)
    pids[i] = th_fork(contend, &k);
  /* The slot moves under contention: once the processes are at work;
   * between the moves and after them, they make progress on each owner. */
  wait_progress(counter, 50);
  th_cluster_move_slot(cl, slot, from, to, 1500);
  CHECK_EQ(th_cluster_master_of(cl, slot), to);
  wait_progress(counter, 20);
  th_cluster_move_slot(cl, slot, to, from, 800);
  wait_progress(counter, 20);
  FILE *sf = fopen(stop, "w");
  CHECK(sf != NULL);
  fclose(sf);
  finish_contenders(pids, counter, "two slot moves");
  /* After the moves: a hand-over is still woken by pub/sub. */
  th_cluster_move_slot(cl, slot, from, to, 0);
  dlock_client *a = cl_client(cl), *b = cl_client(cl);
  one_kind(cl, a, b, 0, name);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Subscribers of channel on node i (PUBSUB SHARDNUMSUB), polled until it
 * is want (bounded); returns the last count. */
static long long wait_shardsubs(th_cluster *cl, int i, const char *channel,
                                long long want) {
  int64_t until = th_now_ms() + 10000L * th_timeout_mult();
  long long subs = -1;
  do {
    redisReply *r = th_cmd(cl->node[i], "PUBSUB SHARDNUMSUB %s", channel);
    subs = r && r->elements == 2 ? r->element[1]->integer : -1;
    freeReplyObject(r);
    if (subs != want)
      usleep(20 * 1000);
  } while (subs != want && th_now_ms() < until);
  return subs;
}

/* A waiter subscribed on the slot's master when the slot moves: the old
 * master drops its subscription (sunsubscribe), the waiter re-subscribes
 * at the new owner, and the holder's unlock there wakes it by pub/sub in
 * milliseconds (the holder's lease is 30 s: a lost wake-up would show). */
TH_CASE_T(waiter_resubscribes_after_slot_move, 120, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  const char *name = "moving-waiter",
             *ch = "redisson_lock__channel:{moving-waiter}";
  unsigned slot = th_cluster_slot(cl, name);
  int from = th_cluster_master_of(cl, slot), to = (from + 1) % 3;
  dlock_client *a = cl_client(cl), *b = cl_client(cl);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(a, name, &m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
  waiter w = {b, name, 0, -100, 0};
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK_EQ(wait_shardsubs(cl, from, ch, 1), 1);
  th_cluster_move_slot(cl, slot, from, to, 0);
  CHECK_EQ(wait_shardsubs(cl, to, ch, 1), 1);
  CHECK_EQ(wait_shardsubs(cl, from, ch, 0), 0);
  int64_t released = th_now_ms();
  CHECK_OK(dlock_mutex_unlock(m));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_OK);
  printf("waiter woken %lld ms after the unlock on the new master\n",
         (long long)(w.done_at - released));
  fflush(stdout);
  CHECK(w.done_at - released < 1000L * th_timeout_mult());
  dlock_mutex_free(m);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Issue 25.10: watchdog renewals follow ASK (and MOVED). A hold whose key
 * moves to the importing node while its slot's migration lasts longer
 * than the lease stays held: the old batched renewal went to the migrating
 * node, got ASK, and retried there until the lease ran out (old code: the
 * hold reported lost, its key expired on the importing node). */
static atomic_int g_mig_lost;
static void on_mig_lost(const char *name, void *arg) {
  (void)arg;
  printf("lost: %s\n", name);
  fflush(stdout);
  atomic_fetch_add(&g_mig_lost, 1);
}

TH_CASE_T(watchdog_renews_through_a_slot_migration, 120, "cluster slow") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  const char *name = "migrating-hold";
  unsigned slot = th_cluster_slot(cl, name);
  int from = th_cluster_master_of(cl, slot), to = (from + 1) % 3;
  int mult = th_timeout_mult();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = cl->url;
  cfg.retry_attempts = 5;
  cfg.retry_interval_ms = 100;
  cfg.command_timeout_ms = 1000 * mult;
  cfg.connect_timeout_ms = 1000 * mult;
  cfg.watchdog_timeout_ms = 1500 * mult; /* renewed every 500 ms */
  cfg.on_lock_lost = on_mig_lost;
  atomic_store(&g_mig_lost, 0);
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, name, &m));
  CHECK_OK(dlock_mutex_lock(m)); /* the watchdog renews it */
  char tid[48];
  th_cluster_id(cl, to, tid);
  /* The migration: IMPORTING / MIGRATING, the key moved with MIGRATE at
   * once, and the slot left in that state for two leases (without the
   * renewals the importing node's copy expires after one). */
  th_cluster_move_slot(cl, slot, from, to, 2 * cfg.watchdog_timeout_ms);
  CHECK_EQ(th_cluster_master_of(cl, slot), to);
  CHECK_EQ(atomic_load(&g_mig_lost), 0);
  long long pttl = th_cmd_int(cl->node[to], "PTTL %s", name);
  printf("PTTL on the importing node after the migration: %lld ms\n", pttl);
  CHECK(pttl > 0);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(cl->node[to], "EXISTS %s", name), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- failover ---------------------------------------------------------- */

static atomic_int g_lost;
static void on_lost(const char *name, void *arg) {
  (void)arg;
  printf("lost: %s (%lld)\n", name, (long long)th_now_ms());
  fflush(stdout);
  atomic_fetch_add(&g_lost, 1);
}

/* 1 when node i (a replica) has key, read with READONLY. */
static int replica_has(th_cluster *cl, int i, const char *key) {
  redisContext *rc = th_redis_raw(cl->node[i]);
  redisReply *r = redisCommand(rc, "READONLY");
  freeReplyObject(r);
  r = redisCommand(rc, "EXISTS %s", key);
  int has = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  redisFree(rc);
  return has;
}

/* The replica of master m: the node whose ROLE names m's port. */
static int replica_of(th_cluster *cl, int m) {
  for (int i = 0; i < cl->n; i++) {
    redisReply *r = th_cmd(cl->node[i], "ROLE");
    int is = r && r->elements >= 3 &&
             strcmp(r->element[0]->str, "slave") == 0 &&
             r->element[2]->integer == cl->node[m]->port;
    freeReplyObject(r);
    if (is)
      return i;
  }
  return -1;
}

/* kill -9 of the master that owns a held lock while 4 processes contend
 * on another lock of the same master: its replica takes over; the
 * contenders finish with no increment lost; the holder's watchdog renews
 * on the new master (the hold is not reported lost) and its unlock works;
 * a hold whose key the new master lacks is reported lost there. */
TH_CASE_T(master_killed_replica_takes_over, 240, "cluster") {
  th_cluster *cl = th_cluster_new(3, 1, 1000);
  const char *held = "{fo}held", *busy = "{fo}busy", *gone = "{fo}gone";
  unsigned slot = th_cluster_slot(cl, "fo");
  int master = th_cluster_master_of(cl, slot), replica = replica_of(cl, master);
  CHECK(replica >= 0);
  /* The contenders first: no process forks after it started threads. */
  const char *counter = th_tmpfile("counter"), *go = th_tmpfile("go");
  FILE *f = fopen(counter, "w");
  fprintf(f, "0\n");
  fclose(f);
  contender k = {cl->url, busy, counter, 7000, go, NULL};
  pid_t pids[4];
  for (int i = 0; i < 4; i++)
    pids[i] = th_fork(contend, &k);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = cl->url;
  cfg.retry_attempts = 40;
  cfg.retry_interval_ms = 200;
  cfg.command_timeout_ms = 1000;
  cfg.watchdog_timeout_ms = 9000;
  cfg.on_lock_lost = on_lost;
  dlock_client *c;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *h, *g;
  CHECK_OK(dlock_mutex_new(c, held, &h));
  CHECK_OK(dlock_mutex_new(c, gone, &g));
  CHECK_OK(dlock_mutex_lock(h));
  CHECK_OK(dlock_mutex_lock(g));
  /* The replica may still be in its first sync on a loaded machine. */
  int64_t until = th_now_ms() + 30000L * th_timeout_mult();
  while (!(replica_has(cl, replica, held) && replica_has(cl, replica, gone))) {
    CHECK(th_now_ms() < until);
    usleep(20 * 1000);
  }
  f = fopen(go, "w"); /* contend from now on */
  fclose(f);
  usleep(1500 * 1000);
  int64_t killed = th_now_ms();
  printf("kill at %lld\n", (long long)killed);
  th_redis_kill(cl->node[master]);
  int nm = th_cluster_wait_new_master(cl, slot, master, 20000);
  CHECK_EQ(nm, replica);
  printf("replica took over %lld ms after the kill\n",
         (long long)(th_now_ms() - killed));
  fflush(stdout);
  finish_contenders(pids, counter, "a master kill");
  /* The new master lacks one hold's key (as if its write had not
   * replicated): the watchdog's next renewal there reports it lost. */
  CHECK_EQ(th_cmd_int(cl->node[nm], "DEL %s", gone), 1);
  until = th_now_ms() + 12000L * th_timeout_mult();
  while (atomic_load(&g_lost) == 0 && th_now_ms() < until)
    usleep(20 * 1000);
  CHECK_EQ(atomic_load(&g_lost), 1);
  CHECK_RC(dlock_mutex_unlock(g), DLOCK_ELOST);
  /* The other hold survived and was renewed on the new master. */
  CHECK_EQ(dlock_mutex_is_held(h), 1);
  CHECK(th_cmd_int(cl->node[nm], "PTTL %s", held) > 3000);
  CHECK_OK(dlock_mutex_unlock(h));
  CHECK_EQ(th_cmd_int(cl->node[nm], "EXISTS %s", held), 0);
  dlock_mutex_free(h);
  dlock_mutex_free(g);
  dlock_client_free(c);
}

/* The CLI, seckill and bench take the cluster URL: a lock and its status
 * through the CLI, seckill's strategies (its own connection goes to the
 * master of its keys' slot), bench's per-master "many". */
TH_CASE_T(tools_take_the_cluster_url, 180, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  const char *lock[] = {"-u", cl->url, "-n", "toolock", "--", "true", NULL};
  const char *status[] = {"-u", cl->url, "status", "toolock", NULL};
  const char *sk[] = {"--url",      cl->url, "--strategy", "none,dlock,atomic",
                      "--procs",    "2",     "--threads",  "4",
                      "--requests", "200",   "--stock",    "20",
                      "--json",     NULL};
  const char *bn[] = {"--url",   cl->url, "--scenario", "many", "--quick",
                      "--procs", "3",     "--secs",     "1",    NULL};
  int rc;
  if ((rc = th_run_tool("DLOCK_TEST_CLI", lock)) >= 0)
    CHECK_EQ(rc, 0);
  if ((rc = th_run_tool("DLOCK_TEST_CLI", status)) >= 0)
    CHECK_EQ(rc, 3); /* free: status's documented exit code */
  if ((rc = th_run_tool("DLOCK_TEST_SECKILL", sk)) >= 0) {
    CHECK_EQ(rc, 0);
    FILE *f = fopen(th_tmpfile("tool.out"), "r");
    char buf[65536];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
      fclose(f);
    buf[n] = '\0';
    /* dlock and atomic sold exactly the stock on the cluster. */
    CHECK(strstr(buf, "\"name\":\"dlock\",\"correct\":true") != NULL);
    CHECK(strstr(buf, "\"name\":\"atomic\",\"correct\":true") != NULL);
  }
  if ((rc = th_run_tool("DLOCK_TEST_BENCH", bn)) >= 0)
    CHECK_EQ(rc, 0);
}

/* dlock list on a cluster URL scans every master (issue 27): held locks
 * whose names fall on all three masters are listed, each with its master
 * and its holder resolved through the info key -- which lives in the slot
 * of the client id, usually on another master than the lock. */
TH_CASE_T(list_scans_every_master, 120, "cluster") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_client *c = cl_client(cl);
  dlock_mutex *m[3] = {NULL, NULL, NULL};
  char names[3][32];
  int have = 0;
  for (int i = 0; i < 200 && have < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "lst:%d", i);
    int master = th_cluster_master_of(cl, th_cluster_slot(cl, name));
    if (master < 0 || master >= 3 || m[master])
      continue;
    snprintf(names[master], sizeof names[master], "%s", name);
    CHECK_OK(dlock_mutex_new(c, name, &m[master]));
    CHECK_OK(dlock_mutex_lock(m[master]));
    have++;
  }
  CHECK_EQ(have, 3);
  const char *argv[] = {"-u", cl->url, "list", "--json", "lst:*", NULL};
  int rc = -1, ok = 0;
  char buf[65536];
  int64_t until = th_now_ms() + 10000L * th_timeout_mult();
  /* until every hold's start is published (after 100 ms) */
  while (!ok && th_now_ms() < until) {
    if ((rc = th_run_tool("DLOCK_TEST_CLI", argv)) < 0)
      break; /* the CLI is not built: skipped */
    CHECK_EQ(rc, 0);
    FILE *f = fopen(th_tmpfile("tool.out"), "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
      fclose(f);
    buf[n] = '\0';
    ok = !strstr(buf, "\"since_ms\":null");
    if (!ok)
      th_sleep_ms(50);
  }
  if (rc >= 0) {
    printf("%s\n", buf);
    CHECK(ok);
    CHECK(strstr(buf, "\"nodes\":3,") != NULL);
    char alive_pat[64];
    snprintf(alive_pat, sizeof alive_pat, "\"alive\":true,\"host\":");
    for (int k = 0; k < 3; k++) {
      char want[160];
      snprintf(want, sizeof want, "{\"name\":\"%s\",\"kind\":\"mutex\"",
               names[k]);
      CHECK(strstr(buf, want) != NULL);
    }
    const char *p = buf;
    int alive = 0;
    while ((p = strstr(p, alive_pat)) != NULL) {
      alive++;
      p++;
    }
    CHECK_EQ(alive, 3);
  }
  for (int k = 0; k < 3; k++) {
    CHECK_OK(dlock_mutex_unlock(m[k]));
    dlock_mutex_free(m[k]);
  }
  dlock_client_free(c);
}

TH_MAIN()
