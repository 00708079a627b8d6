/* http.c -- dlock-stockd's endpoints on evhttp: parsing and checking each
 * request (anything malformed gets a 4xx with a one-line reason), one
 * purchase through the product's engine, the stock read back from Redis,
 * and the per-thread event loop setup. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "opts.h"
#include "stockd.h"
#include "url.h"

#define SD_CONNECT_S 5
#define SD_COMMAND_S 10

/* ---- replies ---------------------------------------------------------- */

static void reply(struct evhttp_request *req, enum sd_endpoint ep, int code,
                  const char *ctype, struct evbuffer *body) {
  struct evkeyvalq *h = evhttp_request_get_output_headers(req);
  evhttp_add_header(h, "Content-Type", ctype);
  evhttp_add_header(h, "Cache-Control", "no-store");
  const char *reason = code == 200   ? "OK"
                       : code == 400 ? "Bad Request"
                       : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed"
                       : code == 409 ? "Conflict"
                       : code == 503 ? "Service Unavailable"
                                     : "Error";
  evhttp_send_reply(req, code, reason, body);
  sd_metrics_request(ep, code);
}

/* A one-line text reason. */
static void fail(struct evhttp_request *req, enum sd_endpoint ep, int code,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(struct evhttp_request *req, enum sd_endpoint ep, int code,
                 const char *fmt, ...) {
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, 500, NULL);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  evbuffer_add_vprintf(b, fmt, ap);
  va_end(ap);
  evbuffer_add(b, "\n", 1);
  reply(req, ep, code, "text/plain; charset=utf-8", b);
  evbuffer_free(b);
}

/* ---- the request's parameters ------------------------------------------ */

typedef struct sd_req {
  struct evhttp_request *req;
  const char *path;
  enum sd_endpoint ep;
  struct evkeyvalq q;
  int have_q;
} sd_req;

/* The value of a query parameter, or NULL. */
static const char *param(sd_req *r, const char *name) {
  return r->have_q ? evhttp_find_header(&r->q, name) : NULL;
}

/* The product named by ?product=, or NULL after answering 400 / 404. */
static sd_product *product(sd_thread *t, sd_req *r, int *index) {
  const char *p = param(r, "product");
  if (!p) {
    fail(r->req, r->ep, 400, "bad request: missing parameter 'product'");
    return NULL;
  }
  for (int i = 0; i < t->svc->n; i++)
    if (strcmp(t->svc->p[i].name, p) == 0) {
      *index = i;
      return &t->svc->p[i];
    }
  if (sd_name_ok(p))
    fail(r->req, r->ep, 404, "unknown product '%s'", p);
  else
    fail(r->req, r->ep, 400, "bad request: 'product' is not a product name");
  return NULL;
}

static int want_method(sd_req *r, enum evhttp_cmd_type m, const char *name) {
  if (evhttp_request_get_command(r->req) == m)
    return 1;
  evhttp_add_header(evhttp_request_get_output_headers(r->req), "Allow", name);
  fail(r->req, r->ep, 405, "method not allowed: use %s", name);
  return 0;
}

/* ---- Redis from a handler ------------------------------------------------ */

static redisContext *conn(sk_eth *th, char *err, size_t el) {
  if (!th->rc)
    th->rc = dlc_redis_connect(th->e->url, SD_CONNECT_S, SD_COMMAND_S, err, el);
  return th->rc;
}

/* After a failed command: drop the connection (the next call reconnects). */
static void drop(sk_eth *th) {
  if (th->rc && th->rc->err)
    sk_eth_close(th);
}

static int get_ll(redisContext *c, const char *key, long long *v) {
  redisReply *x = redisCommand(c, "GET %s", key);
  if (!x || (x->type != REDIS_REPLY_STRING && x->type != REDIS_REPLY_NIL)) {
    if (x)
      freeReplyObject(x);
    return -1;
  }
  *v = x->type == REDIS_REPLY_STRING ? strtoll(x->str, NULL, 10) : 0;
  freeReplyObject(x);
  return 0;
}

/* s as a JSON string (NULL: null); our texts are ASCII. */
static void json_str(struct evbuffer *b, const char *s) {
  if (!s) {
    evbuffer_add_printf(b, "null");
    return;
  }
  evbuffer_add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      evbuffer_add_printf(b, "\\%c", c);
    else if (c < 0x20)
      evbuffer_add_printf(b, "\\u%04x", c);
    else
      evbuffer_add(b, s, 1);
  }
  evbuffer_add(b, "\"", 1);
}

/* /stock's JSON: stock, orders, initial, oversold, lost updates, the
 * purchases (orders) and the requests each instance handled, the verdict
 * and, only when something went wrong, the strategy's lesson. */
static int stock_json(sk_eth *th, const sd_product *p, const sd_opts *o,
                      struct evbuffer *b, char *err, size_t el) {
  redisContext *c = conn(th, err, el);
  long long stock, orders, initial = 0;
  if (!c ||
      sk_stock_get(c, &p->e.k, p->e.segments, &stock, &orders, err, el) != 0)
    return -1;
  if (get_ll(c, p->initial, &initial) != 0)
    return snprintf(err, el, "redis: GET %s failed", p->initial), -1;
  redisReply *h = redisCommand(c, "HGETALL %s", p->served);
  if (!h || h->type != REDIS_REPLY_ARRAY) {
    snprintf(err, el, "redis: HGETALL %s failed", p->served);
    if (h)
      freeReplyObject(h);
    return -1;
  }
  redisReply *rq = redisCommand(c, "HGETALL %s", p->requests);
  if (!rq || rq->type != REDIS_REPLY_ARRAY) {
    snprintf(err, el, "redis: HGETALL %s failed", p->requests);
    if (rq)
      freeReplyObject(rq);
    freeReplyObject(h);
    return -1;
  }
  long long over = orders - initial;
  over = (over > 0 ? over : 0) + (stock < 0 ? -stock : 0);
  /* orders that took nothing off the stock (a decrement overwritten) */
  long long lost = orders - (initial - stock);
  lost = lost > 0 ? lost : 0;
  evbuffer_add_printf(b,
                      "{\"product\": \"%s\", \"stock\": %lld, \"orders\": "
                      "%lld, \"initial\": %lld, \"oversold\": %lld, "
                      "\"lost_updates\": %lld, \"strategy\": \"%s\", "
                      "\"instance\": \"%s\", \"per_instance\": {",
                      p->name, stock, orders, initial, over, lost,
                      o->strategy->name, o->name);
  for (size_t i = 0; i + 1 < h->elements; i += 2)
    evbuffer_add_printf(b, "%s\"%s\": %s", i ? ", " : "", h->element[i]->str,
                        h->element[i + 1]->str);
  evbuffer_add_printf(b, "}, \"requests_per_instance\": {");
  for (size_t i = 0; i + 1 < rq->elements; i += 2)
    evbuffer_add_printf(b, "%s\"%s\": %s", i ? ", " : "", rq->element[i]->str,
                        rq->element[i + 1]->str);
  const sk_strategy *st = o->strategy;
  /* the lesson only when it went wrong: a correct strategy with nothing
   * oversold gets no alarm (issue 29) */
  const char *verdict = over > 0   ? "oversold"
                        : lost > 0 ? "lost updates"
                                   : "ok";
  evbuffer_add_printf(b, "}, \"verdict\": \"%s\", \"summary\": ", verdict);
  json_str(b, st->summary);
  evbuffer_add_printf(b, ", \"lesson\": ");
  json_str(b, over > 0 || lost > 0 ? st->lesson_race : NULL);
  evbuffer_add_printf(b, ", \"hint\": ");
  json_str(b, st->hint);
  evbuffer_add_printf(b, "}\n");
  freeReplyObject(rq);
  freeReplyObject(h);
  return 0;
}

/* ---- endpoints ------------------------------------------------------------
 */

static void do_stock(sd_thread *t, sd_req *r) {
  int i;
  sd_product *p;
  if (!want_method(r, EVHTTP_REQ_GET, "GET") || !(p = product(t, r, &i)))
    return;
  struct evbuffer *b = evbuffer_new();
  char err[256] = "";
  if (b && stock_json(&t->eth[i], p, t->svc->o, b, err, sizeof err) == 0)
    reply(r->req, r->ep, 200, "application/json", b);
  else
    fail(r->req, r->ep, 503, "redis unavailable: %s", err);
  drop(&t->eth[i]);
  if (b)
    evbuffer_free(b);
}

static void do_reset(sd_thread *t, sd_req *r) {
  int i;
  sd_product *p;
  if (!want_method(r, EVHTTP_REQ_POST, "POST") || !(p = product(t, r, &i)))
    return;
  const char *s = param(r, "stock");
  long long n;
  char err[256] = "";
  if (!s) {
    fail(r->req, r->ep, 400, "bad request: missing parameter 'stock'");
    return;
  }
  if (dlc_opt_ll("stock", s, 0, 1000000000LL, &n, err, sizeof err) != 0) {
    fail(r->req, r->ep, 400, "bad request: %s", err);
    return;
  }
  redisContext *c = conn(&t->eth[i], err, sizeof err);
  redisReply *x = NULL;
  if (c && sk_stock_set(c, &p->e.k, p->e.segments, n, err, sizeof err) == 0 &&
      (x = redisCommand(c, "SET %s %lld", p->initial, n)) &&
      x->type != REDIS_REPLY_ERROR) {
    freeReplyObject(x);
    x = redisCommand(c, "DEL %s %s", p->served, p->requests);
  }
  if (x && x->type != REDIS_REPLY_ERROR) {
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "{\"product\": \"%s\", \"stock\": %lld}\n", p->name,
                        n);
    reply(r->req, r->ep, 200, "application/json", b);
    evbuffer_free(b);
  } else {
    fail(r->req, r->ep, 503, "redis unavailable: %s",
         err[0] ? err : "command failed");
  }
  if (x)
    freeReplyObject(x);
  drop(&t->eth[i]);
}

static uint64_t hash_user(const char *u) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *u; u++)
    h = (h ^ (unsigned char)*u) * 1099511628211ULL;
  return h;
}

static const char *outcome_word(int out) {
  switch (out) {
  case SK_O_ORDER:
    return "order";
  case SK_O_SOLDOUT:
    return "soldout";
  case SK_O_DUPLICATE:
    return "duplicate";
  case SK_O_DEADLOCK:
    return "lock_wait_timeout";
  default:
    return "error";
  }
}

/* Counts the request as handled by this instance, and as a purchase when
 * it bought (the page's "purchases per instance": orders, not requests). */
static void count_served(sd_thread *t, int i, int out) {
  sk_eth *th = &t->eth[i];
  char err[200];
  redisContext *c = conn(th, err, sizeof err);
  if (!c)
    return;
  const char *name = t->svc->o->name;
  int n = 1;
  redisAppendCommand(c, "HINCRBY %s %s 1", t->svc->p[i].requests, name);
  if (out == SK_O_ORDER) {
    redisAppendCommand(c, "HINCRBY %s %s 1", t->svc->p[i].served, name);
    n++;
  }
  for (int k = 0; k < n; k++) {
    void *x = NULL;
    if (redisGetReply(c, &x) != REDIS_OK)
      break;
    freeReplyObject(x);
  }
  drop(th);
}

static void do_deduct(sd_thread *t, sd_req *r) {
  int i;
  if (!want_method(r, EVHTTP_REQ_POST, "POST") || !product(t, r, &i))
    return;
  const char *u = param(r, "user");
  if (u && !sd_name_ok(u)) {
    fail(r->req, r->ep, 400,
         "bad request: 'user' must be 1-%d of [A-Za-z0-9_.:-]", SD_NAME_MAX);
    return;
  }
  sk_eth *th = &t->eth[i];
  t->deadline_us = dlc_now_us() + t->svc->o->wait_ms * 1000;
  int out = sk_engine_request(th, u, u ? (long long)(hash_user(u) >> 1) : 0);
  sd_metrics_purchase(out, th->wait_us);
  count_served(t, i, out);
  struct evbuffer *b = evbuffer_new();
  evbuffer_add_printf(b, "{\"result\": \"%s\", \"instance\": \"%s\"}\n",
                      outcome_word(out), t->svc->o->name);
  int code = out == SK_O_ORDER                              ? 200
             : out == SK_O_SOLDOUT || out == SK_O_DUPLICATE ? 409
                                                            : 503;
  reply(r->req, r->ep, code, "application/json", b);
  evbuffer_free(b);
  drop(th);
}

static void do_simple(sd_thread *t, sd_req *r) {
  if (!want_method(r, EVHTTP_REQ_GET, "GET"))
    return;
  struct evbuffer *b = evbuffer_new();
  const char *ctype = "text/plain; charset=utf-8";
  if (r->ep == SD_EP_METRICS) {
    sd_metrics_write(b, t->svc->o);
    sd_metrics_dlock(b, t->svc);
    ctype = "text/plain; version=0.0.4";
  } else if (r->ep == SD_EP_HEALTHZ) {
    char why[256];
    if (!sd_health(t->svc->o, why, sizeof why)) {
      evbuffer_add_printf(b, "unavailable %s: Redis does not answer: %s\n",
                          t->svc->o->name, why);
      reply(r->req, r->ep, 503, ctype, b);
      evbuffer_free(b);
      return;
    }
    evbuffer_add_printf(b, "ok %s %s\n", t->svc->o->name,
                        t->svc->o->strategy->name);
  } else {
    /* the page's files; "@PRODUCT@" in the HTML: the first product (names
     * need no escaping) */
    const sd_asset *a = sd_asset_find(r->path);
    const char *d = (const char *)a->data;
    const char *at = strstr(d, "@PRODUCT@");
    if (at) {
      evbuffer_add(b, d, (size_t)(at - d));
      evbuffer_add_printf(b, "%s", t->svc->p[0].name);
      evbuffer_add_printf(b, "%s", at + strlen("@PRODUCT@"));
    } else {
      evbuffer_add(b, d, *a->len);
    }
    ctype = a->ctype;
  }
  reply(r->req, r->ep, 200, ctype, b);
  evbuffer_free(b);
}

/* ---- routing ------------------------------------------------------------- */

static void on_request(struct evhttp_request *req, void *arg) {
  sd_thread *t = arg;
  sd_req r = {.req = req, .ep = SD_EP_OTHER};
  const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
  const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
  const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
  if (!path) {
    fail(req, r.ep, 400, "bad request: no path");
    return;
  }
  if (query && evhttp_parse_query_str(query, &r.q) != 0) {
    fail(req, r.ep, 400, "bad request: malformed query string");
    return;
  }
  r.have_q = query != NULL;
  r.path = path;
  static const struct {
    const char *path;
    enum sd_endpoint ep;
    void (*fn)(sd_thread *, sd_req *);
  } routes[] = {{"/deduct_stock", SD_EP_DEDUCT, do_deduct},
                {"/stock", SD_EP_STOCK, do_stock},
                {"/reset", SD_EP_RESET, do_reset},
                {"/metrics", SD_EP_METRICS, do_simple},
                {"/healthz", SD_EP_HEALTHZ, do_simple},
                {"/", SD_EP_PAGE, do_simple},
                {"/page.css", SD_EP_PAGE, do_simple},
                {"/page.js", SD_EP_PAGE, do_simple}};
  size_t k = 0;
  while (k < sizeof routes / sizeof routes[0] &&
         strcmp(routes[k].path, path) != 0)
    k++;
  if (k == sizeof routes / sizeof routes[0]) {
    fail(req, r.ep, 404, "not found: %.100s", path);
  } else {
    r.ep = routes[k].ep;
    routes[k].fn(t, &r);
  }
  if (r.have_q)
    evhttp_clear_headers(&r.q);
}

/* ---- the service and its threads ---------------------------------------- */

static int hook_aborted(sk_eth *th) {
  const sd_thread *t = th->user;
  return atomic_load(&t->svc->stopping) || dlc_now_us() > t->deadline_us;
}

static void hook_error(sk_eth *th, const char *msg) {
  const sd_thread *t = th->user;
  sd_log(t->svc->o->name, th->e->k.lock, "%s", msg);
}

int sd_service_init(sd_service *svc, const sd_opts *o) {
  memset(svc, 0, sizeof *svc);
  svc->o = o;
  for (int i = 0; i < o->n_products; i++) {
    sd_product *p = &svc->p[i];
    sk_engine *e = &p->e;
    p->name = o->products[i];
    char pre[80]; /* the product's keys: stockd:<product>:... */
    snprintf(pre, sizeof pre, "stockd:%s", p->name);
    snprintf(e->k.prefix, sizeof e->k.prefix, "%s", pre);
    snprintf(e->k.stock, sizeof e->k.stock, "%s:stock", pre);
    snprintf(e->k.orders, sizeof e->k.orders, "%s:orders", pre);
    snprintf(e->k.users, sizeof e->k.users, "%s:users", pre);
    snprintf(e->k.lock, sizeof e->k.lock, "%s:lock", pre);
    snprintf(p->initial, sizeof p->initial, "%s:initial", pre);
    snprintf(p->served, sizeof p->served, "%s:served", pre);
    snprintf(p->requests, sizeof p->requests, "%s:requests", pre);
    e->s = o->strategy;
    e->url = o->url;
    for (int k = 0; k < SK_REDLOCK_SERVERS; k++)
      e->redlock_urls[k] = o->redlock_urls[k];
    e->segments = o->strategy->kind == SK_SEGMENTED ? o->segments : 1;
    e->lease_ms = o->lease_ms;
    e->watchdog_ms = o->watchdog_ms;
    e->threads = o->threads;
    e->work_min_ms = o->work_min_ms;
    e->work_max_ms = o->work_max_ms;
    e->aborted = hook_aborted;
    e->on_error = hook_error;
    e->on_lock_lost = sd_on_lock_lost;
    e->on_lock_lost_arg = (void *)o;
    char err[256] = "";
    if (sk_engine_init(e, err, sizeof err) != 0) {
      fprintf(stderr, "dlock-stockd: %s: %s\n", p->name, err);
      sd_service_free(svc);
      return -1;
    }
    svc->n = i + 1;
  }
  return 0;
}

void sd_service_free(sd_service *svc) {
  for (int i = 0; i < svc->n; i++)
    sk_engine_free(&svc->p[i].e);
  svc->n = 0;
}

int sd_thread_init(sd_thread *t, sd_service *svc, int index, int fd) {
  memset(t, 0, sizeof *t);
  t->svc = svc;
  t->t = index;
  for (int i = 0; i < svc->n; i++) {
    sk_eth_init(&t->eth[i], &svc->p[i].e, index,
                (uint64_t)dlc_now_ns() ^ ((uint64_t)index << 32));
    t->eth[i].user = t;
  }
  const sd_opts *o = svc->o;
  if (!(t->base = event_base_new()) || !(t->http = evhttp_new(t->base)))
    return -1;
  evhttp_set_gencb(t->http, on_request, t);
  evhttp_set_bevcb(t->http, sd_conn_bev, t);
  evhttp_set_max_body_size(t->http, (ev_ssize_t)o->max_body);
  evhttp_set_max_headers_size(t->http, 8192);
  /* idle connections: longer than conn.c's 408 deadline for requests */
  evhttp_set_timeout(t->http, (int)o->client_timeout_s + 2);
  evhttp_set_allowed_methods(t->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
                                          EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                          EVHTTP_REQ_DELETE);
  if (sd_conn_start(t) != 0)
    return -1;
  return evhttp_accept_socket(t->http, fd) == 0 ? 0 : -1;
}

void sd_thread_free(sd_thread *t) {
  for (int i = 0; i < t->svc->n; i++)
    sk_eth_close(&t->eth[i]);
  if (t->http)
    evhttp_free(t->http);
  sd_conn_stop(t);
  if (t->base)
    event_base_free(t->base);
  t->http = NULL;
  t->base = NULL;
}
