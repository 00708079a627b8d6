/*
 * consumer.c -- an outside program written against the 0.1 API, compiled
 * once per saved header (tests/abi/<version>/dlock.h) and once against the
 * current one, always linked with the library of this tree. It must run
 * correctly: the library may not write past the program's structs (guard
 * bytes after each, and ASan redzones around bare ones in the ASan build),
 * must hand the program the defaults its header documents (a field moved in
 * the library's layout shows up here), and must honour the fields the
 * program sets.
 *
 * Usage: consumer URL DEAD_URL   (DEAD_URL: a socket nobody listens on)
 * Exit 0 and "ok" when every check passes; 1 with the first failure.
 */
#include <dlock.h>
#include <stdio.h>
#include <string.h>

#define GUARD_BYTE 0xA5
#define GUARD_LEN 64

static int failures;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "consumer:%d: %s: ", __LINE__, #cond);                   \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      failures++;                                                              \
    }                                                                          \
  } while (0)

#define EXPECT_RC(call, want)                                                  \
  do {                                                                         \
    int rc_ = (call);                                                          \
    EXPECT(rc_ == (want), "%s (%d), want %s: %s", dlock_err_name(rc_), rc_,    \
           dlock_err_name(want), dlock_last_error());                          \
  } while (0)

static int guard_intact(const unsigned char *g) {
  for (int i = 0; i < GUARD_LEN; i++)
    if (g[i] != GUARD_BYTE)
      return 0;
  return 1;
}

static struct {
  dlock_config cfg;
  unsigned char guard[GUARD_LEN];
} gcfg;

static struct {
  dlock_status st;
  unsigned char guard[GUARD_LEN];
} gst;

static void lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
}

/* The defaults every header since 0.1 documents for its fields. */
static void check_defaults(const dlock_config *c) {
  EXPECT(c->url == NULL, "url %p", (const void *)c->url);
  EXPECT(c->connect_timeout_ms == 10000, "%d", c->connect_timeout_ms);
  EXPECT(c->command_timeout_ms == 3000, "%d", c->command_timeout_ms);
  EXPECT(c->retry_attempts == 3, "%d", c->retry_attempts);
  EXPECT(c->retry_interval_ms == 1500, "%d", c->retry_interval_ms);
  EXPECT(c->watchdog_timeout_ms == 30000, "%d", c->watchdog_timeout_ms);
  EXPECT(c->pool_size == 16, "%d", c->pool_size);
  EXPECT(c->lazy_connect == 0, "%d", c->lazy_connect);
  EXPECT(c->on_lock_lost == NULL, "on_lock_lost set");
  EXPECT(c->on_lock_lost_arg == NULL, "on_lock_lost_arg set");
  EXPECT(c->subscription_linger_ms == 100, "%d", c->subscription_linger_ms);
  EXPECT(c->multiplex == 1, "%d", c->multiplex);
}

/* Settings the program changes; each must take effect. */
static void configure(dlock_config *c, const char *url) {
  c->url = url;
  c->connect_timeout_ms = 2000;
  c->retry_attempts = 0; /* an unreachable server fails at once */
  c->retry_interval_ms = 10;
  c->on_lock_lost = lost;
  c->multiplex = 0;
}

/* lazy_connect (a field after the pointers) is honoured: with it the client
 * comes up against a dead server and the first operation fails. */
static void check_lazy(const char *dead_url) {
  dlock_config cfg; /* bare: ASan's redzones catch an overrun */
  dlock_config_init(&cfg);
  configure(&cfg, dead_url);
  dlock_client *c = NULL;
  EXPECT_RC(dlock_client_new(&cfg, &c), DLOCK_ECONN);
  cfg.lazy_connect = 1;
  EXPECT_RC(dlock_client_new(&cfg, &c), DLOCK_OK);
  if (!c)
    return;
  dlock_mutex *m = NULL;
  EXPECT_RC(dlock_mutex_new(c, "abi:lazy", &m), DLOCK_OK);
  EXPECT_RC(dlock_mutex_trylock(m), DLOCK_ECONN);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static void check_status(dlock_client *c, dlock_mutex *m, int held) {
  EXPECT_RC(dlock_status_query(c, "abi:lock", &gst.st), DLOCK_OK);
  EXPECT(guard_intact(gst.guard), "dlock_status_query wrote past the struct");
  EXPECT(gst.st.locked == held, "locked %d", gst.st.locked);
  EXPECT(gst.st.n_holders == (size_t)held, "%zu holders", gst.st.n_holders);
  if (held && gst.st.n_holders == 1) {
    char owner[64];
    EXPECT_RC(dlock_mutex_owner(m, owner, sizeof owner), DLOCK_OK);
    EXPECT(strcmp(gst.st.holders[0].owner, owner) == 0, "owner %s, want %s",
           gst.st.holders[0].owner, owner);
    EXPECT(gst.st.holders[0].count == 1, "count %lld", gst.st.holders[0].count);
    EXPECT(gst.st.ttl_ms > 0 && gst.st.ttl_ms <= 30000, "ttl %lld",
           gst.st.ttl_ms);
    EXPECT(gst.st.mode[0] == '\0', "mode '%s'", gst.st.mode);
  }
  dlock_status_clear(&gst.st);
  EXPECT(guard_intact(gst.guard), "dlock_status_clear wrote past the struct");
  EXPECT(gst.st.holders == NULL && gst.st.n_holders == 0, "not cleared");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: consumer URL DEAD_URL\n");
    return 2;
  }
  memset(&gcfg, GUARD_BYTE, sizeof gcfg);
  memset(&gst, GUARD_BYTE, sizeof gst);
  dlock_config_init(&gcfg.cfg);
  EXPECT(guard_intact(gcfg.guard), "dlock_config_init wrote past the struct");
  check_defaults(&gcfg.cfg);
  configure(&gcfg.cfg, argv[1]);
  dlock_client *c = NULL;
  EXPECT_RC(dlock_client_new(&gcfg.cfg, &c), DLOCK_OK);
  EXPECT(guard_intact(gcfg.guard), "dlock_client_new wrote past the struct");
  if (!c)
    return 1;
  dlock_mutex *m = NULL;
  EXPECT_RC(dlock_mutex_new(c, "abi:lock", &m), DLOCK_OK);
  EXPECT_RC(dlock_mutex_lock(m), DLOCK_OK);
  check_status(c, m, 1);
  EXPECT_RC(dlock_mutex_unlock(m), DLOCK_OK);
  check_status(c, m, 0);
  dlock_status bare; /* never queried: clear only zeroes it */
  memset(&bare, 0, sizeof bare);
  dlock_status_clear(&bare);
  dlock_status_clear(NULL);
  dlock_mutex_free(m);
  dlock_client_free(c);
  check_lazy(argv[2]);
  if (failures)
    return 1;
  printf("ok: built against dlock.h %d.%d.%d, running libdlock %s\n",
         DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH,
         dlock_version_string());
  return 0;
}
