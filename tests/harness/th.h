/*
 * th.h -- the test harness: a tiny runner (one ctest case per test, each in
 * its own process), assertions that print both sides and are never compiled
 * out, and real redis-server processes started in a private temp dir and
 * stopped however the test ends (atexit, the case's timeout, parent death).
 *
 * Test files:  TH_CASE(name) { ... }   and at the end  TH_MAIN()
 *   TH_CASE(name)                       default timeout, no extra tags
 *   TH_CASE_T(name, timeout_s, "tags")  its own timeout in seconds (an
 *                                       integer literal) and space-separated
 *                                       ctest labels ("" for none)
 * Start each TH_CASE / TH_CASE_T at column 0 with literal arguments:
 * tests/CMakeLists.txt reads them with a regex (a wrapped argument list is
 * fine) to register the ctest case "<file without test_>.<name>" with
 * LABELS "unit <tags>" and TIMEOUT = the harness's limit + a margin. A case
 * it cannot read stops the configure. Label "slow": the cases that wait out
 * leases and watchdog periods (ctest -LE slow for a quick run).
 *
 * One clock: the harness itself ends a case that runs past timeout_s x
 * DLOCK_TEST_TIMEOUT_MULT (default 1; CMake passes its configured value to
 * every case), printing the case, the elapsed time and the logs of the
 * redis-servers it started, which it kills. ctest's TIMEOUT is only the
 * backstop. When run by ctest, the case also checks that CMake read the
 * same timeout and tags as it declares (TH_CMAKE_META), so the two cannot
 * drift apart.
 *
 * Run:  ./test_x          every case, each in its own process, a line each
 *                         and a summary; exit 1 if any failed
 *       ./test_x NAME     one case in this process (what ctest runs)
 *       ./test_x --list   the case names, one a line
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
  int timeout_s;    /* before DLOCK_TEST_TIMEOUT_MULT */
  const char *tags; /* space-separated ctest labels, "" for none */
} th_case;

/* Cases one test binary can hold; registering more is reported at start. */
#define TH_MAX_CASES 256
/* A case's limit unless TH_CASE_T says otherwise. Default cases take up to
 * 3 s plain and in the ASan build, at most 7.5 s in the ASan build at load
 * 45 on 2 cores. Those that wait out leases and watchdog periods (3-8 s)
 * are TH_CASE_T(name, 120, "slow"), two CPU-bound ones TH_CASE_T(name,
 * 120, ""). */
#define TH_DEFAULT_TIMEOUT_S 60

/* Called by TH_CASE / TH_CASE_T before main; never fails (an error is kept
 * and reported by th_main). */
void th_register(const char *name, void (*fn)(void), int timeout_s,
                 const char *tags);

#define TH_CASE_T(nm, timeout_s, tags)                                         \
  static void th_case_##nm(void);                                              \
  __attribute__((constructor)) static void th_reg_##nm(void) {                 \
    th_register(#nm, th_case_##nm, timeout_s, tags);                           \
  }                                                                            \
  static void th_case_##nm(void)

#define TH_CASE(nm) TH_CASE_T(nm, TH_DEFAULT_TIMEOUT_S, "")

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
/* A replica of master (which must listen on TCP): replicaof master's port,
 * its own TCP port; waits (bounded) until its link to the master is up and
 * the master lists it online. */
th_redis *th_replica_new(th_redis *master);
/* A Sentinel (redis-server --sentinel, TCP) monitoring master as `name`
 * with the given quorum, down-after-milliseconds and failover-timeout. */
th_redis *th_sentinel_new(th_redis *master, const char *name, int quorum,
                          int down_ms, int failover_ms);
/* The down-after-milliseconds of the tests' Sentinel topologies: 2000, a
 * second above Sentinel's own PING period (1 s). At 1000 (the PING period
 * itself) a Sentinel whose first PING to the just-promoted master went
 * unanswered for 1 s (its link to it is new; a loaded box) declared the
 * new master down and failed over a second time: two masters for 11 s,
 * the first one's writes dropped by a full resync (make test-tsan:
 * async_topo.sentinel_hold_across_failover_libuv lost its hold; the reply
 * came 88 ms late). Not scaled by th_timeout_mult(): the failovers must
 * stay within the tests' retry policies and watchdog leases (2-5 s). */
int th_sentinel_down_ms(void);
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
/* The server's clock (TIME), in ms (fails the test on another reply). */
long long th_server_ms(th_redis *r);
/* 1 when the case runs under valgrind (its preload library is in
 * LD_PRELOAD: make test-valgrind), else 0. */
int th_under_valgrind(void);
/* A raw connection subscribed to `channel` (reads time out after 5 s). */
redisContext *th_subscriber(th_redis *r, const char *channel);
/* Reads the next pub/sub message of sub and fails the case unless it is
 * `payload` on `channel`. */
void th_expect_message(redisContext *sub, const char *channel,
                       const char *payload);
/* A raw connection in MONITOR mode (reads time out after 5 s): each
 * redisGetReply gives one status line per command the server runs, the
 * commands scripts call included ("[0 lua]"). */
redisContext *th_monitor_start(th_redis *r);
/* Splits a MONITOR line into its quoted arguments (escapes undone, each
 * malloc'd: the caller frees them); returns how many, at most max. */
int th_monitor_parse(const char *line, char **argv, size_t *lens, int max);
/* GET key as a number; -1 when the key does not exist. */
long long th_get_ll(th_redis *r, const char *key);
/* Polls (bounded) until `channel` has exactly n subscribers on the server /
 * until LLEN key is exactly n; fails the test when the time runs out. */
void th_wait_numsub(th_redis *r, const char *channel, long long n,
                    int64_t timeout_ms);
void th_wait_llen(th_redis *r, const char *key, long long n,
                  int64_t timeout_ms);
/* Polls (bounded) until key exists; fails the test when the time runs out.
 * Safe in a worker (th_fork). */
void th_wait_key(th_redis *r, const char *key, int64_t timeout_ms);

/* A client with test-friendly settings on r (short timeouts). */
dlock_client *th_client(th_redis *r);
dlock_client *th_client_cfg(th_redis *r, const dlock_config *cfg);

/* Runs the tool whose path env var `tool` holds (DLOCK_TEST_CLI,
 * DLOCK_TEST_SECKILL, DLOCK_TEST_BENCH: set by tests/CMakeLists.txt) with
 * argv (NULL-terminated), its output in the test's temp dir (printed when
 * it fails). Its exit status, or -1 when the variable is unset (the tool
 * is not built). */
int th_run_tool(const char *tool, const char *const *argv);

/* ---- processes and time ---------------------------------------------- */

int64_t th_now_ms(void);
/* DLOCK_TEST_TIMEOUT_MULT (1 to 100, default 1): the slack factor of slow
 * builds (TSan, valgrind). Scales every case's timeout; tests scale their
 * own time bounds with it too. */
int th_timeout_mult(void);
void th_sleep_ms(int64_t ms);
/* Forks a worker that runs fn(arg) and _exit()s with its return value;
 * workers never run the parent's atexit handlers.
 * Fork workers before the case makes a client or a thread. Under ASan
 * (GCC 12's libasan takes none of its allocator's locks around fork) a
 * child forked while another thread holds one of them hangs at its first
 * malloc that needs it: seen as a worker stuck in the allocator, 2 runs in
 * 40 of a sentinel case under stress-ng. A case whose subject is a fork of
 * a process with a client lets that client's threads go idle first. */
pid_t th_fork(int (*fn)(void *), void *arg);
/* Waits for pid with a bound; returns its exit status (or -signal). Kills
 * it and fails the test if it does not end within timeout_ms. */
int th_wait(pid_t pid, int64_t timeout_ms);
/* Path of a fresh file in the test's temp dir. */
const char *th_tmpfile(const char *name);

/* TLS test certificates in the test's temp dir, made by openssl(1) at
 * test time (nothing committed): a CA, a server certificate for
 * localhost / 127.0.0.1 and a client certificate signed by it, and a
 * second CA that signed nothing we use. */
typedef struct th_certs {
  char ca[512], srv_crt[512], srv_key[512], cli_crt[512], cli_key[512];
  char other_ca[512];
} th_certs;
void th_make_certs(th_certs *k);
/* A loopback TCP port free now (bound, read, closed). */
int th_free_port(void);

/* ---- other processes a case starts (etcd members: th_etcd.h) --------- */

/* Tracks process pid, whose log is the file log_path: it is killed
 * (SIGKILL) when the case ends however it ends, and its log is printed when
 * the case fails or times out. At most 16 at a time; the path is copied.
 * th_untrack forgets it (it was stopped by the caller). */
void th_track(pid_t pid, const char *log_path);
void th_untrack(pid_t pid);

#endif
