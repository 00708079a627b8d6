/*
 * soak.c -- `make soak` (soak.h): starts a redis-server (appendonly,
 * appendfsync always), one blackholing proxy per worker, the worker
 * processes (this program re-executed with --worker), then for
 * --minutes (default $SOAK_MINUTES, else 10) injects a random fault every
 * 1-3 s: kill -9 of a worker (restarted), SIGSTOP of a fenced holder past
 * its lease (the Kleppmann pause), redis-server SIGSTOP, redis-server
 * kill -9 and restart (its AOF reloads), CLIENT KILL of the command
 * connections, CLIENT KILL of the pub/sub connections, a partition of one
 * worker (its proxy blackholed past the lease). Then it stops the workers
 * and runs the checker. Exit 0 when the checker finds nothing.
 *
 *   dlock_soak [--minutes M] [--workers N] [--seed S] [--keep]
 *   dlock_soak --check-only DIR    the checker over kept logs (no stores)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "redis_spawn.h"
#include "soak.h"
#include "th_proxy.h"

const soak_res soak_resources[] = {
    {"mx0", K_MUTEX, "soak-mx0"},     {"mx1", K_MUTEX, "soak-mx1"},
    {"fair0", K_FAIR, "soak-fair0"},  {"fen0", K_FENCED, "soak-fen0"},
    {"fen1", K_FENCED, "soak-fen1"},  {"rw0r", K_RW_READ, "soak-rw0"},
    {"rw0w", K_RW_WRITE, "soak-rw0"}, {"sem0", K_SEM, "soak-sem0"},
};
const int soak_nresources = sizeof soak_resources / sizeof soak_resources[0];

int64_t soak_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

soak_shared *soak_map(const char *path, int create) {
  int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0 || (create && ftruncate(fd, sizeof(soak_shared)) != 0))
    return NULL;
  void *p = mmap(NULL, sizeof(soak_shared), PROT_READ | PROT_WRITE, MAP_SHARED,
                 fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

static struct {
  char dir[256];
  dlc_redis r;
  th_proxy *proxy[SOAK_MAX_WORKERS];
  pid_t pid[SOAK_MAX_WORKERS];
  int n;
  soak_shared *sh;
  FILE *faults;
  long counts[8];
  int paused_in_cs;
} g;

static const char *const g_fault_names[] = {
    "kill9",       "pause-holder", "redis-stop", "redis-restart",
    "client-kill", "pubsub-kill",  "partition"};

static void spawn_worker(int i) {
  char idx[16];
  snprintf(idx, sizeof idx, "%d", i);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "dlock_soak", "--worker", idx,
          th_proxy_url(g.proxy[i]), g.r.url, g.dir, (char *)NULL);
    _exit(127);
  }
  g.pid[i] = pid;
}

/* Restarts workers that exited (killed, or Redis was down at start). */
static void reap(void) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (int i = 0; i < g.n; i++)
      if (g.pid[i] == pid && !g.sh->stop)
        spawn_worker(i);
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void raw_cmd(const char *cmd) {
  redisContext *rc = redisConnectUnix(g.r.sock);
  if (rc && !rc->err) {
    redisReply *x = redisCommand(rc, cmd);
    if (x)
      freeReplyObject(x);
  }
  if (rc)
    redisFree(rc);
}

/* A worker to hurt: one in a fenced section before its write when `fenced`
 * and one is, else any not holding a semaphore permit (a permit has no
 * lease: a killed holder would leak it for good). -1 if none. */
static int pick_worker(int fenced) {
  int start = rand() % g.n;
  for (int k = 0; fenced && k < g.n; k++)
    if (g.sh->phase[(start + k) % g.n] == PH_PRE_WRITE)
      return (start + k) % g.n;
  for (int k = 0; k < g.n; k++)
    if (g.sh->phase[(start + k) % g.n] != PH_SEM)
      return (start + k) % g.n;
  return -1;
}

static void fault(int kind) {
  int64_t t0 = soak_now_us();
  int w = pick_worker(kind == 1);
  switch (kind) {
  case 0:
    if (w >= 0)
      kill(g.pid[w], SIGKILL);
    break;
  case 1:
    if (w < 0)
      break;
    g.paused_in_cs += g.sh->phase[w] == PH_PRE_WRITE;
    kill(g.pid[w], SIGSTOP);
    sleep_ms(SOAK_LEASE_MS + 1000);
    kill(g.pid[w], SIGCONT);
    break;
  case 2:
    kill(g.r.pid, SIGSTOP);
    sleep_ms(500 + rand() % 1500);
    kill(g.r.pid, SIGCONT);
    break;
  case 3:
    dlc_redis_kill(&g.r);
    if (dlc_redis_respawn(&g.r, 50, 1) != 0) {
      fprintf(stderr, "soak: redis-server did not restart\n");
      exit(2);
    }
    break;
  case 4:
    raw_cmd("CLIENT KILL TYPE normal");
    break;
  case 5:
    raw_cmd("CLIENT KILL TYPE pubsub");
    break;
  default:
    if (w < 0)
      break;
    th_proxy_blackhole(g.proxy[w], 1);
    sleep_ms(SOAK_LEASE_MS + 1000);
    th_proxy_blackhole(g.proxy[w], 0);
    break;
  }
  g.counts[kind]++;
  fprintf(g.faults, "%s %lld %lld %d\n", g_fault_names[kind], (long long)t0,
          (long long)soak_now_us(), w);
  fflush(g.faults);
}

static int setup(void) {
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g.dir, sizeof g.dir, "%s/dlock-soak-XXXXXX", tmp);
  if (!mkdtemp(g.dir))
    return -1;
  if (dlc_redis_prepare(&g.r, g.dir, "redis-",
                        "appendonly yes\nappendfsync always\n") != 0 ||
      dlc_redis_start(&g.r, 1, 1) != 0)
    return -1;
  char p[300], f[300];
  snprintf(p, sizeof p, "%s/shared", g.dir);
  snprintf(f, sizeof f, "%s/faults.log", g.dir);
  g.sh = soak_map(p, 1);
  g.faults = fopen(f, "w");
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g.r.url;
  dlock_client *c;
  dlock_sem *s;
  if (!g.sh || !g.faults || dlock_client_new(&cfg, &c) ||
      dlock_sem_new(c, "soak-sem0", &s) || dlock_sem_init(s, SOAK_SEM_PERMITS))
    return -1;
  dlock_sem_free(s);
  dlock_client_free(c);
  for (int i = 0; i < g.n; i++)
    g.proxy[i] = th_proxy_new(g.r.port);
  return 0;
}

static void finish(void) {
  g.sh->stop = 1;
  int64_t end = soak_now_us() + 30000000;
  for (int i = 0; i < g.n; i++) {
    kill(g.pid[i], SIGCONT);
    int st;
    while (waitpid(g.pid[i], &st, WNOHANG) == 0 && soak_now_us() < end)
      sleep_ms(20);
    kill(g.pid[i], SIGKILL);
    waitpid(g.pid[i], &st, 0);
  }
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--worker") == 0) {
    char p[512];
    snprintf(p, sizeof p, "%s/shared", argv[5]);
    soak_shared *sh = soak_map(p, 0);
    return sh ? soak_worker(atoi(argv[2]), argv[3], argv[4], argv[5], sh) : 2;
  }
  if (argc == 3 && strcmp(argv[1], "--check-only") == 0) {
    /* The checker alone over a kept run's logs (stores not read). */
    int problems = soak_check(argv[2], NULL, 0);
    printf("RESULT: %s (%d problems)\n", problems ? "FAIL" : "PASS", problems);
    return problems ? 1 : 0;
  }
  const char *env_min = getenv("SOAK_MINUTES");
  double minutes = env_min ? atof(env_min) : 10;
  unsigned seed = (unsigned)time(NULL);
  int keep = 0;
  g.n = 8;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--minutes") == 0 && i + 1 < argc)
      minutes = atof(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      g.n = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = (unsigned)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--keep") == 0)
      keep = 1;
    else {
      fprintf(stderr, "usage: dlock_soak [--minutes M] [--workers N] "
                      "[--seed S] [--keep]\n");
      return 64;
    }
  }
  if (g.n < 2 || g.n > SOAK_MAX_WORKERS || minutes <= 0) {
    fprintf(stderr, "dlock_soak: 2 to %d workers, minutes > 0\n",
            SOAK_MAX_WORKERS);
    return 64;
  }
  srand(seed);
  signal(SIGPIPE, SIG_IGN);
  if (setup() != 0) {
    fprintf(stderr, "dlock_soak: setup failed (%s)\n", strerror(errno));
    return 2;
  }
  printf("soak: %.1f min, %d workers, seed %u, redis-server appendfsync "
         "always, lease %d ms; logs in %s\n",
         minutes, g.n, seed, SOAK_LEASE_MS, g.dir);
  fflush(stdout);
  for (int i = 0; i < g.n; i++)
    spawn_worker(i);
  int64_t end = soak_now_us() + (int64_t)(minutes * 60e6);
  while (soak_now_us() < end) {
    sleep_ms(1000 + rand() % 2000);
    reap();
    fault(rand() % 7);
    reap();
  }
  finish();
  printf("faults:");
  for (int k = 0; k < 7; k++)
    printf(" %s %ld%s", g_fault_names[k], g.counts[k], k < 6 ? "," : "\n");
  printf("fenced holders paused past their lease mid-section: %d\n",
         g.paused_in_cs);
  int problems = soak_check(g.dir, g.r.url, g.paused_in_cs);
  printf("RESULT: %s (%d problems)\n", problems ? "FAIL" : "PASS", problems);
  dlc_redis_stop(&g.r);
  if (!keep && !problems)
    dlc_redis_remove_dir(&g.r);
  fclose(g.faults);
  return problems ? 1 : 0;
}
