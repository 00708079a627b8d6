/*
 * clockshim.c -- an LD_PRELOAD library for a test's redis-server: its wall
 * clock (clock_gettime(CLOCK_REALTIME*), gettimeofday, time) is set by the
 * file named by $DLOCK_CLOCKSHIM_FILE, re-read on every call, so a test can
 * step the server's clock while it runs. The file holds either
 *   "<ms>"          the clock runs, that many milliseconds ahead of real
 *                   time (test_clock.c), or
 *   "=<ms>/<ms>"    the clock STANDS at that time, ms since the epoch --
 *                   the same number twice, so that a read torn by the
 *                   test rewriting the file is noticed and read again
 *                   (the Redis model's differential test, test_sim.c,
 *                   moves it step by step: the server's expiries and TIME
 *                   are then exactly the model's).
 * The monotonic clocks are left alone.
 *
 * Why not libfaketime: Debian's redis-server (jemalloc) calls
 * clock_gettime while libfaketime initialises and refuses to start under
 * it ("Unexpected recursive calls to clock_gettime()"). This shim needs no
 * initialisation and no allocation: it calls the kernel directly and
 * reads the offset with pread. Built without sanitizers (it is preloaded
 * into an uninstrumented program).
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_fd = -2;

/* The file's setting: *frozen = 0 and the offset in ms, or *frozen = 1
 * and the time the clock stands at. */
static long long setting(int *frozen) {
  *frozen = 0;
  int fd = atomic_load(&g_fd);
  if (fd == -2) {
    const char *p = getenv("DLOCK_CLOCKSHIM_FILE");
    int nfd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    int expect = -2;
    if (!atomic_compare_exchange_strong(&g_fd, &expect, nfd) && nfd >= 0)
      close(nfd);
    fd = atomic_load(&g_fd);
  }
  if (fd < 0)
    return 0;
  for (int tries = 0; tries < 1000; tries++) {
    char b[96];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0)
      return 0;
    b[n] = '\0';
    if (b[0] != '=')
      return strtoll(b, NULL, 10);
    char *end = NULL;
    long long a = strtoll(b + 1, &end, 10);
    if (end && *end == '/' && strtoll(end + 1, NULL, 10) == a) {
      *frozen = 1;
      return a;
    }
  }
  return 0; /* never torn 1000 times in a row: a broken file, real time */
}

static int is_wall(clockid_t clk) {
  return clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
  long r = syscall(SYS_clock_gettime, clk, ts);
  if (r == 0 && is_wall(clk)) {
    int frozen;
    long long v = setting(&frozen);
    if (frozen) {
      ts->tv_sec = (time_t)(v / 1000);
      ts->tv_nsec = (long)(v % 1000) * 1000000L;
      return 0;
    }
    long long ns = (long long)ts->tv_nsec + v * 1000000LL;
    long long s = ns / 1000000000LL, rem = ns % 1000000000LL;
    if (rem < 0) {
      rem += 1000000000LL;
      s--;
    }
    ts->tv_sec += (time_t)s;
    ts->tv_nsec = (long)rem;
  }
  return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz;
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
    return -1;
  struct timeval *out = tv; /* glibc declares tv nonnull; callers pass NULL */
  if (out) {
    out->tv_sec = ts.tv_sec;
    out->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
    return (time_t)-1;
  if (t)
    *t = ts.tv_sec;
  return ts.tv_sec;
}
