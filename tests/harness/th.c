/*
 * th.c -- see th.h. Modelled on how redis's own test suite runs servers:
 * private directory, generated config, bounded readiness wait, SIGTERM then
 * SIGKILL, and the server log printed when a test fails.
 */
#include "th.h"

#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

th_case th_cases[TH_MAX_CASES];
int th_ncases;

#define TH_MAX_SERVERS 16
static th_redis g_server_store[TH_MAX_SERVERS];
static th_redis *g_servers[TH_MAX_SERVERS];
static int g_nservers;
static pid_t g_owner;
static char g_tmpdir[64];
static const char *g_current = "?";

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void dump_file(const char *path, const char *title) {
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  fprintf(stderr, "----- %s (%s) -----\n", title, path);
  char line[512];
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fprintf(stderr, "----- end -----\n");
  fclose(f);
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void stop_all(void) {
  if (getpid() != g_owner)
    return;
  for (int i = 0; i < g_nservers; i++)
    if (g_servers[i] && g_servers[i]->pid > 1)
      th_redis_stop(g_servers[i]);
  /* The servers' logs were printed if the case failed; leave no trace.
   * DLOCK_TEST_KEEP=1 keeps the directory for a post-mortem. */
  if (g_tmpdir[0] && !getenv("DLOCK_TEST_KEEP")) {
    nftw(g_tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_tmpdir[0] = '\0';
  }
}

void th_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL %s (%s:%d): ", g_current, file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  if (getpid() == g_owner) {
    for (int i = 0; i < g_nservers; i++) {
      char p[300];
      snprintf(p, sizeof p, "%s/redis.log", g_servers[i]->dir);
      dump_file(p, "redis-server log");
    }
    stop_all();
  }
  fflush(stderr);
  _exit(1);
}

void th_skip(const char *why) {
  fprintf(stderr, "SKIP %s: %s\n", g_current, why);
  stop_all();
  _exit(77);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: test timed out (SIGALRM)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  for (int i = 0; i < g_nservers; i++)
    if (g_servers[i]->pid > 1)
      kill(g_servers[i]->pid, SIGKILL);
  _exit(1);
}

const char *th_tmpfile(const char *name) {
  static char buf[8][256];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, 256, "%s/%s", g_tmpdir, name);
  return b;
}

int th_main(int argc, char **argv) {
  g_owner = getpid();
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < th_ncases; i++)
      printf("%s\n", th_cases[i].name);
    return 0;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: %s NAME | --list\n", argv[0]);
    return 2;
  }
  for (int i = 0; i < th_ncases; i++) {
    if (strcmp(th_cases[i].name, argv[1]) != 0)
      continue;
    g_current = th_cases[i].name;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/dlock-test-XXXXXX");
    if (!mkdtemp(g_tmpdir)) {
      perror("mkdtemp");
      return 1;
    }
    atexit(stop_all);
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    const char *mult = getenv("DLOCK_TEST_TIMEOUT_MULT");
    unsigned secs = 120u * (unsigned)(mult ? atoi(mult) : 1);
    alarm(secs ? secs : 120);
    int64_t t0 = th_now_ms();
    th_cases[i].fn();
    printf("PASS %s (%lld ms)\n", g_current, (long long)(th_now_ms() - t0));
    stop_all();
    return 0;
  }
  fprintf(stderr, "no test named %s\n", argv[1]);
  return 2;
}

/* ---- redis-server ---------------------------------------------------------
 */

th_redis *th_redis_new(int tcp, const char *extra_conf) {
  if (g_nservers >= TH_MAX_SERVERS)
    th_fail(__FILE__, __LINE__, "too many redis-servers in one test");
  th_redis *r = &g_server_store[g_nservers];
  /* DEBUG (sleep, jmap, ...) from local connections, for the fault tests. */
  char extra[sizeof r->extra];
  snprintf(extra, sizeof extra, "enable-debug-command local\n%s",
           extra_conf ? extra_conf : "");
  if (dlc_redis_prepare(r, g_tmpdir, "redis-", extra) != 0)
    th_fail(__FILE__, __LINE__, "mkdtemp: %s", strerror(errno));
  g_servers[g_nservers++] = r;
  if (dlc_redis_start(r, tcp, 0) != 0)
    th_fail(__FILE__, __LINE__, "redis-server did not start in %s", r->dir);
  return r;
}

void th_redis_stop(th_redis *r) { dlc_redis_stop(r); }

void th_redis_kill(th_redis *r) { dlc_redis_kill(r); }

void th_redis_restart(th_redis *r) {
  dlc_redis_stop(r);
  if (dlc_redis_respawn(r, 20, 0) != 0)
    th_fail(__FILE__, __LINE__, "redis-server did not restart");
}

void th_redis_pause(th_redis *r) {
  if (r->pid <= 1)
    th_fail(__FILE__, __LINE__, "pause: server not running");
  kill(r->pid, SIGSTOP);
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)r->pid);
  for (int i = 0; i < 200; i++) {
    FILE *f = fopen(path, "r");
    if (f) {
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      buf[n] = '\0';
      const char *rp = strrchr(buf, ')');
      if (rp && rp[1] == ' ' && rp[2] == 'T')
        return;
    }
    th_sleep_ms(5);
  }
  th_fail(__FILE__, __LINE__, "redis-server did not stop (SIGSTOP)");
}

void th_redis_resume(th_redis *r) {
  if (r->pid > 1)
    kill(r->pid, SIGCONT);
}

redisContext *th_redis_raw(th_redis *r) {
  struct timeval tv = {5, 0};
  redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
  if (!c || c->err)
    th_fail(__FILE__, __LINE__, "raw connect to %s failed", r->sock);
  const char *pw = strstr(r->extra, "requirepass ");
  if (pw) {
    char p[128];
    sscanf(pw + 12, "%127s", p);
    redisReply *rep = redisCommand(c, "AUTH %s", p);
    if (rep)
      freeReplyObject(rep);
  }
  return c;
}

redisReply *th_cmd(th_redis *r, const char *fmt, ...) {
  redisContext *c = th_redis_raw(r);
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!rep)
    th_fail(__FILE__, __LINE__, "command '%s' failed: %s", fmt, c->errstr);
  redisFree(c);
  return rep;
}

long long th_cmd_int(th_redis *r, const char *fmt, ...) {
  redisContext *c = th_redis_raw(r);
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!rep || rep->type != REDIS_REPLY_INTEGER)
    th_fail(__FILE__, __LINE__, "command '%s': no integer reply (%s)", fmt,
            rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "");
  long long v = rep->integer;
  freeReplyObject(rep);
  redisFree(c);
  return v;
}

long long th_get_ll(th_redis *r, const char *key) {
  redisReply *x = th_cmd(r, "GET %s", key);
  long long v = x->type == REDIS_REPLY_STRING ? atoll(x->str) : -1;
  freeReplyObject(x);
  return v;
}

void th_wait_numsub(th_redis *r, const char *channel, long long n,
                    int64_t timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  long long got = -1;
  while (th_now_ms() < end) {
    redisReply *x = th_cmd(r, "PUBSUB NUMSUB %s", channel);
    got = x->type == REDIS_REPLY_ARRAY && x->elements == 2
              ? x->element[1]->integer
              : -1;
    freeReplyObject(x);
    if (got == n)
      return;
    th_sleep_ms(10);
  }
  th_fail(__FILE__, __LINE__, "%s: %lld subscribers, expected %lld", channel,
          got, n);
}

void th_wait_llen(th_redis *r, const char *key, long long n,
                  int64_t timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    long long v = th_cmd_int(r, "LLEN %s", key);
    if (v == n)
      return;
    if (th_now_ms() >= end)
      th_fail(__FILE__, __LINE__, "LLEN %s stayed %lld, expected %lld", key, v,
              n);
    th_sleep_ms(2);
  }
}

dlock_client *th_client_cfg(th_redis *r, const dlock_config *cfg_in) {
  dlock_config cfg;
  if (cfg_in)
    cfg = *cfg_in;
  else
    dlock_config_init(&cfg);
  if (!cfg.url)
    cfg.url = r->url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc != 0)
    th_fail(__FILE__, __LINE__, "dlock_client_new: %s: %s", dlock_err_name(rc),
            dlock_last_error());
  return c;
}

dlock_client *th_client(th_redis *r) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.retry_interval_ms = 100;
  return th_client_cfg(r, &cfg);
}

pid_t th_fork(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    th_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGALRM, SIG_DFL);
    alarm(0);
    int rc = fn(arg);
    fflush(NULL);
    _exit(rc);
  }
  return pid;
}

int th_wait(pid_t pid, int64_t timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    if (w < 0)
      th_fail(__FILE__, __LINE__, "waitpid: %s", strerror(errno));
    if (th_now_ms() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      th_fail(__FILE__, __LINE__, "worker %d did not finish in %lld ms",
              (int)pid, (long long)timeout_ms);
    }
    th_sleep_ms(5);
  }
}
