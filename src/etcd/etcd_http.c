/*
 * etcd_http.c -- the etcd store's transport: requests to etcd's v3 JSON
 * gateway (POST /v3/...) over libcurl, answers parsed with json-c.
 *
 * ONE REQUEST, TWO DRIVERS. A request (dlock__etcd_req) is a libcurl easy
 * handle on a multi handle. Its start (endpoint, headers, TLS), its
 * completion (the answer, or which failure) and its retry decision (the
 * next endpoint, the next round) are written once here; who drives the
 * multi is the caller's:
 *   - a blocking call (dlock__etcd_call) drives a private multi with poll
 *     (curl_multi_poll) until its one request is done -- the calling
 *     thread's, as the Redis store's router is;
 *   - the lease thread (etcd_lease.c) drives one multi for all its
 *     requests and streams (keepalives, the holders' watches, clean-up),
 *     never blocking on one of them, so a deadline is seen on time.
 * An event loop can drive the same requests later with
 * curl_multi_socket_action: nothing here blocks but dlock__etcd_call.
 *
 * CONNECTIONS. A blocking call borrows a pooled (multi, easy) pair: the
 * multi keeps the keep-alive connection between calls, so an uncontended
 * lock and unlock are two requests on one open connection.
 *
 * ENDPOINTS, IN TURN. A request starts on the endpoint that answered last
 * (e->cur); a failure to connect, a connection that broke, a member
 * without quorum (HTTP 503, "no leader", "request timed out") or a server
 * that is no etcd gateway moves it to the next endpoint at once; after every
 * endpoint failed once (a round), the retry policy's pause, then another
 * round, retry_attempts rounds at most, within the call's budget
 * (dlock__call_deadline). A request marked ONCE is never sent again once a
 * copy may have reached a server (force unlock): only a refused connection
 * moves it on.
 *
 * AUTH. With user:password in the URL, POST /v3/auth/authenticate gives a
 * token sent as "Authorization: <token>"; an answer that the token is
 * invalid (expired) authenticates again once and re-sends.
 *
 * ERRORS (the same codes as the Redis store, docs/etcd.md): no member
 * reachable or none with a quorum: DLOCK_ECONN; credentials refused:
 * DLOCK_EAUTH; TLS refused: DLOCK_ETLS; a server that is not an etcd
 * gateway (no HTTP, no JSON): DLOCK_EPROTO; the gateway's own error reply
 * ({"error":..., "code":...}): DLOCK_EREDIS with its text ("the store
 * replied with an error"), res.code its gRPC code.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

/* A pooled connection: an easy handle and the multi that keeps its
 * connection between requests. */
typedef struct slot {
  struct slot *next;
  CURLM *m;
  CURL *easy;
} slot;

struct dlock__etcd_http {
  int n;
  char **base;  /* "http://host:port" per endpoint */
  char **names; /* "host:port", for messages */
  atomic_int cur;
  char *user, *password;
  pthread_mutex_t mu; /* token, pool */
  char *token;
  unsigned token_gen;
  int tls, verify;
  char *ca_file, *ca_dir, *cert, *key, *key_pass, *sni;
  int cert_p12;
  struct curl_slist *connect_to; /* tls_server_name: name -> address */
  int connect_ms, command_ms;
  slot *pool;
};

/* Answers larger than this are no gateway's (a status of 10k waiters is
 * about 2 MB). */
#define ANSWER_MAX (64u << 20)

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static int g_curl_ok;
static void curl_once(void) {
  g_curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

const char *dlock__etcd_ep_name(const dlock__etcd *e, int i) {
  const dlock__etcd_http *h = e->http;
  return i >= 0 && i < h->n ? h->names[i] : "?";
}

const char *dlock__etcd_where(const dlock__etcd *e, int ep) {
  static _Thread_local char buf[300];
  snprintf(buf, sizeof buf, "etcd %s", dlock__etcd_ep_name(e, ep));
  return buf;
}

/* ---- the transport's state ---------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? dlock__strdup(s) : NULL; }

/* The endpoints' base URLs and names. 0 or DLOCK_ENOMEM. */
static int endpoints_init(dlock__etcd_http *h, const dlock__url *u) {
  h->n = u->n_endpoints;
  h->base = dlock__calloc((size_t)h->n, sizeof *h->base);
  h->names = dlock__calloc((size_t)h->n, sizeof *h->names);
  if (!h->base || !h->names)
    return DLOCK_ENOMEM;
  for (int i = 0; i < h->n; i++) {
    const char *host = u->endpoints[i].host;
    int v6 = strchr(host, ':') != NULL;
    char b[320], nm[300];
    snprintf(nm, sizeof nm, v6 ? "[%s]:%d" : "%s:%d", host,
             u->endpoints[i].port);
    snprintf(b, sizeof b, "%s://%s", h->tls ? "https" : "http", nm);
    if (!(h->base[i] = dlock__strdup(b)) || !(h->names[i] = dlock__strdup(nm)))
      return DLOCK_ENOMEM;
  }
  return 0;
}

/* The TLS settings of cfg, copied (the caller's strings are borrowed for
 * dlock_client_new only). 0, DLOCK_ENOTSUP or DLOCK_ENOMEM. */
static int tls_init(dlock__etcd_http *h, const dlock_config *cfg,
                    const dlock__url *u) {
  h->verify = cfg->tls_verify;
  if (cfg->tls_truststore)
    return dlock__fail(DLOCK_ENOTSUP,
                       "tls_truststore (a PKCS12 trust store) is not offered "
                       "on etcd: give the CA as PEM (tls_ca_file)");
  h->ca_file = dup_or_null(cfg->tls_ca_file);
  h->ca_dir = dup_or_null(cfg->tls_ca_dir);
  h->cert = dup_or_null(cfg->tls_keystore ? dlock__store_path(cfg->tls_keystore)
                                          : cfg->tls_cert_file);
  h->cert_p12 = cfg->tls_keystore != NULL;
  h->key = dup_or_null(cfg->tls_keystore ? NULL : cfg->tls_key_file);
  h->key_pass = dup_or_null(cfg->tls_keystore_password);
  h->sni = dup_or_null(cfg->tls_server_name);
  if ((cfg->tls_ca_file && !h->ca_file) || (cfg->tls_ca_dir && !h->ca_dir) ||
      (cfg->tls_server_name && !h->sni))
    return DLOCK_ENOMEM;
  if (h->sni) {
    /* The certificate is checked against tls_server_name: the URL names
     * it and CONNECT_TO sends the connection to the real address. */
    for (int i = 0; i < u->n_endpoints; i++) {
      char m[600];
      snprintf(m, sizeof m, "%s:%d:%s:%d", h->sni, u->endpoints[i].port,
               u->endpoints[i].host, u->endpoints[i].port);
      struct curl_slist *nl = curl_slist_append(h->connect_to, m);
      if (!nl)
        return DLOCK_ENOMEM;
      h->connect_to = nl;
      char b[320];
      snprintf(b, sizeof b, "https://%s:%d", h->sni, u->endpoints[i].port);
      free(h->base[i]);
      if (!(h->base[i] = dlock__strdup(b)))
        return DLOCK_ENOMEM;
    }
  }
  return 0;
}

int dlock__etcd_http_new(dlock_client *c, dlock__etcd_http **out) {
  pthread_once(&g_curl_once, curl_once);
  if (!g_curl_ok)
    return dlock__fail(DLOCK_ENOMEM, "libcurl did not initialise");
  dlock__etcd_http *h = dlock__calloc(1, sizeof *h);
  if (!h)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  const dlock__url *u = &c->url;
  h->tls = u->etcd_tls != 0;
  h->connect_ms = c->cfg.connect_timeout_ms;
  h->command_ms = c->cfg.command_timeout_ms;
  int rc = pthread_mutex_init(&h->mu, NULL) ? DLOCK_ENOMEM : 0;
  if (rc == 0)
    rc = endpoints_init(h, u);
  if (rc == 0 && h->tls)
    rc = tls_init(h, &c->cfg, u);
  if (rc == 0 && u->user && !(h->user = dlock__strdup(u->user)))
    rc = DLOCK_ENOMEM;
  if (rc == 0 && u->password && !(h->password = dlock__strdup(u->password)))
    rc = DLOCK_ENOMEM;
  if (rc == 0 && h->password && !h->user)
    rc = dlock__fail(DLOCK_EINVAL, "etcd:// URL: a password needs a user name "
                                   "(etcd://user:password@host:port)");
  if (rc) {
    dlock__etcd_http_free(h);
    return rc == DLOCK_ENOMEM ? dlock__fail(DLOCK_ENOMEM, "out of memory") : rc;
  }
  *out = h;
  return 0;
}

static void slot_free(slot *s) {
  curl_easy_cleanup(s->easy);
  curl_multi_cleanup(s->m);
  free(s);
}

void dlock__etcd_http_close(dlock__etcd_http *h) {
  if (!h)
    return;
  dlock__mu_lock(&h->mu);
  slot *s = h->pool;
  h->pool = NULL;
  dlock__mu_unlock(&h->mu);
  while (s) {
    slot *next = s->next;
    slot_free(s);
    s = next;
  }
}

void dlock__etcd_http_free(dlock__etcd_http *h) {
  if (!h)
    return;
  dlock__etcd_http_close(h);
  for (int i = 0; i < h->n; i++) {
    free(h->base ? h->base[i] : NULL);
    free(h->names ? h->names[i] : NULL);
  }
  free(h->base);
  free(h->names);
  free(h->user);
  free(h->password);
  free(h->token);
  free(h->ca_file);
  free(h->ca_dir);
  free(h->cert);
  free(h->key);
  free(h->key_pass);
  free(h->sni);
  curl_slist_free_all(h->connect_to);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

/* ---- one request ----------------------------------------------------------
 */

int dlock__etcd_req_init(dlock__etcd_req *r, dlock__etcd *e, const char *path,
                         const char *body, size_t len, int flags) {
  r->e = e;
  snprintf(r->path, sizeof r->path, "%s", path);
  dlock__sb_init(&r->body);
  dlock__sb_init(&r->in);
  dlock__sb_add(&r->body, body, len);
  r->flags = flags;
  r->timeout_ms = e->http->command_ms;
  r->ep = atomic_load(&e->http->cur);
  return r->body.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory") : 0;
}

void dlock__etcd_req_free(dlock__etcd_req *r) {
  dlock__sb_free(&r->body);
  dlock__sb_free(&r->in);
  curl_slist_free_all(r->hdrs);
  r->hdrs = NULL;
  if (r->res.json)
    json_object_put(r->res.json);
  r->res.json = NULL;
}

/* A stream's complete lines, each parsed and passed on. 0, or 1 to stop. */
static int stream_lines(dlock__etcd_req *r) {
  size_t at = 0;
  int stop = 0;
  while (!stop && at < r->in.len) {
    char *nl = memchr(r->in.p + at, '\n', r->in.len - at);
    if (!nl)
      break;
    size_t n = (size_t)(nl - (r->in.p + at));
    json_tokener *tok = json_tokener_new();
    json_object *o =
        tok ? json_tokener_parse_ex(tok, r->in.p + at, (int)n) : NULL;
    if (tok)
      json_tokener_free(tok);
    at += n + 1;
    if (o) {
      stop = r->on_line(r, o);
      json_object_put(o);
    }
  }
  if (at > 0) {
    memmove(r->in.p, r->in.p + at, r->in.len - at);
    r->in.len -= at;
  }
  return stop;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *arg) {
  dlock__etcd_req *r = arg;
  size_t n = size * nmemb;
  if (r->in.len + n > ANSWER_MAX)
    return 0;
  dlock__sb_add(&r->in, p, n);
  if (r->in.oom)
    return 0;
  if (r->stream && r->on_line && stream_lines(r)) {
    r->stopped = 1;
    return 0; /* ends the transfer: the caller has what it wanted */
  }
  return n;
}

/* The headers of a copy: JSON, no "Expect: 100-continue" (a pause of a
 * second before a body of more than 1 kB), the token when there is one. */
static int make_headers(dlock__etcd_req *r) {
  dlock__etcd_http *h = r->e->http;
  curl_slist_free_all(r->hdrs);
  r->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  struct curl_slist *l = r->hdrs ? curl_slist_append(r->hdrs, "Expect:") : NULL;
  if (!l)
    return DLOCK_ENOMEM;
  r->hdrs = l;
  if (r->flags & DLOCK__ETCD_NOAUTH)
    return 0;
  dlock__mu_lock(&h->mu);
  char *tok = h->token ? dlock__strdup(h->token) : NULL;
  int had = h->token != NULL;
  dlock__mu_unlock(&h->mu);
  if (had && !tok)
    return DLOCK_ENOMEM;
  if (!tok)
    return 0;
  size_t tl = strlen(tok);
  char *line = dlock__malloc(tl + 16);
  if (line) {
    snprintf(line, tl + 16, "Authorization: %s", tok);
    l = curl_slist_append(r->hdrs, line);
  }
  free(tok);
  free(line);
  if (!line || !l)
    return DLOCK_ENOMEM;
  r->hdrs = l;
  return 0;
}

static void tls_opts(CURL *k, const dlock__etcd_http *h) {
  if (h->ca_file)
    curl_easy_setopt(k, CURLOPT_CAINFO, h->ca_file);
  if (h->ca_dir)
    curl_easy_setopt(k, CURLOPT_CAPATH, h->ca_dir);
  if (h->cert) {
    curl_easy_setopt(k, CURLOPT_SSLCERT, h->cert);
    if (h->cert_p12)
      curl_easy_setopt(k, CURLOPT_SSLCERTTYPE, "P12");
  }
  if (h->key)
    curl_easy_setopt(k, CURLOPT_SSLKEY, h->key);
  if (h->key_pass)
    curl_easy_setopt(k, CURLOPT_KEYPASSWD, h->key_pass);
  curl_easy_setopt(k, CURLOPT_SSL_VERIFYPEER,
                   h->verify == DLOCK_TLS_VERIFY_NONE ? 0L : 1L);
  curl_easy_setopt(k, CURLOPT_SSL_VERIFYHOST,
                   h->verify == DLOCK_TLS_VERIFY_NONE ||
                           h->verify == DLOCK_TLS_VERIFY_CA_ONLY
                       ? 0L
                       : 2L);
  if (h->connect_to)
    curl_easy_setopt(k, CURLOPT_CONNECT_TO, h->connect_to);
}

/* The options of one copy of r on its easy handle. */
static void easy_opts(dlock__etcd_req *r, const char *url) {
  dlock__etcd_http *h = r->e->http;
  CURL *k = r->easy;
  curl_easy_setopt(k, CURLOPT_URL, url);
  curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(k, CURLOPT_POST, 1L);
  curl_easy_setopt(k, CURLOPT_POSTFIELDS, r->body.p ? r->body.p : "");
  curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE, (long)r->body.len);
  curl_easy_setopt(k, CURLOPT_HTTPHEADER, r->hdrs);
  curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(k, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(k, CURLOPT_PRIVATE, r);
  curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_ms);
  curl_easy_setopt(k, CURLOPT_TIMEOUT_MS,
                   (long)(r->stream ? 0 : r->timeout_ms));
  curl_easy_setopt(k, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  if (r->stream) {
    /* a member that died without closing (its machine gone) */
    curl_easy_setopt(k, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(k, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(k, CURLOPT_TCP_KEEPINTVL, 2L);
  }
  if (h->tls)
    tls_opts(k, h);
}

int dlock__etcd_req_start(dlock__etcd_req *r, CURLM *m) {
  if (!r->e) /* dlock__etcd_req_init not run: cannot be */
    dlock__never("an etcd request started without its client");
  dlock__etcd_http *h = r->e->http;
  if (!r->easy && !(r->easy = curl_easy_init()))
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (r->ep < 0 || r->ep >= h->n)
    r->ep = 0;
  dlock__sb_reset(&r->in);
  r->stopped = 0;
  if (make_headers(r) != 0) {
    r->done = 1;
    r->rc = DLOCK_ENOMEM;
    snprintf(r->why, sizeof r->why, "out of memory");
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  char url[400];
  snprintf(url, sizeof url, "%s%s", h->base[r->ep], r->path);
  easy_opts(r, url);
  r->res.sent = dlock__now_ms();
  r->res.sends++;
  if (curl_multi_add_handle(m, r->easy) != CURLM_OK) {
    r->done = 1;
    r->rc = DLOCK_ENOMEM;
    snprintf(r->why, sizeof r->why, "curl_multi_add_handle failed");
    return dlock__fail(DLOCK_ENOMEM, "curl_multi_add_handle failed");
  }
  r->running = 1;
  return 0;
}

void dlock__etcd_req_stop(dlock__etcd_req *r, CURLM *m) {
  if (r->running) {
    curl_multi_remove_handle(m, r->easy);
    r->running = 0;
  }
}

/* ---- what an ending means -------------------------------------------------
 */

enum { END_DONE, END_NEXT, END_REAUTH };

/* A transport failure cc of the copy on endpoint ep: the code and why.
 * Returns END_NEXT when another endpoint may answer (and the copy may be
 * sent again under r's flags), else END_DONE. */
static int transport_failure(dlock__etcd_req *r, CURLcode cc, long http) {
  const char *ep = dlock__etcd_where(r->e, r->ep);
  const char *what = curl_easy_strerror(cc);
  int unsent = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST;
  switch (cc) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_ISSUER_ERROR:
    r->rc = DLOCK_ETLS;
    snprintf(r->why, sizeof r->why, "%.100s: TLS refused: %.150s", ep, what);
    return END_DONE;
  case CURLE_WEIRD_SERVER_REPLY:
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_HTTP2:
    r->rc = DLOCK_EPROTO;
    snprintf(r->why, sizeof r->why,
             "%.100s does not answer HTTP (%.60s): not an etcd gateway "
             "(wrong port? etcd's client URL, not its peer URL)",
             ep, what);
    return END_NEXT;
  case CURLE_GOT_NOTHING:
    /* a server that closes on an HTTP request without a word (Redis does:
     * "possible SECURITY ATTACK"), or a member that died under it: the
     * next endpoint or round tells them apart */
    r->rc = DLOCK_EPROTO;
    snprintf(r->why, sizeof r->why,
             "%.100s closed the connection without an HTTP answer: not an "
             "etcd gateway (wrong port?), or the member died",
             ep);
    return (r->flags & DLOCK__ETCD_ONCE) ? END_DONE : END_NEXT;
  default:
    break;
  }
  r->rc = DLOCK_ECONN;
  if (cc == CURLE_OPERATION_TIMEDOUT)
    snprintf(
        r->why, sizeof r->why,
        "%.100s: no answer within %d ms (paused, partitioned, or without a "
        "quorum)",
        ep, r->timeout_ms);
  else
    snprintf(r->why, sizeof r->why, "%.100s: %.150s%s", ep, what,
             http ? " (the answer broke off)" : "");
  /* a copy that may have reached the server is not sent again when ONCE */
  return (r->flags & DLOCK__ETCD_ONCE) && !unsent ? END_DONE : END_NEXT;
}

/* 1 if the gateway's error text or code says no quorum / no leader: another
 * member may have one. */
static int unavailable(long http, int code, const char *msg) {
  return http == 503 || code == 14 || code == 4 || strstr(msg, "no leader") ||
         strstr(msg, "request timed out") ||
         strstr(msg, "context deadline exceeded") ||
         strstr(msg, "leader changed") || strstr(msg, "too many requests");
}

/* The gateway answered an error object o with status http. */
static int gateway_error(dlock__etcd_req *r, json_object *o, long http) {
  json_object *em = dlock__etcd_get(o, "error");
  if (!em)
    em = dlock__etcd_get(o, "message");
  const char *msg = em ? json_object_get_string(em) : "(no message)";
  int code = (int)dlock__etcd_int(o, "code");
  const char *ep = dlock__etcd_where(r->e, r->ep);
  r->res.code = code;
  if (code == 16 || strstr(msg, "invalid auth token") ||
      strstr(msg, "user name is empty")) {
    if (r->e->http->user && !r->reauthed && !(r->flags & DLOCK__ETCD_NOAUTH))
      return END_REAUTH;
    r->rc = DLOCK_EAUTH;
    snprintf(
        r->why, sizeof r->why,
        "%.100s requires authentication (%.100s): give user:password@ in the "
        "etcd:// URL",
        ep, msg);
    return END_DONE;
  }
  if (strstr(msg, "authentication failed") || code == 7) {
    r->rc = DLOCK_EAUTH;
    snprintf(r->why, sizeof r->why, "%.100s refused: %.150s", ep, msg);
    return END_DONE;
  }
  if (unavailable(http, code, msg)) {
    r->rc = DLOCK_ECONN;
    snprintf(
        r->why, sizeof r->why,
        "%.100s: %.100s (HTTP %ld: the member has no quorum or no leader now)",
        ep, msg, http);
    return (r->flags & DLOCK__ETCD_ONCE) ? END_DONE : END_NEXT;
  }
  r->rc = DLOCK_EREDIS;
  snprintf(r->why, sizeof r->why, "%.100s: %.150s (HTTP %ld, code %d)", ep, msg,
           http, code);
  return END_DONE;
}

/* A transfer that completed: the answer, or why it is none. */
static int answer(dlock__etcd_req *r, long http) {
  if (r->stream) {
    r->rc = DLOCK_ECONN;
    snprintf(r->why, sizeof r->why, "%.100s: the stream ended (HTTP %ld)",
             dlock__etcd_where(r->e, r->ep), http);
    return END_DONE;
  }
  json_tokener *tok = json_tokener_new();
  json_object *o = tok && r->in.len
                       ? json_tokener_parse_ex(tok, r->in.p, (int)r->in.len)
                       : NULL;
  if (tok)
    json_tokener_free(tok);
  if (!o || !json_object_is_type(o, json_type_object)) {
    if (o)
      json_object_put(o);
    r->rc = DLOCK_EPROTO;
    snprintf(r->why, sizeof r->why,
             "%.100s answered HTTP %ld without JSON ('%.60s'): not an etcd v3 "
             "gateway",
             dlock__etcd_where(r->e, r->ep), http, r->in.len ? r->in.p : "");
    for (char *p = r->why; *p; p++)
      if ((unsigned char)*p < 32)
        *p = '?';
    return END_NEXT;
  }
  if (http == 200 && !dlock__etcd_get(o, "error")) {
    r->res.json = o;
    r->rc = 0;
    return END_DONE;
  }
  int end = gateway_error(r, o, http);
  json_object_put(o);
  return end;
}

/* END_NEXT: the next endpoint, or after a full round the policy's pause.
 * Returns 1 (send again at r->retry_at) or 0 (r->rc stays). */
static int next_copy(dlock__etcd_req *r) {
  dlock__etcd *e = r->e;
  dlock__etcd_http *h = e->http;
  const dlock_config *cfg = &e->c->cfg;
  int64_t now = dlock__now_ms(), dl = dlock__call_deadline();
  if (atomic_load(&e->c->closing) || (dl >= 0 && now >= dl))
    return 0;
  int was = r->ep;
  r->ep = (r->ep + 1) % h->n;
  /* the next request starts on the next endpoint too */
  atomic_compare_exchange_strong(&h->cur, &was, r->ep);
  if (++r->tried < h->n) {
    r->retry_at = now;
    return 1;
  }
  r->tried = 0;
  int rounds = cfg->retry_attempts > 0 ? cfg->retry_attempts : 0;
  if ((r->flags & DLOCK__ETCD_ONEROUND) || r->rounds++ >= rounds)
    return 0;
  int64_t prev = 0;
  int64_t pause = dlock__retry_pause(cfg, r->rounds - 1, &prev);
  r->retry_at = now + pause;
  return dl < 0 || r->retry_at < dl;
}

int dlock__etcd_req_finish(dlock__etcd_req *r, CURLM *m, CURLcode cc) {
  long http = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &http);
  dlock__etcd_req_stop(r, m);
  r->res.http = http;
  r->res.ep = r->ep;
  int end;
  if (r->stream && r->stopped) {
    r->rc = 0;
    end = END_DONE;
  } else if (cc != CURLE_OK) {
    end = transport_failure(r, cc, http);
  } else {
    end = answer(r, http);
  }
  if (http > 0)
    atomic_store(&r->e->connected, 1);
  if (end == END_DONE && r->rc == 0)
    atomic_store(&r->e->http->cur, r->ep);
  if (end == END_REAUTH) {
    r->reauthed = 1;
    if (dlock__etcd_http_auth(r->e) == 0) {
      r->retry_at = dlock__now_ms();
      return 1;
    }
    r->rc = DLOCK_EAUTH;
    snprintf(r->why, sizeof r->why, "%s", dlock_last_error());
    end = END_DONE;
  }
  if (end == END_NEXT && next_copy(r))
    return 1;
  if (r->rc == DLOCK_ECONN && !r->stream)
    atomic_store(&r->e->connected, 0);
  r->done = 1;
  return 0;
}

/* ---- the blocking driver ---------------------------------------------------
 */

static slot *pool_get(dlock__etcd_http *h) {
  dlock__mu_lock(&h->mu);
  slot *s = h->pool;
  if (s)
    h->pool = s->next;
  dlock__mu_unlock(&h->mu);
  if (s)
    return s;
  if (!(s = dlock__calloc(1, sizeof *s)))
    return NULL;
  s->m = curl_multi_init();
  s->easy = curl_easy_init();
  if (!s->m || !s->easy) {
    if (s->m)
      curl_multi_cleanup(s->m);
    if (s->easy)
      curl_easy_cleanup(s->easy);
    free(s);
    return NULL;
  }
  return s;
}

static void pool_put(dlock__etcd_http *h, slot *s) {
  dlock__mu_lock(&h->mu);
  s->next = h->pool;
  h->pool = s;
  dlock__mu_unlock(&h->mu);
}

/* Drives multi m until r (its only transfer) finished. 0, or 1 to send a
 * copy again at r->retry_at. */
static int drive_one(dlock__etcd_req *r, CURLM *m) {
  for (int guard = 0; guard < 1000000; guard++) {
    int running = 0;
    curl_multi_perform(m, &running);
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(m, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == r->easy)
        return dlock__etcd_req_finish(r, m, msg->data.result);
    if (!running && !r->running)
      return 0;
    curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  return 0;
}

int dlock__etcd_call(dlock__etcd *e, const char *path, const dlock__sb *body,
                     int flags, dlock__etcd_res *res) {
  memset(res, 0, sizeof *res);
  dlock__etcd_http *h = e->http;
  dlock__etcd_req r;
  memset(&r, 0, sizeof r);
  int rc = dlock__etcd_req_init(&r, e, path, body->p ? body->p : "", body->len,
                                flags);
  slot *s = rc ? NULL : pool_get(h);
  if (!rc && !s)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (rc) {
    dlock__etcd_req_free(&r);
    return rc;
  }
  r.easy = s->easy;
  /* The call's budget (a timed wait's) ends the retries (next_copy), not
   * a copy in flight: its answer is awaited for command_timeout_ms, as the
   * Redis store's router waits for a reply. */
  for (int copy = 0; copy < 1000; copy++) {
    if (dlock__etcd_req_start(&r, s->m) != 0)
      break;
    if (drive_one(&r, s->m) == 0)
      break;
    int64_t wait = r.retry_at - dlock__now_ms();
    if (wait > 0)
      dlock__sleep_ms(wait);
  }
  r.easy = NULL; /* the slot's */
  if (atomic_load(&e->c->closing))
    slot_free(s); /* dlock_client_free closed the pool: no fd outlives it */
  else
    pool_put(h, s);
  *res = r.res;
  r.res.json = NULL;
  rc = r.done ? r.rc : DLOCK_ECONN;
  if (rc == DLOCK_ECONN && r.rounds > 0)
    rc = dlock__fail(rc, "%s (every endpoint tried, %d round%s)", r.why,
                     r.rounds, r.rounds == 1 ? "" : "s");
  else if (rc)
    rc = dlock__fail(rc, "%s", r.why[0] ? r.why : "etcd request failed");
  dlock__etcd_req_free(&r);
  return rc;
}

int dlock__etcd_calls(dlock__etcd *e, const char *path, const char *body,
                      int flags, dlock__etcd_res *res) {
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, body);
  int rc = b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                 : dlock__etcd_call(e, path, &b, flags, res);
  dlock__sb_free(&b);
  return rc;
}

/* ---- a blocking wait on a watch stream ---------------------------------- */

typedef struct watch_ctx {
  int noput;
  int event;
  int keep;           /* keep the first event (dlock__etcd_watch_first) */
  json_object *first; /* ... here, a reference of its own */
} watch_ctx;

static int wait_line(dlock__etcd_req *r, json_object *line) {
  watch_ctx *x = r->arg;
  json_object *res = dlock__etcd_get(line, "result");
  if (!res || json_object_get_boolean(dlock__etcd_get(res, "canceled")))
    return 1; /* an error or a compaction: the caller looks again */
  json_object *ev = dlock__etcd_get(res, "events");
  size_t n = ev ? json_object_array_length(ev) : 0;
  for (size_t i = 0; i < n; i++) {
    json_object *t = dlock__etcd_get(json_object_array_get_idx(ev, i), "type");
    /* the gateway leaves out the default type, PUT */
    int del = t && strcmp(json_object_get_string(t), "DELETE") == 0;
    if (del || !x->noput) {
      x->event = 1;
      if (x->keep && !x->first)
        x->first = json_object_get(json_object_array_get_idx(ev, i));
      return 1;
    }
  }
  return 0;
}

/* Drives m (one stream r on it) until an event, the stream's end, `until`,
 * a cancel of b or the client closing. */
static void drive_watch(dlock__etcd *e, CURLM *m, dlock__etcd_req *r,
                        watch_ctx *x, int64_t until, const dlock__budget *b) {
  for (int guard = 0; guard < 1000000 && !r->done; guard++) {
    int running = 0;
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE)
        r->done = 1;
    int64_t now = dlock__now_ms();
    if (r->done || x->event || (until >= 0 && now >= until) ||
        (b && dlock__budget_canceled(b)) || atomic_load(&e->c->closing))
      break;
    int64_t ms = until < 0 ? 1000 : until - now;
    curl_multi_poll(m, NULL, 0, (int)(ms > 1000 ? 1000 : ms), NULL);
  }
}

/* The watch of dlock__etcd_watch_wait and dlock__etcd_watch_first: what it
 * saw goes to *x. 0 or DLOCK_ENOMEM. */
static int watch_run(dlock__etcd *e, const char *key, size_t klen,
                     const char *end, size_t elen, int64_t from, int64_t until,
                     const dlock__budget *b, watch_ctx *x) {
  int noput = x->noput;
  dlock__sb body;
  dlock__sb_init(&body);
  dlock__sb_adds(&body, "{\"create_request\":{\"key\":\"");
  dlock__etcd_b64(&body, key, klen);
  if (end) {
    dlock__sb_adds(&body, "\",\"range_end\":\"");
    dlock__etcd_b64(&body, end, elen);
  }
  dlock__sb_adds(&body, "\",\"start_revision\":");
  dlock__etcd_jint(&body, from);
  dlock__sb_adds(&body, noput ? ",\"filters\":[\"NOPUT\"]}}" : "}}");
  dlock__etcd_req r;
  memset(&r, 0, sizeof r);
  CURLM *m = curl_multi_init();
  int rc = !m || body.oom
               ? dlock__fail(DLOCK_ENOMEM, "out of memory")
               : dlock__etcd_req_init(&r, e, "/v3/watch", body.p, body.len,
                                      DLOCK__ETCD_ONEROUND);
  dlock__sb_free(&body);
  dlock__etcd_waitreg reg = {NULL, m};
  if (rc == 0) {
    r.stream = 1;
    r.on_line = wait_line;
    r.arg = x;
    dlock__etcd_wait_register(e, &reg);
    if (dlock__etcd_req_start(&r, m) == 0)
      drive_watch(e, m, &r, x, until, b);
    dlock__etcd_req_stop(&r, m);
    dlock__etcd_wait_unregister(e, &reg);
  }
  dlock__etcd_req_free(&r);
  if (r.easy)
    curl_easy_cleanup(r.easy);
  if (m)
    curl_multi_cleanup(m);
  return rc;
}

int dlock__etcd_watch_wait(dlock__etcd *e, const char *key, size_t klen,
                           const char *end, size_t elen, int64_t from,
                           int noput, int64_t until, const dlock__budget *b) {
  watch_ctx x = {noput, 0, 0, NULL};
  int rc = watch_run(e, key, klen, end, elen, from, until, b, &x);
  return rc ? rc : x.event;
}

int dlock__etcd_watch_first(dlock__etcd *e, const char *key, size_t klen,
                            int64_t from, int64_t until, json_object **ev) {
  watch_ctx x = {0, 0, 1, NULL};
  *ev = NULL;
  int rc = watch_run(e, key, klen, NULL, 0, from, until, NULL, &x);
  if (rc || !x.first) {
    json_object_put(x.first);
    return rc;
  }
  *ev = x.first;
  return 1;
}

/* ---- auth ------------------------------------------------------------------
 */

/* Appends s as a JSON string (quotes and escapes). */
static void json_str(dlock__sb *b, const char *s) {
  dlock__sb_add(b, "\"", 1);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      dlock__sb_add(b, "\\", 1);
      dlock__sb_add(b, s, 1);
    } else if (ch < 32) {
      char u[8];
      snprintf(u, sizeof u, "\\u%04x", ch);
      dlock__sb_adds(b, u);
    } else {
      dlock__sb_add(b, s, 1);
    }
  }
  dlock__sb_add(b, "\"", 1);
}

int dlock__etcd_http_auth(dlock__etcd *e) {
  dlock__etcd_http *h = e->http;
  if (!h->user)
    return 0;
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, "{\"name\":");
  json_str(&b, h->user);
  dlock__sb_adds(&b, ",\"password\":");
  json_str(&b, h->password ? h->password : "");
  dlock__sb_adds(&b, "}");
  dlock__etcd_res res = {0};
  int rc = b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                 : dlock__etcd_call(e, "/v3/auth/authenticate", &b,
                                    DLOCK__ETCD_NOAUTH, &res);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  json_object *t = dlock__etcd_get(res.json, "token");
  const char *tok = t ? json_object_get_string(t) : NULL;
  char *copy = tok && *tok ? dlock__strdup(tok) : NULL;
  json_object_put(res.json);
  if (!copy)
    return tok && *tok ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                       : dlock__fail(DLOCK_EAUTH,
                                     "%s accepted user '%s' but gave no token "
                                     "(is auth enabled? etcdctl auth enable)",
                                     dlock__etcd_where(e, res.ep), h->user);
  dlock__mu_lock(&h->mu);
  free(h->token);
  h->token = copy;
  h->token_gen++;
  dlock__mu_unlock(&h->mu);
  return 0;
}

/* ---- the async driver's helpers -------------------------------------------
 */

void dlock__etcd_multi_reap(CURLM *m) {
  int left = 0;
  CURLMsg *msg;
  while ((msg = curl_multi_info_read(m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    dlock__etcd_req *r = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    CURLcode cc = msg->data.result;
    if (!r)
      continue;
    if (dlock__etcd_req_finish(r, m, cc)) {
      /* another endpoint now: sent again at once; after a round's pause
       * the owner keeps it on its list until r->retry_at */
      if (r->retry_at <= dlock__now_ms() && dlock__etcd_req_start(r, m) == 0)
        continue;
      r->done = r->done ? 1 : 0;
      if (r->on_done)
        r->on_done(r);
      continue;
    }
    if (r->on_done)
      r->on_done(r);
  }
}

void dlock__etcd_async_due(dlock__etcd_req **list, CURLM *m, int64_t now,
                           int64_t *next) {
  for (dlock__etcd_req **pp = list; *pp;) {
    dlock__etcd_req *r = *pp;
    if (r->retry_at <= now) {
      *pp = r->next;
      r->next = NULL;
      if (dlock__etcd_req_start(r, m) != 0 && r->on_done)
        r->on_done(r);
      continue;
    }
    if (r->retry_at < *next)
      *next = r->retry_at;
    pp = &r->next;
  }
}

void dlock__etcd_async_unlist(dlock__etcd_req **list, dlock__etcd_req *r) {
  for (dlock__etcd_req **pp = list; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      r->next = NULL;
      return;
    }
}
