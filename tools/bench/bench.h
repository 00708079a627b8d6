/*
 * bench.h -- what the files of dlock-bench share.
 *
 * dlock-bench measures the library against the floor a Redis lock cannot
 * beat: round trips to one Redis server, measured with plain hiredis on the
 * same connection type in the same run. Every scenario is bounded in time
 * and in count. Results go into a flat list of metrics (scenario, key,
 * value, unit); the target rows of issue 4 are computed from those metrics
 * at the end, so a skipped scenario shows up as a row marked SKIP instead of
 * disappearing.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"

/* ---- options ------------------------------------------------------------ */

typedef struct bench_opts {
  char url[512];         /* what the library and hiredis connect to */
  char etcd_url[256];    /* --etcd-url ("" : a private member) */
  int private_server;    /* 1: we started it (and may FLUSHALL it) */
  int quick;             /* CI smoke sizes */
  int json;              /* print one JSON object after the tables */
  int threads;           /* "many" threads / baseline concurrency */
  int procs;             /* "many" processes */
  int workers;           /* "contended" processes */
  long pairs;            /* uncontended pairs per phase */
  double many_secs;      /* duration of each throughput phase */
  double contended_secs; /* contended phase */
  double serial_secs;    /* serial reference phase */
  long wd_locks;         /* locks held in the watchdog scenario */
  int wd_timeout_ms;     /* watchdog_timeout_ms in that scenario */
  long handoff_rounds;   /* hand-overs measured */
  int pipeline_depth;    /* pipelined baseline */
  int reps;              /* repetitions of cheap phases (medians) */
  int multiplex;         /* dlock_config.multiplex, -1: library default */
  char only[256];        /* comma list of scenarios, "" = all */
  char run_id[32];       /* prefix of every key this run writes */
} bench_opts;

/* Parses the command line (args.c) into *o, with the defaults (--quick:
 * the smaller ones) for what it does not give; *tcp: --tcp. --help prints
 * and exits 0; a mistake prints the usage and exits 2. */
void bench_parse_args(int argc, char **argv, bench_opts *o, int *tcp);

/* 1 if scenario `name` is selected by --only. */
int bench_selected(const bench_opts *o, const char *name);

/* ---- time, CPU, memory -------------------------------------------------- */

/* Clocks: dlc_now_ns, dlc_sleep_ns (tools/common/clock.h). */
/* user+system CPU of the whole process / of the calling thread, in µs. */
double bench_cpu_us(void);
double bench_thread_cpu_us(void);
/* Context switches (voluntary + involuntary) of every thread of the
 * process so far: a blocking read is one, each wake-up of another thread
 * of ours is one more. */
double bench_ctxsw(void);
/* Resident set size of this process in bytes (from /proc/self/statm). */
long long bench_rss_bytes(void);
/* Bytes of heap in use (mallinfo2), -1 if unknown. */
long long bench_heap_bytes(void);

/* Median of n values (sorts v in place); NAN when n == 0. */
double bench_median(double *v, int n);

/* ---- samples ------------------------------------------------------------ */

typedef struct bench_samples {
  double *v; /* µs */
  size_t n, cap;
  int sorted;
} bench_samples;

void bs_init(bench_samples *s);
void bs_free(bench_samples *s);
void bs_add(bench_samples *s, double us);
void bs_add_many(bench_samples *s, const float *v, size_t n);
/* Percentile p in [0, 100] (nearest rank); NAN when empty. */
double bs_pct(bench_samples *s, double p);
double bs_max(bench_samples *s);
double bs_min(bench_samples *s);

/* ---- Redis -------------------------------------------------------------- */

/* A blocking hiredis connection to o->url (unix:// or redis://), with AUTH
 * and SELECT when the URL carries them. Exits the tool on failure: nothing
 * can be measured without the server. */
redisContext *bench_connect(const bench_opts *o);
/* Runs a command given as argv strings; exits on a transport error, returns
 * the reply (freeReplyObject) which may be an error reply. */
redisReply *bench_cmd(redisContext *c, int argc, const char **argv);
/* Simple formatted command (hiredis printf-style), exits on transport
 * error. */
redisReply *bench_cmdf(redisContext *c, const char *fmt, ...);

/* INFO commandstats, summed the way the tables report it. Commands run
 * inside scripts are counted by Redis as well, under their own names:
 * `other` includes them (see bench_monitor for top-level only). */
typedef struct bench_cmdstats {
  long long evalsha, eval, other; /* calls, excluding INFO */
  long long script_usec;          /* usec spent in EVALSHA + EVAL */
  long long all_usec;             /* usec of every command but INFO */
} bench_cmdstats;
void bench_cmdstats_read(redisContext *c, bench_cmdstats *out);
void bench_cmdstats_delta(const bench_cmdstats *a, const bench_cmdstats *b,
                          bench_cmdstats *d);
/* The server's CPU so far (INFO cpu: used_cpu_user + used_cpu_sys), s. */
double bench_redis_cpu_s(redisContext *c);

/* MONITOR-based classification: what a short phase sent at top level
 * (EVALSHA, EVAL, other) versus what scripts called inside (redis.call).
 * bench_monitor_start opens a connection in MONITOR mode; _stop sends an
 * end marker through `ctl` and reads the log up to it. */
typedef struct bench_monitor {
  redisContext *mon;
  long long evalsha, eval, other, in_script;
} bench_monitor;
void bench_monitor_start(const bench_opts *o, bench_monitor *m);
void bench_monitor_stop(bench_monitor *m, redisContext *ctl);

/* ---- shared memory between processes ------------------------------------ */

/* Anonymous MAP_SHARED memory, zeroed; exits on failure. */
void *bench_shm(size_t bytes);
void bench_shm_free(void *p, size_t bytes);

/* Forks n worker processes running fn(i, arg) then _exit(0) (a worker that
 * fails calls _exit(1)); stdout is flushed first. Returns the pids
 * (malloc'ed). */
typedef void (*bench_worker_fn)(int i, void *arg);
int *bench_fork(int n, bench_worker_fn fn, void *arg);
/* In a worker: counts itself in `ready`, then waits for `go` (set by the
 * parent once all are ready); _exit(1) when no go comes within 60 s. */
void bench_worker_ready(atomic_int *ready, atomic_int *go);
/* Waits for the workers until deadline_ns (monotonic), then SIGKILLs the
 * ones left. Returns how many did not exit with status 0; frees pids. */
int bench_reap(int *pids, int n, int64_t deadline_ns);

/* ---- results ------------------------------------------------------------ */

/* Records a measurement. label is what the table prints. */
void bm_put(const char *scen, const char *key, const char *label, double v,
            const char *unit);
/* The value of a measurement, NAN if it was not taken. */
double bm_get(const char *scen, const char *key);
/* Free-form note printed under the tables (e.g. why a phase was cut). */
void bm_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the scenario table, the target table, the notes and (json) the
 * JSON object. Returns the number of targets missed. */
int bench_report(const bench_opts *o, double wall_s);

/* ---- scenarios ---------------------------------------------------------- */

void scen_baseline(const bench_opts *o);
/* Plain hiredis EVALSHA (the baseline script) from `conns` connections, one
 * thread each, for secs: total requests/s. The floor of "many", measured
 * next to it. */
double bench_evalsha_conc_rps(const bench_opts *o, int conns, double secs);
/* The floor's own request on a connection of its own, for the same
 * requests from processes (many's reference row): open (connects, loads
 * the script; dies on error), one blocking EVALSHA per call, close. One
 * per process; not thread-safe. */
typedef struct bench_floor bench_floor;
bench_floor *bench_floor_open(const bench_opts *o);
void bench_floor_one(bench_floor *b);
void bench_floor_close(bench_floor *b);
void scen_uncontended(const bench_opts *o);
void scen_many(const bench_opts *o);
/* "many" on a redis-cluster:// URL: one-master reference, then spread. */
void scen_cluster_many(const bench_opts *o);
void scen_contended(const bench_opts *o);
void scen_contended_spin(const bench_opts *o);
void scen_watchdog(const bench_opts *o);
void scen_handoff(const bench_opts *o);
/* The event-loop client: 1,000 pairs in flight from one thread. */
void scen_async(const bench_opts *o);
/* The etcd store (scen_etcd.c): uncontended pairs against a libcurl floor,
 * contended workers; bench_etcd_stop stops its private member. */
void scen_etcd(const bench_opts *o);
void bench_etcd_stop(void);

/* A dlock client for o->url with defaults (pool grown to `threads`);
 * exits on failure. watchdog_ms <= 0: the library default. */
struct dlock_client;
struct dlock_client *bench_client(const bench_opts *o, int threads,
                                  int watchdog_ms);

/* Progress line on stderr. */
void bench_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fatal error: message on stderr, exit 2. */
void bench_die(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#endif
