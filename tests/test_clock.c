/*
 * test_clock.c -- clocks that jump (issue 17):
 *
 * - the server's wall clock jumps forward: Redis expires keys by its wall
 *   clock, so the lease ends early on the server. What the holder sees:
 *   nothing until its next renewal (at most a third of the lease later),
 *   which finds the lock gone and reports it lost; meanwhile another
 *   client can acquire -- two holders, which only fencing tokens expose.
 *   The case shows exactly that (it is the documented hazard, not a
 *   guarantee). The server runs with tests/clockshim preloaded (Debian's
 *   redis-server does not start under libfaketime: jemalloc recursion).
 * - the client's own wall clock jumps (forward and back, hours): nothing
 *   changes -- leases, renewals, local deadlines and wait timeouts all
 *   run on CLOCK_MONOTONIC. The client runs in a child process started
 *   with libfaketime preloaded (the monotonic clock left real); the case
 *   SKIPs without Debian's libfaketime.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "th.h"

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

static const char *faketime_lib(void) {
  const char *p = getenv("DLOCK_FAKETIME_LIB");
  if (!p)
    p = FAKETIME_LIB;
  if (access(p, R_OK) != 0)
    th_skip("libfaketime not installed (Debian: libfaketime)");
  return p;
}

/* Sets the offset libfaketime applies ("+0", "+60", "-3600"). */
static void set_offset(const char *file, const char *spec) {
  FILE *f = fopen(file, "w");
  CHECK(f != NULL);
  fprintf(f, "%s\n", spec);
  CHECK(fclose(f) == 0);
}

#if defined(__SANITIZE_THREAD__)
#define TH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TH_TSAN 1
#endif
#endif

#ifdef TH_TSAN
void __tsan_init(void);
#endif

/* What LD_PRELOAD gets: libfaketime -- and in a TSan build the TSan runtime
 * before it. libfaketime interposes pthread_cond_timedwait and calls
 * glibc's directly: preloaded first, it hides every timed wait from TSan,
 * which then believes the waiting thread still owns the wait's mutex and
 * reports "double lock of a mutex" when another thread takes it
 * (dlock__reg_attach, the watchdog's expiry thread; issue 26). With the
 * runtime first, TSan's interceptor sees the wait and calls on into
 * libfaketime, which still fakes the clock. */
static const char *preload_list(char *buf, size_t n) {
  const char *ft = faketime_lib();
#ifdef TH_TSAN
  /* GCC links the runtime as libtsan.so; clang links it into the program,
   * which comes first anyway. */
  Dl_info di, self;
  if (dladdr((void *)__tsan_init, &di) && di.dli_fname && di.dli_fname[0] &&
      dladdr((void *)preload_list, &self) && self.dli_fname &&
      strcmp(di.dli_fname, self.dli_fname) != 0) {
    snprintf(buf, n, "%s:%s", di.dli_fname, ft);
    return buf;
  }
#endif
  snprintf(buf, n, "%s", ft);
  return buf;
}

static void faketime_env(const char *file, int on) {
  if (on) {
    char pre[2048];
    setenv("LD_PRELOAD", preload_list(pre, sizeof pre), 1);
    setenv("FAKETIME_TIMESTAMP_FILE", file, 1);
    setenv("FAKETIME_NO_CACHE", "1", 1);
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
  } else {
    unsetenv("LD_PRELOAD");
    unsetenv("FAKETIME_TIMESTAMP_FILE");
    unsetenv("FAKETIME_NO_CACHE");
    unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
  }
}

/* Steps the clockshim'd server's wall clock to `ms` ahead of real time:
 * one fixed-width pwrite, so the server never reads a half-written file. */
static void shim_offset(int fd, long long ms) {
  char b[24];
  snprintf(b, sizeof b, "%-22lld\n", ms);
  CHECK(pwrite(fd, b, 23, 0) == 23);
}

static atomic_llong g_lost_at;
static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  long long zero = 0;
  atomic_compare_exchange_strong(&g_lost_at, &zero, (long long)th_now_ms());
}

TH_CASE_T(server_clock_jump_expires_lease_early, 120, "slow") {
  const char *file = th_tmpfile("clockshim");
  int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  shim_offset(fd, 0);
  setenv("LD_PRELOAD", DLOCK_CLOCKSHIM, 1);
  setenv("DLOCK_CLOCKSHIM_FILE", file, 1);
  th_redis *r = th_redis_new(0, NULL);
  unsetenv("LD_PRELOAD");
  unsetenv("DLOCK_CLOCKSHIM_FILE");
  long long t0 = th_server_ms(r);
  shim_offset(fd, 3600 * 1000LL);
  CHECK_MSG(th_server_ms(r) - t0 >= 3000 * 1000LL,
            "the clock shim had no effect");
  shim_offset(fd, 0);

  int wd = 3000 * th_timeout_mult();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = wd;
  cfg.on_lock_lost = on_lost;
  cfg.retry_interval_ms = 100;
  dlock_client *a = th_client_cfg(r, &cfg), *b = th_client(r);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new_fenced(a, "clk", &ma));
  CHECK_OK(dlock_mutex_new_fenced(b, "clk", &mb));
  CHECK_OK(dlock_mutex_lock(ma));
  uint64_t ta, tb;
  CHECK_OK(dlock_mutex_token(ma, &ta));
  CHECK_RC(dlock_mutex_trylock(mb), DLOCK_EBUSY);

  shim_offset(fd, 60000); /* the server's clock steps 60 s forward */
  int64_t t_jump = th_now_ms();
  int rc;
  while ((rc = dlock_mutex_trylock(mb)) == DLOCK_EBUSY) {
    CHECK_MSG(th_now_ms() - t_jump < 2LL * wd, "lock never freed");
    th_sleep_ms(10);
  }
  CHECK_OK(rc);
  int64_t t_b = th_now_ms();
  long long a_valid = -1;
  int vrc = dlock_mutex_validity(ma, &a_valid);
  int a_asks = dlock_mutex_is_held(ma); /* asks Redis */
  /* The hazard: B holds while A's local deadline has not passed. */
  CHECK_MSG(t_b - t_jump < wd / 2, "B acquired %lld ms after the jump",
            (long long)(t_b - t_jump));
  CHECK_OK(vrc); /* A's local deadline has not passed: validity > 0 ... */
  CHECK_MSG(a_valid > 0, "validity %lld", a_valid);
  CHECK_EQ(a_asks, 0); /* ... but asking Redis tells the truth */
  /* A hears of it at its next renewal: within a third of the lease plus a
   * command round (and load). */
  while (atomic_load(&g_lost_at) == 0) {
    CHECK_MSG(th_now_ms() - t_jump < wd, "A never told");
    th_sleep_ms(10);
  }
  long long t_lost = atomic_load(&g_lost_at) - t_jump;
  printf("server clock +60 s at 0 ms; B acquired at %lld ms while A's "
         "validity still said %lld ms (is_held, which asks Redis: %d); A told "
         "at %lld ms (lease %d ms, renewal every %d ms)\n",
         (long long)(t_b - t_jump), a_valid, a_asks, t_lost, wd, wd / 3);
  CHECK_MSG(t_lost <= wd / 3 + 1000LL * th_timeout_mult(),
            "A told %lld ms after the jump", t_lost);
  CHECK_RC(dlock_mutex_unlock(ma), DLOCK_ELOST);
  CHECK_OK(dlock_mutex_token(mb, &tb));
  CHECK_MSG(tb > ta, "B's token %llu not above A's %llu",
            (unsigned long long)tb, (unsigned long long)ta);
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
  close(fd);
}

/* ---- the client's wall clock jumps ------------------------------------ */

#define CHILD_ENV "DLOCK_CLOCK_CHILD_URL"

/* In the child (libfaketime preloaded): 0 all fine, 77 faketime inert,
 * else the number of the check that failed. */
static int child_body(const char *url, const char *file) {
  set_offset(file, "+0");
  time_t w0 = time(NULL);
  set_offset(file, "+3600");
  time_t w1 = time(NULL);
  set_offset(file, "+0");
  if (w1 - w0 < 3000)
    return 77;
  int wd = 1500 * th_timeout_mult();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = wd;
  cfg.on_lock_lost = on_lost;
  dlock_client *c;
  dlock_mutex *m, *fixed, *busy;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new(c, "clk-wd", &m) ||
      dlock_mutex_new(c, "clk-fixed", &fixed) ||
      dlock_mutex_new(c, "clk-busy", &busy))
    return 2;
  if (dlock_mutex_lock(m) || dlock_mutex_timedlock(fixed, 0, 60000))
    return 3;
  int64_t t0 = th_now_ms();
  static const char *const jumps[] = {"+3600", "-3600", "+86400", "-86400",
                                      "+0"};
  /* 2.5 leases of jumps; every step checks the holds still stand. */
  for (int i = 0; th_now_ms() - t0 < wd * 5 / 2; i++) {
    set_offset(file, jumps[i % 5]);
    th_sleep_ms(100);
    if (dlock_mutex_is_held(m) != 1 || atomic_load(&g_lost_at) != 0)
      return 4;
  }
  /* A timed wait on a lock held elsewhere lasts its time, not an hour
   * and not zero, with the wall clock jumping meanwhile. */
  set_offset(file, "-3600");
  int64_t w = th_now_ms();
  int rc = dlock_mutex_timedlock(busy, 1000, -1);
  set_offset(file, "+86400");
  int64_t took = th_now_ms() - w;
  if (rc != DLOCK_ETIMEDOUT || took < 950 ||
      took > 1000 + 2000LL * th_timeout_mult())
    return 5;
  long long v;
  int64_t held_for = th_now_ms() - t0;
  if (dlock_mutex_validity(fixed, &v) || v <= 0 || v > 60000 - held_for + 50 ||
      v < 60000 - held_for - 2000)
    return 6;
  if (dlock_mutex_unlock(m) || dlock_mutex_unlock(fixed))
    return 7;
  set_offset(file, "+0");
  dlock_mutex_free(m);
  dlock_mutex_free(fixed);
  dlock_mutex_free(busy);
  dlock_client_free(c);
  return 0;
}

TH_CASE_T(client_wall_clock_jumps_change_nothing, 120, "slow") {
  const char *child_url = getenv(CHILD_ENV);
  if (child_url) /* the re-executed child */
    _exit(child_body(child_url, getenv("DLOCK_CLOCK_FILE")));
  const char *lib = faketime_lib();
  (void)lib;
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *other = th_client(r);
  dlock_mutex *busy;
  CHECK_OK(dlock_mutex_new(other, "clk-busy", &busy));
  CHECK_OK(dlock_mutex_timedlock(busy, 0, 60000));
  const char *file = th_tmpfile("faketime-client");
  set_offset(file, "+0");
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    faketime_env(file, 1);
    /* Sanitizer builds: ASan insists on being first in the library list;
     * libfaketime preloaded before it is fine for this test. */
    char asan[512];
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", ao ? ao : "",
             ao && *ao ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    setenv(CHILD_ENV, r->url, 1);
    setenv("DLOCK_CLOCK_FILE", file, 1);
    /* The path, not /proc/self/exe itself: under valgrind only readlink
     * names this program. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
      _exit(126);
    self[n] = '\0';
    execl(self, "test_clock", "client_wall_clock_jumps_change_nothing",
          (char *)NULL);
    _exit(126);
  }
  int st = th_wait(pid, 60000);
  if (st == 77)
    th_skip("libfaketime had no effect on the client");
  CHECK_MSG(st == 0, "client under wall-clock jumps: check %d failed", st);
  CHECK_OK(dlock_mutex_unlock(busy));
  dlock_mutex_free(busy);
  dlock_client_free(other);
}

/* ---- a Redlock's renewal across a wall-clock step back (issue 25.14) -- */

#define RL_CHILD_ENV "DLOCK_CLOCK_RL_URLS"
#define RL_STEP_MS 600000LL /* 10 min */

/* The key's PTTL on the first master, through a probe mutex that never
 * locks (-3 on error). */
static long long probe_pttl(dlock_mutex *probe) {
  long long t = -3;
  if (dlock_mutex_ttl(probe, &t) != 0)
    return -3;
  return t;
}

/* Polls the PTTL until a renewal pushes it back up; the time it was seen
 * (monotonic ms), or -1 if none came by `until` or the key went. */
static int64_t next_renewal(dlock_mutex *probe, int64_t until) {
  long long last = probe_pttl(probe);
  while (th_now_ms() < until && last > 0) {
    th_sleep_ms(10);
    long long cur = probe_pttl(probe);
    if (cur > last + 20)
      return th_now_ms();
    last = cur;
  }
  return -1;
}

/* In the child, with the clock shim preloaded: once the shim's offset is
 * set, every CLOCK_REALTIME deadline the process computes lies RL_STEP_MS
 * later on the kernel's clock -- what a step of the wall clock back by that
 * much, right after the deadline was computed, does to a wait. 0 all fine,
 * 77 the shim had no effect, else the number of the check that failed. */
static int redlock_child(char *urls, const char *shim_file) {
  int fd = shim_file ? open(shim_file, O_RDWR | O_CLOEXEC) : -1; /* getenv */
  if (fd < 0)
    return 2;
  shim_offset(fd, RL_STEP_MS);
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  time_t kernel_wall = (time_t)syscall(SYS_time, NULL);
  shim_offset(fd, 0);
  if (wall.tv_sec - kernel_wall < RL_STEP_MS / 1000 - 60)
    return 77;
  int wd = 1500 * th_timeout_mult();
  dlock_client *cs[3];
  size_t n = 0;
  for (char *save = NULL, *u = strtok_r(urls, " ", &save); u && n < 3;
       u = strtok_r(NULL, " ", &save)) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    cfg.url = u;
    cfg.watchdog_timeout_ms = wd;
    cfg.on_lock_lost = on_lost;
    cfg.retry_interval_ms = 100;
    if (dlock_client_new(&cfg, &cs[n]) != 0)
      return 2;
    n++;
  }
  dlock_redlock *rl;
  dlock_mutex *probe;
  if (n != 3 || dlock_redlock_new(cs, n, "clk-rl", &rl) ||
      dlock_mutex_new(cs[0], "clk-rl", &probe))
    return 2;
  if (dlock_redlock_lock(rl))
    return 3;
  /* The first renewal with the clocks in step. */
  int64_t prev = next_renewal(probe, th_now_ms() + wd);
  if (prev < 0)
    return 4;
  shim_offset(fd, RL_STEP_MS);
  int64_t step = th_now_ms();
  /* Two leases more: every renewal comes a third of the lease after the
   * previous one (plus load), none 10 min late (the lease ends first). */
  int renewals = 0;
  int64_t worst = 0;
  while (th_now_ms() - step < 2LL * wd) {
    int64_t next =
        next_renewal(probe, prev + wd / 3 + 1000LL * th_timeout_mult());
    if (next < 0)
      return 5;
    if (next - prev > worst)
      worst = next - prev;
    prev = next;
    renewals++;
  }
  long long v = 0;
  if (dlock_redlock_validity(rl, &v) || v <= 0 || atomic_load(&g_lost_at))
    return 6;
  if (dlock_redlock_unlock(rl))
    return 7;
  shim_offset(fd, 0);
  printf("after the step: %d renewals in 2 leases, the longest gap %lld ms "
         "(lease %d ms, renewal every %d ms)\n",
         renewals, (long long)worst, wd, wd / 3);
  dlock_mutex_free(probe);
  dlock_redlock_free(rl);
  for (size_t i = 0; i < n; i++)
    dlock_client_free(cs[i]);
  close(fd);
  return 0;
}

/* The Redlock's renewal thread slept on a CLOCK_REALTIME condition
 * variable: a wall clock stepped back during its sleep stretched the sleep
 * by the step, and the lease ran out unrenewed. The client runs with the
 * clock shim (not libfaketime: libfaketime rewrites the deadline of every
 * pthread_cond_timedwait into real time itself, so a realtime wait under it
 * never sees a step; the shim changes only what the process reads, so a
 * deadline computed from it lands 10 min late on the kernel's clock, as a
 * real step back does to a wait armed before it). */
TH_CASE_T(redlock_renewed_across_wall_clock_step_back, 120, "slow") {
  char *urls = getenv(RL_CHILD_ENV);
  if (urls) /* the re-executed child */
    _exit(redlock_child(urls, getenv("DLOCK_CLOCKSHIM_FILE")));
  th_redis *r[3];
  char list[1024] = "";
  for (int i = 0; i < 3; i++) {
    r[i] = th_redis_new(0, NULL);
    if (i)
      strncat(list, " ", sizeof list - strlen(list) - 1);
    strncat(list, r[i]->url, sizeof list - strlen(list) - 1);
  }
  const char *file = th_tmpfile("clockshim-client");
  int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  shim_offset(fd, 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("LD_PRELOAD", DLOCK_CLOCKSHIM, 1);
    setenv("DLOCK_CLOCKSHIM_FILE", file, 1);
    char asan[512];
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", ao ? ao : "",
             ao && *ao ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    setenv(RL_CHILD_ENV, list, 1);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
      _exit(126);
    self[n] = '\0';
    execl(self, "test_clock", "redlock_renewed_across_wall_clock_step_back",
          (char *)NULL);
    _exit(126);
  }
  int st = th_wait(pid, 60000);
  if (st == 77)
    th_skip("the clock shim had no effect on the client");
  CHECK_MSG(st == 0,
            "redlock under a wall-clock step back: check %d failed (4: no "
            "first renewal, 5: a renewal late or missing after the step, 6: "
            "lost)",
            st);
  /* Released: no key left on any master. */
  for (int i = 0; i < 3; i++)
    CHECK_EQ(th_cmd_int(r[i], "EXISTS clk-rl"), 0);
  close(fd);
}

TH_MAIN()
