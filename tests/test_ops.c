/*
 * test_ops.c -- issue 39, the operator's picture, end to end: `dlock list`,
 * `list --json`, `top`, `status` and `exporter` (the CLI built in this tree)
 * against real dlock holders and waiters on TLS with a client certificate
 * and an ACL user whose password only a config file carries (${VAR}), on a
 * Sentinel URL, and on a 3-master Cluster with one master paused (SIGSTOP):
 * every lock of a healthy master listed with its holder's host, pid and
 * program and its waiters with when they began, permit holders named, the
 * failed master named with a non-zero exit, dlock_up{node} per master, a
 * scrape within --scrape-timeout; exit 77 for NOAUTH and NOPERM in every
 * subcommand; a redis:// URL at a Sentinel's port told so.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "th.h"
#include "th_cluster.h"

/* ---- running the CLI --------------------------------------------------------
 */

typedef struct run {
  int rc;
  int64_t ms;
  char out[131072];
  char err[16384];
} run;

static const char *cli_path(void) {
  const char *p = getenv("DLOCK_TEST_CLI");
  if (!p || !*p)
    th_skip("the dlock CLI is not built (DLOCK_TEST_CLI unset)");
  return p;
}

static void slurp(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  size_t k = f ? fread(buf, 1, n - 1, f) : 0;
  buf[k] = '\0';
  if (f)
    fclose(f);
}

/* Starts the CLI with argv (argv[0] is its first argument), its output in
 * files of the test's temp dir named by tag. */
static pid_t spawn(const char *tag, const char *const *argv) {
  char o[64], e[64];
  snprintf(o, sizeof o, "%s.out", tag);
  snprintf(e, sizeof e, "%s.err", tag);
  char op[512], ep[512];
  snprintf(op, sizeof op, "%s", th_tmpfile(o));
  snprintf(ep, sizeof ep, "%s", th_tmpfile(e));
  const char *path = cli_path();
  const char *av[32] = {path};
  int n = 1;
  for (; argv[n - 1] && n < 31; n++)
    av[n] = argv[n - 1];
  av[n] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fi = open("/dev/null", O_RDONLY);
    dup2(fi, 0);
    dup2(fo, 1);
    dup2(fe, 2);
    unsetenv("DLOCK_URL");
    unsetenv("DLOCK_CONFIG");
    execv(path, (char *const *)av);
    _exit(127);
  }
  return pid;
}

/* Runs the CLI to its end (bounded): exit code, time, output. */
static void cli(run *r, const char *const *argv) {
  int64_t t0 = th_now_ms();
  pid_t pid = spawn("cli", argv);
  r->rc = th_wait(pid, 60000LL * th_timeout_mult());
  r->ms = th_now_ms() - t0;
  slurp(th_tmpfile("cli.out"), r->out, sizeof r->out);
  slurp(th_tmpfile("cli.err"), r->err, sizeof r->err);
  printf("dlock %s %s ...: exit %d in %lld ms\n%s%s", argv[0],
         argv[1] ? argv[1] : "", r->rc, (long long)r->ms, r->err,
         strlen(r->out) < 3000 ? r->out : "(long output)\n");
}

/* A background holder or waiter: killed (SIGTERM, bounded) by stop(). */
static pid_t bg(const char *tag, const char *const *argv) {
  return spawn(tag, argv);
}

static void stop(pid_t pid) {
  if (pid <= 0)
    return;
  kill(pid, SIGTERM);
  (void)th_wait(pid, 20000LL * th_timeout_mult());
}

/* python3's verdict on the JSON document in text: expr over d (and L(name):
 * the lock of that name). 1 true, 0 false or no python3. */
static int json_true(const char *text, const char *expr) {
  static const char prog[] =
      "import json, sys\n"
      "d = json.load(open(sys.argv[1]))\n"
      "L = lambda n: next((l for l in d.get('locks', []) if l['name'] == n),"
      " None)\n"
      "sys.exit(0 if eval(open(sys.argv[2]).read()) else 1)\n";
  const char *files[3][2] = {
      {"check.json", text}, {"check.expr", expr}, {"check.py", prog}};
  char paths[3][512];
  for (int i = 0; i < 3; i++) {
    snprintf(paths[i], sizeof paths[i], "%s", th_tmpfile(files[i][0]));
    FILE *f = fopen(paths[i], "w");
    if (!f)
      return 0;
    fputs(files[i][1], f);
    fclose(f);
  }
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "python3 %s %s %s 2>&1", paths[2], paths[0],
           paths[1]);
  return system(cmd) == 0;
}

/* Polls `list --json` (bounded) until expr holds over its output. */
static int list_until(run *r, const char *const *argv, const char *expr) {
  int64_t end = th_now_ms() + 20000LL * th_timeout_mult();
  do {
    cli(r, argv);
    if (json_true(r->out, expr))
      return 1;
    th_sleep_ms(100);
  } while (th_now_ms() < end);
  return 0;
}

/* GET /metrics of the exporter whose stdout (tag.out) names its port. */
static int64_t scrape(const char *tag, char *buf, size_t n) {
  char line[512] = "";
  char name[64];
  snprintf(name, sizeof name, "%s.out", tag);
  int64_t end = th_now_ms() + 20000LL * th_timeout_mult();
  while (!strstr(line, "listening on") && th_now_ms() < end) {
    slurp(th_tmpfile(name), line, sizeof line);
    th_sleep_ms(20);
  }
  const char *colon = strrchr(line, ':');
  CHECK_MSG(colon && strstr(line, "listening on"), "exporter: '%s'", line);
  int port = atoi(colon + 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  int64_t t0 = th_now_ms();
  const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
  size_t got = 0;
  while (got + 1 < n && th_now_ms() < t0 + 60000LL * th_timeout_mult()) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0)
      continue;
    ssize_t k = read(fd, buf + got, n - 1 - got);
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  buf[got] = '\0';
  close(fd);
  return th_now_ms() - t0;
}

static void check_has(const char *text, const char *want) {
  CHECK_MSG(strstr(text, want), "no '%s' in:\n%s", want, text);
}

/* ---- TLS, a client certificate, an ACL user from a config file ---------- */

typedef struct tls_env {
  th_certs k;
  int port;
  th_redis *r;
  char conf[512]; /* the YAML file: rediss://, user ops, ${OPS_PW}, certs */
  char url[128];  /* rediss://127.0.0.1:port */
} tls_env;

static void tls_env_init(tls_env *t) {
  th_make_certs(&t->k);
  t->port = th_free_port();
  char c[4096];
  snprintf(c, sizeof c,
           "tls-port %d\ntls-cert-file %s\ntls-key-file %s\n"
           "tls-ca-cert-file %s\ntls-auth-clients yes\n",
           t->port, t->k.srv_crt, t->k.srv_key, t->k.ca);
  t->r = th_redis_new(0, c);
  const char *users[] = {
      "ACL SETUSER ops on >pw-ops ~* &* +@all",
      "ACL SETUSER noscan on >pw-ns ~* &* +@all -scan",
      "ACL SETUSER noeval on >pw-ne ~* &* +@all -evalsha -eval",
      /* docs/operations.md's rule for the tools, as it is written there */
      "ACL SETUSER opsro on >pw-ro ~* &* -@all +ping +auth +select "
      "+client|setname +scan +type +hlen +hgetall +pttl +lrange +zrange "
      "+exists +getrange +pubsub|channels +pubsub|numsub +cluster|nodes "
      "+cluster|shards +cluster|slots +evalsha +eval +hget +get +zrange"};
  for (int i = 0; i < 4; i++) {
    redisReply *x = th_cmd(t->r, users[i]);
    CHECK_MSG(x && x->type == REDIS_REPLY_STATUS, "%s", users[i]);
    freeReplyObject(x);
  }
  snprintf(t->url, sizeof t->url, "rediss://127.0.0.1:%d", t->port);
  snprintf(t->conf, sizeof t->conf, "%s", th_tmpfile("ops.yaml"));
  FILE *f = fopen(t->conf, "w");
  CHECK(f != NULL);
  fprintf(f,
          "singleServerConfig:\n  address: \"%s\"\n  username: ops\n"
          "  password: \"${OPS_PW}\"\n  sslCaFile: \"%s\"\n"
          "  sslCertFile: \"%s\"\n  sslKeyFile: \"%s\"\n",
          t->url, t->k.ca, t->k.cli_crt, t->k.cli_key);
  fclose(f);
  setenv("OPS_PW", "pw-ops", 1); /* the children read it */
}

/* Every subcommand with URL u (and the config's certificates): exit 77, and
 * `word` in what it says. */
static void all_refused(const tls_env *t, const char *u, const char *word) {
  const char *ca = t->k.ca, *crt = t->k.cli_crt, *key = t->k.cli_key;
  const char *cmds[][12] = {{"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "-n", "x", "--", "true"},
                            {"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "list", NULL},
                            {"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "top", "-n", "1", NULL},
                            {"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "status", "x", NULL},
                            {"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "unlock", "--force", "x"},
                            {"-u", u, "--tls-ca", ca, "--tls-cert", crt,
                             "--tls-key", key, "exporter", "--listen",
                             "127.0.0.1:0"}};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    const char *argv[14] = {0};
    for (int j = 0; j < 12 && cmds[i][j]; j++)
      argv[j] = cmds[i][j];
    run r;
    cli(&r, argv);
    CHECK_MSG(r.rc == 77, "'%s' exited %d, not 77: %s", cmds[i][8], r.rc,
              r.err);
    CHECK_MSG(strstr(r.err, word), "'%s' does not say %s: %s", cmds[i][8], word,
              r.err);
  }
}

/* Refused certificates, logins and ACL users: exit 77 everywhere, said
 * in the CLI's terms. */
static void refusals(const tls_env *t) {
  run r;
  char u[160];
  snprintf(u, sizeof u, "rediss://ops:pw-ops@127.0.0.1:%d", t->port);
  /* No client certificate: refused, said in the CLI's terms. */
  const char *nocert[] = {"-u", u, "--tls-ca", t->k.ca, "list", NULL};
  cli(&r, nocert);
  CHECK_EQ(r.rc, 77);
  check_has(r.err, "--tls-cert");
  /* NOAUTH / WRONGPASS, NOPERM: 77 in every subcommand. */
  snprintf(u, sizeof u, "rediss://ops:wrong@127.0.0.1:%d", t->port);
  all_refused(t, u, "refused");
  snprintf(u, sizeof u, "rediss://noeval:pw-ne@127.0.0.1:%d", t->port);
  const char *ne[] = {
      "-u",         u,           "--tls-ca",   t->k.ca, "--tls-cert",
      t->k.cli_crt, "--tls-key", t->k.cli_key, "-n",    "x",
      "--",         "true",      NULL};
  cli(&r, ne);
  CHECK_EQ(r.rc, 77);
  ne[8] = "status";
  ne[10] = NULL;
  cli(&r, ne);
  CHECK_EQ(r.rc, 77);
  snprintf(u, sizeof u, "rediss://noscan:pw-ns@127.0.0.1:%d", t->port);
  const char *ns[] = {
      "-u",         u,           "--tls-ca",   t->k.ca, "--tls-cert",
      t->k.cli_crt, "--tls-key", t->k.cli_key, "list",  NULL,
      NULL,         NULL};
  cli(&r, ns);
  CHECK_EQ(r.rc, 77);
  check_has(r.err, "NOPERM");
  ns[8] = "exporter";
  ns[9] = "--listen";
  ns[10] = "127.0.0.1:0";
  cli(&r, ns);
  CHECK_EQ(r.rc, 77);
}

TH_CASE_T(tls_client_cert_acl_user_from_a_config_file, 240, "slow") {
  tls_env t;
  tls_env_init(&t);
  const char *c = t.conf;
  char pids[4][24];
  const char *h1[] = {"--config", c, "m1", "--", "sleep", "120", NULL};
  pid_t holder = bg("h1", h1);
  th_wait_key(t.r, "m1", 20000LL * th_timeout_mult());
  const char *w1[] = {"--config", c, "-w", "120", "m1", "--", "true", NULL};
  pid_t waiter = bg("w1", w1);
  th_wait_key(t.r, "dlock_lock_queue:{m1}", 20000LL * th_timeout_mult());
  const char *s1[] = {"--config", c,       "--sem", "2", "s1",
                      "--",       "sleep", "120",   NULL};
  pid_t sem = bg("s1", s1);
  th_wait_key(t.r, "{s1}:timeout", 20000LL * th_timeout_mult());
  snprintf(pids[0], sizeof pids[0], "%d", (int)holder);
  snprintf(pids[1], sizeof pids[1], "%d", (int)waiter);
  snprintf(pids[2], sizeof pids[2], "%d", (int)sem);
  char expr[2048];
  snprintf(expr, sizeof expr,
           "L('m1')['holders'][0]['pid'] == %s and "
           "L('m1')['holders'][0]['program'] == 'dlock' and "
           "L('m1')['holders'][0]['host'] and "
           "L('m1')['holders'][0]['since_ms'] and "
           "[w['pid'] for w in L('m1')['waiters']] == [%s] and "
           "L('m1')['waiters'][0]['since_ms'] and "
           "[h['pid'] for h in L('s1')['holders']] == [%s] and "
           "L('s1')['holders'][0]['since_ms'] and d['errors'] == []",
           pids[0], pids[1], pids[2]);
  const char *list[] = {"--config", c, "list", "--json", NULL};
  run r;
  CHECK_MSG(list_until(&r, list, expr), "list --json: %s", r.out);
  CHECK_EQ(r.rc, 0);
  const char *text[] = {"--config", c, "list", NULL};
  cli(&r, text);
  CHECK_EQ(r.rc, 0);
  char want[128];
  snprintf(want, sizeof want, "pid=%s program=dlock since=", pids[0]);
  check_has(r.out, want);
  const char *top[] = {"--config", c, "top", "-n", "1", NULL};
  cli(&r, top);
  CHECK_EQ(r.rc, 0);
  check_has(r.out, "m1 ");
  const char *st[] = {"--config", c, "status", "m1", NULL};
  cli(&r, st);
  CHECK_EQ(r.rc, 0);
  snprintf(want, sizeof want, "  pid %s  program dlock", pids[1]);
  check_has(r.out, "  waiter 1 ");
  check_has(r.out, want);
  const char *sst[] = {"--config", c, "status", "--json", "s1", NULL};
  cli(&r, sst);
  CHECK_EQ(r.rc, 0);
  snprintf(want, sizeof want, "\"pid\":%s", pids[2]);
  check_has(r.out, want);
  /* The exporter: one scrape. */
  const char *ex[] = {"--config",    c,   "exporter", "--listen",
                      "127.0.0.1:0", NULL};
  pid_t exp = bg("exp", ex);
  char body[65536];
  scrape("exp", body, sizeof body);
  stop(exp);
  snprintf(want, sizeof want, "dlock_up{node=\"127.0.0.1:%d\"} 1", t.port);
  check_has(body, want);
  check_has(body, "dlock_lock_holders{name=\"m1\",kind=\"mutex\"} 1");
  check_has(body, "dlock_lock_oldest_wait_seconds{name=\"m1\",kind=\"mutex\"}");
  /* The same with flags, the password in the URL. */
  char u[160];
  snprintf(u, sizeof u, "rediss://ops:pw-ops@127.0.0.1:%d", t.port);
  const char *fl[] = {"-u",         u,           "--tls-ca",  t.k.ca,
                      "--tls-cert", t.k.cli_crt, "--tls-key", t.k.cli_key,
                      "list",       NULL};
  cli(&r, fl);
  CHECK_EQ(r.rc, 0);
  check_has(r.out, "m1  mutex");
  /* docs/operations.md's read-only rule serves list and status. */
  char ro[160];
  snprintf(ro, sizeof ro, "rediss://opsro:pw-ro@127.0.0.1:%d", t.port);
  const char *rl[] = {"-u",         ro,          "--tls-ca",  t.k.ca,
                      "--tls-cert", t.k.cli_crt, "--tls-key", t.k.cli_key,
                      "list",       "--json",    NULL};
  cli(&r, rl);
  CHECK_EQ(r.rc, 0);
  CHECK_MSG(json_true(r.out, expr), "list as opsro: %s", r.out);
  rl[8] = "status";
  rl[9] = "m1";
  cli(&r, rl);
  CHECK_EQ(r.rc, 0);
  check_has(r.out, "  waiter 1 ");
  rl[9] = "s1";
  cli(&r, rl);
  CHECK_EQ(r.rc, 0);
  check_has(r.out, "permits 's1'");
  refusals(&t);
  stop(holder);
  stop(waiter);
  stop(sem);
}

/* ---- Sentinel
 * ------------------------------------------------------------------ */

TH_CASE_T(sentinel_url_and_the_sentinel_port_hint, 180, "slow") {
  th_redis *m = th_redis_new(1, NULL);
  th_redis *s = th_sentinel_new(m, "mm", 1, th_sentinel_down_ms(), 10000);
  char url[128];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/mm", s->port);
  const char *h[] = {"-u", url, "sm", "--", "sleep", "120", NULL};
  pid_t holder = bg("h", h);
  th_wait_key(m, "sm", 20000LL * th_timeout_mult());
  char expr[512];
  snprintf(expr, sizeof expr,
           "L('sm')['holders'][0]['pid'] == %d and L('sm')['node'] == "
           "'127.0.0.1:%d' and d['nodes'] == 1",
           (int)holder, m->port);
  const char *list[] = {"-u", url, "list", "--json", NULL};
  run r;
  CHECK_MSG(list_until(&r, list, expr), "list: %s", r.out);
  const char *st[] = {"-u", url, "status", "sm", NULL};
  cli(&r, st);
  CHECK_EQ(r.rc, 0);
  char want[128];
  snprintf(want, sizeof want, "  pid %d  program dlock", (int)holder);
  check_has(r.out, want);
  const char *ex[] = {"-u", url, "exporter", "--listen", "127.0.0.1:0", NULL};
  pid_t exp = bg("exp", ex);
  char body[65536];
  scrape("exp", body, sizeof body);
  stop(exp);
  snprintf(want, sizeof want, "dlock_up{node=\"127.0.0.1:%d\"} 1", m->port);
  check_has(body, want);
  /* A redis:// URL at the sentinel's port says to use redis-sentinel://. */
  char plain[64];
  snprintf(plain, sizeof plain, "redis://127.0.0.1:%d", s->port);
  snprintf(want, sizeof want,
           "this is a Sentinel: use redis-sentinel://127.0.0.1:%d/mm", s->port);
  const char *lk[] = {"-u", plain, "-n", "x", "--", "true", NULL};
  cli(&r, lk);
  CHECK_EQ(r.rc, 70);
  check_has(r.err, want);
  const char *ls[] = {"-u", plain, "list", NULL};
  cli(&r, ls);
  CHECK(r.rc != 0);
  check_has(r.err, "use redis-sentinel://");
  stop(holder);
}

/* ---- a Cluster with a master paused
 * --------------------------------------------- */

/* name i on master `want` of cl (a fresh name each call). */
static void name_on(th_cluster *cl, int want, const char *prefix, char *out,
                    size_t n) {
  static int next;
  for (int i = 0; i < 100000; i++) {
    snprintf(out, n, "%s%d", prefix, next++);
    if (th_cluster_master_of(cl, th_cluster_slot(cl, out)) == want)
      return;
  }
  th_fail(__FILE__, __LINE__, "no name for master %d", want);
}

TH_CASE_T(cluster_with_one_master_paused, 300, "cluster slow") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  /* The healthy masters serve their slots while one is down (Redis's
   * default refuses every key then: CLUSTERDOWN, which list names). */
  for (int i = 0; i < 3; i++) {
    redisReply *x =
        th_cmd(cl->node[i], "CONFIG SET cluster-require-full-coverage no");
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    freeReplyObject(x);
  }
  const int paused = 2;
  char names[4][32], sem[32];
  pid_t pids[6];
  int np = 0;
  for (int i = 0; i < 4; i++) { /* two locks on each healthy master */
    name_on(cl, i % 2, "pc:", names[i], sizeof names[i]);
    const char *h[] = {"-u", cl->url, names[i], "--", "sleep", "180", NULL};
    pids[np++] = bg(names[i], h);
    th_wait_key(cl->node[i % 2], names[i], 20000LL * th_timeout_mult());
  }
  const char *w[] = {"-u", cl->url, "-w", "180", names[0], "--", "true", NULL};
  pid_t waiter = pids[np++] = bg("w", w);
  name_on(cl, 1, "ps:", sem, sizeof sem);
  const char *s[] = {"-u", cl->url, "--sem", "1", sem,
                     "--", "sleep", "180",   NULL};
  pid_t semh = pids[np++] = bg("sem", s);
  /* who holds and waits, as list --json must show it */
  char who[4096];
  int at = snprintf(who, sizeof who, "d['nodes'] == 3");
  for (int i = 0; i < 4; i++)
    at += snprintf(who + at, sizeof who - (size_t)at,
                   " and [h['pid'] for h in L('%s')['holders']] == [%d] and "
                   "L('%s')['holders'][0]['program'] == 'dlock' and "
                   "L('%s')['holders'][0]['host'] and "
                   "L('%s')['holders'][0]['since_ms']",
                   names[i], (int)pids[i], names[i], names[i], names[i]);
  snprintf(who + at, sizeof who - (size_t)at,
           " and [w['pid'] for w in L('%s')['waiters']] == [%d] and "
           "L('%s')['waiters'][0]['since_ms'] and "
           "[h['pid'] for h in L('%s')['holders']] == [%d]",
           names[0], (int)waiter, names[0], sem, (int)semh);
  char expr[4200];
  snprintf(expr, sizeof expr, "d['errors'] == [] and %s", who);
  const char *list[] = {"-u", cl->url, "list", "--json", NULL};
  run r;
  CHECK_MSG(list_until(&r, list, expr), "list before the pause: %s", r.out);
  th_redis_pause(cl->node[paused]);
  char bad[64];
  snprintf(bad, sizeof bad, "master 127.0.0.1:%d: ", cl->node[paused]->port);
  /* list --json: everything of the healthy masters, the paused one named. */
  cli(&r, list);
  CHECK_EQ(r.rc, 69);
  CHECK_MSG(json_true(r.out, who), "list --json with a master paused: %s",
            r.out);
  check_has(r.err, bad);
  check_has(r.err, "no reply within");
  CHECK_MSG(r.ms < 10000LL * th_timeout_mult(), "list took %lld ms",
            (long long)r.ms);
  const char *text[] = {"-u", cl->url, "list", NULL};
  cli(&r, text);
  CHECK_EQ(r.rc, 69);
  char want[256];
  snprintf(want, sizeof want, "pid=%d program=dlock", (int)pids[1]);
  check_has(r.out, want);
  check_has(r.err, bad);
  const char *top[] = {"-u", cl->url, "top", "-n", "1", NULL};
  cli(&r, top);
  CHECK_EQ(r.rc, 69);
  check_has(r.out, names[0]);
  check_has(r.err, bad);
  const char *st[] = {"-u", cl->url, "status", names[2], NULL};
  cli(&r, st);
  CHECK_EQ(r.rc, 0);
  snprintf(want, sizeof want, "  pid %d  program dlock", (int)pids[2]);
  check_has(r.out, want);
  /* The exporter: the healthy masters' series, the paused one's up 0 and
   * why, within --scrape-timeout. */
  const char *ex[] = {"-u",       cl->url,       "exporter",
                      "--listen", "127.0.0.1:0", "--scrape-timeout",
                      "4",        NULL};
  pid_t exp = bg("exp", ex);
  char body[131072];
  int64_t ms = scrape("exp", body, sizeof body);
  stop(exp);
  printf("scrape with a master paused: %lld ms\n%s\n", (long long)ms, body);
  CHECK_MSG(ms <= 4000 + 1000LL * th_timeout_mult(), "scrape took %lld ms",
            (long long)ms);
  for (int i = 0; i < 3; i++) {
    snprintf(want, sizeof want, "dlock_up{node=\"127.0.0.1:%d\"} %d",
             cl->node[i]->port, i != paused);
    check_has(body, want);
  }
  snprintf(want, sizeof want,
           "dlock_scrape_error{node=\"127.0.0.1:%d\",reason=",
           cl->node[paused]->port);
  check_has(body, want);
  for (int i = 0; i < 4; i++) {
    snprintf(want, sizeof want,
             "dlock_lock_holders{name=\"%s\",kind=\"mutex\"} 1", names[i]);
    check_has(body, want);
  }
  snprintf(want, sizeof want,
           "dlock_lock_holders{name=\"%s\",kind=\"permits\"} 1", sem);
  check_has(body, want);
  th_redis_resume(cl->node[paused]);
  for (int i = 0; i < np; i++)
    stop(pids[i]);
}

TH_MAIN()
