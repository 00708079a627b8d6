/*
 * stockd.h -- dlock-stockd, the articles' stock service over HTTP (issue
 * 16): POST /deduct_stock runs one purchase under the instance's strategy
 * (the lab's code, tools/seckill/engine.c), GET /stock, POST /reset,
 * GET /metrics, GET /healthz and GET / (a page that refreshes itself).
 *
 * HTTP is libevent's evhttp. --threads threads each run their own event
 * loop and evhttp on one shared listening socket, and each handles its
 * requests to the end (a purchase blocks its thread while it waits for
 * the lock, like one servlet thread of the articles' service). Each
 * product has one sk_engine (its keys and lock objects); each thread has
 * one sk_eth per product (its own Redis connection).
 */
#ifndef DLOCK_STOCKD_H
#define DLOCK_STOCKD_H

#include <stdatomic.h>
#include <stdint.h>

#include "engine.h"

#define SD_MAX_PRODUCTS 8
#define SD_MAX_THREADS 128
#define SD_NAME_MAX 64 /* product, user and instance names */

/* Exit codes (sysexits.h values). */
#define SD_EX_USAGE 64
#define SD_EX_UNAVAILABLE 69
#define SD_EX_SOFTWARE 70

typedef struct sd_opts {
  char host[64];
  long long port; /* 0: any free port (printed on stdout) */
  const char *url;
  const char *redlock_urls[SK_REDLOCK_SERVERS];
  int n_redlock;
  const sk_strategy *strategy;
  const char *products[SD_MAX_PRODUCTS];
  int n_products;
  char products_buf[512];
  long long threads, segments, lease_ms, watchdog_ms, wait_ms;
  long long client_timeout_s, max_body;
  double work_min_ms, work_max_ms;
  char name[SD_NAME_MAX + 1]; /* instance name: default host:port */
} sd_opts;

/* Parses argv into o (defaults first). 0, or the exit status after
 * printing why (or --help / --version: *exit_now set). args.c */
int sd_parse_args(int argc, char **argv, sd_opts *o, int *exit_now);
/* A name we put in keys and pages: 1..SD_NAME_MAX of [A-Za-z0-9_.:-]. */
int sd_name_ok(const char *s);

/* ---- metrics (metrics.c): process-wide counters, any thread ------------ */

enum sd_endpoint {
  SD_EP_DEDUCT,
  SD_EP_STOCK,
  SD_EP_RESET,
  SD_EP_METRICS,
  SD_EP_HEALTHZ,
  SD_EP_PAGE,
  SD_EP_OTHER,
  SD_EP_N
};

void sd_metrics_request(enum sd_endpoint ep, int status);
/* One purchase's outcome (sk_outcome) and its lock wait. */
void sd_metrics_purchase(int outcome, long long wait_us);
/* The Prometheus text exposition, appended to out. */
struct evbuffer;
void sd_metrics_write(struct evbuffer *out, const sd_opts *o);

/* ---- the service (http.c) ------------------------------------------------ */

typedef struct sd_product {
  const char *name;
  sk_engine e;        /* its keys and lock objects */
  char initial[128];  /* key: the stock of the last reset */
  char served[128];   /* key: hash instance -> purchases (orders) it made */
  char requests[128]; /* key: hash instance -> requests it handled */
} sd_product;

typedef struct sd_service {
  const sd_opts *o;
  sd_product p[SD_MAX_PRODUCTS];
  int n;
  atomic_int stopping; /* shutting down: lock waits end */
} sd_service;

typedef struct sd_conn sd_conn;

/* One HTTP thread's state. */
typedef struct sd_thread {
  sd_service *svc;
  int t;
  sk_eth eth[SD_MAX_PRODUCTS];
  long long deadline_us; /* the current purchase gives up waiting then */
  struct event_base *base;
  struct evhttp *http;
  sd_conn *conns;      /* conn.c: this loop's connections */
  struct event *sweep; /* conn.c: their deadlines */
} sd_thread;

/* Creates the engines (0, or -1 after printing why) / frees them. */
int sd_service_init(sd_service *svc, const sd_opts *o);
void sd_service_free(sd_service *svc);
/* Sets up t's event loop on the listening socket fd. 0 or -1. */
int sd_thread_init(sd_thread *t, sd_service *svc, int index, int fd);
void sd_thread_free(sd_thread *t);

/* ---- lock-service health (health.c) ------------------------------------ */

/* A log line on stderr: ISO 8601 UTC time (ms), the instance, the lock
 * (NULL: "-") and the message. Any thread. */
void sd_log(const char *instance, const char *lock, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* cfg.on_lock_lost of the service's dlock clients (arg: the sd_opts):
 * counts and logs the loss. */
void sd_on_lock_lost(const char *name, void *arg);
/* 1 if Redis answered a PING in the last 0.5 s (probing again when the
 * last probe is older), else 0 with why. Any thread. */
int sd_health(const sd_opts *o, char *why, size_t len);
void sd_health_free(void);
/* The library's counters of the service's dlock clients (/metrics). */
void sd_metrics_dlock(struct evbuffer *out, const sd_service *svc);

/* ---- slow clients (conn.c) ----------------------------------------------- */

/* evhttp's bufferevent factory (arg: the sd_thread): a socket
 * bufferevent on the thread's list, so that a request that comes too
 * slowly is answered 408. */
struct bufferevent *sd_conn_bev(struct event_base *base, void *arg);
/* Starts the thread's deadline sweep (0 or -1) / stops it and drops the
 * list (after evhttp_free). */
int sd_conn_start(sd_thread *t);
void sd_conn_stop(sd_thread *t);

/* ---- the page (page.c) --------------------------------------------------- */

/* One file of the page, compiled in: GET path answers it. */
typedef struct sd_asset {
  const char *path; /* "/", "/page.css", "/page.js" */
  const char *ctype;
  const unsigned char *data; /* NUL-terminated */
  const size_t *len;
} sd_asset;

/* The file served at path, or NULL. */
const sd_asset *sd_asset_find(const char *path);

#endif
