/*
 * seckill.h -- dlock-seckill, the flash-sale strategy lab.
 *
 * One "run" = one strategy: the parent (main.c) prepares the keys, forks
 * the worker processes (worker.c), watches them (progress, stall/deadline,
 * --kill-holder) and then checks the result in Redis. Workers run the
 * strategies of engine.c (shared with dlock-stockd), which talk to Redis
 * directly with hiredis (the naive schemes) or through the public dlock
 * API (dlock, segmented, fair, redlock); each worker creates its own
 * connections and its own dlock client after fork. The outcome of every
 * request lands in a shared anonymous mapping (sk_shared) that survives a
 * worker killed with SIGKILL. report.c turns results into the table, JSON
 * and SVG.
 */
#ifndef DLOCK_SECKILL_H
#define DLOCK_SECKILL_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "clock.h"
#include "url.h"

#define SK_MAX_STRATEGIES 16
#define SK_MAX_SEGMENTS 64
#define SK_REDLOCK_SERVERS 3
/* A fair-lock waiter waits in slices this long: a waiter that dies with its
 * worker is skipped only after its deadline (its wait budget after the one
 * ahead), so a short budget keeps --kill-holder recovery short. */
#define SK_FAIR_SLICE_MS 250

/* ---- strategies (strategy.c) ------------------------------------------ */

enum sk_kind {
  SK_NONE,
  SK_LOCAL,
  SK_SETNX,
  SK_SETNX_EXPIRE,
  SK_GETSET,
  SK_SET_NX_PX,
  SK_OWNER_LUA,
  SK_DLOCK,
  SK_SEGMENTED,
  SK_ATOMIC,
  SK_FAIR,
  SK_REDLOCK,
  SK_SPIN,
  SK_PERMITS,
  SK_ETCD /* dlock_mutex on an etcd cluster (the CP store, docs/etcd.md) */
};

/* Where --kill-holder kills the victim: the worst moment for the scheme. */
enum sk_killpoint {
  SK_KP_LOCKED,  /* right after acquiring the lock (inside the section) */
  SK_KP_BETWEEN, /* setnx-expire: after SETNX, before EXPIRE */
  SK_KP_READ     /* lock-free schemes: after reading/reserving, mid-work */
};

typedef struct sk_strategy {
  const char *name;
  enum sk_kind kind;
  const char *summary;     /* one line for --help and the docs */
  const char *lesson_race; /* why it oversold / lost updates */
  const char *lesson_dead; /* why requests deadlocked */
  const char *lesson_dup;  /* why a user got two orders (--users) */
  const char *hint;        /* shown when it passed: how to make it fail */
  enum sk_killpoint killpoint;
  int uses_lease;   /* honours --lease-ms */
  int needs_family; /* 1 fair, 2 redlock: only when the library has it */
} sk_strategy;

extern const sk_strategy sk_strategies[];
extern const int sk_n_strategies;
const sk_strategy *sk_strategy_find(const char *name);

/* ---- options (args.c) --------------------------------------------------- */

/* Exit codes (sysexits.h values). */
#define SK_EX_USAGE 64
#define SK_EX_UNAVAILABLE 69
#define SK_EX_SOFTWARE 70

/* ---- scenarios (scenario.c) ------------------------------------------- */
/* --scenarios: normal (the options as given), kill-holder (plus
 * --kill-holder), short-lease (work 2-4 ms, lease 1 ms: every fixed lease
 * runs out inside the critical section), failover (the lock store fails
 * over while a buyer holds the last item's lock: dlock on Redis Sentinel
 * with a lagging replica, etcd on 3 members with the leader killed;
 * failover.c). */
#define SK_N_SCENARIOS 4
#define SK_SC_FAILOVER 3
extern const char *const sk_scenario_names[SK_N_SCENARIOS];

typedef struct sk_opts {
  const sk_strategy *list[SK_MAX_STRATEGIES];
  int n_list;
  long long stock, procs, threads, requests, users, segments;
  double work_min_ms, work_max_ms;
  long long lease_ms, watchdog_ms, stall_ms, deadline_ms;
  int stall_auto; /* stall_ms not given: derived per strategy */
  int kill_holder;
  unsigned scenarios; /* --scenarios: bit i = sk_scenario_names[i]; 0 off */
  int json;
  const char *chart;
  const char *url;     /* user's server, or the private one */
  char url_shown[160]; /* url with any password redacted */
  int private_server;  /* 1: started by the tool */
  /* redlock: three more independent servers (always private ones) */
  const char *redlock_urls[SK_REDLOCK_SERVERS];
  /* etcd: the lock store (--etcd-url, else a private member; NULL when
   * etcd is not installed: the strategy is skipped) */
  const char *etcd_url;
  int tty; /* stderr is a terminal: live progress line */
} sk_opts;

/* Parses the command line into o (which holds the defaults). Returns 0, or
 * the exit status after printing why (one line on stderr). --help and
 * --version print and set *exit_now (the return value is the status). */
int sk_parse_args(int argc, char **argv, sk_opts *o, int *exit_now);
void sk_usage(FILE *f);

/* ---- shared state of one run ------------------------------------------- */

enum sk_outcome {
  SK_O_PENDING = 0, /* never finished: deadlocked, or lost with the victim */
  SK_O_ORDER,       /* bought */
  SK_O_SOLDOUT,     /* rejected: no stock */
  SK_O_DUPLICATE,   /* rejected: this user already has an order (--users) */
  SK_O_ERROR,       /* a Redis or lock call failed */
  SK_O_DEADLOCK     /* gave up waiting for the lock when the run was stopped */
};

typedef struct sk_shared {
  atomic_int ready;               /* workers connected and waiting for go */
  atomic_int go;                  /* parent: start */
  atomic_int abort;               /* parent: stop waiting, the run is over */
  atomic_long done;               /* finished requests (any outcome) */
  atomic_int victim_at_killpoint; /* the victim thread waits to be killed */
  atomic_int victim_killed;
  atomic_llong last_end_us;   /* monotonic time of the last finished request */
  atomic_llong unlock_errors; /* releases that failed */
  atomic_int errmsg_claimed;  /* first error message, written once */
  char errmsg[256];
  long long go_us;
  /* per request, indexed by request number; sized at mmap time */
  uint8_t *outcome;
  uint32_t *lat_us;
} sk_shared;

/* Keys of one run (all start with the run prefix). */
typedef struct sk_keys {
  char prefix[96];
  char stock[128];  /* stock, or stock:<i> base for segmented */
  char orders[128]; /* counter of orders placed */
  char users[128];  /* hash user -> orders (--users) */
  char lock[128];   /* lock name (or lock:<i> base for segmented) */
} sk_keys;

typedef struct sk_run {
  const sk_opts *o;
  const sk_strategy *s;
  sk_keys k;
  sk_shared *sh;
  long long segments; /* 1, or the segment count for segmented */
} sk_run;

/* Result of one run, as reported. */
typedef struct sk_result {
  const sk_strategy *s;
  int ran; /* 0: skipped (not available) */
  char skipped[160];
  long long orders, final_stock, oversold, lost_updates;
  long long soldout, duplicates_rejected, errors, deadlocked, killed;
  long long dup_users, dup_orders;
  double throughput, p50_ms, p99_ms, wall_ms;
  int stuck_lock; /* the lock key outlived the run with no expiry */
  long long stuck_ttl_ms;
  long long unfinished; /* still queued when the deadline hit while the
                           run was making progress (too slow, not stuck) */
  int stopped;          /* 0 finished, 1 stall, 2 deadline */
  int victim_killed;
  int correct;
  char first_error[256];
  /* a scenario's own words (failover.c): the cell's label and its one-line
   * lesson, instead of the strategy's generic ones ("" none) */
  char cell[48];
  char lesson[256];
} sk_result;

/* ---- redis helpers (tools/common) --------------------------------------- */

/* Plain hiredis connections (the naive strategies, the checks) come from
 * dlc_redis_connect: the URL forms dlock accepts, AUTH and SELECT as the
 * URL says, these timeouts. */
#define SK_CONNECT_S 5
#define SK_COMMAND_S 10

/* ---- worker (worker.c) -------------------------------------------------- */

/* How long a run may go without any request finishing before it counts as
 * deadlocked: --stall-ms, or longer than the strategy's own recovery from
 * a dead holder (main.c). */
long long sk_stall_ms(const sk_opts *o, const sk_strategy *s);

/* Runs one strategy: keys, workers, watching, checking (run.c). */
void sk_run_strategy(const sk_opts *o, const sk_strategy *s, int index,
                     sk_result *res);

/* ---- the parent's side of one run (watch.c, outcome.c) ------------------ */

#define SK_MAX_PROCS 64

typedef struct sk_procs {
  pid_t pid[SK_MAX_PROCS]; /* > 0 running; reaped: its negation */
  int status[SK_MAX_PROCS];
  int n; /* forked */
} sk_procs;

/* Forks the workers (each drops the parent's connection pc). On a fork
 * failure the ones forked so far run and res->first_error says why. */
void sk_fork_workers(const sk_run *r, redisContext *pc, sk_procs *ps,
                     sk_result *res);
/* Waits (bounded) until every worker thread is connected, then starts
 * them together; then watches them until they are done, stuck or past
 * the deadline (--kill-holder: kills worker 0 at its kill point), and
 * stops what is left in bounded time. Returns when the run stopped
 * (monotonic us). */
long long sk_watch_workers(const sk_run *r, sk_procs *ps, sk_result *res);
/* Counts the outcome of every request, the throughput and latencies, and
 * why workers failed, into res. */
void sk_tally(const sk_run *r, const sk_procs *ps, long long t_start,
              long long t_stop, sk_result *res);

/* Runs worker number `w` in a freshly forked child; never returns. */
void sk_worker_main(const sk_run *r, int w) __attribute__((noreturn));
void sk_request_range(const sk_opts *o, int w, long long *first,
                      long long *count);

/* ---- report (report.c) -------------------------------------------------- */

void sk_report_table(const sk_opts *o, const sk_result *res, int n,
                     double total_s);
void sk_report_json(const sk_opts *o, const sk_result *res, int n,
                    double total_s);
int sk_report_svg(const sk_opts *o, const sk_result *res, int n,
                  const char *path);
/* The settings of a run in one line ("stock 100, 4 processes x 16 threads,
 * ..."), for the header and the chart's title. */
void sk_settings_line(const sk_opts *o, char *buf, size_t len);
/* The body of the JSON object of one run (from "params" to "skipped",
 * without the braces around it). */
void sk_report_json_body(const sk_opts *o, const sk_result *res, int n,
                         double total_s);
/* The chart (chart.c): a matrix strategy x column (scenario), each cell
 * coloured and labelled with what happened and its throughput, the first
 * column's throughput as log bars, each column's settings, each distinct
 * lesson once. cols[s].res holds n results (the same strategies in the same
 * order in every column). 0, or -1 (errno) when the file cannot be
 * written. */
typedef struct sk_chart_col {
  const char *name;     /* "normal", "kill-holder", ... or "this run" */
  const sk_opts *o;     /* the column's options */
  const sk_result *res; /* n results */
} sk_chart_col;
int sk_chart_svg(const char *path, const char *title, const sk_chart_col *cols,
                 int ncols, int n);
/* --scenarios: runs every strategy in each chosen scenario, prints one
 * table (or JSON), writes the chart. Returns the exit status. */
int sk_run_scenarios(const sk_opts *o, void (*stop_servers)(void));

/* The failover scenario (failover.c) for strategy s: dlock on a Redis
 * master + lagging replica + 3 sentinels, etcd on a 3-member cluster, the
 * others not run. Starts and stops its own servers. */
void sk_failover_run(const sk_opts *o, const sk_strategy *s, sk_result *res);

/* The one-line lesson for a failed result, or the hint for a passed one. */
const char *sk_lesson(const sk_result *r, char *buf, size_t len,
                      const sk_opts *o);

#endif
