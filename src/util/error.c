/*
 * error.c -- error codes, their text, and the per-thread detail message.
 *
 * The code is the contract; the detail message (dlock_last_error) is for
 * people. Each thread has its own buffer so threads sharing a client never
 * see each other's messages. (What a WRONGTYPE refusal says is net/hints.c:
 * it asks the server.)
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

static _Thread_local char t_errbuf[DLOCK__ERRBUF_SIZE];
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

int dlock__err_kept(void) { return t_keep > 0; }

void dlock__err_keep_end(void) {
  if (t_keep > 0)
    t_keep--;
}

int dlock_version(void) { return DLOCK_VERSION_NUMBER; }

#define DLOCK__STR2(x) #x
#define DLOCK__STR(x) DLOCK__STR2(x)
const char *dlock_version_string(void) {
  return DLOCK__STR(DLOCK_VERSION_MAJOR) "." DLOCK__STR(
      DLOCK_VERSION_MINOR) "." DLOCK__STR(DLOCK_VERSION_PATCH);
}

int dlock__etcd_notsup(const char *what, const char *instead) {
  return dlock__fail(DLOCK_ENOTSUP, "%s: not offered on etcd; %s", what,
                     instead);
}
