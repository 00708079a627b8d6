/*
 * redis_spawn.c -- starting and stopping private redis-server processes
 * (see redis_spawn.h), shared by the tools and the test harness.
 * Modelled on how redis's own test suite runs servers.
 */
#include "redis_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

/* The kernel's ephemeral port range (its defaults when unreadable). */
static void ephemeral_range(int *lo, int *hi) {
  *lo = 32768, *hi = 60999;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (!f)
    return;
  int a, b;
  if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a)
    *lo = a, *hi = b;
  fclose(f);
}

/* 1 if nothing on this host holds 127.0.0.1:port now. */
static int bindable(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0)
    return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
  close(s);
  return ok;
}

/* A free port BELOW the kernel's ephemeral range (or above it when the range
 * starts too low), so that no client socket's own port can ever be it: a
 * server restarted in place on an ephemeral port found it taken by a
 * client's connection (20 tries in 2 s: "bind: Address already in use" --
 * the reconnecting client's own port, or its TCP self-connect to the dead
 * port), and make test-stress failed on it. Ports in [10000, lo - 10001]
 * leave a Cluster node's bus port (port + 10000) below the range too. A
 * random start per call keeps parallel test processes apart; the caller
 * retries a start that lost the race. 0 when none is found. */
int dlc_free_port(void) {
  int lo, hi;
  ephemeral_range(&lo, &hi);
  int from = 10000, to = lo - 10001;
  if (to - from < 1000)
    from = hi + 1, to = 65535 - 10000;
  if (to - from < 100)
    from = 1024, to = lo - 1; /* a strange range: at least not in it */
  static _Thread_local unsigned seed;
  if (!seed)
    seed = ((unsigned)getpid() * 2654435761u) ^ (unsigned)dlc_now_ns() ^
           (unsigned)(uintptr_t)&seed;
  int span = to - from + 1;
  for (int i = 0; span > 0 && i < 200; i++) {
    seed = seed * 1103515245u + 12345u;
    int port = from + (int)((seed >> 8) % (unsigned)span);
    if (bindable(port))
      return port;
  }
  return 0;
}

int dlc_redis_prepare(dlc_redis *r, const char *parent, const char *prefix,
                      const char *extra_conf) {
  memset(r, 0, sizeof *r);
  char d[sizeof r->dir];
  snprintf(d, sizeof d, "%s/%sXXXXXX", parent, prefix);
  if (!mkdtemp(d))
    return -1;
  memcpy(r->dir, d, sizeof d);
  char t[sizeof r->sock];
  snprintf(t, sizeof t, "%s/redis.sock", d);
  memcpy(r->sock, t, sizeof t);
  snprintf(r->extra, sizeof r->extra, "%s", extra_conf ? extra_conf : "");
  return 0;
}

static int write_conf(const dlc_redis *r, const char *conf) {
  FILE *f = fopen(conf, "w");
  if (!f)
    return -1;
  fprintf(f,
          "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\n"
          "save \"\"\nappendonly no\ndir %s\nlogfile %s/redis.log\n"
          "daemonize no\nmaxclients 10000\n%s",
          r->port, r->sock, r->dir, r->dir, r->extra);
  return fclose(f) == 0 ? 0 : -1;
}

/* In the child: never outlive the parent; stdin (and stdout, stderr when
 * quiet) from /dev/null. */
static void exec_server(const char *conf, int quiet, int sentinel) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  int dn = open("/dev/null", O_RDWR);
  if (dn >= 0) {
    dup2(dn, 0);
    dup2(dn, 1);
    if (quiet)
      dup2(dn, 2);
  }
  if (sentinel) /* Debian's redis-sentinel is this binary in this mode */
    execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
  else
    execlp("redis-server", "redis-server", conf, (char *)NULL);
  _exit(127);
}

/* 1 if the server on r->sock answers PING. A server with requirepass (or a
 * default-user password) answers NOAUTH: it is up too. */
static int answers_ping(const dlc_redis *r) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
  int ok = 0;
  if (c && !c->err) {
    redisReply *rep = redisCommand(c, "PING");
    ok = rep && (rep->type == REDIS_REPLY_STATUS ||
                 (rep->type == REDIS_REPLY_ERROR &&
                  strncmp(rep->str, "NOAUTH", 6) == 0));
    if (rep)
      freeReplyObject(rep);
  }
  if (c)
    redisFree(c);
  return ok;
}

/* One start on r->port: fork, exec, wait for PING (bounded: 10 s). */
static int spawn(dlc_redis *r, int quiet) {
  char conf[sizeof r->dir + 16];
  snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
  if (write_conf(r, conf) != 0)
    return DLC_REDIS_FAILED;
  pid_t pid = fork();
  if (pid < 0)
    return DLC_REDIS_FAILED;
  if (pid == 0)
    exec_server(conf, quiet, r->sentinel);
  r->pid = pid;
  for (int i = 0; i < 1000; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r->pid = 0;
      return WIFEXITED(st) && WEXITSTATUS(st) == 127 ? DLC_REDIS_NOTFOUND
                                                     : DLC_REDIS_FAILED;
    }
    if (answers_ping(r))
      return 0;
    dlc_sleep_ms(10);
  }
  dlc_redis_kill(r);
  return DLC_REDIS_FAILED;
}

int dlc_redis_start(dlc_redis *r, int tcp, int quiet) {
  int rc = DLC_REDIS_FAILED;
  for (int attempt = 0; attempt < 5; attempt++) {
    r->port = tcp ? dlc_free_port() : 0;
    rc = spawn(r, quiet);
    if (rc == 0) {
      char sk[sizeof r->sock], u[sizeof r->url];
      memcpy(sk, r->sock, sizeof sk);
      snprintf(u, sizeof u, "unix://%s", sk);
      memcpy(r->url, u, sizeof u);
      if (tcp)
        snprintf(r->tcp_url, sizeof r->tcp_url, "redis://127.0.0.1:%d",
                 r->port);
      return 0;
    }
    if (!tcp || rc == DLC_REDIS_NOTFOUND)
      break; /* a unix socket in our own dir cannot be "busy" */
  }
  return rc;
}

int dlc_redis_respawn(dlc_redis *r, int attempts, int quiet) {
  unlink(r->sock);
  int rc = DLC_REDIS_FAILED;
  for (int i = 0; i < attempts; i++) {
    if ((rc = spawn(r, quiet)) == 0 || rc == DLC_REDIS_NOTFOUND)
      return rc;
    dlc_sleep_ms(100);
  }
  return rc;
}

void dlc_redis_stop(dlc_redis *r) {
  if (r->pid <= 1)
    return;
  kill(r->pid, SIGCONT);
  kill(r->pid, SIGTERM);
  for (int i = 0; i < 500; i++) {
    if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
      r->pid = 0;
      return;
    }
    dlc_sleep_ms(10);
  }
  dlc_redis_kill(r);
}

void dlc_redis_kill(dlc_redis *r) {
  if (r->pid <= 1)
    return;
  kill(r->pid, SIGKILL);
  while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  r->pid = 0;
}

void dlc_redis_remove_dir(dlc_redis *r) {
  if (!r->dir[0])
    return;
  char p[sizeof r->dir + 32];
  const char *files[] = {"redis.conf", "redis.log", "redis.sock", "dump.rdb",
                         "temp-redis.conf"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", r->dir, files[i]);
    unlink(p);
  }
  rmdir(r->dir);
  r->dir[0] = '\0';
}

int dlc_redis_start_private(dlc_redis *r, int tcp, const char *extra_conf) {
  const char *tmp = getenv("TMPDIR");
  if (dlc_redis_prepare(r, tmp && *tmp ? tmp : "/tmp", "dlock-redis-",
                        extra_conf) != 0) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  int rc = dlc_redis_start(r, tcp, 1);
  if (rc == 0)
    return 0;
  if (rc == DLC_REDIS_NOTFOUND)
    fprintf(stderr, "redis-server not found (run scripts/install-deps.sh)\n");
  fprintf(stderr, "could not start a private redis-server (see %s/redis.log)\n",
          r->dir);
  return -1;
}

void dlc_redis_stop_private(dlc_redis *r) {
  dlc_redis_stop(r);
  dlc_redis_remove_dir(r);
}
