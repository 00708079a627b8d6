/*
 * clock.c -- the library's one clock: monotonic time in ms and us, sleeps, and
 * absolute times for condition variables. Nothing here reads the wall
 * clock: a jump of the system time changes no deadline or lease.
 */
#include <errno.h>
#include <time.h>

#include "util/util.h"

/* ---- clocks ------------------------------------------------------------- */

int64_t dlock__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dlock__now_ms(void) { return dlock__now_us() / 1000; }

int64_t dlock__wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec dlock__abstime(clockid_t clk, int64_t ms) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  if (ms < 0)
    ms = 0;
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

int dlock__cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0)
    return -1;
  int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (rc == 0)
    rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc == 0 ? 0 : -1;
}

void dlock__sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
