/*
 * failover.c -- the failover scenario of dlock-seckill: the articles'
 * verdict, measured. The last item is for sale; buyer A holds the lock and
 * is paying when the LOCK STORE fails over; buyer B asks for the lock.
 *
 *   dlock on Redis: a master, one replica, three sentinels. The replica
 *     lags (its link is cut and it is paused) when A locks, so A's lock
 *     exists on the master only; the master is killed, the replica resumes
 *     and Sentinel promotes it -- without A's key. B locks on the new
 *     master and sells the item; A, still paying, sells it too: two
 *     holders, oversold. (Redis replication is asynchronous; dlock's
 *     replica sync, WAIT, counts only the replicas connected at the time.)
 *   dlock on etcd: three members, A's connection on the leader; the leader
 *     is killed. A's lock was committed by a quorum before it was answered,
 *     so the new leader has it: A's keepalives go on through another
 *     member, B waits until A has sold and unlocked, then finds the stock
 *     empty. No oversell.
 *
 * Both stories run the same steps: A locks and reads the stock (one, in a
 * file: the shop's database is not what fails here); the store fails over;
 * B waits for the lock (at most B_WAIT_MS) in its own thread while A keeps
 * paying (until B is done, or PAY_MS after the fault); each holder that
 * saw stock sells it. The cell says how many held at once and what was
 * oversold; the lesson says why, in one line. Servers are private (free
 * loopback ports, a temp dir) and die with the tool.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "etcd_spawn.h"
#include "redis_spawn.h"
#include "seckill.h"

#define B_WAIT_MS 20000 /* B's budget: past Sentinel's failover */
#define PAY_MS 8000     /* A pays this long after the fault, at most */
#define DOWN_MS 1500    /* Sentinel's down-after-milliseconds */
/* The buyers' watchdog lease: o->watchdog_ms, which the scenario sets to
 * 10 s -- a realistic one (dlock's default is 30 s, etcd's
 * concurrency.Session's 60 s), longer than a failover takes, so A's lease
 * still runs when B asks. A checks its validity before it pays, as a
 * correct holder does, and a payment once started is not taken back: A
 * sells what it paid for. On Redis A's watchdog may report the loss while
 * A pays (the renewal after +switch-master finds the key gone) -- too late:
 * the card is charged. A store that forgets a granted lock cannot be made
 * safe by the holder's checks. */
static long long lease_of(const sk_opts *o) {
  return o->watchdog_ms < 2000 ? 2000 : (o->watchdog_ms + 999) / 1000 * 1000;
}

/* One story's shared state. */
typedef struct story {
  dlock_mutex *ma, *mb;
  char stock_path[256];
  atomic_int inside;  /* holders in the critical section now */
  atomic_int overlap; /* B got in while A was inside */
  atomic_int b_done;  /* B's attempt ended */
  int b_rc;           /* B's lock answer */
  long long b_at_ms;  /* when B got it (ms after the fault) */
  long long t_fault;  /* monotonic ms of the fault */
  long long orders;
  char err[256];
} story;

static long long read_stock(const story *s) {
  FILE *f = fopen(s->stock_path, "r");
  long long v = -1;
  if (f) {
    if (fscanf(f, "%lld", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

static void write_stock(const story *s, long long v) {
  FILE *f = fopen(s->stock_path, "w");
  if (f) {
    fprintf(f, "%lld\n", v);
    fclose(f);
  }
}

/* B: waits for the lock; buys if it sees stock. */
static void *buyer_b(void *arg) {
  story *s = arg;
  s->b_rc = dlock_mutex_timedlock(s->mb, B_WAIT_MS, -1);
  if (s->b_rc == 0) {
    s->b_at_ms = dlc_now_ms() - s->t_fault;
    if (atomic_fetch_add(&s->inside, 1) > 0)
      atomic_store(&s->overlap, 1);
    long long v = read_stock(s);
    if (v > 0) {
      write_stock(s, v - 1);
      s->orders++;
    }
    atomic_fetch_sub(&s->inside, 1);
    (void)dlock_mutex_unlock(s->mb);
  } else {
    snprintf(s->err, sizeof s->err, "B: %s (%s)", dlock_err_name(s->b_rc),
             dlock_last_error());
  }
  atomic_store(&s->b_done, 1);
  return NULL;
}

/* A locks and reads; fault() fails the store over; B asks; A pays, then
 * sells what it saw. 0, or -1 with s->err set. */
static int run_story(story *s, void (*fault)(void *), void *arg) {
  write_stock(s, 1);
  int rc = dlock_mutex_lock(s->ma);
  if (rc) {
    snprintf(s->err, sizeof s->err, "A could not lock: %s (%s)",
             dlock_err_name(rc), dlock_last_error());
    return -1;
  }
  atomic_fetch_add(&s->inside, 1);
  long long seen = read_stock(s);
  long long valid = 0;
  int paying = seen > 0 && dlock_mutex_validity(s->ma, &valid) == 0 &&
               valid > 0; /* A holds and there is stock: A pays */
  fault(arg);
  s->t_fault = dlc_now_ms();
  pthread_t t;
  if (pthread_create(&t, NULL, buyer_b, s) != 0) {
    snprintf(s->err, sizeof s->err, "pthread_create failed");
    return -1;
  }
  while (!atomic_load(&s->b_done) && dlc_now_ms() - s->t_fault < PAY_MS)
    dlc_sleep_ms(20);
  if (paying) { /* A paid: it sells what it saw */
    write_stock(s, read_stock(s) - 1);
    s->orders++;
  }
  atomic_fetch_sub(&s->inside, 1);
  (void)dlock_mutex_unlock(s->ma);
  pthread_join(t, NULL);
  return 0;
}

static void fill_result(const story *s, sk_result *res, long long t0,
                        const char *store) {
  res->ran = 1;
  res->orders = s->orders;
  res->final_stock = read_stock(s);
  res->oversold = s->orders > 1 ? s->orders - 1 : 0;
  res->wall_ms = (double)(dlc_now_ms() - t0);
  int two = atomic_load(&s->overlap);
  res->correct = res->oversold == 0 && !two;
  if (two)
    snprintf(res->cell, sizeof res->cell, "2 holders, oversold %lld",
             res->oversold);
  else if (s->b_rc == 0)
    snprintf(res->cell, sizeof res->cell, "B waited %.1f s: ok",
             (double)s->b_at_ms / 1000);
  else
    snprintf(res->cell, sizeof res->cell, "B refused: ok");
  if (!strcmp(store, "redis"))
    snprintf(res->lesson, sizeof res->lesson, "%s",
             two ? "Redis replicates asynchronously: the promoted replica had "
                   "never seen A's lock, so B got it too while A was paying "
                   "(AP)"
                 : "the replica did not lose the lock this time (it was "
                   "promoted with A's key): the race is real, run again");
  else
    snprintf(res->lesson, sizeof res->lesson, "%s",
             two ? "two holders on etcd: this must not happen, please report "
                   "it"
                 : "etcd answers a lock only once a quorum has it: the new "
                   "leader had A's key, so B waited until A was done (CP)");
}

/* ---- Redis: master, lagging replica, 3 sentinels ------------------------- */

typedef struct redis_topo {
  dlc_redis m, r, s[3];
} redis_topo;

static redisContext *conn(int port) {
  struct timeval tv = {2, 0};
  return redisConnectWithTimeout("127.0.0.1", port, tv);
}

/* 1 when INFO replication of port contains what. */
static int info_has(int port, const char *what) {
  redisContext *c = conn(port);
  redisReply *x = c && !c->err ? redisCommand(c, "INFO replication") : NULL;
  int ok = x && x->type == REDIS_REPLY_STRING && strstr(x->str, what);
  if (x)
    freeReplyObject(x);
  if (c)
    redisFree(c);
  return ok;
}

static int wait_for(int (*check)(int, const char *), int port, const char *w,
                    int ms) {
  long long end = dlc_now_ms() + ms;
  while (dlc_now_ms() < end) {
    if (check(port, w))
      return 0;
    dlc_sleep_ms(50);
  }
  return -1;
}

/* 1 when sentinel at port lists a replica of mymaster. */
static int sentinel_sees(int port, const char *w) {
  (void)w;
  redisContext *c = conn(port);
  redisReply *x =
      c && !c->err ? redisCommand(c, "SENTINEL replicas mymaster") : NULL;
  int ok = x && x->type == REDIS_REPLY_ARRAY && x->elements > 0;
  if (x)
    freeReplyObject(x);
  if (c)
    redisFree(c);
  return ok;
}

static int start_redis(redis_topo *t, const char *dir) {
  char extra[512];
  if (dlc_redis_prepare(&t->m, dir, "master-", NULL) ||
      dlc_redis_start(&t->m, 1, 1))
    return -1;
  snprintf(extra, sizeof extra,
           "replicaof 127.0.0.1 %d\nrepl-diskless-sync-delay 0\n", t->m.port);
  if (dlc_redis_prepare(&t->r, dir, "replica-", extra) ||
      dlc_redis_start(&t->r, 1, 1))
    return -1;
  char online[64];
  snprintf(online, sizeof online, "port=%d,state=online", t->r.port);
  if (wait_for(info_has, t->m.port, online, 20000))
    return -1;
  snprintf(extra, sizeof extra,
           "sentinel monitor mymaster 127.0.0.1 %d 2\n"
           "sentinel down-after-milliseconds mymaster %d\n"
           "sentinel failover-timeout mymaster 10000\n",
           t->m.port, DOWN_MS);
  for (int i = 0; i < 3; i++) {
    if (dlc_redis_prepare(&t->s[i], dir, "sentinel-", extra))
      return -1;
    t->s[i].sentinel = 1;
    if (dlc_redis_start(&t->s[i], 1, 1))
      return -1;
  }
  for (int i = 0; i < 3; i++)
    if (wait_for(sentinel_sees, t->s[i].port, "", 20000))
      return -1;
  return 0;
}

static void stop_redis(redis_topo *t) {
  dlc_redis_stop_private(&t->m);
  dlc_redis_stop_private(&t->r);
  for (int i = 0; i < 3; i++)
    dlc_redis_stop_private(&t->s[i]);
}

/* The replica lags: paused, its link cut (what A writes next never reaches
 * it). Runs before A locks. */
static void redis_lag(redis_topo *t) {
  kill(t->r.pid, SIGSTOP);
  redisContext *c = conn(t->m.port);
  if (c && !c->err) {
    redisReply *x = redisCommand(c, "CLIENT KILL TYPE replica");
    if (x)
      freeReplyObject(x);
  }
  if (c)
    redisFree(c);
}

/* The fault: the master dies, the replica comes back, Sentinel promotes
 * it. */
static void redis_fault(void *arg) {
  redis_topo *t = arg;
  dlc_redis_kill(&t->m);
  kill(t->r.pid, SIGCONT);
}

static dlock_client *client(const char *url, long long wd, char *err,
                            size_t el) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = (int)wd;
  cfg.connect_timeout_ms = 1000;
  cfg.command_timeout_ms = 2000;
  cfg.retry_interval_ms = 200;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  /* a message longer than err is cut, and says so at its end */
  if (rc &&
      snprintf(err, el, "dlock_client_new(%s): %s", url, dlock_last_error()) >=
          (int)el &&
      el > 4)
    memcpy(err + el - 4, "...", 4);
  return c;
}

/* A story on clients a and b of lock `name`. */
static void story_run(story *s, dlock_client *a, dlock_client *b,
                      void (*fault)(void *), void *arg, sk_result *res,
                      long long t0, const char *store) {
  if (dlock_mutex_new(a, "seckill:failover", &s->ma) ||
      dlock_mutex_new(b, "seckill:failover", &s->mb)) {
    snprintf(res->skipped, sizeof res->skipped, "dlock_mutex_new: %.120s",
             dlock_last_error());
    return;
  }
  if (run_story(s, fault, arg) == 0)
    fill_result(s, res, t0, store);
  else
    snprintf(res->skipped, sizeof res->skipped, "%.150s", s->err);
  if (s->err[0])
    snprintf(res->first_error, sizeof res->first_error, "%s", s->err);
  dlock_mutex_free(s->ma);
  dlock_mutex_free(s->mb);
}

static void failover_redis(const sk_opts *o, const char *dir, sk_result *res) {
  static redis_topo t;
  memset(&t, 0, sizeof t);
  long long t0 = dlc_now_ms();
  story s;
  memset(&s, 0, sizeof s);
  snprintf(s.stock_path, sizeof s.stock_path, "%s/stock", dir);
  if (start_redis(&t, dir) != 0) {
    snprintf(res->skipped, sizeof res->skipped,
             "could not start a Redis master, replica and 3 sentinels");
    stop_redis(&t);
    return;
  }
  char url[256];
  snprintf(url, sizeof url,
           "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
           t.s[0].port, t.s[1].port, t.s[2].port);
  dlock_client *a = client(url, lease_of(o), s.err, sizeof s.err);
  dlock_client *b = a ? client(url, lease_of(o), s.err, sizeof s.err) : 0;
  if (a && b) {
    redis_lag(&t);
    story_run(&s, a, b, redis_fault, &t, res, t0, "redis");
  } else {
    snprintf(res->skipped, sizeof res->skipped, "%.150s", s.err);
  }
  dlock_client_free(a);
  dlock_client_free(b);
  stop_redis(&t);
}

/* ---- etcd: 3 members, the leader killed ---------------------------------- */

static void etcd_fault(void *arg) { dlc_etcd_kill(arg); }

static void failover_etcd(const sk_opts *o, const char *dir, sk_result *res) {
  static dlc_etcd m[3];
  memset(m, 0, sizeof m);
  long long t0 = dlc_now_ms();
  story s;
  memset(&s, 0, sizeof s);
  snprintf(s.stock_path, sizeof s.stock_path, "%s/stock", dir);
  int leader = dlc_etcd_cluster(m, 3, dir, 0) == 0 ? dlc_etcd_leader(m, 3) : -1;
  for (int i = 0; leader < 0 && i < 100 && m[0].pid > 0; i++) {
    dlc_sleep_ms(100);
    leader = dlc_etcd_leader(m, 3);
  }
  if (leader < 0) {
    snprintf(res->skipped, sizeof res->skipped,
             "could not start a 3-member etcd cluster");
  } else {
    /* A's and B's connections start on the leader: it dies under them */
    char url[256];
    snprintf(url, sizeof url, "etcd://%s,%s,%s", m[leader].ep,
             m[(leader + 1) % 3].ep, m[(leader + 2) % 3].ep);
    dlock_client *a = client(url, lease_of(o), s.err, sizeof s.err);
    dlock_client *b = a ? client(url, lease_of(o), s.err, sizeof s.err) : 0;
    if (a && b)
      story_run(&s, a, b, etcd_fault, &m[leader], res, t0, "etcd");
    else
      snprintf(res->skipped, sizeof res->skipped, "%.150s", s.err);
    dlock_client_free(a);
    dlock_client_free(b);
  }
  for (int i = 0; i < 3; i++)
    dlc_etcd_kill(&m[i]);
}

static void rm_rf(const char *dir) {
  pid_t p = fork();
  if (p == 0) {
    execlp("rm", "rm", "-rf", dir, (char *)NULL);
    _exit(127);
  }
  if (p > 0)
    waitpid(p, NULL, 0);
}

void sk_failover_run(const sk_opts *o, const sk_strategy *s, sk_result *res) {
  memset(res, 0, sizeof *res);
  res->s = s;
  if (s->kind != SK_DLOCK && s->kind != SK_ETCD) {
    snprintf(res->skipped, sizeof res->skipped,
             "the failover scenario fails the lock store over: dlock (Redis "
             "Sentinel) and etcd only");
    return;
  }
  if (s->kind == SK_ETCD && !dlc_etcd_installed()) {
    snprintf(res->skipped, sizeof res->skipped,
             "etcd is not installed (scripts/install-deps.sh)");
    return;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[200];
  snprintf(dir, sizeof dir, "%s/dlock-failover-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    snprintf(res->skipped, sizeof res->skipped, "mkdtemp: %s", strerror(errno));
    return;
  }
  if (s->kind == SK_DLOCK)
    failover_redis(o, dir, res);
  else
    failover_etcd(o, dir, res);
  if (!o->tty)
    fprintf(stderr, "dlock-seckill: failover %s: %s in %.1f s\n", s->name,
            !res->ran      ? "not run"
            : res->correct ? "correct"
                           : "FAILED",
            res->wall_ms / 1000.0);
  rm_rf(dir);
}
