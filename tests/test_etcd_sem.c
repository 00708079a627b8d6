/*
 * test_etcd_sem.c -- the counting semaphore (dlock_sem_*) on an etcd://
 * client (src/etcd/etcd_sem.c, docs/etcd.md) against a real private etcd member
 * per case (tests/harness/th_etcd.h), through the public API: the Redis
 * semaphore's contract (init/trywait/post/value and their codes, a timed
 * wait woken by another client's post, a timeout within its budget), the
 * key's layout (a mutex of the same name is not disturbed, a value put by
 * hand is read), at most `permits` holders among threads of two clients,
 * and a change whose answer is lost on the way back counted once (a small
 * HTTP proxy drops the answer of one txn). Every case SKIPs (77) when etcd
 * is not installed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "th.h"
#include "th_etcd.h"

static dlc_etcd *g_e;
static const char *g_url;

static void start(void) {
  g_e = th_etcd_new();
  g_url = th_etcd_url(g_e, 1, "");
}

/* ---- the contract ---------------------------------------------------------
 */

TH_CASE_T(init_trywait_post_value, 60, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_client *b = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *sa, *sb;
  CHECK_OK(dlock_sem_new(a, "s1", &sa));
  CHECK_OK(dlock_sem_new(b, "s1", &sb));
  long long v = -1;
  CHECK_OK(dlock_sem_value(sa, &v)); /* not set: 0 */
  CHECK_EQ(v, 0);
  CHECK_RC(dlock_sem_trywait(sa), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "s1") != NULL);
  CHECK_RC(dlock_sem_timedwait(sa, 0), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_init(sa, -1), DLOCK_EINVAL);
  CHECK_EQ(th_etcd_count(g_e, 1, "s1", 0), 0); /* nothing written yet */
  CHECK_OK(dlock_sem_init(sa, 2));
  CHECK_RC(dlock_sem_init(sb, 3), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "already") != NULL);
  CHECK_OK(dlock_sem_value(sb, &v));
  CHECK_EQ(v, 2);
  CHECK_OK(dlock_sem_trywait(sb));
  CHECK_OK(dlock_sem_trywait(sa));
  CHECK_RC(dlock_sem_trywait(sa), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_trywait(sb), DLOCK_EBUSY);
  CHECK_OK(dlock_sem_value(sa, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(dlock_sem_post(sb));
  CHECK_OK(dlock_sem_value(sa, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(dlock_sem_timedwait(sa, 1000));
  CHECK_OK(dlock_sem_post(sa));
  CHECK_OK(dlock_sem_post(sa)); /* nothing checks a permit was taken */
  CHECK_OK(dlock_sem_value(sb, &v));
  CHECK_EQ(v, 2);
  /* init(0) is a semaphore that starts empty, and is set */
  dlock_sem *z;
  CHECK_OK(dlock_sem_new(a, "s0", &z));
  CHECK_OK(dlock_sem_init(z, 0));
  CHECK_RC(dlock_sem_init(z, 1), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_trywait(z), DLOCK_EBUSY);
  dlock_sem_free(z);
  /* post on a missing key creates it at 1; init afterwards is EBUSY */
  dlock_sem *p;
  CHECK_OK(dlock_sem_new(b, "s2", &p));
  CHECK_OK(dlock_sem_post(p));
  CHECK_OK(dlock_sem_value(p, &v));
  CHECK_EQ(v, 1);
  CHECK_RC(dlock_sem_init(p, 5), DLOCK_EBUSY);
  CHECK_OK(dlock_sem_trywait(p));
  CHECK_RC(dlock_sem_trywait(p), DLOCK_EBUSY);
  dlock_sem_free(p);
  dlock_sem_free(sa);
  dlock_sem_free(sb);
  dlock_client_free(a);
  dlock_client_free(b);
  CHECK_EQ(th_etcd_count(g_e, 1, "s1~sem", 0), 1); /* no lease */
}

TH_CASE_T(layout_one_key_beside_a_mutex_of_the_same_name, 60, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_client *b = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(a, "both", &s));
  CHECK_OK(dlock_sem_init(s, 1));
  CHECK_EQ(th_etcd_count(g_e, 1, "both~sem", 0), 1);
  CHECK_EQ(th_etcd_count(g_e, 1, "both/", 0), 0); /* not in the mutex's range */
  /* the mutex "both" sees no waiter in the semaphore's key */
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(a, "both", &ma));
  CHECK_OK(dlock_mutex_new(b, "both", &mb));
  CHECK_EQ(dlock_mutex_is_locked(mb), 0);
  CHECK_OK(dlock_mutex_trylock(ma));
  CHECK_RC(dlock_mutex_trylock(mb), DLOCK_EBUSY);
  char **w = NULL;
  size_t n = 9;
  CHECK_OK(dlock_fair_waiters_query(b, "both", &w, &n));
  CHECK_EQ(n, 0);
  dlock_fair_waiters_free(w, n);
  CHECK_OK(dlock_mutex_unlock(ma));
  CHECK_OK(dlock_mutex_trylock(mb));
  CHECK_OK(dlock_mutex_unlock(mb));
  /* the names list never shows the semaphore's key */
  char **names = NULL;
  n = 0;
  CHECK_OK(dlock_lock_names_query(a, "*", &names, &n));
  for (size_t i = 0; i < n; i++)
    CHECK_MSG(strstr(names[i], "~sem") == NULL, "name '%s'", names[i]);
  dlock_fair_waiters_free(names, n);
  /* a value put by hand (etcdctl put both~sem 5) is understood */
  th_etcd_put(g_e, "both~sem", "5");
  long long v = 0;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 5);
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 4);
  th_etcd_put(g_e, "both~sem", "many");
  CHECK_RC(dlock_sem_value(s, &v), DLOCK_EPROTO);
  CHECK_RC(dlock_sem_trywait(s), DLOCK_EPROTO);
  CHECK_RC(dlock_sem_post(s), DLOCK_EPROTO);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_sem_free(s);
  dlock_client_free(a);
  dlock_client_free(b);
}

TH_CASE_T(invalid_arguments, 60, "etcd") {
  start();
  dlock_client *c = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *s = (dlock_sem *)(void *)&s;
  CHECK_RC(dlock_sem_new(c, NULL, &s), DLOCK_EINVAL);
  CHECK(s == NULL);
  CHECK_RC(dlock_sem_new(c, "", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_new(NULL, "x", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_init(NULL, 1), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_post(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_trywait(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_wait(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_timedwait(NULL, 10), DLOCK_EINVAL);
  long long v = 0;
  CHECK_RC(dlock_sem_value(NULL, &v), DLOCK_EINVAL);
  CHECK_OK(dlock_sem_new(c, "x", &s));
  CHECK_RC(dlock_sem_value(s, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_init(s, -5), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "negative") != NULL);
  CHECK_EQ(th_etcd_count(g_e, 1, "x/", 0), 0);
  dlock_sem_free(s);
  dlock_sem_free(NULL);
  dlock_client_free(c);
}

/* ---- waiting --------------------------------------------------------------
 */

typedef struct waiter {
  dlock_sem *s;
  long long wait_ms;
  int rc;
  int64_t at;
} waiter;

static void *wait_thread(void *p) {
  waiter *w = p;
  w->rc = dlock_sem_timedwait(w->s, w->wait_ms);
  w->at = th_now_ms();
  return NULL;
}

TH_CASE_T(timedwait_woken_by_another_clients_post, 60, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_client *b = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *sa;
  waiter w = {NULL, 20000LL * th_timeout_mult(), -1, 0};
  CHECK_OK(dlock_sem_new(a, "wake", &sa));
  CHECK_OK(dlock_sem_new(b, "wake", &w.s));
  CHECK_OK(dlock_sem_init(sa, 0));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  /* it reads 0 and watches; its next look without a watch would be a
   * second after that read, so a post now is seen by the watch alone */
  th_sleep_ms(150);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_sem_post(sa));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  printf("the waiter had the permit %lld ms after the post began\n",
         (long long)(w.at - t0));
  CHECK_MSG(w.at >= t0, "returned %lld ms before the post",
            (long long)(t0 - w.at));
  /* woken by the watch, not by the once-a-second recheck (~850 ms away) */
  CHECK_MSG(w.at - t0 < 500LL * th_timeout_mult(), "after %lld ms",
            (long long)(w.at - t0));
  long long v = -1;
  CHECK_OK(dlock_sem_value(sa, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(sa);
  dlock_sem_free(w.s);
  dlock_client_free(a);
  dlock_client_free(b);
}

TH_CASE_T(timedwait_times_out_within_its_budget, 60, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(a, "tmo", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  dlock_client_stats st0, st1;
  CHECK_OK(dlock_client_stats(a, &st0));
  /* 300 ms, and 1500 ms: longer than the once-a-second recheck */
  static const long long budgets[] = {300, 1500};
  for (int i = 0; i < 2; i++) {
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_sem_timedwait(s, budgets[i]), DLOCK_ETIMEDOUT);
    int64_t took = th_now_ms() - t0;
    printf("timedwait(%lld) ended after %lld ms\n", budgets[i],
           (long long)took);
    CHECK_MSG(took >= budgets[i] - 10, "after %lld ms", (long long)took);
    CHECK_MSG(took < budgets[i] + 1000LL * th_timeout_mult(), "after %lld ms",
              (long long)took);
    CHECK(strstr(dlock_last_error(), "tmo") != NULL);
  }
  CHECK_OK(dlock_client_stats(a, &st1));
  CHECK_EQ(st1.timeouts - st0.timeouts, 2);
  /* a permit that came is taken, the count is not touched otherwise */
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(s);
  dlock_client_free(a);
}

TH_CASE_T(cancel_waits_ends_a_wait_and_takes_nothing, 60, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_client *b = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *sa;
  waiter w = {NULL, -1, -1, 0}; /* forever */
  CHECK_OK(dlock_sem_new(a, "cw", &sa));
  CHECK_OK(dlock_sem_new(b, "cw", &w.s));
  CHECK_OK(dlock_sem_init(sa, 0));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  th_sleep_ms(300); /* it reads 0 and watches */
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_client_cancel_waits(b));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  CHECK_MSG(w.at - t0 < 500LL * th_timeout_mult(), "after %lld ms",
            (long long)(w.at - t0));
  CHECK_OK(dlock_sem_post(sa));
  long long v = -1;
  CHECK_OK(dlock_sem_value(sa, &v));
  CHECK_EQ(v, 1);                   /* the cancelled wait took nothing */
  CHECK_OK(dlock_sem_trywait(w.s)); /* a later call is not cancelled */
  dlock_sem_free(sa);
  dlock_sem_free(w.s);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* A wait cancelled while its attempt is failing (the member stopped: the
 * recheck's read hangs until the command timeout) returns DLOCK_ECANCELED,
 * as dlock.h promises -- not the attempt's failure (the rule of
 * dlock__budget_end, src/client/wait.c, which the Redis waits and the etcd
 * mutex apply; the etcd semaphore's wait did not, at a1a2e80: ECONN). */
TH_CASE_T(cancel_during_a_failing_attempt_reports_the_cancel, 90, "etcd") {
  start();
  dlock_client *a = th_etcd_client(g_url, 5000, NULL);
  dlock_client *b = th_etcd_client(g_url, 5000, NULL);
  dlock_sem *sa;
  waiter w = {NULL, -1, -1, 0}; /* forever */
  CHECK_OK(dlock_sem_new(a, "cwf", &sa));
  CHECK_OK(dlock_sem_new(b, "cwf", &w.s));
  CHECK_OK(dlock_sem_init(sa, 0));
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  th_sleep_ms(300); /* it reads 0 and watches */
  th_etcd_pause(g_e);
  /* the wait's recheck (DLOCK__ENG_QUEUED_RECHECK_MS after its read) is
   * now in flight, and stays so for the command timeout */
  th_sleep_ms(1300);
  CHECK_OK(dlock_client_cancel_waits(b));
  pthread_join(t, NULL);
  th_etcd_resume(g_e);
  CHECK_MSG(w.rc == DLOCK_ECANCELED, "the cancelled wait: %s",
            dlock_err_name(w.rc));
  long long v = -1;
  CHECK_OK(dlock_sem_value(sa, &v));
  CHECK_EQ(v, 0); /* it took nothing */
  dlock_sem_free(sa);
  dlock_sem_free(w.s);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- at most `permits` holders ------------------------------------------- */

enum { EX_THREADS = 4, EX_ROUNDS = 200, EX_PERMITS = 2 };

static _Atomic int g_inside, g_max_inside, g_over, g_done, g_errors;

typedef struct ex_arg {
  dlock_sem *s;
} ex_arg;

static void *ex_thread(void *p) {
  ex_arg *x = p;
  for (int i = 0; i < EX_ROUNDS; i++) {
    int rc = dlock_sem_timedwait(x->s, 30000LL * th_timeout_mult());
    if (rc) {
      fprintf(stderr, "timedwait: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      atomic_fetch_add(&g_errors, 1);
      continue;
    }
    int in = atomic_fetch_add(&g_inside, 1) + 1;
    int m = atomic_load(&g_max_inside);
    while (in > m && !atomic_compare_exchange_weak(&g_max_inside, &m, in))
      ;
    if (in > EX_PERMITS)
      atomic_fetch_add(&g_over, 1);
    usleep(300);
    atomic_fetch_sub(&g_inside, 1);
    atomic_fetch_add(&g_done, 1);
    if ((rc = dlock_sem_post(x->s)) != 0) {
      fprintf(stderr, "post: %s %s\n", dlock_err_name(rc), dlock_last_error());
      atomic_fetch_add(&g_errors, 1);
    }
  }
  return NULL;
}

TH_CASE_T(four_threads_of_two_clients_never_exceed_two_permits, 240, "etcd") {
  start();
  dlock_client *c[2] = {th_etcd_client(g_url, 5000, NULL),
                        th_etcd_client(g_url, 5000, NULL)};
  ex_arg x[EX_THREADS];
  pthread_t t[EX_THREADS];
  for (int i = 0; i < EX_THREADS; i++)
    CHECK_OK(dlock_sem_new(c[i % 2], "ex", &x[i].s));
  CHECK_OK(dlock_sem_init(x[0].s, EX_PERMITS));
  int64_t t0 = th_now_ms();
  for (int i = 0; i < EX_THREADS; i++)
    pthread_create(&t[i], NULL, ex_thread, &x[i]);
  for (int i = 0; i < EX_THREADS; i++)
    pthread_join(t[i], NULL);
  printf("%d sections in %lld ms, at most %d inside at once\n",
         atomic_load(&g_done), (long long)(th_now_ms() - t0),
         atomic_load(&g_max_inside));
  CHECK_EQ(atomic_load(&g_errors), 0);
  CHECK_EQ(atomic_load(&g_over), 0);
  CHECK_EQ(atomic_load(&g_done), EX_THREADS * EX_ROUNDS);
  CHECK(atomic_load(&g_max_inside) <= EX_PERMITS);
  long long v = -1;
  CHECK_OK(dlock_sem_value(x[1].s, &v)); /* every permit came back once */
  CHECK_EQ(v, EX_PERMITS);
  for (int i = 0; i < EX_THREADS; i++)
    dlock_sem_free(x[i].s);
  dlock_client_free(c[0]);
  dlock_client_free(c[1]);
}

/* ---- an answer lost on the way back -------------------------------------- */

/* A TCP proxy in front of the etcd member that, when armed, lets the next
 * txn whose request contains `match` reach etcd and run, drops its answer
 * and closes the connection: the client cannot know whether it ran, and
 * sends it again (or libcurl does). `meanwhile`, when set, runs after the
 * txn ran and before the connection closes: another change of the key gets
 * in between the lost copy and the one sent again. */
typedef struct hproxy {
  int lfd, port, target;
  pthread_t acc;
  _Atomic int armed, fired, stop, conns;
  char match[256];
  void (*meanwhile)(void);
} hproxy;

static hproxy g_hp;

typedef struct hconn {
  int c, u;
} hconn;

static int hp_write(int fd, const char *p, ssize_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, (size_t)n);
    if (w <= 0)
      return -1;
    p += w;
    n -= w;
  }
  return 0;
}

/* One connection: relays both ways; drops the armed txn's answer. */
static void *hp_conn(void *p) {
  hconn *k = p;
  char req[16384], buf[16384];
  size_t rl = 0;
  int dropping = 0;
  int64_t answered = 0, end = th_now_ms() + 300000;
  req[0] = '\0';
  while (!atomic_load(&g_hp.stop) && th_now_ms() < end) {
    struct pollfd pf[2] = {{k->c, POLLIN, 0}, {k->u, POLLIN, 0}};
    int pr = poll(pf, 2, 50);
    if (dropping && answered && th_now_ms() - answered >= 100) {
      if (g_hp.meanwhile)
        g_hp.meanwhile();
      atomic_fetch_add(&g_hp.fired, 1);
      break; /* the answer is gone: close both sides */
    }
    if (pr <= 0)
      continue;
    if (pf[0].revents) {
      ssize_t n = read(k->c, buf, sizeof buf);
      if (n <= 0 || hp_write(k->u, buf, n) != 0)
        break;
      size_t take = rl + (size_t)n < sizeof req - 1 ? (size_t)n : 0;
      memcpy(req + rl, buf, take);
      rl += take;
      req[rl] = '\0';
      int one = 1;
      if (strstr(req, "POST /v3/kv/txn") && strstr(req, g_hp.match) &&
          atomic_compare_exchange_strong(&g_hp.armed, &one, 0))
        dropping = 1;
    }
    if (pf[1].revents) {
      ssize_t n = read(k->u, buf, sizeof buf);
      if (n <= 0)
        break;
      if (dropping) {
        if (!answered)
          answered = th_now_ms();
        continue;
      }
      if (hp_write(k->c, buf, n) != 0)
        break;
      rl = 0; /* the next request starts after this answer */
      req[0] = '\0';
    }
  }
  close(k->c);
  close(k->u);
  free(k);
  atomic_fetch_sub(&g_hp.conns, 1);
  return NULL;
}

static void *hp_accept(void *p) {
  (void)p;
  while (!atomic_load(&g_hp.stop)) {
    struct pollfd pf = {g_hp.lfd, POLLIN, 0};
    if (poll(&pf, 1, 50) <= 0)
      continue;
    int c = accept(g_hp.lfd, NULL, NULL);
    if (c < 0)
      continue;
    int u = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_hp.target);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    hconn *k = malloc(sizeof *k);
    if (u < 0 || !k || connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
      close(c);
      if (u >= 0)
        close(u);
      free(k);
      continue;
    }
    k->c = c;
    k->u = u;
    atomic_fetch_add(&g_hp.conns, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, hp_conn, k) != 0) {
      atomic_fetch_sub(&g_hp.conns, 1);
      close(c);
      close(u);
      free(k);
      continue;
    }
    pthread_detach(t);
  }
  return NULL;
}

static void hp_start(int target) {
  memset(&g_hp, 0, sizeof g_hp);
  g_hp.target = target;
  g_hp.lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (g_hp.lfd < 0 || bind(g_hp.lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(g_hp.lfd, 64) != 0 ||
      getsockname(g_hp.lfd, (struct sockaddr *)&a, &al) != 0)
    th_fail(__FILE__, __LINE__, "proxy: no listening socket");
  g_hp.port = ntohs(a.sin_port);
  pthread_create(&g_hp.acc, NULL, hp_accept, NULL);
}

static void hp_stop(void) {
  atomic_store(&g_hp.stop, 1);
  pthread_join(g_hp.acc, NULL);
  for (int i = 0; i < 100 && atomic_load(&g_hp.conns) > 0; i++)
    th_sleep_ms(20);
  close(g_hp.lfd);
}

/* Arms the proxy on the next txn of key (its base64, as the request has
 * it). */
static void hp_arm(const char *key, void (*meanwhile)(void)) {
  static const char t[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *s = (const unsigned char *)key;
  size_t n = strlen(key), o = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)s[i] << 16;
    if (i + 1 < n)
      v |= (unsigned)s[i + 1] << 8;
    if (i + 2 < n)
      v |= s[i + 2];
    g_hp.match[o++] = t[(v >> 18) & 63];
    g_hp.match[o++] = t[(v >> 12) & 63];
    g_hp.match[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
    g_hp.match[o++] = i + 2 < n ? t[v & 63] : '=';
  }
  g_hp.match[o] = '\0';
  g_hp.meanwhile = meanwhile;
  atomic_store(&g_hp.armed, 1);
}

static dlock_sem *g_other; /* another client's object, for `meanwhile` */
static int g_meanwhile_rc = -1;
static void other_posts(void) { g_meanwhile_rc = dlock_sem_post(g_other); }
static void other_takes(void) { g_meanwhile_rc = dlock_sem_trywait(g_other); }

TH_CASE_T(a_change_whose_answer_is_lost_counts_once, 60, "etcd") {
  start();
  hp_start(g_e->port);
  char purl[64];
  snprintf(purl, sizeof purl, "etcd://127.0.0.1:%d", g_hp.port);
  dlock_client *d = th_etcd_client(g_url, 5000, NULL); /* direct */
  dlock_client *p = th_etcd_client(purl, 5000, NULL);  /* through the proxy */
  dlock_sem *sd, *sp;
  CHECK_OK(dlock_sem_new(d, "lost", &sd));
  CHECK_OK(dlock_sem_new(p, "lost", &sp));
  g_other = sd;
  long long v = -1;
  /* init: its create runs, the answer is lost, the copy finds the key */
  hp_arm("lost~sem", NULL);
  CHECK_OK(dlock_sem_init(sp, 0));
  CHECK_EQ(atomic_load(&g_hp.fired), 1);
  CHECK_OK(dlock_sem_value(sd, &v));
  CHECK_EQ(v, 0);
  /* post: +1 once, not twice */
  hp_arm("lost~sem", NULL);
  CHECK_OK(dlock_sem_post(sp));
  CHECK_EQ(atomic_load(&g_hp.fired), 2);
  CHECK_OK(dlock_sem_value(sd, &v));
  CHECK_EQ(v, 1);
  /* post, and another client's post between the lost copy and the next:
   * the key's history says the first change was ours */
  hp_arm("lost~sem", other_posts);
  CHECK_OK(dlock_sem_post(sp));
  CHECK_EQ(atomic_load(&g_hp.fired), 3);
  CHECK_OK(g_meanwhile_rc);
  CHECK_OK(dlock_sem_value(sd, &v));
  CHECK_EQ(v, 3); /* 1 + ours + the other's */
  /* an acquire takes one permit, not two */
  hp_arm("lost~sem", NULL);
  CHECK_OK(dlock_sem_trywait(sp));
  CHECK_EQ(atomic_load(&g_hp.fired), 4);
  CHECK_OK(dlock_sem_value(sd, &v));
  CHECK_EQ(v, 2);
  /* ... with another client's acquire in between */
  hp_arm("lost~sem", other_takes);
  CHECK_OK(dlock_sem_timedwait(sp, 5000LL * th_timeout_mult()));
  CHECK_EQ(atomic_load(&g_hp.fired), 5);
  CHECK_OK(g_meanwhile_rc);
  CHECK_OK(dlock_sem_value(sd, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(sp);
  dlock_sem_free(sd);
  dlock_client_free(p);
  dlock_client_free(d);
  hp_stop();
}

TH_MAIN()
