/* redis_spawn.c -- see redis_spawn.h. */
#include "redis_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  int port = 0;
  if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0)
    close(s);
  return port;
}

static char g_extra[1024];

static int spawn(tool_redis *r) {
  char conf[200];
  snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
  FILE *f = fopen(conf, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", conf, strerror(errno));
    return -1;
  }
  fprintf(f,
          "port %d\nbind 127.0.0.1\nunixsocket %s\nunixsocketperm 700\n"
          "save \"\"\nappendonly no\ndir %s\nlogfile %s/redis.log\n"
          "daemonize no\nmaxclients 10000\n%s",
          r->port, r->sock, r->dir, r->dir, g_extra);
  fclose(f);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);
    int dn = open("/dev/null", O_RDWR);
    if (dn >= 0) {
      dup2(dn, 0);
      dup2(dn, 1);
      dup2(dn, 2);
    }
    execlp("redis-server", "redis-server", conf, (char *)NULL);
    _exit(127);
  }
  r->pid = pid;
  for (int i = 0; i < 1000; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r->pid = 0;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        fprintf(stderr,
                "redis-server not found (run scripts/install-deps.sh)\n");
      return -1;
    }
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
    int ok = 0;
    if (c && !c->err) {
      redisReply *rep = redisCommand(c, "PING");
      ok = rep && rep->type == REDIS_REPLY_STATUS;
      if (rep)
        freeReplyObject(rep);
    }
    if (c)
      redisFree(c);
    if (ok)
      return 0;
    nap_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  r->pid = 0;
  return -1;
}

int tool_redis_start(tool_redis *r, int tcp, const char *extra_conf) {
  memset(r, 0, sizeof *r);
  snprintf(g_extra, sizeof g_extra, "%s", extra_conf ? extra_conf : "");
  const char *tmp = getenv("TMPDIR");
  char d[sizeof r->dir];
  snprintf(d, sizeof d, "%s/dlock-redis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(d)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  memcpy(r->dir, d, sizeof d);
  char t[sizeof r->sock];
  snprintf(t, sizeof t, "%s/redis.sock", d);
  memcpy(r->sock, t, sizeof t);
  for (int attempt = 0; attempt < 5; attempt++) {
    r->port = tcp ? free_port() : 0;
    if (spawn(r) == 0) {
      char u[sizeof r->url];
      snprintf(u, sizeof u, "unix://%s", t);
      memcpy(r->url, u, sizeof u);
      if (tcp)
        snprintf(r->tcp_url, sizeof r->tcp_url, "redis://127.0.0.1:%d",
                 r->port);
      return 0;
    }
    if (!tcp)
      break;
  }
  fprintf(stderr, "could not start a private redis-server (see %s/redis.log)\n",
          r->dir);
  return -1;
}

static void stop_proc(tool_redis *r) {
  if (r->pid <= 1)
    return;
  kill(r->pid, SIGCONT);
  kill(r->pid, SIGTERM);
  for (int i = 0; i < 500; i++) {
    if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
      r->pid = 0;
      return;
    }
    nap_ms(10);
  }
  kill(r->pid, SIGKILL);
  waitpid(r->pid, NULL, 0);
  r->pid = 0;
}

void tool_redis_stop(tool_redis *r) {
  stop_proc(r);
  if (r->dir[0]) {
    char p[sizeof r->dir + 32];
    const char *files[] = {"redis.conf", "redis.log", "redis.sock", "dump.rdb"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      snprintf(p, sizeof p, "%s/%s", r->dir, files[i]);
      unlink(p);
    }
    rmdir(r->dir);
    r->dir[0] = '\0';
  }
}

int tool_redis_restart(tool_redis *r) {
  if (r->pid > 1) {
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
  }
  unlink(r->sock);
  for (int i = 0; i < 20; i++) {
    if (spawn(r) == 0)
      return 0;
    nap_ms(100);
  }
  return -1;
}
