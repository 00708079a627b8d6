/*
 * family_stubs.c -- placeholders for the lock kinds of issue 6 (fair,
 * fenced, read-write, multi, Redlock, semaphore, latch). Each entry point
 * reports DLOCK_ENOTSUP until its real implementation replaces this file's
 * part. Nothing here pretends to lock anything.
 */
#include "internal.h"

static int unsupported(const char *what) {
  return dlock__fail(DLOCK_ENOTSUP, "%s is not implemented yet", what);
}

static int na_attempt(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                      int queue, int64_t wait_ms, int64_t *ttl,
                      uint64_t *token) {
  (void)m, (void)tid, (void)target, (void)lease, (void)queue, (void)wait_ms,
      (void)ttl, (void)token;
  return unsupported("this mutex variant");
}
static int na_release(dlock_mutex *m, uint64_t tid, int64_t lease) {
  (void)m, (void)tid, (void)lease;
  return unsupported("this mutex variant");
}
static void na_channels(dlock_mutex *m, uint64_t tid, dlock__sb *a,
                        dlock__sb *b) {
  (void)m, (void)tid, (void)a, (void)b;
}
static int na_force(dlock_mutex *m) {
  (void)m;
  return unsupported("this mutex variant");
}

const dlock__mutex_ops dlock__fair_ops = {
    "fair",   na_attempt,       na_release, NULL, na_channels,
    na_force, DLOCK__WAKE_LOCK, "",         1,    NULL};
const dlock__mutex_ops dlock__fenced_ops = {
    "fenced", na_attempt,       na_release, NULL, na_channels,
    na_force, DLOCK__WAKE_LOCK, "",         0,    NULL};

int dlock_mutex_new_fair(dlock_client *c, const char *name, dlock_mutex **out) {
  (void)c, (void)name, (void)out;
  return unsupported("the fair mutex");
}
int dlock_mutex_new_fenced(dlock_client *c, const char *name,
                           dlock_mutex **out) {
  (void)c, (void)name, (void)out;
  return unsupported("the fenced mutex");
}
