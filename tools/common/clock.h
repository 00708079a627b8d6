/*
 * clock.h -- the clocks of the tools and the test harness: monotonic time
 * in ns / us / ms, wall-clock ms, and sleeps that resume after EINTR.
 */
#ifndef DLOCK_COMMON_CLOCK_H
#define DLOCK_COMMON_CLOCK_H

#include <stdint.h>

int64_t dlc_now_ns(void); /* CLOCK_MONOTONIC */
int64_t dlc_now_us(void);
int64_t dlc_now_ms(void);
int64_t dlc_wall_ms(void); /* CLOCK_REALTIME, for timestamps only */

/* Sleep the whole duration (a signal does not cut it short); <= 0: none. */
void dlc_sleep_ns(int64_t ns);
void dlc_sleep_us(int64_t us);
void dlc_sleep_ms(int64_t ms);

#endif
