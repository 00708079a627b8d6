/*
 * th.h -- the test harness: a tiny runner (one ctest case per test, each in
 * its own process), assertions that print both sides and are never compiled
 * out, and real redis-server processes started in a private temp dir and
 * stopped however the test ends (atexit, SIGALRM timeout, parent death).
 *
 * Test files:  TH_CASE(name) { ... }   and at the end  TH_MAIN()
 * Run:         ./test_x NAME | ./test_x --list
 */
#ifndef DLOCK_TH_H
#define DLOCK_TH_H

#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "dlock.h"
#include "redis_spawn.h"

typedef struct th_case {
  const char *name;
  void (*fn)(void);
} th_case;

#define TH_MAX_CASES 256
extern th_case th_cases[TH_MAX_CASES];
extern int th_ncases;

#define TH_CASE(nm)                                                            \
  static void th_case_##nm(void);                                              \
  __attribute__((constructor)) static void th_reg_##nm(void) {                 \
    th_cases[th_ncases].name = #nm;                                            \
    th_cases[th_ncases++].fn = th_case_##nm;                                   \
  }                                                                            \
  static void th_case_##nm(void)

#define TH_MAIN()                                                              \
  int main(int argc, char **argv) { return th_main(argc, argv); }

int th_main(int argc, char **argv);

/* Prints a failure (file:line, message), the logs of every server this
 * process started, stops them, and exits 1. */
void th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Skips the test (exit 77, which ctest reports as skipped). */
void th_skip(const char *why) __attribute__((noreturn));

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond))                                                               \
      th_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                  \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond))                                                               \
      th_fail(__FILE__, __LINE__, __VA_ARGS__);                                \
  } while (0)

#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                  \
    if (th_a_ != th_b_)                                                        \
      th_fail(__FILE__, __LINE__, "CHECK_EQ(%s, %s): %lld != %lld", #a, #b,    \
              th_a_, th_b_);                                                   \
  } while (0)

/* A dlock call that must return rc; prints the error name and detail. */
#define CHECK_RC(call, rc)                                                     \
  do {                                                                         \
    int th_r_ = (call);                                                        \
    if (th_r_ != (rc))                                                         \
      th_fail(__FILE__, __LINE__, "%s returned %s (%d), expected %s: %s",      \
              #call, dlock_err_name(th_r_), th_r_, dlock_err_name(rc),         \
              dlock_last_error());                                             \
  } while (0)
#define CHECK_OK(call) CHECK_RC(call, DLOCK_OK)

#define CHECK_STR(a, b)                                                        \
  do {                                                                         \
    const char *th_sa_ = (a), *th_sb_ = (b);                                   \
    if (!th_sa_ || !th_sb_ || strcmp(th_sa_, th_sb_) != 0)                     \
      th_fail(__FILE__, __LINE__, "CHECK_STR(%s, %s): '%s' != '%s'", #a, #b,   \
              th_sa_ ? th_sa_ : "(null)", th_sb_ ? th_sb_ : "(null)");         \
  } while (0)

/* ---- redis-server processes --------------------------------------------- */

/* The shared spawner's server (tools/common/redis_spawn.h): pid, port (0:
 * unix socket only), dir (private, under the test's temp dir), sock, url
 * (unix:///...), tcp_url (redis://127.0.0.1:port when port > 0), extra
 * (the extra config lines). */
typedef dlc_redis th_redis;

/* Starts a redis-server: unix socket always, TCP on a free port if tcp.
 * extra_conf: more redis.conf lines ("requirepass x\n"), or NULL. Waits
 * until it answers PING (bounded); fails the test otherwise. The harness
 * owns the returned object (valid until the process ends) and stops the
 * server however the test ends. */
th_redis *th_redis_new(int tcp, const char *extra_conf);
/* SIGTERM, bounded wait, SIGKILL. Keeps the directory (for the log). */
void th_redis_stop(th_redis *r);
/* kill -9 now. */
void th_redis_kill(th_redis *r);
/* Starts again on the same socket/port, empty (no persistence). */
void th_redis_restart(th_redis *r);
void th_redis_pause(th_redis *r);  /* SIGSTOP and wait for state T */
void th_redis_resume(th_redis *r); /* SIGCONT */
/* A raw hiredis connection to the server (for checks from "outside"). */
redisContext *th_redis_raw(th_redis *r);
/* Runs one command on a fresh raw connection; caller frees the reply. */
redisReply *th_cmd(th_redis *r, const char *fmt, ...);
/* Convenience: integer reply of a command (fails the test otherwise). */
long long th_cmd_int(th_redis *r, const char *fmt, ...);
/* GET key as a number; -1 when the key does not exist. */
long long th_get_ll(th_redis *r, const char *key);
/* Polls (bounded) until `channel` has exactly n subscribers on the server /
 * until LLEN key is exactly n; fails the test when the time runs out. */
void th_wait_numsub(th_redis *r, const char *channel, long long n,
                    int64_t timeout_ms);
void th_wait_llen(th_redis *r, const char *key, long long n,
                  int64_t timeout_ms);

/* A client with test-friendly settings on r (short timeouts). */
dlock_client *th_client(th_redis *r);
dlock_client *th_client_cfg(th_redis *r, const dlock_config *cfg);

/* ---- processes and time ---------------------------------------------- */

int64_t th_now_ms(void);
void th_sleep_ms(int64_t ms);
/* Forks a worker that runs fn(arg) and _exit()s with its return value;
 * workers never run the parent's atexit handlers. */
pid_t th_fork(int (*fn)(void *), void *arg);
/* Waits for pid with a bound; returns its exit status (or -signal). Kills
 * it and fails the test if it does not end within timeout_ms. */
int th_wait(pid_t pid, int64_t timeout_ms);
/* Path of a fresh file in the test's temp dir. */
const char *th_tmpfile(const char *name);

#endif
