/*
 * demo_two_procs -- two processes contend for one lock on a private
 * redis-server that the demo starts and stops itself. Each process takes
 * the lock a few times and prints when it holds it; the output shows the
 * holds never overlap and the hand-over is immediate.
 * Usage: demo_two_procs [redis-url]
 */
#include <dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_spawn.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int worker(const char *url, const char *who, double t0) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  dlock_client *c;
  dlock_mutex *m;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new(c, "demo:lock", &m)) {
    fprintf(stderr, "%s: %s\n", who, dlock_last_error());
    return 1;
  }
  for (int i = 0; i < 3; i++) {
    if (dlock_mutex_lock(m) != DLOCK_OK)
      return 1;
    printf("%8.1f ms  %s holds demo:lock (round %d)\n", now_ms() - t0, who,
           i + 1);
    fflush(stdout);
    usleep(100 * 1000); /* the critical section */
    printf("%8.1f ms  %s releases\n", now_ms() - t0, who);
    fflush(stdout);
    dlock_mutex_unlock(m);
    usleep(1000);
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

int main(int argc, char **argv) {
  dlc_redis srv = {0};
  const char *url = argc > 1 ? argv[1] : NULL;
  if (!url) {
    if (dlc_redis_start_private(&srv, 0, NULL) != 0)
      return 1;
    url = srv.url;
    printf("private redis-server at %s\n", url);
  }
  fflush(stdout);
  double t0 = now_ms();
  pid_t a = fork();
  if (a == 0)
    _exit(worker(url, "process A", t0));
  pid_t b = fork();
  if (b == 0)
    _exit(worker(url, "process B", t0));
  int sa = 1, sb = 1;
  waitpid(a, &sa, 0);
  waitpid(b, &sb, 0);
  dlc_redis_stop_private(&srv);
  int ok =
      WIFEXITED(sa) && !WEXITSTATUS(sa) && WIFEXITED(sb) && !WEXITSTATUS(sb);
  puts(ok ? "demo finished: the two processes never held the lock together"
          : "demo failed");
  return ok ? 0 : 1;
}
