/*
 * etcd_spawn.c -- private etcd members (see etcd_spawn.h), shared by the
 * tests, dlock-seckill's failover scenario and dlock-bench. The same habits
 * as redis_spawn.c: a private directory, free loopback ports, bounded
 * waits, signals by pid only.
 */
#include "etcd_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "redis_spawn.h"

static int on_path(const char *prog) {
  const char *path = getenv("PATH");
  char buf[4096], p[4200];
  snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
  for (char *s = strtok(buf, ":"); s; s = strtok(NULL, ":")) {
    snprintf(p, sizeof p, "%s/%s", s, prog);
    if (access(p, X_OK) == 0)
      return 1;
  }
  return 0;
}

int dlc_etcd_installed(void) { return on_path("etcd"); }
int dlc_etcd_ctl_installed(void) { return on_path("etcdctl"); }

/* ---- a tiny HTTP/1.1 client (Connection: close) ------------------------- */

static int connect_to(int port, int ms) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 &&
      errno != EINPROGRESS) {
    close(s);
    return -1;
  }
  struct pollfd p = {s, POLLOUT, 0};
  int err = 0;
  socklen_t l = sizeof err;
  if (poll(&p, 1, ms) != 1 ||
      getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err) {
    close(s);
    return -1;
  }
  return s;
}

int dlc_etcd_post(int port, const char *path, const char *body, char *out,
                  size_t cap, int ms) {
  int64_t end = dlc_now_ms() + ms;
  int s = connect_to(port, ms);
  if (s < 0)
    return -1;
  char req[4096];
  int n = snprintf(req, sizeof req,
                   "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\nConnection: "
                   "close\r\n\r\n%s",
                   path, strlen(body), body);
  if (n < 0 || (size_t)n >= sizeof req ||
      send(s, req, (size_t)n, MSG_NOSIGNAL) != n) {
    close(s);
    return -1;
  }
  char buf[65536];
  size_t got = 0;
  while (got < sizeof buf - 1) {
    int left = (int)(end - dlc_now_ms());
    struct pollfd p = {s, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) != 1)
      break;
    ssize_t r = recv(s, buf + got, sizeof buf - 1 - got, 0);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(s);
  buf[got] = '\0';
  int status = -1;
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
    return -1;
  const char *b = strstr(buf, "\r\n\r\n");
  if (out && cap)
    snprintf(out, cap, "%s", b ? b + 4 : "");
  return status;
}

/* ---- members ------------------------------------------------------------- */

static int prepare(dlc_etcd *m, const char *parent, const char *name,
                   int fast) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  char d[sizeof m->dir];
  snprintf(d, sizeof d, "%s/etcd-%s-XXXXXX", parent, name);
  if (!mkdtemp(d))
    return -1;
  memcpy(m->dir, d, sizeof d);
  m->fast = fast;
  for (int i = 0; i < 20; i++) {
    m->port = dlc_free_port();
    m->peer_port = dlc_free_port();
    if (m->port && m->peer_port && m->port != m->peer_port)
      break;
  }
  snprintf(m->ep, sizeof m->ep, "127.0.0.1:%d", m->port);
  return 0;
}

static void exec_member(const dlc_etcd *m, int existing) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  char log[sizeof m->dir + 16], data[sizeof m->dir + 16];
  snprintf(log, sizeof log, "%s/etcd.log", m->dir);
  snprintf(data, sizeof data, "%s/data", m->dir);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  int nul = open("/dev/null", O_RDONLY);
  if (nul >= 0)
    dup2(nul, 0);
  char cu[64], pu[64];
  snprintf(cu, sizeof cu, "%s://127.0.0.1:%d", m->cert[0] ? "https" : "http",
           m->port);
  snprintf(pu, sizeof pu, "http://127.0.0.1:%d", m->peer_port);
  const char *argv[32];
  int a = 0;
  argv[a++] = "etcd";
  argv[a++] = "--name";
  argv[a++] = m->name;
  argv[a++] = "--data-dir";
  argv[a++] = data;
  argv[a++] = "--listen-client-urls";
  argv[a++] = cu;
  argv[a++] = "--advertise-client-urls";
  argv[a++] = cu;
  argv[a++] = "--listen-peer-urls";
  argv[a++] = pu;
  argv[a++] = "--initial-advertise-peer-urls";
  argv[a++] = pu;
  argv[a++] = "--initial-cluster";
  argv[a++] = m->cluster;
  argv[a++] = "--initial-cluster-state";
  argv[a++] = existing ? "existing" : "new";
  argv[a++] = "--initial-cluster-token";
  argv[a++] = "dlock-private";
  argv[a++] = "--logger";
  argv[a++] = "zap";
  if (m->fast)
    argv[a++] = "--unsafe-no-fsync";
  if (m->cert[0]) {
    argv[a++] = "--cert-file";
    argv[a++] = m->cert;
    argv[a++] = "--key-file";
    argv[a++] = m->key;
  }
  if (m->client_ca[0]) {
    argv[a++] = "--client-cert-auth";
    argv[a++] = "--trusted-ca-file";
    argv[a++] = m->client_ca;
  }
  argv[a] = NULL;
  execvp("etcd", (char *const *)argv);
  _exit(127);
}

static int spawn(dlc_etcd *m, int existing) {
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0)
    exec_member(m, existing);
  m->pid = pid;
  m->paused = 0;
  return 0;
}

int dlc_etcd_wait_ready(dlc_etcd *m, int ms) {
  int64_t end = dlc_now_ms() + ms;
  while (dlc_now_ms() < end) {
    int st;
    if (m->pid > 0 && waitpid(m->pid, &st, WNOHANG) == m->pid) {
      m->pid = 0; /* reaped: its pid may be another process's soon */
      return -1;
    }
    char out[512];
    if (dlc_etcd_post(m->port, "/v3/kv/range", "{\"key\":\"AA==\"}", out,
                      sizeof out, 1000) == 200)
      return 0;
    dlc_sleep_ms(50);
  }
  return -1;
}

/* 1 if the member's log says a port it was given was taken meanwhile (the
 * free port was picked, then bound by another process before etcd). */
static int lost_port_race(const dlc_etcd *m) {
  char log[sizeof m->dir + 16], buf[8192];
  snprintf(log, sizeof log, "%s/etcd.log", m->dir);
  FILE *f = fopen(log, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, "address already in use") != NULL;
}

static int cluster_once(dlc_etcd *m, int n, const char *parent, int fast) {
  char cl[1024] = "";
  for (int i = 0; i < n; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "m%d", i + 1);
    if (prepare(&m[i], parent, nm, fast) != 0)
      return -1;
    size_t l = strlen(cl);
    snprintf(cl + l, sizeof cl - l, "%s%s=http://127.0.0.1:%d", i ? "," : "",
             nm, m[i].peer_port);
  }
  for (int i = 0; i < n; i++) {
    snprintf(m[i].cluster, sizeof m[i].cluster, "%s", cl);
    if (spawn(&m[i], 0) != 0)
      return -1;
  }
  for (int i = 0; i < n; i++)
    if (dlc_etcd_wait_ready(&m[i], 30000) != 0)
      return -1;
  return 0;
}

int dlc_etcd_cluster(dlc_etcd *m, int n, const char *parent, int fast) {
  /* A port picked free can be taken by another process before etcd binds
   * it (a loaded machine running many cases): such a start is tried again
   * with fresh ports, at most 5 times; any other failure is final. */
  for (int attempt = 0;; attempt++) {
    int rc = cluster_once(m, n, parent, fast);
    if (rc == 0)
      return 0;
    int race = 0;
    for (int i = 0; i < n; i++)
      race |= m[i].pid == 0 && lost_port_race(&m[i]);
    if (!race || attempt == 4)
      return rc;
    for (int i = 0; i < n; i++)
      dlc_etcd_kill(&m[i]);
  }
}

int dlc_etcd_single(dlc_etcd *m, const char *parent, int fast) {
  return dlc_etcd_cluster(m, 1, parent, fast);
}

int dlc_etcd_single_tls(dlc_etcd *m, const char *parent, const char *cert,
                        const char *key, const char *client_ca) {
  if (prepare(m, parent, "tls", 1) != 0)
    return -1;
  snprintf(m->cert, sizeof m->cert, "%s", cert);
  snprintf(m->key, sizeof m->key, "%s", key);
  snprintf(m->client_ca, sizeof m->client_ca, "%s", client_ca ? client_ca : "");
  snprintf(m->cluster, sizeof m->cluster, "tls=http://127.0.0.1:%d",
           m->peer_port);
  if (spawn(m, 0) != 0)
    return -1;
  for (int i = 0; i < 400; i++) {
    int st;
    if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
      m->pid = 0;
      return -1;
    }
    int s = connect_to(m->port, 200);
    if (s >= 0) {
      close(s);
      dlc_sleep_ms(500); /* a single member elects itself at once */
      return 0;
    }
    dlc_sleep_ms(50);
  }
  return -1;
}

void dlc_etcd_endpoints(const dlc_etcd *m, int n, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%s", i ? "," : "", m[i].ep);
  }
}

void dlc_etcd_kill(dlc_etcd *m) {
  if (m->pid <= 1)
    return;
  kill(m->pid, SIGKILL);
  while (waitpid(m->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  m->pid = 0;
  m->paused = 0;
}

int dlc_etcd_restart(dlc_etcd *m) {
  dlc_etcd_kill(m);
  for (int i = 0; i < 50; i++) {
    /* the ports may linger a moment after the kill */
    if (spawn(m, 1) != 0)
      return -1;
    dlc_sleep_ms(200);
    int st;
    if (waitpid(m->pid, &st, WNOHANG) != m->pid)
      return 0;
    m->pid = 0;
    dlc_sleep_ms(100);
  }
  return -1;
}

void dlc_etcd_pause(dlc_etcd *m) {
  if (m->pid <= 1)
    return;
  kill(m->pid, SIGSTOP);
  char p[64], st[512];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)m->pid);
  for (int i = 0; i < 500; i++) {
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(st, 1, sizeof st - 1, f) : 0;
    if (f)
      fclose(f);
    st[n] = '\0';
    const char *rp = strrchr(st, ')');
    if (rp && (rp[2] == 'T' || rp[2] == 't'))
      break;
    dlc_sleep_ms(10);
  }
  m->paused = 1;
}

void dlc_etcd_resume(dlc_etcd *m) {
  if (m->pid > 1)
    kill(m->pid, SIGCONT);
  m->paused = 0;
}

int dlc_etcd_leader(const dlc_etcd *m, int n) {
  for (int i = 0; i < n; i++) {
    if (m[i].pid <= 1 || m[i].paused)
      continue;
    char out[2048];
    if (dlc_etcd_post(m[i].port, "/v3/maintenance/status", "{}", out,
                      sizeof out, 1500) != 200)
      continue;
    char leader[32] = "", me[32] = "";
    const char *l = strstr(out, "\"leader\":\"");
    const char *h = strstr(out, "\"member_id\":\"");
    if (!l || !h)
      continue;
    sscanf(l + 10, "%31[0-9]", leader);
    sscanf(h + 13, "%31[0-9]", me);
    if (!leader[0] || strcmp(leader, me) != 0)
      continue;
    return i;
  }
  return -1;
}

static int rm_tree(const char *dir) {
  pid_t pid = fork();
  if (pid == 0) {
    execlp("rm", "rm", "-rf", dir, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  if (pid > 0)
    waitpid(pid, &st, 0);
  return st;
}

void dlc_etcd_remove(dlc_etcd *m) {
  dlc_etcd_kill(m);
  if (m->dir[0])
    rm_tree(m->dir);
  m->dir[0] = '\0';
}
