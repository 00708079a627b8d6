/*
 * demo_two_procs -- two processes contend for one lock on a private
 * redis-server that the demo starts and stops itself. Each process takes
 * the lock a few times and prints when it holds it; the output shows the
 * holds never overlap and the hand-over is immediate. Uses only <dlock.h>:
 * it builds against an installed dlock like any program (examples/
 * CMakeLists.txt).
 * Usage: demo_two_procs [redis-url]
 */
#define _DEFAULT_SOURCE /* mkdtemp, usleep, kill, clock_gettime */
#include <dlock.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A private redis-server on a unix socket in a fresh directory (no TCP
 * port, no persistence), and its URL; 0 or -1. */
typedef struct private_redis {
  pid_t pid;
  char dir[64], sock[128], url[160];
} private_redis;

static int start_redis(private_redis *r) {
  snprintf(r->dir, sizeof r->dir, "/tmp/dlock-demo.XXXXXX");
  if (!mkdtemp(r->dir))
    return -1;
  snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
  snprintf(r->url, sizeof r->url, "unix://%s", r->sock);
  if ((r->pid = fork()) == 0) {
    int null = open("/dev/null", O_WRONLY); /* its log: not the demo's */
    dup2(null, 1);
    dup2(null, 2);
    execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
           r->sock, "--save", "", "--appendonly", "no", "--dir", r->dir,
           "--logfile", "", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; r->pid > 0 && i < 400; i++) { /* up to 10 s */
    struct stat st;
    if (stat(r->sock, &st) == 0)
      return 0;
    usleep(25 * 1000);
  }
  fprintf(stderr, "redis-server did not start (is it installed?)\n");
  return -1;
}

static void stop_redis(private_redis *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGTERM);
    waitpid(r->pid, NULL, 0);
  }
  if (r->dir[0]) {
    unlink(r->sock);
    rmdir(r->dir);
  }
}

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
  private_redis srv = {0};
  const char *url = argc > 1 ? argv[1] : NULL;
  if (!url) {
    if (start_redis(&srv) != 0) {
      stop_redis(&srv);
      return 1;
    }
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
  stop_redis(&srv);
  int ok =
      WIFEXITED(sa) && !WEXITSTATUS(sa) && WIFEXITED(sb) && !WEXITSTATUS(sb);
  puts(ok ? "demo finished: the two processes never held the lock together"
          : "demo failed");
  return ok ? 0 : 1;
}
