/* Sentinel and replica sync (issue 14, docs/sentinel.md): 1 master + 2
 * replicas + 3 sentinels on loopback ports, started by the harness
 * (redis-server --sentinel); locks through redis-sentinel:// URLs, a master
 * killed under contention, replicas stopped (DLOCK_ENOSYNC), a waiter
 * across a failover, unreachable sentinels, WAIT on a plain master. Every
 * case prints its figures (docs/sentinel.md quotes them). */
#include <dirent.h>
#include "th.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MASTER "mymaster"

static int64_t slow(void) { return th_timeout_mult(); }

typedef struct topo {
  th_redis *m, *r[2], *s[3];
  char url[256];
} topo;

/* A field of SENTINEL MASTER <name> (a flat key/value array), or -1. */
static long long sentinel_field(th_redis *s, const char *field) {
  redisReply *x = th_cmd(s, "SENTINEL MASTER %s", MASTER);
  long long v = -1;
  if (x->type == REDIS_REPLY_ARRAY)
    for (size_t i = 0; i + 1 < x->elements; i += 2)
      if (strcmp(x->element[i]->str, field) == 0)
        v = atoll(x->element[i + 1]->str);
  freeReplyObject(x);
  return v;
}

/* The master's port as sentinel s names it, or -1. */
static int master_port(th_redis *s) {
  redisReply *x = th_cmd(s, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", MASTER);
  int port = x->type == REDIS_REPLY_ARRAY && x->elements == 2
                 ? atoi(x->element[1]->str)
                 : -1;
  freeReplyObject(x);
  return port;
}

/* Starts the topology and waits (bounded) until every sentinel knows the
 * two replicas and the two other sentinels: a failover can be voted. */
static void topo_start(topo *t) {
  t->m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  for (int i = 0; i < 2; i++)
    t->r[i] = th_replica_new(t->m);
  for (int i = 0; i < 3; i++)
    t->s[i] = th_sentinel_new(t->m, MASTER, 2, th_sentinel_down_ms(), 3000);
  snprintf(t->url, sizeof t->url,
           "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/" MASTER,
           t->s[0]->port, t->s[1]->port, t->s[2]->port);
  int64_t t0 = th_now_ms(), end = t0 + 20000 * slow();
  for (int i = 0; i < 3; i++)
    while (sentinel_field(t->s[i], "num-other-sentinels") != 2 ||
           sentinel_field(t->s[i], "num-slaves") != 2) {
      CHECK_MSG(th_now_ms() < end, "sentinel %d never saw the topology", i);
      th_sleep_ms(50);
    }
  printf("topology ready in %lld ms\n", (long long)(th_now_ms() - t0));
}

/* Waits (bounded) until every sentinel names a master other than old. */
static th_redis *wait_promoted(topo *t, int old, int64_t *at) {
  /* A first try may abort (-failover-abort-no-good-slave: the sentinels'
   * INFO of the replicas, refreshed every 10 s until the master is down,
   * too old on a loaded machine); the next comes 2 x failover-timeout
   * later. */
  int64_t end = th_now_ms() + 60000 * slow();
  for (;;) {
    int p = master_port(t->s[0]);
    if (p != old && p == master_port(t->s[1]) && p == master_port(t->s[2]))
      for (int i = 0; i < 2; i++)
        if (t->r[i]->port == p) {
          *at = th_now_ms();
          return t->r[i];
        }
    CHECK_MSG(th_now_ms() < end, "no replica was promoted");
    th_sleep_ms(20);
  }
}

static dlock_config sentinel_cfg(const topo *t) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = t->url;
  cfg.connect_timeout_ms = 500;
  cfg.command_timeout_ms = 1000;
  /* The retry policy must bridge a failover (about 2-5 s here). */
  cfg.retry_attempts = 20;
  cfg.retry_interval_ms = 300;
  return cfg;
}

/* The keys on r other than clients' info keys ("dlock_client:{<id>}",
 * who a client is, for dlock status: not a lock's state). */
static long long lock_keys(th_redis *r) {
  redisReply *k = th_cmd(r, "KEYS *");
  long long n = 0;
  for (size_t i = 0; k && i < k->elements; i++)
    n += strncmp(k->element[i]->str, "dlock_client:{", 14) != 0;
  freeReplyObject(k);
  return n;
}

/* ---- through the sentinels ---------------------------------------------- */

/* The CLI, seckill and bench take the URL (they pass it to the library;
 * seckill's and bench's own connections ask the sentinels too). */
static void tools_accept_the_url(const topo *t) {
  const char *cli[] = {"-u", t->url, "-n", "toolock", "--", "true", NULL};
  const char *sk[] = {"--url",      t->url, "--strategy", "dlock",
                      "--procs",    "2",    "--threads",  "2",
                      "--requests", "40",   "--stock",    "20",
                      NULL};
  const char *bn[] = {"--url",  t->url, "--quick", "--scenario", "uncontended",
                      "--reps", "1",    "--pairs", "200",        NULL};
  int rc;
  if ((rc = th_run_tool("DLOCK_TEST_CLI", cli)) >= 0)
    CHECK_EQ(rc, 0);
  if ((rc = th_run_tool("DLOCK_TEST_SECKILL", sk)) >= 0)
    CHECK_EQ(rc, 0);
  if ((rc = th_run_tool("DLOCK_TEST_BENCH", bn)) >= 0)
    CHECK_EQ(rc, 0);
}

TH_CASE_T(lock_unlock_and_switch, 150, "sentinel") {
  topo t;
  topo_start(&t);
  dlock_config cfg = sentinel_cfg(&t);
  dlock_client *c = th_client_cfg(t.m, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "sl", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(th_cmd_int(t.m, "EXISTS sl"), 1);
  /* Synced: both replicas have it the moment lock returns. */
  for (int i = 0; i < 2; i++)
    CHECK_EQ(th_cmd_int(t.r[i], "EXISTS sl"), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(t.m, "EXISTS sl"), 0);
  tools_accept_the_url(&t);
  /* A switch with the old master alive (SENTINEL FAILOVER): it becomes a
   * replica; the client follows (+switch-master, READONLY). */
  redisReply *x = th_cmd(t.s[0], "SENTINEL FAILOVER %s", MASTER);
  CHECK_MSG(x->type != REDIS_REPLY_ERROR, "SENTINEL FAILOVER: %s", x->str);
  freeReplyObject(x);
  int64_t t0 = th_now_ms(), at = 0;
  th_redis *nm = wait_promoted(&t, t.m->port, &at);
  printf("SENTINEL FAILOVER: new master after %lld ms\n", (long long)(at - t0));
  /* Until the old master is a replica it may still take a write, which
   * its resync then drops: that hold is reported lost (ELOST), never
   * silently kept. */
  int ok = 0, lost = 0, other = 0;
  int64_t end = th_now_ms() + 20000 * slow();
  while (!ok && th_now_ms() < end) {
    int64_t tl = th_now_ms();
    int rc = dlock_mutex_lock(m);
    if (getenv("DLOCK_TEST_DEBUG"))
      printf("lock %s in %lld ms: %s\n", dlock_err_name(rc),
             (long long)(th_now_ms() - tl), dlock_last_error());
    if (rc == 0) {
      int on_new = th_cmd_int(nm, "EXISTS sl") == 1;
      if (getenv("DLOCK_TEST_DEBUG"))
        printf("+%lld on_new %d old %lld\n", (long long)(th_now_ms() - at),
               on_new, th_cmd_int(t.m, "EXISTS sl"));
      rc = dlock_mutex_unlock(m);
      ok = on_new && rc == 0;
      lost += rc == DLOCK_ELOST;
    } else {
      other++;
      th_sleep_ms(50);
    }
  }
  printf("locks on the new master %lld ms after the switch (%d holds lost "
         "to the switch, %d failed locks)\n",
         (long long)(th_now_ms() - at), lost, other);
  CHECK_MSG(ok, "never locked on the new master");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

/* A freed client leaves no fd open (make soak on a Sentinel topology
 * found 2 fds left per freed client). */
TH_CASE_T(client_free_leaves_no_fd, 90, "sentinel") {
  topo t;
  topo_start(&t);
  dlock_config cfg = sentinel_cfg(&t);
  int before = open_fds();
  for (int i = 0; i < 5; i++) {
    dlock_client *c;
    dlock_mutex *m;
    CHECK_OK(dlock_client_new(&cfg, &c));
    CHECK_OK(dlock_mutex_new(c, "fds", &m));
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_unlock(m));
    dlock_mutex_free(m);
    dlock_client_free(c);
  }
  int after = open_fds();
  printf("fds before %d, after 5 clients made, used and freed %d\n", before,
         after);
  CHECK_MSG(after == before, "%d fds left by 5 freed clients", after - before);
}

TH_CASE_T(sentinels_unreachable, 60, "sentinel") {
  /* Three ports nobody listens on: servers started, then stopped. */
  th_redis *gone[3];
  for (int i = 0; i < 3; i++) {
    gone[i] = th_redis_new(1, NULL);
    th_redis_stop(gone[i]);
  }
  char url[256];
  snprintf(url, sizeof url,
           "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/" MASTER,
           gone[0]->port, gone[1]->port, gone[2]->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 50;
  dlock_client *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
  const char *msg = dlock_last_error();
  printf("%s after %lld ms: %s\n", dlock_err_name(DLOCK_ECONN),
         (long long)(th_now_ms() - t0), msg);
  CHECK_MSG(strstr(msg, "no master 'mymaster' found through 3 sentinels"), "%s",
            msg);
  char port[32];
  snprintf(port, sizeof port, "127.0.0.1:%d", gone[2]->port);
  CHECK_MSG(strstr(msg, port) && strstr(msg, "refused"), "%s", msg);
  CHECK(c == NULL);
  /* A lazy client reports it at the first operation. */
  cfg.lazy_connect = 1;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "x", &m));
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_ECONN);
  CHECK_MSG(strstr(dlock_last_error(), "no master 'mymaster'"), "%s",
            dlock_last_error());
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_CASE(url_errors) {
  static const char *const bad[][2] = {
      {"redis-sentinel://h:1", "missing /master-name"},
      {"redis-sentinel://h:1/", "missing master name"},
      {"redis-sentinel://h:0/m", "port must be"},
      {"redis-sentinel://h:1,/m", "missing host"},
      {"redis-sentinel://h:1/m/x", "database"},
      {"redis-sentinel://h:1/m?db=1", "unknown query parameter"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    cfg.url = bad[i][0];
    cfg.lazy_connect = 1;
    dlock_client *c = NULL;
    CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
    CHECK_MSG(strstr(dlock_last_error(), bad[i][1]), "%s: %s", bad[i][0],
              dlock_last_error());
  }
  /* Passwords never show in messages. */
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = "redis-sentinel://u:SECRET1@h:1/m/x?sentinel_password=SECRET2";
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
  CHECK_MSG(!strstr(dlock_last_error(), "SECRET"), "%s", dlock_last_error());
  /* A good one (lazy: nothing is asked yet). */
  cfg.url = "redis-sentinel://u:p@h1,[::1]:26380/my%20master/2"
            "?sentinel_user=su&sentinel_password=sp";
  cfg.lazy_connect = 1;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_client_free(c);
}

/* ---- replica sync on a plain master ---------------------------------------
 */

/* A lock that must succeed with the replicas up: a 300 ms WAIT on this
 * loaded machine may still fall short (then the acquisition is undone and
 * DLOCK_ENOSYNC is right); a few tries, each printed. */
static int lock_synced(dlock_mutex *m) {
  int rc = DLOCK_ENOSYNC;
  for (int i = 0; i < 5 && rc == DLOCK_ENOSYNC; i++)
    if ((rc = dlock_mutex_lock(m)) == DLOCK_ENOSYNC)
      printf("replicas slow to confirm (%s): again\n", dlock_last_error());
  return rc;
}

/* Resumes the stopped replicas and waits (bounded) until the master lists
 * n replicas online at its own replication offset. */
static void resume_synced(th_redis *m, th_redis **r, int nr, int n) {
  for (int i = 0; i < nr; i++)
    th_redis_resume(r[i]);
  int64_t end = th_now_ms() + 10000 * slow();
  for (;;) {
    redisReply *x = th_cmd(m, "INFO replication");
    const char *o = strstr(x->str, "master_repl_offset:");
    long long off = o ? atoll(o + 19) : -1;
    int ok = 0;
    for (const char *p = x->str; (p = strstr(p, ",state=online,offset=")); p++)
      ok += atoll(p + 21) == off;
    freeReplyObject(x);
    if (ok >= n)
      return;
    CHECK_MSG(th_now_ms() < end, "replicas did not catch up");
    th_sleep_ms(10);
  }
}

TH_CASE_T(enosync_when_replicas_stopped, 60, "sentinel") {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *r[2] = {th_replica_new(m), th_replica_new(m)};
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = m->tcp_url;
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 100;
  cfg.sync_timeout_ms = 300;
  dlock_client *c = th_client_cfg(m, &cfg);
  dlock_mutex *mu;
  CHECK_OK(dlock_mutex_new(c, "ns", &mu));
  /* Replicas up: the write is on both when lock returns. */
  resume_synced(m, r, 0, 2);
  CHECK_OK(lock_synced(mu));
  for (int i = 0; i < 2; i++)
    CHECK_EQ(th_cmd_int(r[i], "EXISTS ns"), 1);
  CHECK_OK(dlock_mutex_unlock(mu));
  th_redis_pause(r[0]);
  th_redis_pause(r[1]);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_trylock(mu), DLOCK_ENOSYNC);
  int64_t took = th_now_ms() - t0;
  printf("ENOSYNC after %lld ms (sync_timeout_ms %d, one attempt): %s\n",
         (long long)took, cfg.sync_timeout_ms, dlock_last_error());
  CHECK_MSG(strstr(dlock_last_error(), "0 of 2 replicas"), "%s",
            dlock_last_error());
  /* One attempt: a trylock does not retry (issue 25.9). */
  int64_t floor = cfg.sync_timeout_ms;
  CHECK_MSG(took >= floor && took <= floor + 100 + 2000 * slow(),
            "took %lld ms", (long long)took);
  /* Nothing is left behind: no lock, no latch, no queue. */
  redisReply *k = th_cmd(m, "KEYS *");
  for (size_t i = 0; i < k->elements; i++)
    printf("left behind: %s\n", k->element[i]->str);
  freeReplyObject(k);
  CHECK_EQ(lock_keys(m), 0);
  CHECK_EQ(dlock_mutex_hold_count(mu), 0);
  /* A waiting lock fails the same way. */
  CHECK_RC(dlock_mutex_timedlock(mu, 200, 5000), DLOCK_ENOSYNC);
  CHECK_EQ(lock_keys(m), 0);
  /* The other kinds that acquire: each undone, nothing left behind. */
  dlock_mutex *fair, *fenced;
  dlock_rwlock *rw;
  CHECK_OK(dlock_mutex_new_fair(c, "nsf", &fair));
  CHECK_OK(dlock_mutex_new_fenced(c, "nsx", &fenced));
  CHECK_OK(dlock_rwlock_new(c, "nsrw", &rw));
  CHECK_RC(dlock_mutex_trylock(fair), DLOCK_ENOSYNC);
  CHECK_RC(dlock_mutex_trylock(fenced), DLOCK_ENOSYNC);
  CHECK_RC(dlock_rwlock_wrlock(rw), DLOCK_ENOSYNC);
  CHECK_RC(dlock_rwlock_rdlock(rw), DLOCK_ENOSYNC);
  dlock_mutex *members[2] = {mu, fenced};
  dlock_multilock *ml;
  CHECK_OK(dlock_multilock_new(members, 2, &ml));
  CHECK_RC(dlock_multilock_lock(ml), DLOCK_ENOSYNC);
  k = th_cmd(m, "KEYS *");
  for (size_t i = 0; i < k->elements; i++)
    printf("left behind by another kind: %s\n", k->element[i]->str);
  freeReplyObject(k);
  /* The fenced lock's token counter stays: it is not the lock's state. */
  CHECK_EQ(lock_keys(m), th_cmd_int(m, "EXISTS redisson_lock_token:{nsx}"));
  dlock_multilock_free(ml);
  dlock_rwlock_free(rw);
  dlock_mutex_free(fenced);
  dlock_mutex_free(fair);
  th_cmd_int(m, "DEL redisson_lock_token:{nsx}");
  /* A reentrant acquire that cannot sync gives back only itself. */
  resume_synced(m, r, 2, 2);
  CHECK_OK(lock_synced(mu));
  th_redis_pause(r[0]);
  th_redis_pause(r[1]);
  CHECK_RC(dlock_mutex_lock(mu), DLOCK_ENOSYNC);
  CHECK_EQ(dlock_mutex_hold_count(mu), 1);
  char field[128];
  snprintf(field, sizeof field, "%s:1", dlock_client_id(c));
  redisReply *x = th_cmd(m, "HVALS ns");
  CHECK_MSG(x->elements == 1 && strcmp(x->element[0]->str, "1") == 0,
            "hold count in Redis is not 1");
  freeReplyObject(x);
  /* sync_replicas 1 with one replica back: enough. */
  resume_synced(m, r, 1, 1);
  dlock_config c1 = cfg;
  c1.sync_replicas = 1;
  dlock_client *c2 = th_client_cfg(m, &c1);
  dlock_mutex *m2;
  CHECK_OK(dlock_mutex_new(c2, "ns1", &m2));
  CHECK_OK(lock_synced(m2));
  CHECK_OK(dlock_mutex_unlock(m2));
  /* sync_replicas 0: no WAIT at all, even with both stopped. */
  th_redis_pause(r[0]);
  dlock_config c0 = cfg;
  c0.sync_replicas = 0;
  dlock_client *c3 = th_client_cfg(m, &c0);
  dlock_mutex *m3;
  CHECK_OK(dlock_mutex_new(c3, "ns0", &m3));
  t0 = th_now_ms();
  CHECK_OK(dlock_mutex_trylock(m3));
  CHECK_MSG(th_now_ms() - t0 < cfg.sync_timeout_ms, "waited");
  CHECK_OK(dlock_mutex_unlock(m3));
  th_redis_resume(r[0]);
  th_redis_resume(r[1]);
  CHECK_OK(dlock_mutex_unlock(mu));
  dlock_mutex_free(m3);
  dlock_mutex_free(m2);
  dlock_mutex_free(mu);
  dlock_client_free(c3);
  dlock_client_free(c2);
  dlock_client_free(c);
}

/* 25.9: the retries after DLOCK_ENOSYNC stay within the call's budget: a
 * trylock is one attempt, a timedlock(500) ends about when its 500 ms do
 * (plus the WAIT in flight). The old code ran the whole retry policy: with
 * the defaults (3 retries 1.5 s apart) each took 4 WAITs and 4.5 s of
 * pauses. */
TH_CASE_T(enosync_retries_keep_the_budget, 120, "sentinel slow") {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *r = th_replica_new(m);
  dlock_config cfg;
  dlock_config_init(&cfg); /* the default retry policy */
  cfg.url = m->tcp_url;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 300;
  dlock_client *c = th_client_cfg(m, &cfg);
  dlock_mutex *mu;
  CHECK_OK(dlock_mutex_new(c, "nsb", &mu));
  resume_synced(m, &r, 0, 1);
  CHECK_OK(lock_synced(mu)); /* connected, script loaded */
  CHECK_OK(dlock_mutex_unlock(mu));
  th_redis_pause(r);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_trylock(mu), DLOCK_ENOSYNC);
  int64_t took_try = th_now_ms() - t0;
  t0 = th_now_ms();
  CHECK_RC(dlock_mutex_timedlock(mu, 500, 5000), DLOCK_ENOSYNC);
  int64_t took_timed = th_now_ms() - t0;
  t0 = th_now_ms();
  CHECK_RC(dlock_mutex_timedlock(mu, 2000, 5000), DLOCK_ENOSYNC);
  int64_t took_2s = th_now_ms() - t0;
  printf("replica stopped, sync_timeout_ms 300, retries %d x %d ms: trylock "
         "%lld ms, timedlock(500) %lld ms, timedlock(2000) %lld ms\n",
         cfg.retry_attempts, cfg.retry_interval_ms, (long long)took_try,
         (long long)took_timed, (long long)took_2s);
  /* The old code: 4 WAITs + 3 pauses, 5.7 s for each call. */
  CHECK_MSG(took_try < 300 + 3000 * slow(), "trylock took %lld ms",
            (long long)took_try);
  CHECK_MSG(took_timed < 500 + 300 + 3000 * slow(),
            "timedlock(500) took %lld ms", (long long)took_timed);
  /* 2 s leave room for one retry 1.5 s later at most. */
  CHECK_MSG(took_2s < 2000 + 300 + 2500 * slow(),
            "timedlock(2000) took %lld ms", (long long)took_2s);
  CHECK_EQ(lock_keys(m), 0);
  th_redis_resume(r);
  dlock_mutex_free(mu);
  dlock_client_free(c);
}

typedef struct handed {
  dlock_mutex *m;
  int rc;
  atomic_int done;
} handed;

static void *wait_handed(void *arg) {
  handed *h = arg;
  h->rc = dlock_mutex_timedlock(h->m, 20000 * slow(), 30000);
  if (h->rc == 0)
    dlock_mutex_unlock(h->m);
  atomic_store(&h->done, 1);
  return NULL;
}

/* 25.2: a lock gained by hand-over is confirmed by the replicas like a
 * direct acquisition. A waiter queued while the replica is up; the replica
 * stops; the holder's unlock hands the lock over. The waiter's
 * confirmation (a write with WAIT behind it) falls short: it gives the lock
 * back (the next waiter gets it) and reports DLOCK_ENOSYNC. The old code
 * accepted the grant without sending anything: held, on no replica. */
TH_CASE_T(handover_confirmed_by_replicas, 120, "sentinel slow") {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *r = th_replica_new(m);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = m->tcp_url;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 300;
  cfg.retry_attempts = 0; /* the first ENOSYNC is the answer */
  dlock_client *ch = th_client_cfg(m, &cfg), *cw = th_client_cfg(m, &cfg),
               *cn = th_client_cfg(m, &cfg);
  dlock_mutex *mh, *mw, *mn;
  CHECK_OK(dlock_mutex_new(ch, "ho", &mh));
  CHECK_OK(dlock_mutex_new(cw, "ho", &mw));
  CHECK_OK(dlock_mutex_new(cn, "ho", &mn));
  resume_synced(m, &r, 0, 1);
  CHECK_OK(lock_synced(mh));
  handed w = {mw, -100, 0}, n = {mn, -100, 0};
  pthread_t tw, tn;
  pthread_create(&tw, NULL, wait_handed, &w);
  th_wait_llen(m, "dlock_lock_queue:{ho}", 1, 10000 * slow());
  th_redis_pause(r);
  /* A second waiter, queued behind: it must not be stuck behind an
   * undone hand-over (it gets the lock once the replica is back). */
  pthread_create(&tn, NULL, wait_handed, &n);
  th_wait_llen(m, "dlock_lock_queue:{ho}", 2, 10000 * slow());
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_mutex_unlock(mh)); /* its WAIT falls short: no error */
  while (!atomic_load(&w.done) && th_now_ms() - t0 < 10000 * slow())
    th_sleep_ms(5);
  printf("the waiter handed the lock with the replica stopped: %s after "
         "%lld ms\n",
         dlock_err_name(w.rc), (long long)(th_now_ms() - t0));
  CHECK_RC(w.rc, DLOCK_ENOSYNC);
  CHECK_EQ(dlock_mutex_hold_count(mw), 0);
  /* Given back: handed on to the next waiter (whose own confirmation falls
   * short too while the replica is stopped, and so on), never kept. */
  th_redis_resume(r);
  pthread_join(tw, NULL);
  pthread_join(tn, NULL);
  printf("the next waiter: %s\n", dlock_err_name(n.rc));
  CHECK_MSG(n.rc == 0 || n.rc == DLOCK_ENOSYNC, "next waiter: %s",
            dlock_err_name(n.rc));
  CHECK_EQ(th_cmd_int(m, "EXISTS ho"), 0);
  CHECK_EQ(th_cmd_int(m, "EXISTS dlock_lock_granted:{ho}"), 0);
  CHECK_EQ(th_cmd_int(m, "LLEN dlock_lock_queue:{ho}"), 0);
  CHECK_OK(lock_synced(mh));
  CHECK_OK(dlock_mutex_unlock(mh));
  dlock_mutex_free(mn);
  dlock_mutex_free(mw);
  dlock_mutex_free(mh);
  dlock_client_free(cn);
  dlock_client_free(cw);
  dlock_client_free(ch);
}

/* ---- a master killed under contention -------------------------------------
 */

typedef struct work {
  const topo *t;
  int id;
  int sync_replicas;
} work;

/* One contender: lock, read the file counter, sleep, write it + 1, unlock,
 * until the stop file appears; logs the monotonic time of each increment.
 * Exit status: 0, or 1 when the client could not be made. */
static int contender(void *arg) {
  const work *w = arg;
  dlock_config cfg = sentinel_cfg(w->t);
  cfg.sync_replicas = w->sync_replicas;
  dlock_client *c = NULL;
  if (dlock_client_new(&cfg, &c) != 0)
    return 1;
  dlock_mutex *m;
  dlock_mutex_new(c, "counter", &m);
  int fd = open(th_tmpfile("counter"), O_RDWR);
  char lp[64];
  snprintf(lp, sizeof lp, "log.%d", w->id);
  FILE *log = fopen(th_tmpfile(lp), "w");
  int64_t end = th_now_ms() + 60000 * slow();
  while (access(th_tmpfile("stop"), F_OK) != 0 && th_now_ms() < end) {
    int64_t tl = th_now_ms();
    int rc = dlock_mutex_timedlock(m, 2000, 3000);
    if (rc != 0) {
      if (getenv("DLOCK_TEST_DEBUG"))
        fprintf(stderr, "w%d +%lld..%lld %s %s\n", w->id, (long long)tl,
                (long long)th_now_ms(), dlock_err_name(rc), dlock_last_error());
      th_sleep_ms(10);
      continue;
    }
    long long v = 0;
    if (pread(fd, &v, sizeof v, 0) < 0)
      v = 0;
    th_sleep_ms(2); /* a critical section long enough to collide in */
    v++;
    if (pwrite(fd, &v, sizeof v, 0) != sizeof v)
      return 1;
    fprintf(log, "%lld\n", (long long)th_now_ms());
    fflush(log);
    int64_t tu = th_now_ms();
    rc = dlock_mutex_unlock(m); /* ELOST/ECONN across the failover */
    if (getenv("DLOCK_TEST_DEBUG") && (rc != 0 || th_now_ms() - tu > 100))
      fprintf(stderr, "w%d unlock +%lld..%lld %s %s\n", w->id, (long long)tu,
              (long long)th_now_ms(), dlock_err_name(rc), dlock_last_error());
  }
  fclose(log);
  close(fd);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* The increments the logs record (sorted into *times, n of them). */
static size_t read_logs(int n, long long *times, size_t cap) {
  size_t k = 0;
  for (int i = 0; i < n; i++) {
    char lp[64];
    snprintf(lp, sizeof lp, "log.%d", i);
    FILE *f = fopen(th_tmpfile(lp), "r");
    CHECK(f != NULL);
    long long v;
    while (k < cap && fscanf(f, "%lld", &v) == 1)
      times[k++] = v;
    fclose(f);
  }
  qsort(times, k, sizeof *times, cmp_ll);
  return k;
}

/* A thread of a second client waiting for lock "held" across the
 * failover. */
typedef struct waiter {
  const topo *t;
  int rc;
  int64_t at;
} waiter;

static void *wait_held(void *arg) {
  waiter *w = arg;
  dlock_config cfg = sentinel_cfg(w->t);
  dlock_client *c = NULL;
  w->rc = dlock_client_new(&cfg, &c);
  if (w->rc)
    return NULL;
  dlock_mutex *m;
  dlock_mutex_new(c, "held", &m);
  w->rc = dlock_mutex_timedlock(m, 60000 * slow(), 10000);
  w->at = th_now_ms();
  if (w->rc == 0)
    dlock_mutex_unlock(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return NULL;
}

/* Starts 4 contenders on the file counter (zeroed here), into pid[]. Call
 * it before this process makes a client or a thread (see th_fork: under
 * ASan a contender hung in the allocator, 2 runs in 40 under stress-ng). */
static void start_contenders(topo *t, int sync_replicas, pid_t pid[4]) {
  int fd = open(th_tmpfile("counter"), O_RDWR | O_CREAT | O_TRUNC, 0600);
  long long zero = 0;
  CHECK(pwrite(fd, &zero, sizeof zero, 0) == sizeof zero);
  close(fd);
  unlink(th_tmpfile("stop"));
  work w[4]; /* each child has its copy */
  for (int i = 0; i < 4; i++) {
    w[i] = (work){t, i, sync_replicas};
    pid[i] = th_fork(contender, &w[i]);
  }
}

/* With the contenders of start_contenders running: kills the master, waits
 * for the promotion and some more work, stops them. Returns the lost
 * updates (file counter vs. increments logged) and prints the figures. */
static long long kill_under_contention(topo *t, int sync_replicas,
                                       const pid_t pid[4]) {
  int fd = open(th_tmpfile("counter"), O_RDWR);
  CHECK(fd >= 0);
  /* Some work on the first master. */
  int64_t end = th_now_ms() + 20000 * slow();
  long long v = 0;
  while ((pread(fd, &v, sizeof v, 0) != sizeof v || v < 100) &&
         th_now_ms() < end)
    th_sleep_ms(10);
  CHECK_MSG(v >= 100, "only %lld increments before the kill", v);
  int64_t killed = th_now_ms(), promoted = 0;
  if (getenv("DLOCK_TEST_DEBUG"))
    fprintf(stderr, "killed at %lld\n", (long long)killed);
  int old = t->m->port;
  th_redis_kill(t->m);
  th_redis *nm = wait_promoted(t, old, &promoted);
  /* Work must resume on the new master. */
  long long at_promotion = 0;
  CHECK(pread(fd, &at_promotion, sizeof v, 0) == sizeof v);
  end = th_now_ms() + 30000 * slow();
  while ((pread(fd, &v, sizeof v, 0) != sizeof v || v < at_promotion + 100) &&
         th_now_ms() < end)
    th_sleep_ms(10);
  int fs = open(th_tmpfile("stop"), O_CREAT | O_WRONLY, 0600);
  close(fs);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(th_wait(pid[i], 30000 * slow()), 0);
  CHECK(pread(fd, &v, sizeof v, 0) == sizeof v);
  close(fd);
  static long long times[200000];
  size_t n = read_logs(4, times, sizeof times / sizeof times[0]);
  long long gap = 0, last_before = 0, first_after = 0;
  for (size_t i = 1; i < n; i++)
    if (times[i] - times[i - 1] > gap) {
      gap = times[i] - times[i - 1];
      last_before = times[i - 1];
      first_after = times[i];
    }
  printf("sync_replicas %d: %zu increments, counter %lld, lost %lld; "
         "master killed at +0, promoted at +%lld ms; longest gap %lld ms "
         "(+%lld .. +%lld); new master has %lld keys\n",
         sync_replicas, n, v, (long long)n - v, (long long)(promoted - killed),
         gap, (long long)(last_before - killed),
         (long long)(first_after - killed), th_cmd_int(nm, "DBSIZE"));
  CHECK_MSG(first_after > killed - 50, "no resumption after the kill");
  /* Locks come back after the promotion. The rule that a retry waits for
   * the new master's replicas, not the old master's count (f2f7c74: every
   * WAIT sat out sync_timeout_ms, locks came back 2 s late), is checked
   * where it is decided, engine.replica_sync_rules. Here only a stall: the
   * other replica's resync to the new master makes WAITs sit out
   * sync_timeout_ms legitimately until it is done, which took 2.1 s under
   * stress-ng --cpu 4 (the former 1.5 s bound failed there) -- the same
   * size as that bug, so time cannot tell them apart. */
  CHECK_MSG(first_after - promoted < 5000 * slow(),
            "work resumed %lld ms after the promotion",
            (long long)(first_after - promoted));
  return (long long)n - v;
}

TH_CASE_T(master_killed_under_contention, 180, "sentinel") {
  topo t;
  topo_start(&t);
  pid_t pid[4];
  start_contenders(&t, -1, pid); /* first: see there */
  /* A waiter subscribed before the failover, woken after it. */
  dlock_config cfg = sentinel_cfg(&t);
  dlock_client *c = th_client_cfg(t.m, &cfg);
  dlock_mutex *held;
  CHECK_OK(dlock_mutex_new(c, "held", &held));
  CHECK_OK(dlock_mutex_timedlock(held, 0, 60000));
  waiter wt = {&t, -100, 0};
  pthread_t th;
  pthread_create(&th, NULL, wait_held, &wt);
  th_wait_numsub(t.m, "redisson_lock__channel:{held}", 1, 10000 * slow());
  long long lost = kill_under_contention(&t, -1, pid);
  CHECK_MSG(lost == 0, "%lld lost updates with sync_replicas -1", lost);
  /* The holder lets go on the new master; the waiter gets it. */
  int64_t t0 = th_now_ms();
  int rc = dlock_mutex_unlock(held);
  int64_t released = th_now_ms();
  CHECK_MSG(rc == 0, "unlock after the failover: %s %s", dlock_err_name(rc),
            dlock_last_error());
  pthread_join(th, NULL);
  printf("waiter: %s %lld ms after the unlock (which took %lld ms)\n",
         dlock_err_name(wt.rc), (long long)(wt.at - released),
         (long long)(released - t0));
  CHECK_OK(wt.rc);
  CHECK_MSG(wt.at - released < 3000 * slow(), "woken %lld ms late",
            (long long)(wt.at - released));
  dlock_mutex_free(held);
  dlock_client_free(c);
}

static void *wait_through_failover(void *arg) {
  waiter *w = arg;
  dlock_config cfg = sentinel_cfg(w->t);
  /* A short retry policy: only the wait budget bridges the failover. */
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 200;
  dlock_client *c = NULL;
  w->rc = dlock_client_new(&cfg, &c);
  if (w->rc)
    return NULL;
  dlock_mutex *m;
  dlock_mutex_new(c, "ride", &m);
  w->rc = dlock_mutex_timedlock(m, 60000 * slow(), 10000);
  w->at = th_now_ms();
  if (w->rc != 0)
    printf("waiter: %s\n", dlock_last_error());
  if (w->rc == 0)
    dlock_mutex_unlock(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return NULL;
}

/* 25.11: a timed waiter (nothing held) rides out a failover: while its
 * budget lasts it keeps resolving the master and subscribing again, however
 * short its retry policy. The old code returned DLOCK_ECONN ("no master
 * 'mymaster' found through 3 sentinels") soon after the kill. */
TH_CASE_T(timed_waiter_rides_out_failover, 180, "sentinel slow") {
  topo t;
  topo_start(&t);
  dlock_config cfg = sentinel_cfg(&t);
  dlock_client *c = th_client_cfg(t.m, &cfg);
  dlock_mutex *held;
  CHECK_OK(dlock_mutex_new(c, "ride", &held));
  CHECK_OK(dlock_mutex_timedlock(held, 0, 120000));
  waiter wt = {&t, -100, 0};
  pthread_t th;
  pthread_create(&th, NULL, wait_through_failover, &wt);
  th_wait_llen(t.m, "dlock_lock_queue:{ride}", 1, 10000 * slow());
  int old = t.m->port;
  int64_t killed = th_now_ms(), promoted = 0;
  th_redis_kill(t.m);
  th_redis *nm = wait_promoted(&t, old, &promoted);
  printf("promoted %lld ms after the kill\n", (long long)(promoted - killed));
  /* The holder lets go on the new master (its hold was replicated). */
  int64_t unlocking = th_now_ms();
  int rc = dlock_mutex_unlock(held);
  int64_t released = th_now_ms();
  CHECK_MSG(rc == 0, "unlock after the failover: %s %s", dlock_err_name(rc),
            dlock_last_error());
  pthread_join(th, NULL);
  printf("waiter: %s %lld ms after the unlock (%lld ms after the kill)\n",
         dlock_err_name(wt.rc), (long long)(wt.at - released),
         (long long)(wt.at - killed));
  CHECK_OK(wt.rc);
  CHECK_MSG(wt.at >= unlocking, "the waiter got the lock before the unlock");
  CHECK_MSG(wt.at - released < 5000 * slow(), "woken %lld ms late",
            (long long)(wt.at - released));
  CHECK_EQ(th_cmd_int(nm, "EXISTS ride"), 0);
  dlock_mutex_free(held);
  dlock_client_free(c);
}

/* What WAIT does not cover, shown: the replicas are cut off from the master
 * (CLIENT KILL TYPE replica while they are stopped, so nothing more reaches
 * them), one lock is taken with each sync_replicas setting, the master is
 * killed, a replica without those writes is promoted, and a second client
 * tries the same locks on it. */
TH_CASE_T(unsynced_writes_lost_in_failover, 180, "sentinel") {
  topo t;
  topo_start(&t);
  static const int modes[3] = {0, -1, 1};
  dlock_client *a[3];
  dlock_mutex *am[3];
  for (int i = 0; i < 3; i++) {
    dlock_config cfg = sentinel_cfg(&t);
    cfg.sync_replicas = modes[i];
    cfg.sync_timeout_ms = 300;
    cfg.retry_attempts = 0;
    a[i] = th_client_cfg(t.m, &cfg);
    char name[32];
    snprintf(name, sizeof name, "split%d", i);
    CHECK_OK(dlock_mutex_new(a[i], name, &am[i]));
    CHECK_OK(dlock_mutex_trylock(am[i])); /* connected, script loaded */
    CHECK_OK(dlock_mutex_unlock(am[i]));
  }
  th_redis_pause(t.r[0]);
  th_redis_pause(t.r[1]);
  redisReply *x = th_cmd(t.m, "CLIENT KILL TYPE replica");
  freeReplyObject(x);
  int got[3];
  for (int i = 0; i < 3; i++) {
    got[i] = dlock_mutex_timedlock(am[i], 0, 60000);
    printf("sync_replicas %2d, replicas cut off: lock -> %s %s\n", modes[i],
           dlock_err_name(got[i]), got[i] ? dlock_last_error() : "");
  }
  int old = t.m->port;
  th_redis_kill(t.m);
  th_redis_resume(t.r[0]);
  th_redis_resume(t.r[1]);
  int64_t at = 0;
  (void)wait_promoted(&t, old, &at);
  dlock_config cfg = sentinel_cfg(&t);
  dlock_client *b = th_client_cfg(t.r[0], &cfg);
  for (int i = 0; i < 3; i++) {
    dlock_mutex *bm;
    CHECK_OK(dlock_mutex_new(b,
                             i == 0   ? "split0"
                             : i == 1 ? "split1"
                                      : "split2",
                             &bm));
    int rc = dlock_mutex_trylock(bm);
    int both = got[i] == 0 && rc == 0;
    int ur = got[i] == 0 ? dlock_mutex_unlock(am[i]) : DLOCK_EPERM;
    printf("sync_replicas %2d: after the failover another client's trylock "
           "-> %s; %s; the first holder's unlock -> %s\n",
           modes[i], dlock_err_name(rc),
           both ? "BOTH hold it (exclusion broken)" : "exclusion kept",
           dlock_err_name(ur));
    /* What was seen is what docs/sentinel.md states. */
    if (modes[i] == 1)
      CHECK_RC(got[i], DLOCK_ENOSYNC);
    else
      CHECK_MSG(both && ur == DLOCK_ELOST, "sync_replicas %d: as documented?",
                modes[i]);
    if (rc == 0)
      CHECK_OK(dlock_mutex_unlock(bm));
    dlock_mutex_free(bm);
  }
  dlock_client_free(b);
  for (int i = 0; i < 3; i++) {
    dlock_mutex_free(am[i]);
    dlock_client_free(a[i]);
  }
}

TH_MAIN()
