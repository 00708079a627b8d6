/*
 * args.c -- dlock-stockd's command line: the option table (which also
 * gives --help), applying each option to sd_opts, and the checks after.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "stockd.h"

enum {
  OPT_LISTEN,
  OPT_REDIS,
  OPT_REDLOCK,
  OPT_STRATEGY,
  OPT_PRODUCTS,
  OPT_THREADS,
  OPT_SEGMENTS,
  OPT_WORK,
  OPT_LEASE,
  OPT_WATCHDOG,
  OPT_WAIT,
  OPT_CLIENT_TIMEOUT,
  OPT_MAX_BODY,
  OPT_NAME,
  OPT_HELP,
  OPT_VERSION
};

static const dlc_opt g_opts[] = {
    {"listen", 'l', "HOST:PORT", OPT_LISTEN, 0,
     "where to listen (127.0.0.1:8080); port 0: a\n"
     "free one, printed on stdout"},
    {"redis", 'r', "URL", OPT_REDIS, 0,
     "the stock's server (redis://127.0.0.1:6379)"},
    {"redlock", 0, "URL", OPT_REDLOCK, 0,
     "strategy redlock: one of its 3 servers\n(give it 3 times)"},
    {"strategy", 's', "NAME", OPT_STRATEGY, 0,
     "what protects a purchase (dlock): the\n"
     "strategies of dlock-seckill"},
    {"products", 'p', "LIST", OPT_PRODUCTS, 0,
     "products sold, comma-separated (sku1)"},
    {"threads", 't', "N", OPT_THREADS, 0,
     "request threads (16): purchases at once"},
    {"segments", 0, "N", OPT_SEGMENTS, 0, "segmented: stock segments (4)"},
    {"work-ms", 0, "MIN-MAX", OPT_WORK, 0,
     "business work inside a purchase (0-2)"},
    {"lease-ms", 0, "N", OPT_LEASE, 0, "naive locks' lease (2000)"},
    {"watchdog-ms", 0, "N", OPT_WATCHDOG, 0, "dlock's lease (30000)"},
    {"wait-ms", 0, "N", OPT_WAIT, 0,
     "a purchase gives up waiting for its lock\n"
     "after this long: 503 (10000)"},
    {"client-timeout", 0, "SECS", OPT_CLIENT_TIMEOUT, 0,
     "a client that sends a request this slowly\n"
     "gets 408 (10)"},
    {"max-body", 0, "BYTES", OPT_MAX_BODY, 0,
     "larger request bodies get 413 (4096)"},
    {"name", 'n', "NAME", OPT_NAME, 0,
     "this instance's name (default HOST:PORT)"},
    {"help", 'h', NULL, OPT_HELP, 0, "this text"},
    {"version", 'V', NULL, OPT_VERSION, 0, "print the version"},
};

static const dlc_optset g_optset = {g_opts, sizeof g_opts / sizeof g_opts[0],
                                    24, 0, 0};

static void usage(FILE *f) {
  fputs("usage: dlock-stockd [options]\n"
        "An HTTP stock service: POST /deduct_stock?product=P[&user=U],\n"
        "GET /stock?product=P, POST /reset?product=P&stock=N, GET /metrics,\n"
        "GET /healthz, GET / (a page).\n",
        f);
  dlc_opt_help(f, &g_optset);
}

/* A name we put in keys and pages: 1..SD_NAME_MAX of [A-Za-z0-9_.:-]. */
int sd_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SD_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
          c == '-'))
      return 0;
  }
  return 1;
}

static int parse_listen(sd_opts *o, const char *v, char *err, size_t el) {
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || (size_t)(colon - v) >= sizeof o->host)
    return dlc_opt_fail(err, el, "--listen: expected HOST:PORT, not '%s'", v);
  memcpy(o->host, v, (size_t)(colon - v));
  o->host[colon - v] = '\0';
  return dlc_opt_ll("--listen port", colon + 1, 0, 65535, &o->port, err, el);
}

static int parse_products(sd_opts *o, const char *v, char *err, size_t el) {
  if (strlen(v) >= sizeof o->products_buf)
    return dlc_opt_fail(err, el, "--products: too long");
  snprintf(o->products_buf, sizeof o->products_buf, "%s", v);
  o->n_products = 0;
  for (char *save = NULL, *t = strtok_r(o->products_buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    if (!sd_name_ok(t))
      return dlc_opt_fail(err, el,
                          "--products: '%s' is not a name ([A-Za-z0-9_.:-], "
                          "at most %d)",
                          t, SD_NAME_MAX);
    if (o->n_products == SD_MAX_PRODUCTS)
      return dlc_opt_fail(err, el, "--products: at most %d", SD_MAX_PRODUCTS);
    o->products[o->n_products++] = t;
  }
  if (o->n_products == 0)
    return dlc_opt_fail(err, el, "--products: no product named");
  return 0;
}

static int parse_work(sd_opts *o, const char *v, char *err, size_t el) {
  char *end;
  double lo = strtod(v, &end), hi = lo;
  if (end != v && *end == '-') {
    const char *h = end + 1;
    hi = strtod(h, &end);
    if (end == h)
      end = (char *)"x";
  }
  if (end == v || *end || !(lo >= 0 && hi >= lo && hi <= 60000))
    return dlc_opt_fail(err, el,
                        "--work-ms: '%s' is not MIN-MAX milliseconds with 0 "
                        "<= MIN <= MAX <= 60000",
                        v);
  o->work_min_ms = lo;
  o->work_max_ms = hi;
  return 0;
}

static int num_opt(sd_opts *o, const dlc_opt *op, const char *v, char *err,
                   size_t el) {
  const struct {
    int id;
    long long lo, hi, *field;
  } r[] = {{OPT_THREADS, 1, SD_MAX_THREADS, &o->threads},
           {OPT_SEGMENTS, 1, SK_MAX_SEGMENTS, &o->segments},
           {OPT_LEASE, 1, 3600000LL, &o->lease_ms},
           {OPT_WATCHDOG, 30, 3600000LL, &o->watchdog_ms},
           {OPT_WAIT, 1, 3600000LL, &o->wait_ms},
           {OPT_CLIENT_TIMEOUT, 1, 3600, &o->client_timeout_s},
           {OPT_MAX_BODY, 0, 1 << 20, &o->max_body}};
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
    if (r[k].id == op->id) {
      char name[40];
      snprintf(name, sizeof name, "--%s", op->lng);
      return dlc_opt_ll(name, v, r[k].lo, r[k].hi, r[k].field, err, el);
    }
  return dlc_opt_fail(err, el, "--%s: not handled", op->lng);
}

static int apply(void *arg, const dlc_opt *op, const char *v, char *err,
                 size_t el) {
  sd_opts *o = arg;
  switch (op->id) {
  case OPT_HELP:
  case OPT_VERSION:
    return op->id == OPT_HELP ? 1 : 2;
  case OPT_LISTEN:
    return parse_listen(o, v, err, el);
  case OPT_REDIS:
    o->url = v;
    return 0;
  case OPT_REDLOCK:
    if (o->n_redlock == SK_REDLOCK_SERVERS)
      return dlc_opt_fail(err, el, "--redlock: give it exactly %d times",
                          SK_REDLOCK_SERVERS);
    o->redlock_urls[o->n_redlock++] = v;
    return 0;
  case OPT_STRATEGY:
    if (!(o->strategy = sk_strategy_find(v)))
      return dlc_opt_fail(err, el, "--strategy: unknown strategy '%s'", v);
    return 0;
  case OPT_PRODUCTS:
    return parse_products(o, v, err, el);
  case OPT_WORK:
    return parse_work(o, v, err, el);
  case OPT_NAME:
    if (!sd_name_ok(v))
      return dlc_opt_fail(err, el, "--name: '%s' is not a name", v);
    snprintf(o->name, sizeof o->name, "%s", v);
    return 0;
  default:
    return num_opt(o, op, v, err, el);
  }
}

static void defaults(sd_opts *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->host, sizeof o->host, "127.0.0.1");
  o->port = 8080;
  o->url = "redis://127.0.0.1:6379";
  o->strategy = sk_strategy_find("dlock");
  snprintf(o->products_buf, sizeof o->products_buf, "sku1");
  o->products[0] = o->products_buf;
  o->n_products = 1;
  o->threads = 16;
  o->segments = 4;
  o->lease_ms = 2000;
  o->watchdog_ms = 30000;
  o->wait_ms = 10000;
  o->client_timeout_s = 10;
  o->max_body = 4096;
  o->work_max_ms = 2;
}

int sd_parse_args(int argc, char **argv, sd_opts *o, int *exit_now) {
  defaults(o);
  *exit_now = 0;
  char err[300] = "";
  int rc = dlc_opt_parse_all(&g_optset, argc, argv, apply, o, err, sizeof err);
  if (rc == 0 && o->strategy->kind == SK_REDLOCK &&
      o->n_redlock != SK_REDLOCK_SERVERS)
    rc = dlc_opt_fail(err, sizeof err,
                      "--strategy redlock needs --redlock URL %d times",
                      SK_REDLOCK_SERVERS);
  if (rc == 1 || rc == 2) {
    *exit_now = 1;
    if (rc == 1)
      usage(stdout);
    else
      printf("dlock-stockd %s\n", DLOCK_VERSION_STRING);
    return fflush(stdout) == 0 ? 0 : SD_EX_SOFTWARE;
  }
  if (rc != 0) {
    fprintf(stderr, "dlock-stockd: %s (--help for usage)\n", err);
    return SD_EX_USAGE;
  }
  return 0;
}
