/*
 * deadline.c -- the calling thread's call deadline: the monotonic ms at
 * which the current public call's wait budget ends (-1: none), set when a
 * wait budget starts (client/wait.c), cleared by the next public call
 * (dlock__clear_error), read by the router so its retries stop there
 * (dlock__exec); and the bound of one command's retries
 * (dlock_config.call_timeout_ms). Thread-local; no client.
 */
#include <stdint.h>
#include <stdio.h>

#include "util/util.h"

/* The deadline of the calling thread's current public call, when it has a
 * finite positive wait budget (-1: none): the router's retries stop at it
 * (dlock__exec), so "wait at most wait_ms" holds for connection failures
 * too. Set by dlock__budget_start, cleared by the next public call. */
static _Thread_local int64_t t_deadline = -1;

int64_t dlock__call_deadline(void) { return t_deadline; }

void dlock__call_deadline_reset(void) { t_deadline = -1; }

void dlock__call_deadline_set(int64_t deadline) { t_deadline = deadline; }

int dlock__call_bound_over(const dlock_config *cfg, int64_t first,
                           int64_t pause, int64_t next_ms) {
  int64_t bound = cfg->call_timeout_ms;
  if (bound <= 0 || dlock__now_ms() + pause + next_ms <= first + bound)
    return 0;
  char last[400];
  snprintf(last, sizeof last, "%s", dlock_last_error());
  dlock__fail(DLOCK_ECONN,
              "%s%snot retried: call_timeout_ms (%d ms) would "
              "pass",
              last, last[0] ? "; " : "", cfg->call_timeout_ms);
  return 1;
}
