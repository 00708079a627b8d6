/*
 * error.c -- error codes, their text, and the per-thread detail message.
 *
 * The code is the contract; the detail message (dlock_last_error) is for
 * people. Each thread has its own buffer so threads sharing a client never
 * see each other's messages. Also the message of a WRONGTYPE refusal of a
 * script (dlock__explain_wrongtype): which object, which key, what it holds.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char t_errbuf[512];
/* > 0: a clean-up is running whose failures must not replace the message
 * of the error the call reports (dlock__err_keep_begin). */
static _Thread_local int t_keep;

const char *dlock_strerror(int err) {
  switch (err) {
#define DLOCK__ERR_TEXT(name, value, msg)                                      \
  case DLOCK_##name:                                                           \
    return msg;
    DLOCK_ERRNO_MAP(DLOCK__ERR_TEXT)
#undef DLOCK__ERR_TEXT
  default:
    return "unknown error";
  }
}

const char *dlock_err_name(int err) {
  switch (err) {
#define DLOCK__ERR_NAME(name, value, msg)                                      \
  case DLOCK_##name:                                                           \
    return #name;
    DLOCK_ERRNO_MAP(DLOCK__ERR_NAME)
#undef DLOCK__ERR_NAME
  default:
    return "UNKNOWN";
  }
}

const char *dlock_last_error(void) { return t_errbuf; }

/* A message too long for buf ends at a word with " ..." instead of in
 * the middle of one (issue 39: "cannot connect to 127.0."). */
void dlock__cut_at_word(char *buf, size_t size, int wanted) {
  if (wanted < 0 || (size_t)wanted < size || size < 16)
    return;
  size_t end = size - 5; /* room for " ..." and the NUL */
  while (end > size / 2 && buf[end] != ' ')
    end--;
  memcpy(buf + end, " ...", 5);
}

int dlock__fail(int err, const char *fmt, ...) {
  if (t_keep > 0)
    return err;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t_errbuf, sizeof t_errbuf, fmt, ap);
  va_end(ap);
  dlock__cut_at_word(t_errbuf, sizeof t_errbuf, n);
  return err;
}

void dlock__clear_error(void) {
  if (t_keep == 0)
    t_errbuf[0] = '\0';
  dlock__call_deadline_reset(); /* a new public call: no budget yet */
}

void dlock__err_keep_begin(void) { t_keep++; }

void dlock__err_keep_end(void) {
  if (t_keep > 0)
    t_keep--;
}

/* What a script's object is called in messages (from the script's name). */
static const char *object_noun(const dlock__script *s) {
  static const struct {
    const char *prefix, *noun;
  } t[] = {{"fair_", "fair lock"},     {"fenced_", "fenced lock"},
           {"rw_", "read-write lock"}, {"sem_", "semaphore"},
           {"latch_", "latch"},        {"redlock_", "Redlock lock"}};
  for (size_t i = 0; s && s->name && i < sizeof t / sizeof t[0]; i++)
    if (strncmp(s->name, t[i].prefix, strlen(t[i].prefix)) == 0)
      return t[i].noun;
  return "lock";
}

/* "a string value", "a hash", ... for a TYPE reply. */
static const char *type_phrase(const char *t) {
  static const char *const map[][2] = {
      {"string", "a string value"}, {"hash", "a hash"},
      {"list", "a list"},           {"set", "a set"},
      {"zset", "a sorted set"},     {"stream", "a stream"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(t, map[i][0]) == 0)
      return map[i][1];
  return t;
}

/* The TYPE of key k into buf ("" when unknown, e.g. not allowed). */
static void key_type(dlock_client *c, const char *k, size_t kl, char *buf,
                     size_t len) {
  const char *argv[2] = {"TYPE", k};
  size_t lens[2] = {4, kl};
  dlock__cmd cmd = {k, NULL, 2, argv, lens, 0};
  redisReply *r = NULL;
  buf[0] = '\0';
  if (dlock__exec(c, &cmd, &r) == 0 && r &&
      (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING))
    snprintf(buf, len, "%s", r->str);
  if (r)
    freeReplyObject(r);
}

void dlock__wrongtype_key(char *msg, size_t cap, size_t *n, const char *k,
                          size_t kl, const char *type) {
  if (!type[0] || strcmp(type, "none") == 0 || *n >= cap)
    return;
  int w = snprintf(msg + *n, cap - *n, "%s'%.*s' holds %s",
                   *n ? ", key " : "the key ", (int)kl, k, type_phrase(type));
  *n += w > 0 ? (size_t)w : 0;
  if (*n >= cap)
    *n = cap - 1;
}

int dlock__wrongtype_fail(const dlock__script *s, const char *k0, size_t k0l,
                          const char *held) {
  const char *noun = object_noun(s);
  return dlock__fail(DLOCK_EREDIS,
                     "%s, which %s '%.*s' cannot use: %s (Redis: WRONGTYPE); "
                     "dlock leaves it as it is: delete or rename it, or use "
                     "another name",
                     held && held[0] ? held : "a key", noun, (int)k0l, k0,
                     strstr(noun, "lock") ? "not a lock" : "the wrong type");
}

int dlock__explain_wrongtype(dlock_client *c, const dlock__script *s, int rc,
                             int nkeys, const char **keys,
                             const size_t *klens) {
  if (rc == DLOCK_EREDIS && t_keep == 0 && strstr(t_errbuf, "unknown command"))
    return dlock__explain_sentinel_port(c, rc); /* hints.c */
  if (rc != DLOCK_EREDIS || t_keep > 0 || nkeys < 1 ||
      strncmp(t_errbuf, "WRONGTYPE", 9) != 0)
    return rc;
  char msg[sizeof t_errbuf];
  size_t n = 0;
  msg[0] = '\0';
  for (int i = 0; i < nkeys; i++) {
    size_t kl = klens ? klens[i] : strlen(keys[i]);
    char t[32];
    key_type(c, keys[i], kl, t, sizeof t);
    dlock__wrongtype_key(msg, sizeof msg, &n, keys[i], kl, t);
  }
  return dlock__wrongtype_fail(s, keys[0], klens ? klens[0] : strlen(keys[0]),
                               msg);
}

int dlock_version(void) { return DLOCK_VERSION_NUMBER; }

#define DLOCK__STR2(x) #x
#define DLOCK__STR(x) DLOCK__STR2(x)
const char *dlock_version_string(void) {
  return DLOCK__STR(DLOCK_VERSION_MAJOR) "." DLOCK__STR(
      DLOCK_VERSION_MINOR) "." DLOCK__STR(DLOCK_VERSION_PATCH);
}
