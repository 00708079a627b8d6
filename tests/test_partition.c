/*
 * test_partition.c -- a real network partition (issue 17): the holder runs
 * in its own network namespace, joined to the root namespace (where
 * redis-server and the other client are) by a veth pair; the test cuts the
 * link with `ip link set ... down` and heals it later. Connections stay
 * open and nothing comes back, as in a switch failure.
 *
 * Checked: the holder is told (on_lock_lost) before another client
 * acquires; the other client acquires within the lease after the cut;
 * after healing, the old holder's unlock returns DLOCK_ELOST and touches
 * nothing; a fenced store (highest token wins) rejects the old holder's
 * write and accepted the new holder's.
 *
 * Needs root and `ip` (iproute2); without them every case SKIPs with the
 * reason. Namespace and veth names carry the test's pid; a janitor process
 * deletes them when the test process ends, however it ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "th.h"

typedef struct net {
  char ns[32], host_if[16], ns_if[16];
  char host_ip[20], ns_ip[20];
} net;

/* Runs a shell command quietly; its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  char full[600];
  snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
  int st = system(full);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A process that outlives us only to delete the namespace (and with it
 * both ends of the veth pair): it waits for EOF on a pipe whose write end
 * only this process holds, which comes however the process ends. */
static void start_janitor(const net *n) {
  int p[2];
  if (pipe(p) != 0)
    th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int dn = open("/dev/null", O_RDWR);
    dup2(dn, 0);
    dup2(dn, 1);
    dup2(dn, 2);
    for (int fd = 3; fd < 1024; fd++)
      if (fd != p[0])
        close(fd);
    char c;
    while (read(p[0], &c, 1) != 0 && errno == EINTR)
      ;
    execlp("ip", "ip", "netns", "del", n->ns, (char *)NULL);
    _exit(127);
  }
  close(p[0]);
  fcntl(p[1], F_SETFD, FD_CLOEXEC); /* children (redis-server) do not hold it */
}

/* Creates the namespace and the link, or skips the test saying why. */
static void net_up(net *n) {
  if (geteuid() != 0)
    th_skip("network namespaces need root");
  if (sh("ip -V") != 0)
    th_skip("no 'ip' command (Debian: iproute2)");
  int pid = (int)getpid();
  snprintf(n->ns, sizeof n->ns, "dlockt-%d", pid);
  snprintf(n->host_if, sizeof n->host_if, "dlkh%d", pid);
  snprintf(n->ns_if, sizeof n->ns_if, "dlkn%d", pid);
  /* A /30 of 10.200.0.0/13 from the pid: concurrent tests do not clash. */
  unsigned x = (unsigned)pid % (64u * 256u * 8u);
  unsigned o2 = 200 + x / (64u * 256u), o3 = (x / 64u) % 256u,
           o4 = (x % 64u) * 4u;
  snprintf(n->host_ip, sizeof n->host_ip, "10.%u.%u.%u", o2, o3, o4 + 1);
  snprintf(n->ns_ip, sizeof n->ns_ip, "10.%u.%u.%u", o2, o3, o4 + 2);
  if (sh("ip netns add %s", n->ns) != 0)
    th_skip("'ip netns add' refused (no CAP_SYS_ADMIN in this container?)");
  start_janitor(n);
  int bad = sh("ip link add %s type veth peer name %s netns %s", n->host_if,
               n->ns_if, n->ns) ||
            sh("ip addr add %s/30 dev %s", n->host_ip, n->host_if) ||
            sh("ip link set %s up", n->host_if) ||
            sh("ip -n %s addr add %s/30 dev %s", n->ns, n->ns_ip, n->ns_if) ||
            sh("ip -n %s link set %s up", n->ns, n->ns_if) ||
            sh("ip -n %s link set lo up", n->ns);
  if (bad)
    th_skip("could not set up the veth pair (ip link add ... type veth)");
}

static void link_set(const net *n, int up) {
  CHECK_EQ(sh("ip link set %s %s", n->host_if, up ? "up" : "down"), 0);
}

/* ---- the fenced store: a resource that keeps the highest token ------- */

static const char *g_store_lua =
    "local max = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if tonumber(ARGV[1]) < max then return 0 end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call('rpush', KEYS[2], ARGV[2])\n"
    "return 1\n";

/* 1 accepted, 0 rejected (stale token), -1 unreachable. */
static int store_write(redisContext *rc, unsigned long long token,
                       const char *what) {
  redisReply *x = redisCommand(rc, "EVAL %s 2 store:max store:log %llu %s",
                               g_store_lua, token, what);
  int v = x && x->type == REDIS_REPLY_INTEGER ? (int)x->integer : -1;
  if (x)
    freeReplyObject(x);
  return v;
}

/* ---- the holder, inside the namespace --------------------------------- */

typedef struct holder_arg {
  const net *n;
  int port, wd_ms;
  int up_w;   /* to the test: "A token", "L ms", "U rc", "W accepted" */
  int down_r; /* from the test: "H" (healed) */
} holder_arg;

static int g_up_w = -1;

static void say(int fd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
  char b[128];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (write(fd, b, (size_t)k) != k)
    _exit(90);
}

static void holder_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  say(g_up_w, "L %lld\n", (long long)th_now_ms());
}

static redisContext *connect_retry(const char *ip, int port) {
  for (int i = 0; i < 50; i++) {
    struct timeval tv = {1, 0};
    redisContext *rc = redisConnectWithTimeout(ip, port, tv);
    if (rc && !rc->err) {
      redisSetTimeout(rc, tv);
      return rc;
    }
    if (rc)
      redisFree(rc);
    th_sleep_ms(100);
  }
  return NULL;
}

static int holder_main(void *v) {
  holder_arg *a = v;
  char path[64];
  snprintf(path, sizeof path, "/var/run/netns/%s", a->n->ns);
  int nsfd = open(path, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0)
    return 80;
  close(nsfd);
  g_up_w = a->up_w;
  char url[64];
  snprintf(url, sizeof url, "redis://%s:%d", a->n->host_ip, a->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = a->wd_ms;
  cfg.command_timeout_ms = 500;
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 100;
  cfg.on_lock_lost = holder_lost;
  dlock_client *c;
  dlock_mutex *m;
  uint64_t tok;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new_fenced(c, "part", &m) ||
      dlock_mutex_lock(m) || dlock_mutex_token(m, &tok))
    return 81;
  say(a->up_w, "A %llu\n", (unsigned long long)tok);
  char h;
  if (read(a->down_r, &h, 1) != 1)
    return 82;
  say(a->up_w, "U %d\n", dlock_mutex_unlock(m));
  redisContext *rc = connect_retry(a->n->host_ip, a->port);
  say(a->up_w, "W %d\n", rc ? store_write(rc, tok, "old-holder") : -1);
  if (rc)
    redisFree(rc);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

/* Reads one "<tag> <number>" line from fd within timeout_ms. */
static long long expect(int fd, char tag, int64_t timeout_ms) {
  char line[64];
  size_t n = 0;
  int64_t end = th_now_ms() + timeout_ms;
  while (n < sizeof line - 1) {
    struct pollfd p = {fd, POLLIN, 0};
    int64_t left = end - th_now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) <= 0)
      th_fail(__FILE__, __LINE__, "no '%c' message from the holder", tag);
    if (read(fd, line + n, 1) != 1)
      th_fail(__FILE__, __LINE__, "holder gone before '%c'", tag);
    if (line[n] == '\n')
      break;
    n++;
  }
  line[n] = '\0';
  CHECK_MSG(line[0] == tag, "holder said '%s', expected '%c ...'", line, tag);
  return atoll(line + 2);
}

TH_CASE_T(partitioned_holder_told_first_then_lost_and_fenced, 120,
          "slow netns") {
  net n;
  net_up(&n);
  char extra[160];
  snprintf(extra, sizeof extra, "bind 127.0.0.1 %s\nprotected-mode no\n",
           n.host_ip);
  th_redis *r = th_redis_new(1, extra);
  int wd = 4000 * th_timeout_mult();
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0);
  holder_arg a = {&n, r->port, wd, up[1], down[0]};
  pid_t pid = th_fork(holder_main, &a);
  close(up[1]);
  close(down[0]);
  long long tok1 = expect(up[0], 'A', 10000);

  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fenced(c, "part", &m));
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_EBUSY);
  link_set(&n, 0);
  int64_t t_cut = th_now_ms();
  int rc;
  while ((rc = dlock_mutex_trylock(m)) == DLOCK_EBUSY) {
    CHECK_MSG(th_now_ms() - t_cut < 3LL * wd, "lock not free after 3 leases");
    th_sleep_ms(10);
  }
  CHECK_OK(rc);
  int64_t t_acq = th_now_ms();
  long long t_lost = expect(up[0], 'L', 2000);
  printf("cut at 0 ms; holder told at %lld ms; other acquired at %lld ms "
         "(lease %d ms)\n",
         t_lost - t_cut, (long long)(t_acq - t_cut), wd);
  CHECK_MSG(t_lost <= t_acq, "holder told %lld ms after the other acquired",
            (long long)(t_lost - t_acq));
  CHECK_MSG(t_acq - t_cut <= wd + 1000LL * th_timeout_mult(),
            "other acquired %lld ms after the cut (lease %d)",
            (long long)(t_acq - t_cut), wd);
  uint64_t tok2;
  CHECK_OK(dlock_mutex_token(m, &tok2));
  CHECK_MSG((long long)tok2 > tok1, "token %llu not above %lld",
            (unsigned long long)tok2, tok1);
  redisContext *raw = th_redis_raw(r);
  CHECK_EQ(store_write(raw, tok2, "new-holder"), 1);

  redisReply *before = th_cmd(r, "HGETALL part");
  link_set(&n, 1);
  CHECK_EQ(write(down[1], "H", 1), 1);
  CHECK_EQ(expect(up[0], 'U', 10000), DLOCK_ELOST);
  CHECK_EQ(expect(up[0], 'W', 30000), 0); /* rejected: stale token */
  redisReply *after = th_cmd(r, "HGETALL part");
  CHECK_EQ(before->elements, 2);
  CHECK_EQ(after->elements, 2);
  CHECK_STR(before->element[0]->str, after->element[0]->str);
  CHECK_STR(before->element[1]->str, after->element[1]->str);
  freeReplyObject(before);
  freeReplyObject(after);
  CHECK_EQ(th_cmd_int(r, "LLEN store:log"), 1);
  CHECK_EQ(th_wait(pid, 10000), 0);
  CHECK_OK(dlock_mutex_is_held(m) == 1 ? DLOCK_OK : DLOCK_ELOST);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  redisFree(raw);
}

TH_MAIN()
