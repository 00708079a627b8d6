/* clock.c -- monotonic and wall clocks, EINTR-proof sleeps (see clock.h). */
#include "clock.h"

#include <errno.h>
#include <time.h>

static int64_t read_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t dlc_now_ns(void) { return read_ns(CLOCK_MONOTONIC); }
int64_t dlc_now_us(void) { return read_ns(CLOCK_MONOTONIC) / 1000; }
int64_t dlc_now_ms(void) { return read_ns(CLOCK_MONOTONIC) / 1000000; }
int64_t dlc_wall_ms(void) { return read_ns(CLOCK_REALTIME) / 1000000; }

void dlc_sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void dlc_sleep_us(int64_t us) { dlc_sleep_ns(us * 1000); }
void dlc_sleep_ms(int64_t ms) { dlc_sleep_ns(ms * 1000000); }
