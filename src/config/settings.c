/*
 * settings.c -- a dlock_config as the library reads it: its defaults
 * (dlock_config_init_sized), its layout record (docs/abi.md), its checks
 * and the caller's struct completed to this library's layout
 * (dlock__config_load, dlock__config_resolve), and the bounds derived from
 * it -- the retry policy's pauses, the unlock latch's TTL, the longest one
 * send can take, a once key's TTL and window. No connection, no client:
 * both clients and the config file loader call it.
 */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "config/config.h"

/* The layout record of a dlock_config (docs/abi.md): abi_magic says
 * dlock_config_init_sized ran; abi_size is the caller's sizeof. A size above
 * ABI_SIZE_MAX is garbage, not a struct. */
#define CONFIG_MAGIC 0x444c4346u /* "DLCF" */
#define ABI_SIZE_MAX 4096u

void dlock_config_init_sized(dlock_config *cfg, size_t size) {
  if (!cfg || size < offsetof(dlock_config, url) || size > ABI_SIZE_MAX)
    return;
  dlock_config d;
  memset(&d, 0, sizeof d);
  d.abi_magic = CONFIG_MAGIC;
  d.abi_size = (uint32_t)size;
  d.url = NULL;
  d.connect_timeout_ms = 10000;
  d.command_timeout_ms = 3000;
  d.retry_attempts = 3;
  d.retry_interval_ms = 1500;
  d.watchdog_timeout_ms = 30000;
  d.pool_size = 16;
  d.lazy_connect = 0;
  d.subscription_linger_ms = 100;
  d.multiplex = 1;
  d.tls_verify = 1;
  d.sync_replicas = -1;
  d.sync_timeout_ms = 1000;
  d.log_level = DLOCK_LOG_INFO;
  d.spin_fallback = 0;
  d.retry_delay = DLOCK_RETRY_CONSTANT;
  d.retry_base_delay_ms = 1000;
  d.retry_max_delay_ms = 2000;
  d.call_timeout_ms = 5000;
  /* The caller owns `size` bytes: the fields that fit get their defaults,
   * bytes this library does not know (a newer header's fields) get zero. */
  memset(cfg, 0, size);
  memcpy(cfg, &d, size < sizeof d ? size : sizeof d);
}

int dlock__config_check_record(const dlock_config *cfg, size_t size) {
  if (size < offsetof(dlock_config, url) || cfg->abi_magic != CONFIG_MAGIC)
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_config was not set up by dlock_config_init "
                       "(call it first, then set fields)");
  if (cfg->abi_size < offsetof(dlock_config, url) ||
      cfg->abi_size > ABI_SIZE_MAX)
    return dlock__fail(DLOCK_EINVAL,
                       "dlock_config records a size of %lu bytes: corrupted, "
                       "or not set up by dlock_config_init",
                       (unsigned long)cfg->abi_size);
  return 0;
}

/* *out = the caller's config as a whole one of this library's layout: the
 * fields that fit in the caller's size, defaults for the rest. Reads no byte
 * of *in past min(size, in->abi_size). NULL: all defaults. Fields are only
 * ever appended in natural alignment, so a real size never ends inside a
 * field. */
int dlock__config_load(const dlock_config *in, size_t size, dlock_config *out) {
  dlock_config_init_sized(out, sizeof *out);
  if (!in)
    return 0;
  int rc = dlock__config_check_record(in, size);
  if (rc)
    return rc;
  size_t n = in->abi_size < size ? in->abi_size : size;
  const unsigned char *bytes = (const unsigned char *)in;
  for (size_t i = sizeof *out; i < n; i++)
    if (bytes[i])
      return dlock__fail(DLOCK_ENOTSUP,
                         "dlock_config sets a field at byte %zu that libdlock "
                         "%s does not know (built against a newer dlock.h)",
                         i, dlock_version_string());
  memcpy(out, in, n < sizeof *out ? n : sizeof *out);
  out->abi_size = (uint32_t)sizeof *out;
  return 0;
}

/* The lowest value dlock_client_new accepts for each int field with a
 * bound (the config file loader applies the same ones). */
static const struct {
  size_t off;
  int min;
  const char *name;
} g_int_min[] = {
    {offsetof(dlock_config, connect_timeout_ms), 1, "connect_timeout_ms"},
    {offsetof(dlock_config, command_timeout_ms), 1, "command_timeout_ms"},
    {offsetof(dlock_config, retry_attempts), 0, "retry_attempts"},
    {offsetof(dlock_config, retry_interval_ms), 0, "retry_interval_ms"},
    {offsetof(dlock_config, watchdog_timeout_ms), 3, "watchdog_timeout_ms"},
    {offsetof(dlock_config, pool_size), 1, "pool_size"},
    {offsetof(dlock_config, subscription_linger_ms), 0,
     "subscription_linger_ms"},
    {offsetof(dlock_config, sync_replicas), -1, "sync_replicas"},
    /* WAIT's timeout 0 would wait for ever */
    {offsetof(dlock_config, sync_timeout_ms), 1, "sync_timeout_ms"},
    {offsetof(dlock_config, retry_base_delay_ms), 0, "retry_base_delay_ms"},
    {offsetof(dlock_config, retry_max_delay_ms), 0, "retry_max_delay_ms"},
    {offsetof(dlock_config, call_timeout_ms), 0, "call_timeout_ms"},
};

int dlock__config_int_min(size_t off) {
  for (size_t i = 0; i < sizeof g_int_min / sizeof g_int_min[0]; i++)
    if (g_int_min[i].off == off)
      return g_int_min[i].min;
  return INT_MIN;
}

int dlock__config_check(const dlock_config *cfg) {
  if (cfg->retry_delay < DLOCK_RETRY_CONSTANT ||
      cfg->retry_delay > DLOCK_RETRY_DECORRELATED_JITTER)
    return dlock__fail(DLOCK_EINVAL,
                       "retry_delay must be one of DLOCK_RETRY_* (0 to 3), "
                       "not %d",
                       cfg->retry_delay);
  for (size_t i = 0; i < sizeof g_int_min / sizeof g_int_min[0]; i++) {
    int v;
    memcpy(&v, (const char *)cfg + g_int_min[i].off, sizeof v);
    if (v < g_int_min[i].min)
      return dlock__fail(DLOCK_EINVAL, "%s must be >= %d", g_int_min[i].name,
                         g_int_min[i].min);
  }
  return 0;
}

int dlock__config_resolve(const dlock_config *in, dlock_config *out) {
  int rc = in ? dlock__config_check_record(in, in->abi_size) : 0;
  if (rc == 0)
    rc = dlock__config_load(in, in ? in->abi_size : 0, out);
  return rc ? rc : dlock__config_check(out);
}

/* A random number from 0 to n, both included (n >= 0). */
static int64_t rand_upto(int64_t n) {
  return n > 0 ? (int64_t)(dlock__rand64() % ((uint64_t)n + 1)) : 0;
}

int64_t dlock__retry_pause(const dlock_config *cfg, int n, int64_t *prev) {
  int64_t b = cfg->retry_base_delay_ms > 0 ? cfg->retry_base_delay_ms : 0;
  int64_t m = cfg->retry_max_delay_ms > 0 ? cfg->retry_max_delay_ms : 0;
  int64_t e = m; /* min(b * 2^n, m), without overflow */
  if (n < 0)
    n = 0;
  if (n < 62 && b > 0 && b <= m >> n)
    e = b << n;
  int64_t p;
  switch (cfg->retry_delay) {
  case DLOCK_RETRY_EQUAL_JITTER:
    p = e / 2 + rand_upto(e / 2);
    break;
  case DLOCK_RETRY_FULL_JITTER:
    p = rand_upto(e > 0 ? e : 1);
    break;
  case DLOCK_RETRY_DECORRELATED_JITTER: {
    int64_t last = prev && *prev > 0 ? *prev : b;
    p = b + (last > 0 ? rand_upto(3 * last - 1) : 0);
    if (p > m)
      p = m;
    break;
  }
  default:
    p = cfg->retry_interval_ms > 0 ? cfg->retry_interval_ms : 0;
    break;
  }
  if (prev)
    *prev = p;
  return p;
}

int64_t dlock__retry_pause_max(const dlock_config *cfg) {
  if (cfg->retry_delay == DLOCK_RETRY_CONSTANT)
    return cfg->retry_interval_ms > 0 ? cfg->retry_interval_ms : 0;
  int64_t m = cfg->retry_max_delay_ms > 0 ? cfg->retry_max_delay_ms : 0;
  int64_t b = cfg->retry_base_delay_ms > 0 ? cfg->retry_base_delay_ms : 0;
  /* decorrelated jitter's first pause is b even when b > m */
  return cfg->retry_delay == DLOCK_RETRY_DECORRELATED_JITTER && b > m ? b : m;
}

int64_t dlock__latch_ttl(const dlock_config *cfg) {
  /* The latch must outlive every retry of the unlock it protects. */
  int64_t t = ((int64_t)cfg->command_timeout_ms + dlock__retry_pause_max(cfg)) *
              (cfg->retry_attempts + 1);
  return t < 1 ? 1 : t;
}

int64_t dlock__send_max(const dlock_config *cfg) {
  int64_t cto = cfg->command_timeout_ms > 0 ? cfg->command_timeout_ms : 0;
  int64_t t = (cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 0) +
              2 * cto; /* the handshake (AUTH, HELLO, SELECT) and the reply */
  if (cfg->sync_replicas != 0 && cfg->sync_timeout_ms > 0)
    t += cfg->sync_timeout_ms; /* the WAIT pipelined behind it */
  return t;
}

int64_t dlock__once_ttl(const dlock_config *cfg, int64_t *window) {
  int64_t send = dlock__send_max(cfg);
  int64_t pause = dlock__retry_pause_max(cfg);
  int64_t tries = 1 + (cfg->retry_attempts > 0 ? cfg->retry_attempts : 0);
  /* Every attempt and its pause, plus the send on a fresh connection
   * that replaces a pooled one found dead (not an attempt). */
  int64_t w = (send + pause) * tries + send;
  if (window)
    *window = w;
  /* The last copy starts before the window ends; the key outlives it by
   * one more send and 1 s for the server's and the client's clocks. */
  return w + send + 1000;
}
