/*
 * log.c -- the log hook: where the library's events go. The library never
 * prints on its own: an event goes to the config's log_fn (at its
 * log_level or more severe), or, for a program that set no hook, to stderr
 * when the environment's DLOCK_LOG names a level (error, warn, info,
 * debug). The stderr line: "2026-11-27T10:40:00.123Z dlock[pid] WARN
 * renew_failed 'name': message".
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static int g_env_level; /* 0: DLOCK_LOG unset or unknown */

static void read_env(void) {
  const char *v = getenv("DLOCK_LOG");
  if (!v || !*v)
    return;
  static const char *const names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (!strcasecmp(v, names[i]))
      g_env_level = i + 1;
  if (!strcasecmp(v, "warning"))
    g_env_level = DLOCK_LOG_WARN;
  if (!strcasecmp(v, "1") || !strcasecmp(v, "yes"))
    g_env_level = DLOCK_LOG_INFO;
}

static int env_level(void) {
  pthread_once(&g_env_once, read_env);
  return g_env_level;
}

/* The configured level of a hook; 0 (a caller's struct older than the
 * field, or left unset) means the default, INFO. */
static int hook_level(const dlock_config *cfg) {
  return cfg->log_level > 0 ? cfg->log_level : DLOCK_LOG_INFO;
}

int dlock__log_on(const dlock_config *cfg, int level) {
  if (cfg && cfg->log_fn)
    return level <= hook_level(cfg);
  return level <= env_level();
}

static const char *level_name(int level) {
  switch (level) {
  case DLOCK_LOG_ERROR:
    return "ERROR";
  case DLOCK_LOG_WARN:
    return "WARN";
  case DLOCK_LOG_INFO:
    return "INFO";
  default:
    return "DEBUG";
  }
}

void dlock__log(const dlock_config *cfg, int level, const char *name,
                const char *event, const char *fmt, ...) {
  if (!dlock__log_on(cfg, level))
    return;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dlock__cut_at_word(msg, sizeof msg, n); /* whole words (error.c) */
  /* Raised under an internal lock: kept until the thread's last lock is
   * released (callout.c), so a hook may call back into the library. */
  if (!dlock__log_keep(cfg, level, name, event, msg))
    dlock__log_emit(cfg, level, name, event, msg);
}

void dlock__log_emit(const dlock_config *cfg, int level, const char *name,
                     const char *event, const char *msg) {
  if (cfg && cfg->log_fn) {
    cfg->log_fn(cfg->log_arg, level, name, event, msg);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  /* One fprintf: stderr is unbuffered, a single call keeps a line whole
   * among threads. */
  if (name)
    fprintf(stderr, "%s.%03ldZ dlock[%ld] %s %s '%s': %s\n", when,
            ts.tv_nsec / 1000000L, (long)getpid(), level_name(level), event,
            name, msg);
  else
    fprintf(stderr, "%s.%03ldZ dlock[%ld] %s %s: %s\n", when,
            ts.tv_nsec / 1000000L, (long)getpid(), level_name(level), event,
            msg);
}
