/*
 * external_check.c -- the Bar, checked from outside the project: a
 * program that knows only <dlock.h> (no src/, no hiredis, no test harness),
 * linked to the built library, run against a fresh redis-server through the
 * scenarios: bad input, mutual exclusion across processes, reentrancy,
 * owner-only unlock, lease and watchdog, lost-lock reporting, wake-up
 * latency, crash recovery.
 *
 *   external_check            starts its own redis-server (unix socket in a
 *                             mkdtemp dir; `redis-server` must be on PATH)
 *   external_check URL        uses that server instead (it must be empty of
 *                             keys named ext-*)
 *
 * Exits 0 when every check passed, 1 otherwise (each failure is printed).
 */
#include <dlock.h>

#if defined(__has_include)
#if __has_include("util/util.h")
#error "external_check must not see the library's private headers"
#endif
#endif

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_failures;
static char g_url[512];
static char g_dir[64];
static pid_t g_server;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      g_failures++;                                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

#define EXPECT_RC(call, want)                                                  \
  do {                                                                         \
    int rc_ = (call);                                                          \
    EXPECT(rc_ == (want), "%s = %s, want %s (%s)", #call, dlock_err_name(rc_), \
           dlock_err_name(want), dlock_last_error());                          \
  } while (0)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int64_t slack(void) {
  const char *m = getenv("DLOCK_TEST_TIMEOUT_MULT");
  int v = m ? atoi(m) : 1;
  return v > 1 ? v : 1;
}

/* ---- the private redis-server -------------------------------------------- */

static void stop_server(void) {
  if (g_server > 0) {
    kill(g_server, SIGKILL);
    waitpid(g_server, NULL, 0);
    g_server = 0;
    if (!g_failures && g_dir[0]) { /* keep the log of a failed run */
      char p[128];
      snprintf(p, sizeof p, "%s/redis.log", g_dir);
      unlink(p);
      snprintf(p, sizeof p, "%s/redis.sock", g_dir);
      unlink(p);
      rmdir(g_dir);
    }
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: external_check timed out\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  if (g_server > 0)
    kill(g_server, SIGKILL);
  _exit(1);
}

static int start_server(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/dlock-ext-XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return -1;
  }
  char sock[100], log[100];
  snprintf(sock, sizeof sock, "%s/redis.sock", g_dir);
  snprintf(log, sizeof log, "%s/redis.log", g_dir);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock,
           "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
           "--dir", g_dir, "--logfile", log, (char *)NULL);
    _exit(127);
  }
  g_server = pid;
  atexit(stop_server);
  snprintf(g_url, sizeof g_url, "unix://%s", sock);
  /* Ready when the socket accepts a connection (bounded: 10 s). */
  for (int i = 0; i < 1000; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      g_server = 0;
      fprintf(stderr, "redis-server exited at start (see %s)\n", log);
      return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
      close(fd);
    if (ok)
      return 0;
    sleep_ms(10);
  }
  fprintf(stderr, "redis-server did not come up\n");
  return -1;
}

static dlock_client *new_client(int wd_ms, void (*lost)(const char *, void *)) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g_url;
  cfg.retry_interval_ms = 100;
  if (wd_ms > 0)
    cfg.watchdog_timeout_ms = wd_ms;
  cfg.on_lock_lost = lost;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc) {
    fprintf(stderr, "FATAL: client on %s: %s %s\n", g_url, dlock_err_name(rc),
            dlock_last_error());
    exit(1);
  }
  return c;
}

/* ---- workers, forked before this process has any thread ------------------ */

enum { ME_PROCS = 3, ME_THREADS = 2, ME_ITERS = 50 };

typedef struct shared {
  long counter;       /* non-atomic read-modify-write under the lock */
  atomic_int inside;  /* threads inside the critical section */
  atomic_int overlap; /* times someone found another one inside */
  atomic_int errors;
} shared;

static shared *g_sh;

static void *me_thread(void *arg) {
  dlock_client *c = arg;
  dlock_mutex *m;
  if (dlock_mutex_new(c, "ext-me", &m)) {
    atomic_fetch_add(&g_sh->errors, 1);
    return NULL;
  }
  for (int i = 0; i < ME_ITERS; i++) {
    int rc = dlock_mutex_lock(m);
    if (rc) {
      fprintf(stderr, "worker lock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      atomic_fetch_add(&g_sh->errors, 1);
      continue;
    }
    if (atomic_fetch_add(&g_sh->inside, 1) != 0)
      atomic_fetch_add(&g_sh->overlap, 1);
    long v = *(volatile long *)&g_sh->counter;
    if (i % 10 == 0)
      sleep_ms(1);
    *(volatile long *)&g_sh->counter = v + 1;
    atomic_fetch_sub(&g_sh->inside, 1);
    if ((rc = dlock_mutex_unlock(m)) != 0) {
      fprintf(stderr, "worker unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      atomic_fetch_add(&g_sh->errors, 1);
    }
  }
  dlock_mutex_free(m);
  return NULL;
}

static void wait_gate(int fd) {
  char b;
  while (read(fd, &b, 1) < 0 && errno == EINTR) {
  }
}

static void me_worker(int gate) {
  wait_gate(gate);
  dlock_client *c = new_client(0, NULL);
  pthread_t t[ME_THREADS];
  for (int i = 0; i < ME_THREADS; i++)
    pthread_create(&t[i], NULL, me_thread, c);
  for (int i = 0; i < ME_THREADS; i++)
    pthread_join(t[i], NULL);
  dlock_client_free(c);
  _exit(0);
}

static void crash_worker(int gate, int report) {
  wait_gate(gate);
  dlock_client *c = new_client(900, NULL);
  dlock_mutex *m;
  char ok = 'L';
  if (dlock_mutex_new(c, "ext-crash", &m) || dlock_mutex_lock(m))
    ok = 'E';
  ssize_t w = write(report, &ok, 1);
  (void)w;
  for (int i = 0; i < 600; i++) /* killed in here; bounded anyway */
    sleep_ms(100);
  _exit(2);
}

static pid_t spawn(void (*fn)(int, int), int gate, int report) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    g_server = 0; /* not ours to stop */
    fn(gate, report);
    _exit(3);
  }
  return p;
}

static void me_worker2(int gate, int report) {
  (void)report;
  me_worker(gate);
}

/* ---- helpers for "another thread" --------------------------------------- */

typedef struct op_arg {
  dlock_mutex *m;
  int op; /* 0 unlock, 1 trylock, 2 timedlock(wait) then unlock */
  long long wait_ms;
  int rc;
  int64_t done_at;
} op_arg;

static void *op_thread(void *p) {
  op_arg *a = p;
  if (a->op == 0)
    a->rc = dlock_mutex_unlock(a->m);
  else if (a->op == 1)
    a->rc = dlock_mutex_trylock(a->m);
  else
    a->rc = dlock_mutex_timedlock(a->m, a->wait_ms, -1);
  a->done_at = now_ms();
  if (a->rc == 0 && a->op != 0)
    dlock_mutex_unlock(a->m);
  return NULL;
}

static int in_thread(dlock_mutex *m, int op) {
  op_arg a = {m, op, 0, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, op_thread, &a);
  pthread_join(t, NULL);
  return a.rc;
}

static atomic_int g_lost_calls;
static atomic_llong g_lost_at;
static void on_lost(const char *name, void *arg) {
  (void)arg;
  if (strcmp(name, "ext-lost") == 0) {
    atomic_store(&g_lost_at, (long long)now_ms());
    atomic_fetch_add(&g_lost_calls, 1);
  }
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

/* ---- scenarios ------------------------------------------------------------
 */

static void bad_input(void) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  EXPECT(cfg.connect_timeout_ms == 10000 && cfg.command_timeout_ms == 3000 &&
             cfg.retry_attempts == 3 && cfg.retry_interval_ms == 1500 &&
             cfg.watchdog_timeout_ms == 30000 && cfg.lazy_connect == 0,
         "config defaults differ from the documented ones");
  dlock_client *c = NULL;
  EXPECT_RC(dlock_client_new(&cfg, NULL), DLOCK_EINVAL);
  const char *bad[] = {"http://127.0.0.1:6379", "redis://127.0.0.1:0",
                       "redis://:6379", "redis://127.0.0.1:6379/x",
                       "unix://relative.sock"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cfg.url = bad[i];
    EXPECT_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
    EXPECT(c == NULL && dlock_last_error()[0], "url %s: no detail", bad[i]);
  }
  cfg.url = "redis://u:TopSecret1@127.0.0.1:port";
  EXPECT_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
  EXPECT(strstr(dlock_last_error(), "TopSecret1") == NULL,
         "password in the detail: %s", dlock_last_error());
  cfg.url = "unix:///nonexistent-dlock-dir/redis.sock";
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 50;
  cfg.connect_timeout_ms = 300;
  int64_t t0 = now_ms();
  EXPECT_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
  EXPECT(now_ms() - t0 < 2000 * slack(), "ECONN after %lld ms",
         (long long)(now_ms() - t0));
  c = new_client(0, NULL);
  dlock_mutex *m = NULL;
  EXPECT_RC(dlock_mutex_new(c, NULL, &m), DLOCK_EINVAL);
  EXPECT_RC(dlock_mutex_new(c, "", &m), DLOCK_EINVAL);
  EXPECT_RC(dlock_mutex_new(c, "x", NULL), DLOCK_EINVAL);
  EXPECT_RC(dlock_mutex_new(NULL, "x", &m), DLOCK_EINVAL);
  EXPECT_RC(dlock_mutex_lock(NULL), DLOCK_EINVAL);
  EXPECT_RC(dlock_mutex_unlock(NULL), DLOCK_EINVAL);
  long long ttl;
  EXPECT_RC(dlock_mutex_ttl(NULL, &ttl), DLOCK_EINVAL);
  const char *id = dlock_client_id(c);
  EXPECT(strlen(id) == 36 && id[14] == '4', "client id %s is not a UUID v4",
         id);
  dlock_client_free(c);
}

static void reentrancy_and_ownership(dlock_client *c) {
  dlock_mutex *m;
  EXPECT_RC(dlock_mutex_new(c, "ext-re", &m), 0);
  EXPECT_RC(dlock_mutex_lock(m), 0);
  EXPECT_RC(dlock_mutex_lock(m), 0);
  EXPECT_RC(dlock_mutex_trylock(m), 0);
  EXPECT(dlock_mutex_hold_count(m) == 3, "hold count %d",
         dlock_mutex_hold_count(m));
  /* Owner-only unlock: another thread can neither unlock nor enter. */
  EXPECT_RC(in_thread(m, 0), DLOCK_EPERM);
  EXPECT_RC(in_thread(m, 1), DLOCK_EBUSY);
  EXPECT(dlock_mutex_is_locked(m) == 1, "lock vanished");
  EXPECT(dlock_mutex_hold_count(m) == 3, "hold count changed");
  for (int i = 0; i < 3; i++)
    EXPECT_RC(dlock_mutex_unlock(m), 0);
  EXPECT_RC(dlock_mutex_unlock(m), DLOCK_EPERM);
  EXPECT(dlock_mutex_is_locked(m) == 0, "still locked after 3 unlocks");
  EXPECT_RC(in_thread(m, 1), 0); /* free for the other thread now */
  dlock_mutex_free(m);
}

static void lease_and_watchdog(void) {
  dlock_client *c = new_client(600, NULL);
  dlock_mutex *m;
  EXPECT_RC(dlock_mutex_new(c, "ext-lease", &m), 0);
  /* Fixed lease: expires on its own. */
  EXPECT_RC(dlock_mutex_timedlock(m, 0, 500), 0);
  long long ttl = 0;
  EXPECT_RC(dlock_mutex_ttl(m, &ttl), 0);
  EXPECT(ttl > 0 && ttl <= 500, "fixed lease ttl %lld", ttl);
  sleep_ms(900);
  EXPECT(dlock_mutex_is_locked(m) == 0, "fixed lease did not expire");
  EXPECT_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  /* Watchdog lease of 600 ms: held for well over 3x that. */
  EXPECT_RC(dlock_mutex_lock(m), 0);
  for (int i = 0; i < 10; i++) {
    sleep_ms(200);
    EXPECT_RC(dlock_mutex_ttl(m, &ttl), 0);
    EXPECT(ttl > 0, "watchdog lock expired after %d ms", (i + 1) * 200);
  }
  EXPECT(dlock_mutex_is_held(m) == 1, "watchdog lock not held after 2 s");
  EXPECT_RC(dlock_mutex_unlock(m), 0);
  EXPECT(dlock_mutex_is_locked(m) == 0, "unlocked lock still there");
  sleep_ms(700);
  EXPECT(dlock_mutex_is_locked(m) == 0, "renewal resurrected the lock");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static void lost_lock_reporting(void) {
  dlock_client *c = new_client(600, on_lost), *other = new_client(0, NULL);
  dlock_mutex *m, *o;
  EXPECT_RC(dlock_mutex_new(c, "ext-lost", &m), 0);
  EXPECT_RC(dlock_mutex_new(other, "ext-lost", &o), 0);
  EXPECT_RC(dlock_mutex_lock(m), 0);
  sleep_ms(100);
  int64_t t0 = now_ms();
  EXPECT(dlock_mutex_force_unlock(o) == 1, "force unlock found no lock");
  while (atomic_load(&g_lost_calls) == 0 && now_ms() - t0 < 3000)
    sleep_ms(2);
  long long lat = atomic_load(&g_lost_at) - t0;
  EXPECT(atomic_load(&g_lost_calls) == 1, "on_lock_lost called %d times",
         atomic_load(&g_lost_calls));
  EXPECT(lat <= 200 + 300 * slack(),
         "loss reported %lld ms after it happened (renewal period 200)", lat);
  EXPECT_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  printf("lost lock reported after %lld ms\n", lat);
  dlock_mutex_free(m);
  dlock_mutex_free(o);
  dlock_client_free(c);
  dlock_client_free(other);
}

static void wake_up_latency(dlock_client *c) {
  dlock_client *c2 = new_client(0, NULL);
  dlock_mutex *m, *w;
  EXPECT_RC(dlock_mutex_new(c, "ext-wake", &m), 0);
  EXPECT_RC(dlock_mutex_new(c2, "ext-wake", &w), 0);
  enum { ROUNDS = 5 };
  long long lat[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    EXPECT_RC(dlock_mutex_lock(m), 0);
    op_arg a = {w, 2, 20000, -1, 0};
    pthread_t t;
    pthread_create(&t, NULL, op_thread, &a);
    sleep_ms(300); /* the waiter is asleep on the lock by now */
    long long ttl = 0;
    EXPECT_RC(dlock_mutex_ttl(m, &ttl), 0);
    EXPECT(ttl > 25000, "ttl %lld, want ~30 s", ttl);
    int64_t t0 = now_ms();
    EXPECT_RC(dlock_mutex_unlock(m), 0);
    pthread_join(t, NULL);
    EXPECT_RC(a.rc, 0);
    lat[i] = a.done_at - t0;
  }
  qsort(lat, ROUNDS, sizeof lat[0], cmp_ll);
  printf("wake-up after unlock: median %lld ms (max %lld), TTL was ~30000\n",
         lat[ROUNDS / 2], lat[ROUNDS - 1]);
  EXPECT(lat[ROUNDS / 2] < 1000,
         "median wake-up %lld ms: not woken by the "
         "unlock",
         lat[ROUNDS / 2]);
  dlock_mutex_free(m);
  dlock_mutex_free(w);
  dlock_client_free(c2);
}

static void crash_recovery(dlock_client *c, pid_t child, int gate, int report) {
  char b = 1, got = 0;
  EXPECT(write(gate, &b, 1) == 1, "gate");
  EXPECT(read(report, &got, 1) == 1 && got == 'L', "crash child did not lock");
  sleep_ms(400); /* it renews meanwhile */
  kill(child, SIGKILL);
  int64_t t0 = now_ms();
  waitpid(child, NULL, 0);
  dlock_mutex *m;
  EXPECT_RC(dlock_mutex_new(c, "ext-crash", &m), 0);
  EXPECT_RC(dlock_mutex_trylock(m), DLOCK_EBUSY); /* not before the lease */
  EXPECT_RC(dlock_mutex_timedlock(m, 10000, -1), 0);
  int64_t el = now_ms() - t0;
  printf("dead holder's lock (900 ms lease) acquired %lld ms after kill -9\n",
         (long long)el);
  EXPECT(el <= 900 + 600 * slack(), "took %lld ms", (long long)el);
  EXPECT(dlock_mutex_is_held(m) == 1, "not held");
  EXPECT_RC(dlock_mutex_unlock(m), 0);
  dlock_mutex_free(m);
}

int main(int argc, char **argv) {
  signal(SIGALRM, on_alarm);
  signal(SIGPIPE, SIG_IGN);
  alarm(100 * (unsigned)slack());
  if (argc > 1) {
    snprintf(g_url, sizeof g_url, "%s", argv[1]);
  } else if (start_server() != 0) {
    return 1;
  }
  g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  /* Fork every worker before this process starts any thread. */
  int gate[2], cgate[2], creport[2];
  if (pipe(gate) || pipe(cgate) || pipe(creport)) {
    perror("pipe");
    return 1;
  }
  pid_t me[ME_PROCS];
  for (int i = 0; i < ME_PROCS; i++)
    me[i] = spawn(me_worker2, gate[0], -1);
  pid_t crash = spawn(crash_worker, cgate[0], creport[1]);

  printf("-- bad input\n");
  bad_input();

  printf("-- mutual exclusion: %d processes x %d threads x %d\n", ME_PROCS,
         ME_THREADS, ME_ITERS);
  char go[ME_PROCS] = {0};
  EXPECT(write(gate[1], go, ME_PROCS) == ME_PROCS, "gate");
  for (int i = 0; i < ME_PROCS; i++) {
    int st = 0;
    waitpid(me[i], &st, 0);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d failed", i);
  }
  EXPECT(g_sh->counter == (long)ME_PROCS * ME_THREADS * ME_ITERS,
         "counter %ld, want %d: lost updates", g_sh->counter,
         ME_PROCS * ME_THREADS * ME_ITERS);
  EXPECT(atomic_load(&g_sh->overlap) == 0, "%d overlapping critical sections",
         atomic_load(&g_sh->overlap));
  EXPECT(atomic_load(&g_sh->errors) == 0, "%d lock/unlock errors",
         atomic_load(&g_sh->errors));

  dlock_client *c = new_client(0, NULL);
  printf("-- reentrancy and owner-only unlock\n");
  reentrancy_and_ownership(c);
  printf("-- lease and watchdog\n");
  lease_and_watchdog();
  printf("-- lost-lock reporting\n");
  lost_lock_reporting();
  printf("-- wake-up latency\n");
  wake_up_latency(c);
  printf("-- crash recovery\n");
  crash_recovery(c, crash, cgate[1], creport[0]);
  dlock_client_free(c);

  if (g_failures) {
    fprintf(stderr, "external_check: %d FAILED checks\n", g_failures);
    if (g_dir[0])
      fprintf(stderr, "server log: %s/redis.log\n", g_dir);
    return 1;
  }
  printf("external_check: all checks passed\n");
  return 0;
}
