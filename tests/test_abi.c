/*
 * test_abi.c -- the caller-allocated structs grow safely (docs/abi.md): the
 * library writes nothing past the size a caller's header gave it, reads only
 * the fields that fit (defaults for the rest), refuses configs that
 * dlock_config_init never saw, and refuses fields it does not know. Older
 * callers are simulated with a struct cut short (sizeof minus appended
 * fields), newer ones with a longer one; guard bytes follow every struct.
 */
#include <stddef.h>

#include "th.h"

#define GUARD 0xA5
#define GUARD_LEN 64

/* `size` bytes for the struct, then GUARD_LEN guard bytes; max-aligned. */
static void *guarded(size_t size) {
  unsigned char *p = malloc(size + GUARD_LEN);
  CHECK(p != NULL);
  memset(p, GUARD, size + GUARD_LEN);
  return p;
}

/* The recorded size, read as bytes: the struct may be shorter than this
 * header's (the compiler then rightly refuses a member access). */
static uint32_t abi_size_of(const void *cfg) {
  uint32_t v;
  memcpy(&v, (const unsigned char *)cfg + offsetof(dlock_config, abi_size),
         sizeof v);
  return v;
}

static void check_guard(const void *p, size_t size, const char *after) {
  const unsigned char *g = (const unsigned char *)p + size;
  for (size_t i = 0; i < GUARD_LEN; i++)
    CHECK_MSG(g[i] == GUARD, "%s wrote byte %zu past a %zu-byte struct", after,
              i, size);
}

/* Whether a caller's struct of `size` bytes holds the whole field. */
#define HAS(type, field, size)                                                 \
  (offsetof(type, field) + sizeof(((type *)0)->field) <= (size))

/* A client on cfg (size bytes) works: lock and unlock a mutex. */
static void use_client(th_redis *r, dlock_config *cfg, size_t size) {
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new_sized(cfg, size, &c));
  check_guard(cfg, size, "dlock_client_new_sized");
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "abi:m", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(th_cmd_int(r, "HLEN abi:m"), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Older callers: the struct ends before the appended fields. init writes
 * only what fits; client_new reads only what fits. The guard bytes sit
 * where subscription_linger_ms would be: read as a field they would be a
 * negative linger, which dlock_client_new refuses. */
TH_CASE(config_shorter) {
  th_redis *r = th_redis_new(0, NULL);
  const size_t sizes[] = {offsetof(dlock_config, subscription_linger_ms),
                          offsetof(dlock_config, multiplex),
                          offsetof(dlock_config, sync_replicas),
                          offsetof(dlock_config, client_name),
                          offsetof(dlock_config, call_timeout_ms),
                          sizeof(dlock_config)};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t size = sizes[i];
    dlock_config *cfg = guarded(size);
    dlock_config_init_sized(cfg, size);
    check_guard(cfg, size, "dlock_config_init_sized");
    CHECK_EQ(abi_size_of(cfg), size);
    CHECK(cfg->url == NULL);
    CHECK_EQ(cfg->command_timeout_ms, 3000);
    CHECK(cfg->on_lock_lost_arg == NULL);
    if (HAS(dlock_config, multiplex, size))
      CHECK_EQ(cfg->multiplex, 1);
    if (HAS(dlock_config, sync_timeout_ms, size)) {
      CHECK_EQ(cfg->sync_replicas, -1);
      CHECK_EQ(cfg->sync_timeout_ms, 1000);
    }
    if (HAS(dlock_config, client_name, size))
      CHECK(cfg->client_name == NULL);
    cfg->url = r->url;
    cfg->retry_interval_ms = 100;
    use_client(r, cfg, size);
    free(cfg);
  }
}

/* Down to the layout record alone: init still writes nothing past it. */
TH_CASE(config_tiny) {
  for (size_t size = 0; size <= offsetof(dlock_config, connect_timeout_ms);
       size++) {
    dlock_config *cfg = guarded(size);
    dlock_config_init_sized(cfg, size);
    check_guard(cfg, size, "dlock_config_init_sized");
    if (size >= offsetof(dlock_config, url))
      CHECK_EQ(abi_size_of(cfg), size);
    else /* too small for the record: nothing written */
      for (size_t b = 0; b < size; b++)
        CHECK_EQ(((unsigned char *)cfg)[b], GUARD);
    free(cfg);
  }
  dlock_config_init_sized(NULL, sizeof(dlock_config));
  dlock_config cfg;
  memset(&cfg, GUARD, sizeof cfg);
  dlock_config_init_sized(&cfg, 4097); /* not a struct size: ignored */
  CHECK_EQ(cfg.abi_magic, 0xA5A5A5A5u);
}

/* Newer callers: bytes past this library's struct are zeroed by init and
 * accepted while zero; a field this library does not know is refused. */
TH_CASE(config_longer) {
  th_redis *r = th_redis_new(0, NULL);
  size_t size = sizeof(dlock_config) + 24;
  dlock_config *cfg = guarded(size);
  dlock_config_init_sized(cfg, size);
  check_guard(cfg, size, "dlock_config_init_sized");
  for (size_t b = sizeof(dlock_config); b < size; b++)
    CHECK_EQ(((unsigned char *)cfg)[b], 0);
  cfg->url = r->url;
  use_client(r, cfg, size);
  ((unsigned char *)cfg)[size - 3] = 1; /* a newer header's field, set */
  dlock_client *c = NULL;
  CHECK_RC(dlock_client_new_sized(cfg, size, &c), DLOCK_ENOTSUP);
  CHECK(c == NULL);
  CHECK_MSG(strstr(dlock_last_error(), "newer dlock.h") != NULL, "%s",
            dlock_last_error());
  /* The reader's own size bounds what is read: a caller whose header is
   * this one reads only this library's fields. */
  CHECK_OK(dlock_client_new_sized(cfg, sizeof(dlock_config), &c));
  dlock_client_free(c);
  free(cfg);
}

/* Configs dlock_config_init never set up are refused, not guessed at. */
TH_CASE(config_not_initialised) {
  dlock_config cfg;
  dlock_client *c = NULL;
  memset(&cfg, 0, sizeof cfg); /* = {0}: no layout record */
  cfg.url = "unix:///nonexistent";
  cfg.connect_timeout_ms = cfg.command_timeout_ms = 100;
  cfg.watchdog_timeout_ms = 30000;
  cfg.pool_size = 1;
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
  CHECK_MSG(strstr(dlock_last_error(), "dlock_config_init") != NULL, "%s",
            dlock_last_error());
  memset(&cfg, 0x5A, sizeof cfg); /* stack garbage */
  CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
  /* The mark is right but the recorded size is not a struct size. */
  const uint32_t bad[] = {0, 7, 4097, 0xFFFFFFFFu};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_config_init(&cfg);
    cfg.abi_size = bad[i];
    CHECK_RC(dlock_client_new(&cfg, &c), DLOCK_EINVAL);
    CHECK_MSG(strstr(dlock_last_error(), "size") != NULL, "%s",
              dlock_last_error());
  }
  /* A reader size too small for the record. */
  dlock_config_init(&cfg);
  CHECK_RC(dlock_client_new_sized(&cfg, 4, &c), DLOCK_EINVAL);
  CHECK(c == NULL);
}

/* A copy of an initialised config is as good as the original, and the
 * inline wrappers pass this header's size. */
TH_CASE(config_copy) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_config a;
  dlock_config_init(&a);
  CHECK_EQ(a.abi_size, sizeof(dlock_config));
  a.url = r->url;
  dlock_config *b = guarded(sizeof a);
  *b = a;
  use_client(r, b, sizeof *b);
  free(b);
}

/* dlock_status: the query writes only the fields that fit (holders it
 * cannot hand over are freed, as ASan's leak check sees), clear frees what
 * the query handed over and zeroes only the caller's bytes. */
TH_CASE(status_sizes) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m = NULL;
  CHECK_OK(dlock_mutex_new(c, "abi:s", &m));
  CHECK_OK(dlock_mutex_lock(m));
  const size_t sizes[] = {offsetof(dlock_status, locked),
                          offsetof(dlock_status, mode),
                          offsetof(dlock_status, holders), sizeof(dlock_status),
                          sizeof(dlock_status) + 16};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t size = sizes[i];
    dlock_status *st = guarded(size);
    CHECK_OK(dlock_status_query_sized(c, "abi:s", st, size));
    check_guard(st, size, "dlock_status_query_sized");
    CHECK_EQ(st->abi_size, size);
    if (HAS(dlock_status, ttl_ms, size))
      CHECK(st->locked == 1 && st->ttl_ms > 0);
    if (offsetof(dlock_status, holders) + sizeof(void *) <= size) {
      CHECK_EQ(st->n_holders, 1);
      CHECK_EQ(st->holders[0].count, 1);
    }
    for (size_t b = sizeof(dlock_status); b < size; b++)
      CHECK_EQ(((unsigned char *)st)[b], 0);
    dlock_status_clear_sized(st, size);
    check_guard(st, size, "dlock_status_clear_sized");
    for (size_t b = 0; b < size; b++)
      CHECK_EQ(((unsigned char *)st)[b], 0);
    free(st);
  }
  dlock_status st;
  CHECK_RC(dlock_status_query_sized(c, "abi:s", &st, 4), DLOCK_EINVAL);
  CHECK_RC(dlock_status_query_sized(c, "abi:s", NULL, sizeof st), DLOCK_EINVAL);
  CHECK_RC(dlock_status_query(c, "abi:s", &st), DLOCK_OK);
  CHECK_EQ(st.n_holders, 1);
  dlock_status_clear(&st);
  dlock_status_clear(&st); /* twice: nothing left to free */
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A struct the query never filled (or filled for a shorter layout) is only
 * zeroed: no pointer in it is freed. */
TH_CASE(status_clear_unfilled) {
  dlock_status st;
  memset(&st, 0x5A, sizeof st); /* garbage holders pointer */
  dlock_status_clear(&st);
  for (size_t b = 0; b < sizeof st; b++)
    CHECK_EQ(((unsigned char *)&st)[b], 0);
  dlock_status_clear(NULL);
  /* A shorter record than the clearing caller's size: only its bytes. */
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  size_t small = offsetof(dlock_status, holders);
  dlock_status *s = guarded(small);
  CHECK_OK(dlock_status_query_sized(c, "abi:none", s, small));
  dlock_status_clear_sized(s, sizeof(dlock_status));
  check_guard(s, small, "dlock_status_clear_sized (larger caller size)");
  free(s);
  dlock_client_free(c);
}

TH_MAIN()
