/* The README's example: one lock around a critical section.
 * Usage: basic [redis-url]   (default redis://127.0.0.1:6379) */
#include <dlock.h>
#include <stdio.h>

int main(int argc, char **argv) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  cfg.call_timeout_ms = 5000; /* the default: a call that waits for nothing
                                 retries at most 5 s (docs/errors.md) */
  dlock_client *c;
  int rc = dlock_client_new(&cfg, &c);
  if (rc) {
    fprintf(stderr, "connect: %s: %s\n", dlock_strerror(rc),
            dlock_last_error());
    return 1;
  }
  dlock_mutex *m;
  dlock_mutex_new(c, "orders:42", &m);
  if ((rc = dlock_mutex_timedlock(m, 5000, -1)) == DLOCK_OK) { /* wait <= 5 s */
    puts("holding orders:42 -- the watchdog renews it while we work");
    rc = dlock_mutex_unlock(m); /* DLOCK_ELOST if it expired meanwhile */
  }
  printf("result: %s\n", dlock_strerror(rc));
  dlock_mutex_free(m);
  dlock_client_free(c);
  return rc == DLOCK_OK ? 0 : 1;
}
