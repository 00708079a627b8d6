/* Client tests (issue 2 §2, §6): configuration defaults, URL forms and their
 * rejections, connection / authentication errors and their timing, SELECT,
 * lazy connect, client ids, fork detection, per-thread error detail, NULL
 * arguments, and many threads sharing one client. Real redis-servers only. */
#include "th.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* Timing slack factor: 1 plain, more under TSan/valgrind (th.h). */
static int64_t slow(void) { return th_timeout_mult(); }

/* A TCP port on 127.0.0.1 that nobody listens on (bound and released). */
static int dead_port(void) {
  th_redis *r = th_redis_new(1, NULL);
  int port = r->port;
  th_redis_kill(r);
  return port;
}

static dlock_config quick_cfg(const char *url) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.connect_timeout_ms = 500;
  cfg.command_timeout_ms = 1000;
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 100;
  return cfg;
}

/* Creates a client from url with quick settings; returns the rc and sets *out
 * (NULL on failure). */
static int try_client(const char *url, dlock_client **out) {
  dlock_config cfg = quick_cfg(url);
  return dlock_client_new(&cfg, out);
}

/* ---- configuration --------------------------------------------------- */

TH_CASE(config_defaults) {
  dlock_config cfg;
  memset(&cfg, 0x5a, sizeof cfg); /* garbage in every field */
  dlock_config_init(&cfg);
  CHECK(cfg.url == NULL);
  CHECK_EQ(cfg.connect_timeout_ms, 10000);
  CHECK_EQ(cfg.command_timeout_ms, 3000);
  CHECK_EQ(cfg.retry_attempts, 3);
  CHECK_EQ(cfg.retry_interval_ms, 1500);
  CHECK_EQ(cfg.watchdog_timeout_ms, 30000);
  CHECK_EQ(cfg.pool_size, 16); /* documented in dlock.h */
  CHECK_EQ(cfg.lazy_connect, 0);
  CHECK(cfg.on_lock_lost == NULL);
  CHECK(cfg.on_lock_lost_arg == NULL);
  CHECK(cfg.subscription_linger_ms >= 0); /* extension, not in the issue */
  dlock_config_init(NULL);                /* no crash */

  /* Out-of-range numbers are rejected with a message naming the field. */
  struct {
    int which;
    const char *field;
  } bad[] = {{0, "connect_timeout_ms"},  {1, "command_timeout_ms"},
             {2, "retry_attempts"},      {3, "retry_interval_ms"},
             {4, "watchdog_timeout_ms"}, {5, "pool_size"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_config_init(&cfg);
    cfg.url = "unix:///nonexistent/dlock.sock";
    cfg.lazy_connect = 1;
    switch (bad[i].which) {
    case 0:
      cfg.connect_timeout_ms = 0;
      break;
    case 1:
      cfg.command_timeout_ms = -5;
      break;
    case 2:
      cfg.retry_attempts = -1;
      break;
    case 3:
      cfg.retry_interval_ms = -1;
      break;
    case 4:
      cfg.watchdog_timeout_ms = 0;
      break;
    default:
      cfg.pool_size = 0;
      break;
    }
    dlock_client *c = (dlock_client *)&cfg; /* must be reset to NULL */
    CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
    CHECK(c == NULL);
    CHECK_MSG(strstr(dlock_last_error(), bad[i].field) != NULL,
              "message '%s' does not name %s", dlock_last_error(),
              bad[i].field);
  }
}

/* ---- URLs ------------------------------------------------------------- */

/* Every malformed URL: DLOCK_EINVAL at dlock_client_new (even lazy), a
 * message that names the problem, never the password. */
TH_CASE(url_malformed_rejected) {
  static const struct {
    const char *url;
    const char *must_mention; /* case-insensitive substring of the detail */
  } cases[] = {
      {"", "empty"},
      {"http://127.0.0.1:6379", "scheme"},
      {"redis:/127.0.0.1", "scheme"},
      {"REDIS-X://h", "scheme"},
      {"rediss://127.0.0.1:0", "port"},
      {"rediss://:pw@/0", "host"},
      {"redis://127.0.0.1:0", "port"},
      {"redis://127.0.0.1:65536", "port"},
      {"redis://127.0.0.1:99999999999", "port"},
      {"redis://127.0.0.1:-1", "port"},
      {"redis://127.0.0.1:63x9", "port"},
      {"redis://127.0.0.1:", "port"},
      {"redis://", "host"},
      {"redis://:6379", "host"},
      {"redis://u:Sekr1tPw@:6379/0", "host"},
      {"redis://u:Sekr1tPw@127.0.0.1:70000/1", "port"},
      {"redis://127.0.0.1:6379/abc", "database"},
      {"redis://127.0.0.1:6379/-1", "database"},
      {"redis://127.0.0.1:6379/99999999999", "database"},
      {"redis://justauser@127.0.0.1", "password"},
      {"redis://u:Sekr1t%zzPw@127.0.0.1", "password"},
      {"unix://", "path"},
      {"unix://relative/sock", "path"},
      {"unix:///tmp/x.sock?db=abc", "db"},
      {"unix:///tmp/x.sock?db=-3", "db"},
      {"unix:///tmp/x.sock?db=99999999999", "db"},
      {"unix:///tmp/x.sock?password=Sekr1tPw&db=x", "db"},
      {"unix:///tmp/x.sock?db=1&password=Sekr1tPw&bogus=1", "parameter"},
      {"unix:///tmp/x.sock?password=Sekr1tPw&user=u&bogus", "name=value"},
      {"unix:///tmp/x.sock?password=Sekr1t%4", "password"},
      /* An unencoded '/' in the password ends the authority inside it. */
      {"redis://u:Sekr1t/Pw@127.0.0.1", "port"},
      {"redis-sentinel://u:Sekr1t/Pw@h:1/m", "port"},
      /* '@' past the sentinels (issue 25 item 15: the fuzzer's input). */
      {"redis-sentinel://hr/,r,tt@ee@passwor=699t/3", "'@' after the"},
      {"redis-sentinel://h:1/Sekr1t@h2/m", "credentials go before"},
      /* A %00 (NUL) in any decoded part is refused (issue 38: "%001ed"
       * made the master name empty after decoding, and it was taken). */
      {"redis-sentinel://0/%001ed", "%00"},
      {"redis-sentinel://h:1/m%00", "%00"},
      {"redis://u%00x:Sekr1tPw@127.0.0.1", "%00"},
      {"redis://u:Sekr1t%00Pw@127.0.0.1", "%00"},
      {"unix:///tmp/x.sock?password=Sekr1t%00", "%00"},
      {"redis-sentinel://h:1/m?sentinel_password=Sekr1t%00", "%00"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int lazy = 0; lazy < 2; lazy++) {
      dlock_config cfg = quick_cfg(cases[i].url);
      cfg.lazy_connect = lazy;
      dlock_client *c = NULL;
      int rc = dlock_client_new(&cfg, &c);
      const char *msg = dlock_last_error();
      CHECK_MSG(rc == DLOCK_EINVAL, "url '%s' (lazy %d): %s (%s), want EINVAL",
                cases[i].url, lazy, dlock_err_name(rc), msg);
      CHECK(c == NULL);
      CHECK_MSG(strcasestr(msg, cases[i].must_mention) != NULL,
                "url '%s': message '%s' does not mention '%s'", cases[i].url,
                msg, cases[i].must_mention);
      CHECK_MSG(strstr(msg, "Sekr1t") == NULL,
                "url '%s': message leaks the password: '%s'", cases[i].url,
                msg);
    }
  }
}

/* A password containing a literal '@' (the parser splits at the last '@')
 * must not leak either. */
TH_CASE(url_password_with_at_not_leaked) {
  const char *url = "redis://u:Sek@r1tPw@127.0.0.1:notaport";
  dlock_client *c = NULL;
  CHECK_RC(try_client(url, &c), DLOCK_EINVAL);
  const char *msg = dlock_last_error();
  CHECK_MSG(strstr(msg, "r1tPw") == NULL && strstr(msg, "Sek") == NULL,
            "message leaks part of the password: '%s'", msg);
  /* A repeated password= parameter: the value shown must be redacted too. */
  url = "unix:///tmp/x.sock?password=a&password=Sekr1tPw&db=x";
  CHECK_RC(try_client(url, &c), DLOCK_EINVAL);
  msg = dlock_last_error();
  CHECK_MSG(strstr(msg, "Sekr1tPw") == NULL, "message leaks the password: '%s'",
            msg);
}

/* Reads the database a key is in: returns the db index (0..15) or -1. */
static int db_of(th_redis *r, const char *key) {
  redisContext *raw = th_redis_raw(r);
  int found = -1;
  for (int db = 0; db < 16 && found < 0; db++) {
    redisReply *x = redisCommand(raw, "SELECT %d", db);
    freeReplyObject(x);
    x = redisCommand(raw, "EXISTS %s", key);
    if (x && x->type == REDIS_REPLY_INTEGER && x->integer == 1)
      found = db;
    freeReplyObject(x);
  }
  redisFree(raw);
  return found;
}

/* Locks `name` through url and returns the db its key landed in. */
static int lock_lands_in(th_redis *r, const char *url, const char *name) {
  dlock_client *c = NULL;
  int rc = try_client(url, &c);
  CHECK_MSG(rc == 0, "client for %s: %s %s", url, dlock_err_name(rc),
            dlock_last_error());
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, name, &m));
  CHECK_OK(dlock_mutex_lock(m));
  int db = db_of(r, name);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  return db;
}

TH_CASE(url_tcp_forms_and_select_db) {
  th_redis *r = th_redis_new(1, NULL);
  char url[256];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", r->port);
  CHECK_EQ(lock_lands_in(r, url, "t0"), 0);
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/", r->port);
  CHECK_EQ(lock_lands_in(r, url, "t0b"), 0);
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/7", r->port);
  CHECK_EQ(lock_lands_in(r, url, "t7"), 7);
  snprintf(url, sizeof url, "redis://localhost:%d/3", r->port);
  CHECK_EQ(lock_lands_in(r, url, "t3"), 3);
  /* SELECT of a db the server does not have: the server's refusal. */
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/99", r->port);
  dlock_client *c = NULL;
  CHECK_RC(try_client(url, &c), DLOCK_EREDIS);
  CHECK_MSG(strstr(dlock_last_error(), "99") != NULL &&
                strcasestr(dlock_last_error(), "range") != NULL,
            "detail: %s", dlock_last_error());
}

TH_CASE(url_tcp_user_password_acl) {
  th_redis *r = th_redis_new(1, "user alice on >alice%pw ~* &* +@all\n"
                                "user default on >defpw ~* &* +@all\n");
  char url[256];
  /* ACL user + password (percent-encoded '%' in the password) and a db. */
  snprintf(url, sizeof url, "redis://alice:alice%%25pw@127.0.0.1:%d/5",
           r->port);
  {
    dlock_client *c = NULL;
    CHECK_OK(try_client(url, &c));
    dlock_mutex *m;
    CHECK_OK(dlock_mutex_new(c, "acl-lock", &m));
    CHECK_OK(dlock_mutex_lock(m));
    redisContext *raw = th_redis_raw(r);
    redisReply *x = redisCommand(raw, "AUTH default defpw");
    freeReplyObject(x);
    x = redisCommand(raw, "CLIENT LIST");
    CHECK(x && x->type == REDIS_REPLY_STRING);
    CHECK_MSG(strstr(x->str, "user=alice") != NULL, "client list: %s", x->str);
    freeReplyObject(x);
    x = redisCommand(raw, "SELECT 5");
    freeReplyObject(x);
    x = redisCommand(raw, "EXISTS acl-lock");
    CHECK_EQ(x->integer, 1);
    freeReplyObject(x);
    redisFree(raw);
    CHECK_OK(dlock_mutex_unlock(m));
    dlock_mutex_free(m);
    dlock_client_free(c);
  }
  /* Password only: the default user. */
  snprintf(url, sizeof url, "redis://:defpw@127.0.0.1:%d", r->port);
  {
    dlock_client *c = NULL;
    CHECK_OK(try_client(url, &c));
    dlock_client_free(c);
  }
}

TH_CASE(url_unix_query_forms) {
  th_redis *r = th_redis_new(0, "user bob on >bob&pw ~* &* +@all\n"
                                "requirepass defpw\n");
  char url[512];
  snprintf(url, sizeof url, "unix://%s?db=4&password=defpw", r->sock);
  CHECK_EQ(lock_lands_in(r, url, "u4"), 4);
  /* user + password (percent-encoded '&'), order of parameters free. */
  snprintf(url, sizeof url, "unix://%s?password=bob%%26pw&user=bob&db=9",
           r->sock);
  CHECK_EQ(lock_lands_in(r, url, "u9"), 9);
  snprintf(url, sizeof url, "unix://%s?password=defpw", r->sock);
  CHECK_EQ(lock_lands_in(r, url, "u0"), 0);
}

/* ---- connection errors -------------------------------------------------- */

TH_CASE(unreachable_server_econn_bounded) {
  int port = dead_port();
  char url[128];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  struct {
    const char *url;
    int connect_ms, attempts, interval_ms;
  } cases[] = {
      {url, 300, 2, 200},
      {"unix:///nonexistent-dir-dlock/redis.sock", 300, 3, 100},
      {url, 300, 0, 1000},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dlock_config cfg;
    dlock_config_init(&cfg);
    cfg.url = cases[i].url;
    cfg.connect_timeout_ms = cases[i].connect_ms;
    cfg.retry_attempts = cases[i].attempts;
    cfg.retry_interval_ms = cases[i].interval_ms;
    dlock_client *c = NULL;
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
    int64_t el = th_now_ms() - t0;
    CHECK(c == NULL);
    CHECK_MSG(dlock_last_error()[0] != '\0', "no detail for ECONN");
    /* The retry policy was applied (the pauses between tries)... */
    int64_t min = (int64_t)cases[i].attempts * cases[i].interval_ms;
    /* ...and the whole thing stays within connect timeout x tries. */
    int64_t max = (int64_t)(cases[i].connect_ms + cases[i].interval_ms) *
                      (cases[i].attempts + 1) +
                  1000 * slow();
    printf("%s: ECONN after %lld ms (policy %lld..%lld): %s\n", cases[i].url,
           (long long)el, (long long)min, (long long)max, dlock_last_error());
    CHECK_MSG(el >= min - 20 && el <= max,
              "ECONN after %lld ms, want %lld..%lld", (long long)el,
              (long long)min, (long long)max);
  }
}

/* A server that accepts the connection but never answers (SIGSTOP): the
 * handshake times out, ECONN within connect+command timeouts x tries. */
TH_CASE(unresponsive_server_econn_bounded) {
  th_redis *r = th_redis_new(0, NULL);
  th_redis_pause(r);
  dlock_config cfg = quick_cfg(r->url);
  cfg.command_timeout_ms = 300;
  cfg.retry_attempts = 1;
  dlock_client *c = NULL;
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
  int64_t el = th_now_ms() - t0;
  th_redis_resume(r);
  int64_t max = (int64_t)(cfg.connect_timeout_ms + cfg.command_timeout_ms +
                          cfg.retry_interval_ms) *
                    (cfg.retry_attempts + 1) +
                1000 * slow();
  printf("ECONN after %lld ms: %s\n", (long long)el, dlock_last_error());
  CHECK_MSG(el >= 2 * cfg.command_timeout_ms - 50 && el <= max,
            "ECONN after %lld ms, want %d..%lld", (long long)el,
            2 * cfg.command_timeout_ms, (long long)max);
}

TH_CASE(wrong_password_eauth) {
  th_redis *r = th_redis_new(1, "requirepass RightPw\n");
  char url[256];
  dlock_client *c = NULL;
  const char *forms[] = {"redis://:WrongPw@127.0.0.1:%d",
                         "redis://127.0.0.1:%d", /* none given */
                         "redis://default:WrongPw@127.0.0.1:%d"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(url, sizeof url, forms[i], r->port);
    int64_t t0 = th_now_ms();
    CHECK_RC(try_client(url, &c), DLOCK_EAUTH);
    /* Not retried like an unreachable server: it cannot get better. */
    CHECK_MSG(th_now_ms() - t0 < 1000 * slow(), "EAUTH took %lld ms",
              (long long)(th_now_ms() - t0));
    CHECK(c == NULL);
    CHECK_MSG(strstr(dlock_last_error(), "WrongPw") == NULL,
              "detail leaks the password: %s", dlock_last_error());
  }
  char u2[512];
  snprintf(u2, sizeof u2, "unix://%s?password=WrongPw", r->sock);
  CHECK_RC(try_client(u2, &c), DLOCK_EAUTH);
  snprintf(url, sizeof url, "redis://:RightPw@127.0.0.1:%d", r->port);
  CHECK_OK(try_client(url, &c));
  dlock_client_free(c);
}

TH_CASE(wrong_acl_user_eauth) {
  th_redis *r = th_redis_new(1, "user carol on >carolpw ~* &* +@all\n"
                                "user dave off >davepw ~* &* +@all\n");
  char url[256];
  dlock_client *c = NULL;
  const char *bad[] = {"redis://mallory:carolpw@127.0.0.1:%d", /* no user */
                       "redis://carol:wrong@127.0.0.1:%d",     /* bad pw */
                       "redis://dave:davepw@127.0.0.1:%d"};    /* disabled */
  for (size_t i = 0; i < 3; i++) {
    snprintf(url, sizeof url, bad[i], r->port);
    CHECK_RC(try_client(url, &c), DLOCK_EAUTH);
    CHECK(c == NULL);
  }
  char u2[512];
  snprintf(u2, sizeof u2, "unix://%s?user=mallory&password=carolpw", r->sock);
  CHECK_RC(try_client(u2, &c), DLOCK_EAUTH);
  snprintf(url, sizeof url, "redis://carol:carolpw@127.0.0.1:%d", r->port);
  CHECK_OK(try_client(url, &c));
  dlock_client_free(c);
}

/* ---- lazy connect --------------------------------------------------------
 */

/* Connections the server has accepted so far (INFO stats), asked over raw,
 * a connection of the test's own that stays open (so the count is not
 * moved by the asking). */
static long long conns_accepted(redisContext *raw) {
  redisReply *rep = redisCommand(raw, "INFO stats");
  const char *k = "total_connections_received:";
  const char *at = rep && rep->type == REDIS_REPLY_STRING && rep->str
                       ? strstr(rep->str, k)
                       : NULL;
  long long n = at ? atoll(at + strlen(k)) : -1;
  freeReplyObject(rep);
  if (n < 0)
    th_fail(__FILE__, __LINE__, "INFO stats: no total_connections_received");
  return n;
}

/* A lazy client connects on first use, not in dlock_client_new: shown by
 * the server's connection count (and by client_new succeeding on a port
 * nobody listens on, where a connecting one fails with DLOCK_ECONN) -- not
 * by how fast client_new returned, which a loaded machine stretches. */
TH_CASE(lazy_connect_reports_on_first_use) {
  th_redis *r = th_redis_new(0, "requirepass lazypw\n");
  int port = dead_port();
  char url[256];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  dlock_config cfg = quick_cfg(url);
  cfg.connect_timeout_ms = 300;
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 200;
  cfg.lazy_connect = 1;
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  CHECK_EQ(strlen(dlock_client_id(c)), 36);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "lazy", &m)); /* no traffic */
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_ECONN);
  int64_t el = th_now_ms() - t0;
  /* The retry policy ran on the first use: its two pauses at least. */
  CHECK_MSG(el >= 2 * 200 - 20 && el <= ((300L + 200) * 3 + 1000) * slow(),
            "first operation failed after %lld ms", (long long)el);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_EPERM);
  dlock_mutex_free(m);
  dlock_client_free(c);

  /* Wrong password: client_new succeeds without connecting, the first
   * operation connects and is EAUTH. */
  redisContext *raw = th_redis_raw(r);
  long long before = conns_accepted(raw);
  char u2[512];
  snprintf(u2, sizeof u2, "unix://%s?password=nope", r->sock);
  cfg = quick_cfg(u2);
  cfg.lazy_connect = 1;
  CHECK_OK(dlock_client_new(&cfg, &c));
  CHECK_OK(dlock_mutex_new(c, "lazy", &m));
  CHECK_EQ(conns_accepted(raw), before);
  CHECK_RC(dlock_mutex_lock(m), DLOCK_EAUTH);
  CHECK(conns_accepted(raw) > before);
  redisFree(raw);
  CHECK_RC(dlock_mutex_is_locked(m), DLOCK_EAUTH);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A lazy client made while its server is down works once the server is up
 * (a Redlock must be constructible while one master is down). */
TH_CASE(lazy_connect_server_comes_up_later) {
  th_redis *r = th_redis_new(0, NULL);
  th_redis_kill(r);
  dlock_config cfg = quick_cfg(r->url);
  cfg.lazy_connect = 1;
  cfg.retry_attempts = 0;
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "later", &m));
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_ECONN);
  th_redis_restart(r);
  CHECK_OK(dlock_mutex_trylock(m));
  CHECK_EQ(th_cmd_int(r, "HLEN later"), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  /* Non-lazy with the server down fails at once instead. */
  th_redis_kill(r);
  cfg.lazy_connect = 0;
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
}

/* ---- identity --------------------------------------------------------- */

static void check_uuid4(const char *id) {
  CHECK_MSG(strlen(id) == 36, "id '%s' is not 36 chars", id);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      CHECK_MSG(id[i] == '-', "id '%s': no '-' at %d", id, i);
    } else {
      CHECK_MSG(isxdigit((unsigned char)id[i]) &&
                    !isupper((unsigned char)id[i]),
                "id '%s': char %d is not lowercase hex", id, i);
    }
  }
  CHECK_MSG(id[14] == '4', "id '%s': version nibble is not 4", id);
  CHECK_MSG(strchr("89ab", id[19]) != NULL, "id '%s': variant is not 10xx", id);
}

TH_CASE(client_id_uuid4_distinct) {
  th_redis *r = th_redis_new(0, NULL);
  enum { N = 12 };
  dlock_client *c[N];
  char ids[N][37];
  for (int i = 0; i < N; i++) {
    c[i] = th_client(r);
    check_uuid4(dlock_client_id(c[i]));
    snprintf(ids[i], sizeof ids[i], "%s", dlock_client_id(c[i]));
    /* Stable for the client's lifetime. */
    CHECK_STR(dlock_client_id(c[i]), ids[i]);
    for (int j = 0; j < i; j++)
      CHECK_MSG(strcmp(ids[i], ids[j]) != 0, "clients %d and %d share id %s", i,
                j, ids[i]);
  }
  /* The id is what the lock field starts with. */
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c[3], "idcheck", &m));
  CHECK_OK(dlock_mutex_lock(m));
  redisReply *h = th_cmd(r, "HKEYS idcheck");
  CHECK_EQ(h->elements, 1);
  CHECK_EQ(strncmp(h->element[0]->str, ids[3], 36), 0);
  CHECK_EQ(h->element[0]->str[36], ':');
  freeReplyObject(h);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  for (int i = 0; i < N; i++)
    dlock_client_free(c[i]);
  CHECK_STR(dlock_client_id(NULL), "");
}

/* ---- fork ------------------------------------------------------------- */

static th_redis *g_r;
static dlock_client *g_parent;
static dlock_mutex *g_parent_m;

/* Child: every use of the parent's client is refused with DLOCK_EFORK and a
 * message that says why; a client of its own works and has its own id. */
static int fork_child(void *arg) {
  const char *parent_id = arg;
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(g_parent, "forked", &m);
  if (rc != DLOCK_EFORK || m != NULL) {
    fprintf(stderr, "child: mutex_new on parent client: %s\n",
            dlock_err_name(rc));
    return 10;
  }
  if (!strstr(dlock_last_error(), "fork")) {
    fprintf(stderr, "child: unclear message '%s'\n", dlock_last_error());
    return 11;
  }
  int calls[] = {dlock_mutex_lock(g_parent_m),
                 dlock_mutex_trylock(g_parent_m),
                 dlock_mutex_timedlock(g_parent_m, 100, 1000),
                 dlock_mutex_unlock(g_parent_m),
                 dlock_mutex_force_unlock(g_parent_m),
                 dlock_mutex_is_locked(g_parent_m)};
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (calls[i] != DLOCK_EFORK) {
      fprintf(stderr, "child: call %zu returned %s\n", i,
              dlock_err_name(calls[i]));
      return 12;
    }
  /* The parent's lock is untouched by all of that. */
  dlock_client_free(g_parent); /* memory only; parent's sockets untouched */
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g_r->url;
  dlock_client *own = NULL;
  if ((rc = dlock_client_new(&cfg, &own)) != 0) {
    fprintf(stderr, "child: own client: %s %s\n", dlock_err_name(rc),
            dlock_last_error());
    return 13;
  }
  if (strcmp(dlock_client_id(own), parent_id) == 0)
    return 14;
  if (dlock_mutex_new(own, "forked", &m) || dlock_mutex_trylock(m) ||
      dlock_mutex_unlock(m)) {
    fprintf(stderr, "child: own lock: %s\n", dlock_last_error());
    return 15;
  }
  /* The parent's lock is held by the parent, so the child cannot take it. */
  dlock_mutex *pm = NULL;
  if (dlock_mutex_new(own, "parent-held", &pm) ||
      dlock_mutex_trylock(pm) != DLOCK_EBUSY)
    return 16;
  dlock_mutex_free(pm);
  dlock_mutex_free(m);
  dlock_client_free(own);
  return 0;
}

TH_CASE(fork_child_refused_and_own_client) {
#if defined(__SANITIZE_THREAD__)
  th_skip("TSan cannot run threads in the child of a multi-threaded fork "
          "(die_after_fork); covered by the plain and ASan builds");
#endif
  if (th_under_valgrind())
    th_skip("valgrind reports the parent watchdog thread's allocations as "
            "lost in the child, which may not touch them (the thread is not "
            "there); covered by the plain and ASan builds");
  g_r = th_redis_new(0, NULL);
  g_parent = th_client(g_r);
  CHECK_OK(dlock_mutex_new(g_parent, "parent-held", &g_parent_m));
  CHECK_OK(dlock_mutex_lock(g_parent_m));
  static char pid_copy[37];
  snprintf(pid_copy, sizeof pid_copy, "%s", dlock_client_id(g_parent));
  /* The watchdog thread's first write (the client's info key) done, the
   * parent's threads sleep until the next renewal: nothing of theirs is in
   * the allocator at the fork (see th_fork). */
  char info[64];
  snprintf(info, sizeof info, "dlock_client:{%s}", pid_copy);
  th_wait_key(g_r, info, 10000);
  pid_t p = th_fork(fork_child, pid_copy);
  CHECK_EQ(th_wait(p, 20000), 0);
  /* The parent's client and lock still work after the child is gone. */
  CHECK_EQ(dlock_mutex_is_held(g_parent_m), 1);
  CHECK_EQ(dlock_mutex_hold_count(g_parent_m), 1);
  CHECK_OK(dlock_mutex_unlock(g_parent_m));
  CHECK_EQ(th_cmd_int(g_r, "EXISTS parent-held"), 0);
  dlock_mutex_free(g_parent_m);
  dlock_client_free(g_parent);
}

/* ---- errors per thread, NULL arguments ---------------------------------- */

typedef struct err_arg {
  dlock_client *c;
  int which;
  int rc;
  char seen_before[64];
  char msg[512];
} err_arg;

static pthread_barrier_t g_bar;

static void *err_thread(void *p) {
  err_arg *a = p;
  snprintf(a->seen_before, sizeof a->seen_before, "%s", dlock_last_error());
  dlock_mutex *m = NULL;
  if (a->which == 0) {
    a->rc = dlock_mutex_new(a->c, "", &m); /* EINVAL: empty name */
  } else {
    dlock_mutex_new(a->c, "errs", &m);
    a->rc = dlock_mutex_trylock(m); /* EBUSY: main holds it */
  }
  /* Both threads have failed before either reads its message. */
  pthread_barrier_wait(&g_bar);
  snprintf(a->msg, sizeof a->msg, "%s", dlock_last_error());
  dlock_mutex_free(m);
  return NULL;
}

TH_CASE(last_error_is_per_thread) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "errs", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_RC(dlock_mutex_new(c, NULL, NULL), DLOCK_EINVAL);
  char mine[512];
  snprintf(mine, sizeof mine, "%s", dlock_last_error());
  CHECK_MSG(mine[0] != '\0', "no detail for EINVAL");
  pthread_barrier_init(&g_bar, NULL, 2);
  err_arg a = {c, 0, 0, "", ""}, b = {c, 1, 0, "", ""};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, err_thread, &a);
  pthread_create(&tb, NULL, err_thread, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_barrier_destroy(&g_bar);
  CHECK_STR(a.seen_before, ""); /* a fresh thread has no message */
  CHECK_STR(b.seen_before, "");
  CHECK_RC(a.rc, DLOCK_EINVAL);
  CHECK_RC(b.rc, DLOCK_EBUSY);
  CHECK_MSG(strstr(a.msg, "name") != NULL, "thread a: '%s'", a.msg);
  CHECK_MSG(strstr(b.msg, "errs") != NULL && strstr(b.msg, "held") != NULL,
            "thread b: '%s'", b.msg);
  CHECK_MSG(strcmp(a.msg, b.msg) != 0, "threads share a message: '%s'", a.msg);
  /* This thread's message was not overwritten by theirs. */
  CHECK_STR(dlock_last_error(), mine);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_CASE(null_arguments_einval) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_new(NULL, NULL), DLOCK_EINVAL);
  dlock_config cfg = quick_cfg(r->url);
  CHECK_RC(dlock_client_new(&cfg, NULL), DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "out") != NULL, "detail: %s",
            dlock_last_error());
  c = th_client(r);
  dlock_mutex *m = (dlock_mutex *)c;
  CHECK_RC(dlock_mutex_new(NULL, "x", &m), DLOCK_EINVAL);
  CHECK(m == NULL);
  m = (dlock_mutex *)c;
  CHECK_RC(dlock_mutex_new(c, NULL, &m), DLOCK_EINVAL);
  CHECK(m == NULL);
  CHECK_RC(dlock_mutex_new(c, "", &m), DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "name") != NULL, "detail: %s",
            dlock_last_error());
  CHECK_RC(dlock_mutex_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_new_fair(c, NULL, &m), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_new_fenced(c, "", &m), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_lock(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_trylock(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_timedlock(NULL, 10, 10), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_unlock(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_force_unlock(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_is_locked(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_is_held(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_hold_count(NULL), DLOCK_EINVAL);
  long long ttl = 0;
  CHECK_RC(dlock_mutex_ttl(NULL, &ttl), DLOCK_EINVAL);
  CHECK_OK(dlock_mutex_new(c, "x", &m));
  CHECK_RC(dlock_mutex_ttl(m, NULL), DLOCK_EINVAL);
  char buf[8];
  CHECK_RC(dlock_mutex_owner(NULL, buf, sizeof buf), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_owner(m, NULL, 64), DLOCK_EINVAL);
  CHECK_RC(dlock_mutex_owner(m, buf, sizeof buf), DLOCK_EINVAL); /* small */
  char big[58];
  CHECK_OK(dlock_mutex_owner(m, big, sizeof big));
  CHECK_RC(dlock_client_cancel_waits(NULL), DLOCK_EINVAL);
  CHECK_STR(dlock_mutex_name(NULL), "");
  CHECK_STR(dlock_mutex_name(m), "x");
  dlock_mutex_free(NULL);
  dlock_client_free(NULL);
  /* Every code has text and a name; unknown codes too. */
  for (int e = 0; e >= -16; e--) {
    CHECK(dlock_strerror(e) && dlock_strerror(e)[0]);
    CHECK_MSG(strcmp(dlock_err_name(e), "UNKNOWN") != 0, "code %d unnamed", e);
  }
  CHECK_STR(dlock_strerror(-999), "unknown error");
  CHECK_STR(dlock_err_name(12345), "UNKNOWN");
  CHECK_STR(dlock_err_name(DLOCK_EAUTH), "EAUTH");
  /* Nothing above touched Redis state. */
  CHECK_EQ(th_cmd_int(r, "DBSIZE"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- many threads, one client ------------------------------------------- */

enum { MT_THREADS = 16, MT_ITERS = 40 };

typedef struct mt_arg {
  dlock_client *c;
  th_redis *r;
  int idx;
  int errors;
  int overlaps;
} mt_arg;

static void *mt_thread(void *p) {
  mt_arg *a = p;
  const char *name = (a->idx % 2) ? "mt-odd" : "mt-even";
  const char *ctr = (a->idx % 2) ? "ctr-odd" : "ctr-even";
  dlock_mutex *m;
  if (dlock_mutex_new(a->c, name, &m)) {
    a->errors++;
    return NULL;
  }
  redisContext *raw = th_redis_raw(a->r);
  for (int i = 0; i < MT_ITERS; i++) {
    int rc = (i % 3 == 0) ? dlock_mutex_timedlock(m, 20000, 5000)
                          : dlock_mutex_lock(m);
    if (rc) {
      fprintf(stderr, "lock: %s %s\n", dlock_err_name(rc), dlock_last_error());
      a->errors++;
      continue;
    }
    redisReply *x = redisCommand(raw, "INCR occ:%s", name);
    if (!x || x->integer != 1)
      a->overlaps++;
    freeReplyObject(x);
    x = redisCommand(raw, "GET %s", ctr);
    long v = x && x->type == REDIS_REPLY_STRING ? atol(x->str) : 0;
    freeReplyObject(x);
    if (dlock_mutex_hold_count(m) != 1 || dlock_mutex_is_held(m) != 1)
      a->errors++;
    x = redisCommand(raw, "SET %s %ld", ctr, v + 1);
    freeReplyObject(x);
    x = redisCommand(raw, "DECR occ:%s", name);
    freeReplyObject(x);
    if ((rc = dlock_mutex_unlock(m)) != 0) {
      fprintf(stderr, "unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      a->errors++;
    }
  }
  redisFree(raw);
  dlock_mutex_free(m);
  return NULL;
}

static void many_threads(th_redis *r, int multiplex) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.multiplex = multiplex;
  cfg.pool_size = 3; /* pool mode: fewer connections than threads */
  cfg.retry_interval_ms = 100;
  dlock_client *c = th_client_cfg(r, &cfg);
  mt_arg a[MT_THREADS];
  pthread_t t[MT_THREADS];
  for (int i = 0; i < MT_THREADS; i++) {
    a[i] = (mt_arg){c, r, i, 0, 0};
    pthread_create(&t[i], NULL, mt_thread, &a[i]);
  }
  int errors = 0, overlaps = 0;
  for (int i = 0; i < MT_THREADS; i++) {
    pthread_join(t[i], NULL);
    errors += a[i].errors;
    overlaps += a[i].overlaps;
  }
  CHECK_EQ(errors, 0);
  CHECK_EQ(overlaps, 0);
  redisReply *x = th_cmd(r, "MGET ctr-odd ctr-even");
  CHECK_EQ(atol(x->element[0]->str), MT_THREADS / 2 * MT_ITERS);
  CHECK_EQ(atol(x->element[1]->str), MT_THREADS / 2 * MT_ITERS);
  freeReplyObject(x);
  CHECK_EQ(th_cmd_int(r, "EXISTS mt-odd mt-even"), 0);
  /* The client never opened more than its command connection(s) (pool_size
   * or the one multiplexed connection) + pub/sub + watchdog. */
  x = th_cmd(r, "CLIENT LIST");
  int n = 0;
  for (const char *s = x->str; (s = strstr(s, "cmd=")) != NULL; s++)
    n++;
  freeReplyObject(x);
  int cmd_conns = multiplex ? 1 : 3;
  printf("multiplex=%d: server sees %d connections (%d command + pubsub + "
         "watchdog + this one)\n",
         multiplex, n, cmd_conns);
  CHECK_MSG(n <= cmd_conns + 2 + 1, "%d connections", n);
  dlock_client_free(c);
  freeReplyObject(th_cmd(r, "FLUSHALL"));
}

TH_CASE(many_threads_share_one_client) {
  th_redis *r = th_redis_new(0, NULL);
  many_threads(r, 1); /* the default */
  many_threads(r, 0); /* connection pool */
}

/* ---- connection names (issue 27) ----------------------------------------- */

/* The names of the connections in CLIENT LIST other than raw's own,
 * joined with ' ' into buf ("-" for an unnamed one); returns how many. */
static int client_names(redisContext *raw, char *buf, size_t len) {
  redisReply *x = redisCommand(raw, "CLIENT ID");
  CHECK(x && x->type == REDIS_REPLY_INTEGER);
  char self[40];
  snprintf(self, sizeof self, "id=%lld ", x->integer);
  freeReplyObject(x);
  x = redisCommand(raw, "CLIENT LIST");
  CHECK(x && x->type == REDIS_REPLY_STRING);
  int n = 0;
  size_t at = 0;
  buf[0] = '\0';
  for (char *line = strtok(x->str, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, self, strlen(self)) == 0)
      continue;
    const char *nm = strstr(line, " name=");
    CHECK(nm);
    nm += 6;
    size_t k = strcspn(nm, " ");
    int w = snprintf(buf + at, len - at, "%s%.*s", n ? " " : "", k ? (int)k : 1,
                     k ? nm : "-");
    if (w > 0 && (size_t)w < len - at)
      at += (size_t)w;
    n++;
  }
  freeReplyObject(x);
  return n;
}

/* Whether every word of names is `want`. */
static int all_named(const char *names, const char *want) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", names);
  for (char *w = strtok(copy, " "); w; w = strtok(NULL, " "))
    if (strcmp(w, want) != 0)
      return 0;
  return 1;
}

typedef struct named_waiter {
  dlock_client *c;
  int rc;
} named_waiter;

static void *named_wait(void *arg) {
  named_waiter *w = arg;
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(w->c, "named", &m));
  w->rc = dlock_mutex_timedlock(m, 20000 * slow(), -1);
  if (w->rc == 0)
    CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  return NULL;
}

/* Every connection of a client (router, subscriber, watchdog) names itself
 * with client_name, or by default "dlock:<program>:<host>:<pid>"; the
 * bytes Redis refuses in a name become '_'. */
static void names_every_connection(const char *configured, const char *want,
                                   const char *acl_user) {
  th_redis *r = th_redis_new(0, "user default on >defpw ~* &* +@all\n"
                                "user noclient on >ncpw ~* &* +@all -client\n");
  char url[512];
  snprintf(url, sizeof url, "unix://%s?password=%s%s%s", r->sock,
           acl_user ? "ncpw" : "defpw", acl_user ? "&user=" : "",
           acl_user ? acl_user : "");
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK(cfg.client_name == NULL);
  cfg.url = url;
  cfg.client_name = configured;
  /* A renewal every 200 ms (a slow build's: times its multiplier; valgrind
   * once missed a fixed 600 ms lease): the watchdog's link opens soon. */
  cfg.watchdog_timeout_ms = (int)(600 * slow());
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "named", &m));
  CHECK_OK(dlock_mutex_lock(m));
  named_waiter w = {c, -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, named_wait, &w), 0);
  /* The waiter's subscription is up (the subscriber's link). */
  int64_t end = th_now_ms() + 5000 * slow();
  char names[4096];
  int n = 0;
  redisContext *raw = th_redis_raw(r);
  freeReplyObject(redisCommand(raw, "AUTH defpw"));
  for (;;) {
    redisReply *x =
        redisCommand(raw, "PUBSUB NUMSUB redisson_lock__channel:{named}");
    long long subs = x->element[1]->integer;
    freeReplyObject(x);
    n = client_names(raw, names, sizeof names);
    /* (a connection the harness closed may linger in the list a moment) */
    if ((subs >= 1 && n >= 3 && all_named(names, acl_user ? "-" : want)) ||
        th_now_ms() > end)
      break;
    th_sleep_ms(10);
  }
  redisFree(raw);
  /* Router, subscriber and watchdog at least. */
  CHECK_MSG(n >= 3, "%d connections: %s", n, names);
  CHECK_MSG(all_named(names, acl_user ? "-" : want), "want %s, got: %s",
            acl_user ? "-" : want, names);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_OK(w.rc);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_CASE(connections_named_by_default) {
  char host[256] = "", want[600];
  CHECK_EQ(gethostname(host, sizeof host - 1), 0);
  snprintf(want, sizeof want, "dlock:test_client:%s:%ld", host, (long)getpid());
  for (char *p = want; *p; p++)
    if (*p < '!' || *p > '~')
      *p = '_';
  names_every_connection(NULL, want, NULL);
}

TH_CASE(connections_named_by_client_name) {
  names_every_connection("billing worker\n7", "billing_worker_7", NULL);
}

/* A user whose ACL refuses CLIENT still connects: its links stay unnamed. */
TH_CASE(connection_name_refused_by_acl_is_no_error) {
  names_every_connection("x", "x", "noclient");
}

/* ---- hold start times (issue 27) ----------------------------------------- */

static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls another client's view of name's first holder until a start not
 * before t0 is published (the thread's previous hold of the name may show
 * for a moment); returns the start (0: not within the bound). */
static long long published_since(dlock_client *obs, const char *name,
                                 long long t0) {
  int64_t end = th_now_ms() + 5000 * slow();
  do {
    dlock_status st;
    CHECK_OK(dlock_status_query(obs, name, &st));
    long long since = 0;
    int rc =
        st.n_holders == 1
            ? dlock_hold_since_query(obs, st.holders[0].owner, name, &since)
            : 0;
    dlock_status_clear(&st);
    CHECK_MSG(rc >= 0, "dlock_hold_since_query: %s", dlock_last_error());
    if (rc == 1 && since >= t0)
      return since;
    th_sleep_ms(5);
  } while (th_now_ms() < end);
  return 0;
}

/* The start of a hold, as another process sees it: the acquisition's time
 * (not the client's start), published soon after, unchanged by a
 * reentrant acquisition, and a new one for the thread's next hold. */
TH_CASE(hold_since_is_the_acquisition_time) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *obs = th_client(r);
  dlock_client_info info;
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "since", &m));
  for (int round = 0; round < 2; round++) {
    /* The two holds and the client's start are apart: 150 ms of wall clock
     * between them (not a synchronisation). */
    th_sleep_ms(150);
    long long t0 = wall_ms();
    int64_t m0 = th_now_ms();
    CHECK_OK(dlock_mutex_lock(m));
    long long t1 = wall_ms();
    long long since = published_since(obs, "since", t0);
    int64_t seen = th_now_ms() - m0;
    CHECK_MSG(since >= t0 && since <= t1,
              "round %d: since %lld, acquired between %lld and %lld", round,
              since, t0, t1);
    /* Published in well under the info key's period (10 s here). */
    CHECK_MSG(seen < 1000 * slow(), "published after %lld ms", (long long)seen);
    dlock_status st;
    CHECK_OK(dlock_status_query(obs, "since", &st));
    CHECK_EQ(dlock_client_info_query(obs, st.holders[0].owner, &info), 1);
    CHECK_MSG(since - info.started_ms >= 150, "since %lld, client start %lld",
              since, info.started_ms);
    /* A reentrant acquisition keeps the hold's start. */
    CHECK_OK(dlock_mutex_lock(m));
    long long again = 0;
    CHECK_EQ(dlock_hold_since_query(obs, st.holders[0].owner, "since", &again),
             1);
    CHECK_EQ(again, since);
    dlock_status_clear(&st);
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_OK(dlock_mutex_unlock(m));
  }
  /* Refusals. */
  long long x = 7;
  CHECK_RC(dlock_hold_since_query(obs, "short", "since", &x), DLOCK_EINVAL);
  CHECK_EQ(x, 0);
  char owner[64];
  snprintf(owner, sizeof owner, "%s:", dlock_client_id(c));
  CHECK_RC(dlock_hold_since_query(obs, owner, "since", &x), DLOCK_EINVAL);
  snprintf(owner, sizeof owner, "%s:1", dlock_client_id(c));
  CHECK_RC(dlock_hold_since_query(obs, owner, "", &x), DLOCK_EINVAL);
  CHECK_RC(dlock_hold_since_query(obs, owner, "nothing-held", &x), 0);
  dlock_mutex_free(m);
  dlock_client_free(obs);
  dlock_client_free(c);
}

TH_MAIN()
