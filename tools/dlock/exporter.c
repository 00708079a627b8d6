/*
 * exporter.c -- `dlock exporter --listen ADDR`: Prometheus metrics of a
 * whole Redis's lock space (lockscan.c) on GET /metrics, in the text
 * exposition format 0.0.4. One scan per scrape, every master at once
 * (lockscan.c), bounded by --scrape-timeout (each master's round trips by
 * --call-timeout, 2 s, within it) and --max-keys; a master that fails
 * costs its own series only: dlock_up{node} 0 and dlock_scrape_error{node,
 * reason}, the others' series stay. Per-lock series for at most
 * --max-locks locks (the ones with the most waiters, then the oldest
 * holds); label values are valid UTF-8 whatever the lock names' bytes.
 * Requests are served one at a time on one thread: a scan is the whole
 * cost, and two at once would only double Redis's load. Every line it
 * logs is timestamped.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"
#include "obs.h"
#include "url.h"

static volatile sig_atomic_t g_stop;
static void on_sig(int sig) {
  (void)sig;
  g_stop = 1;
}

/* ADDR: HOST:PORT, [V6]:PORT or :PORT (every interface). A listening
 * socket, or -1 after printing why. */
static int listen_on(const char *addr) {
  char host[256] = "";
  const char *port;
  if (addr[0] == '[') {
    const char *e = strchr(addr, ']');
    if (!e || e[1] != ':' || (size_t)(e - addr - 1) >= sizeof host) {
      cli_err("invalid --listen '%s': expected [V6ADDR]:PORT", addr);
      return -1;
    }
    memcpy(host, addr + 1, (size_t)(e - addr - 1));
    port = e + 2;
  } else {
    const char *c = strrchr(addr, ':');
    if (!c || (size_t)(c - addr) >= sizeof host) {
      cli_err("invalid --listen '%s': expected [HOST]:PORT (e.g. :9471 or "
              "127.0.0.1:9471)",
              addr);
      return -1;
    }
    memcpy(host, addr, (size_t)(c - addr));
    port = c + 1;
  }
  size_t pl = strlen(port);
  if (pl == 0 || pl > 5 || strspn(port, "0123456789") != pl ||
      atoi(port) > 65535) {
    cli_err("invalid --listen '%s': port '%s' is not 0..65535", addr, port);
    return -1;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int gr = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
  if (gr != 0) {
    cli_err("invalid --listen '%s': %s", addr, gai_strerror(gr));
    return -1;
  }
  int fd = -1, err = 0;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    cli_err("cannot listen on '%s': %s", addr, strerror(err));
  return fd;
}

/* A label value: valid UTF-8 whatever the bytes (a byte that starts no
 * valid sequence becomes U+FFFD), backslash, quote and newline escaped. */
static void label(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  while (*p) {
    int n = *p < 0x80             ? 1
            : (*p & 0xe0) == 0xc0 ? 2
            : (*p & 0xf0) == 0xe0 ? 3
            : (*p & 0xf8) == 0xf0 ? 4
                                  : 0;
    int ok = n > 0 && !(n == 2 && *p < 0xc2) && !(n == 4 && *p > 0xf4);
    for (int k = 1; ok && k < n; k++)
      ok = (p[k] & 0xc0) == 0x80;
    if (ok && n == 3) /* no overlong forms, no surrogates */
      ok = !(*p == 0xe0 && p[1] < 0xa0) && !(*p == 0xed && p[1] >= 0xa0);
    if (ok && n == 4)
      ok = !(*p == 0xf0 && p[1] < 0x90) && !(*p == 0xf4 && p[1] >= 0x90);
    if (!ok) {
      fputs("\xef\xbf\xbd", f);
      p++;
      continue;
    }
    if (*p == '\\')
      fputs("\\\\", f);
    else if (*p == '"')
      fputs("\\\"", f);
    else if (*p == '\n')
      fputs("\\n", f);
    else
      fwrite(p, 1, (size_t)n, f);
    p += n;
  }
  fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type,
                 const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const g_kinds[] = {"mutex",   "fair",   "fenced",
                                      "spin",    "rwlock", "semaphore",
                                      "permits", "latch",  "counter"};
#define NKINDS (sizeof g_kinds / sizeof g_kinds[0])

typedef struct prow {
  const ls_lock *l;
  long long waiters, oldest_ms, oldest_wait_ms;
} prow;

static int prow_cmp(const void *a, const void *b) {
  const prow *x = a, *y = b;
  if (x->waiters != y->waiters)
    return x->waiters > y->waiters ? -1 : 1;
  if (x->oldest_ms != y->oldest_ms)
    return x->oldest_ms > y->oldest_ms ? -1 : 1;
  return strcmp(x->l->name, y->l->name);
}

static void lock_labels(FILE *f, const ls_lock *l) {
  fputs("{name=", f);
  label(f, l->name);
  fprintf(f, ",kind=\"%s\"}", l->kind);
}

/* Per master: dlock_up, and dlock_scrape_error with why for a failed one.
 * A scan that could not even list the masters names the URL. */
static void render_nodes(FILE *f, const ls_result *r, const char *url,
                         const char *whole) {
  head(f, "dlock_up", "gauge",
       "1 if the last scrape read this Redis master whole, else 0");
  for (size_t i = 0; i < r->nnodes; i++) {
    fputs("dlock_up{node=", f);
    label(f, r->nodes[i]);
    fprintf(f, "} %d\n", r->node_ok[i]);
  }
  if (whole) {
    fputs("dlock_up{node=", f);
    label(f, url);
    fputs("} 0\n", f);
  }
  head(f, "dlock_scrape_error", "gauge",
       "1 per master the last scrape could not read, and why");
  for (size_t i = 0; i < r->nerrors; i++) {
    fputs("dlock_scrape_error{node=", f);
    label(f, r->errors[i].node);
    fputs(",reason=", f);
    label(f, r->errors[i].why);
    fputs("} 1\n", f);
  }
  if (whole) {
    fputs("dlock_scrape_error{node=", f);
    label(f, url);
    fputs(",reason=", f);
    label(f, whole);
    fputs("} 1\n", f);
  }
}

/* The oldest hold and wait of l (ms; 0: none dated). */
static void ages(const ls_lock *l, long long wall, long long *hold,
                 long long *wait) {
  *hold = *wait = 0;
  for (size_t j = 0; j < l->nholders; j++)
    if (l->holders[j].since_ms > 0 && wall - l->holders[j].since_ms > *hold)
      *hold = wall - l->holders[j].since_ms;
  for (size_t j = 0; j < l->nwaiters; j++)
    if (l->waiters[j].since_ms > 0 && wall - l->waiters[j].since_ms > *wait)
      *wait = wall - l->waiters[j].since_ms;
}

/* The totals by kind, the oldest hold and wait; rows[i] for each lock. */
static void render_totals(FILE *f, const ls_result *r, prow *rows) {
  long long wall = ls_wall_ms();
  long long held[NKINDS] = {0}, waiting[NKINDS] = {0}, oldest = 0, oldw = 0;
  for (size_t i = 0; i < r->n; i++) {
    const ls_lock *l = &r->locks[i];
    size_t k = 0;
    while (k < NKINDS && strcmp(g_kinds[k], l->kind) != 0)
      k++;
    long long w = (long long)l->nwaiters > l->subscribers
                      ? (long long)l->nwaiters
                      : l->subscribers;
    if (k < NKINDS) {
      held[k] += l->nholders > 0;
      waiting[k] += w;
    }
    long long ho, wo;
    ages(l, wall, &ho, &wo);
    oldest = ho > oldest ? ho : oldest;
    oldw = wo > oldw ? wo : oldw;
    rows[i] = (prow){l, w, ho, wo};
  }
  head(f, "dlock_locks_held", "gauge",
       "Locks with at least one holder, by kind");
  for (size_t k = 0; k < NKINDS; k++)
    fprintf(f, "dlock_locks_held{kind=\"%s\"} %lld\n", g_kinds[k], held[k]);
  head(f, "dlock_waiters", "gauge", "Waiting clients, by kind");
  for (size_t k = 0; k < NKINDS; k++)
    fprintf(f, "dlock_waiters{kind=\"%s\"} %lld\n", g_kinds[k], waiting[k]);
  head(f, "dlock_oldest_hold_age_seconds", "gauge",
       "Age of the oldest hold whose start its client published");
  fprintf(f, "dlock_oldest_hold_age_seconds %.3f\n", (double)oldest / 1000.0);
  head(f, "dlock_oldest_wait_seconds", "gauge",
       "How long the longest-waiting waiter has waited (its wait's start)");
  fprintf(f, "dlock_oldest_wait_seconds %.3f\n", (double)oldw / 1000.0);
}

/* One per-lock gauge over rows[0..n): value(row) for each lock with
 * want(row) set. */
static void per_lock(FILE *f, const char *name, const char *help,
                     const prow *rows, size_t n, int (*want)(const prow *),
                     double (*value)(const prow *)) {
  head(f, name, "gauge", help);
  for (size_t i = 0; i < n; i++) {
    if (want && !want(&rows[i]))
      continue;
    fputs(name, f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %.3f\n", value(&rows[i]));
  }
}

static double v_holders(const prow *p) { return (double)p->l->nholders; }
static double v_waiters(const prow *p) { return (double)p->waiters; }
static int w_hold_age(const prow *p) { return p->oldest_ms > 0; }
static double v_hold_age(const prow *p) { return (double)p->oldest_ms / 1e3; }
static int w_wait_age(const prow *p) { return p->oldest_wait_ms > 0; }
static double v_wait_age(const prow *p) {
  return (double)p->oldest_wait_ms / 1e3;
}
static double v_ttl(const prow *p) {
  return p->l->ttl_ms < 0 ? -1.0 : (double)p->l->ttl_ms / 1000.0;
}
static double v_dead(const prow *p) {
  long long d = 0;
  for (size_t j = 0; j < p->l->nholders; j++)
    d += p->l->holders[j].alive == 0;
  return (double)d;
}
static int w_permits(const prow *p) {
  return strcmp(p->l->kind, "semaphore") == 0 ||
         strcmp(p->l->kind, "permits") == 0;
}
static double v_value(const prow *p) { return (double)p->l->value; }

static void render_locks(FILE *f, const obs_opts *o, const ls_result *r,
                         prow *rows) {
  qsort(rows, r->n, sizeof *rows, prow_cmp);
  size_t n = r->n < (size_t)o->max_locks ? r->n : (size_t)o->max_locks;
  head(f, "dlock_series_truncated", "gauge",
       "Locks left out of the per-lock series by --max-locks");
  fprintf(f, "dlock_series_truncated %zu\n", r->n - n);
  per_lock(f, "dlock_lock_holders", "Holders of a lock", rows, n, NULL,
           v_holders);
  per_lock(f, "dlock_lock_waiters",
           "Waiters of a lock (queue entries, or subscribed clients)", rows, n,
           NULL, v_waiters);
  head(f, "dlock_fair_queue_length", "gauge", "Entries of a fair lock's queue");
  for (size_t i = 0; i < n; i++) {
    long long q = 0;
    for (size_t j = 0; j < rows[i].l->nwaiters; j++)
      q += strcmp(rows[i].l->waiters[j].queue, "fair") == 0;
    if (strcmp(rows[i].l->kind, "fair") != 0)
      continue;
    fputs("dlock_fair_queue_length{name=", f);
    label(f, rows[i].l->name);
    fprintf(f, "} %lld\n", q);
  }
  per_lock(f, "dlock_lock_hold_age_seconds",
           "Age of a lock's oldest published hold", rows, n, w_hold_age,
           v_hold_age);
  per_lock(f, "dlock_lock_oldest_wait_seconds",
           "How long a lock's longest waiter has waited (from its wait's "
           "start)",
           rows, n, w_wait_age, v_wait_age);
  per_lock(f, "dlock_lock_ttl_seconds",
           "Time to live of a lock's key (-1: none)", rows, n, NULL, v_ttl);
  per_lock(f, "dlock_lock_dead_holders",
           "Holders whose client info key is gone (dead, or not dlock)", rows,
           n, NULL, v_dead);
  per_lock(f, "dlock_permits_available",
           "A semaphore's (or permits object's) available permits", rows, n,
           w_permits, v_value);
}

/* The exposition of one scrape into f (whole: why the masters could not
 * even be listed, else NULL). */
static void render(FILE *f, const obs_opts *o, const ls_result *r,
                   const char *whole, double secs) {
  char url[1024];
  dlc_url_redact(o->resolved_url, url, sizeof url);
  render_nodes(f, r, url, whole);
  head(f, "dlock_scrape_duration_seconds", "gauge",
       "How long the scan of the lock space took");
  fprintf(f, "dlock_scrape_duration_seconds %.6f\n", secs);
  head(f, "dlock_scrape_timeout_seconds", "gauge",
       "The bound of a scrape (--scrape-timeout)");
  fprintf(f, "dlock_scrape_timeout_seconds %.3f\n",
          (double)o->scrape_timeout_ms / 1000.0);
  if (whole)
    return;
  head(f, "dlock_scrape_keys_scanned", "gauge", "Keys the scan looked at");
  fprintf(f, "dlock_scrape_keys_scanned %lld\n", r->keys_scanned);
  head(f, "dlock_scrape_commands", "gauge", "Redis commands the scan sent");
  fprintf(f, "dlock_scrape_commands %lld\n", r->commands);
  head(f, "dlock_scrape_truncated", "gauge",
       "1 if --max-keys or --scrape-timeout cut the scan short");
  fprintf(f, "dlock_scrape_truncated %d\n", r->truncated);
  head(f, "dlock_redis_nodes", "gauge", "Redis masters scanned");
  fprintf(f, "dlock_redis_nodes %zu\n", r->nnodes);
  prow *rows = calloc(r->n + 1, sizeof *rows);
  if (!rows)
    return;
  render_totals(f, r, rows);
  render_locks(f, o, r, rows);
  free(rows);
}

/* Sends the response; body_len: the bytes of body to send (0 for HEAD,
 * whose Content-Length is still len). */
static void respond_n(int fd, const char *status, const char *ctype,
                      const char *body, size_t len, size_t body_len) {
  char h[256];
  int n = snprintf(h, sizeof h,
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: "
                   "%zu\r\nConnection: close\r\n\r\n",
                   status, ctype, len);
  const char *parts[2] = {h, body};
  size_t lens[2] = {(size_t)n, body_len};
  for (int p = 0; p < 2; p++) {
    size_t off = 0;
    while (off < lens[p]) {
      ssize_t w = send(fd, parts[p] + off, lens[p] - off, MSG_NOSIGNAL);
      if (w <= 0)
        return;
      off += (size_t)w;
    }
  }
}

static void respond(int fd, const char *status, const char *ctype,
                    const char *body, size_t len) {
  respond_n(fd, status, ctype, body, len, len);
}

/* Reads the request head (at most 8 KB, 5 s). 0, or -1. */
static int read_head(int fd, char *buf, size_t cap) {
  size_t n = 0;
  long long end = dlc_now_ms() + 5000;
  while (n + 1 < cap) {
    long long left = end - dlc_now_ms();
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, (int)left) <= 0)
      return -1;
    ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
    if (k <= 0)
      return -1;
    n += (size_t)k;
    buf[n] = '\0';
    if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
      return 0;
  }
  return -1;
}

/* One timestamped line on stderr when what failed changes from one scrape
 * to the next (a master failing, answering again, the whole scan): not one
 * per scrape. */
static void log_changes(const char *whole, const ls_result *r) {
  static char last[4096];
  char now[4096];
  size_t at = 0;
  now[0] = '\0';
  if (whole)
    at += (size_t)snprintf(now, sizeof now, "%s", whole);
  for (size_t i = 0; i < r->nerrors && at < sizeof now; i++)
    at += (size_t)snprintf(now + at, sizeof now - at, "%smaster %s: %s",
                           at ? "; " : "", r->errors[i].node, r->errors[i].why);
  if (strcmp(now, last) == 0)
    return;
  if (now[0])
    cli_err("scrape incomplete: %s", now);
  else
    cli_err("scrape complete again: every master answered");
  snprintf(last, sizeof last, "%s", now);
}

static void serve(int fd, const obs_opts *o) {
  char req[8192];
  if (read_head(fd, req, sizeof req) != 0)
    return;
  char method[16] = "", path[1024] = "";
  if (sscanf(req, "%15s %1023s", method, path) != 2) {
    respond(fd, "400 Bad Request", "text/plain", "bad request\n", 12);
    return;
  }
  char *q = strchr(path, '?');
  if (q)
    *q = '\0';
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    respond(fd, "405 Method Not Allowed", "text/plain", "GET only\n", 9);
    return;
  }
  if (strcmp(path, "/") == 0) {
    static const char page[] = "dlock exporter: the metrics are at /metrics\n";
    respond(fd, "200 OK", "text/plain", page, sizeof page - 1);
    return;
  }
  if (strcmp(path, "/metrics") != 0) {
    respond(fd, "404 Not Found", "text/plain", "not found\n", 10);
    return;
  }
  ls_result r;
  long long t0 = dlc_now_ms();
  ls_opts lo = {o->pattern,           o->scan_count, o->max_keys,
                o->scrape_timeout_ms, o->call_ms,    o->all};
  char whole[1024] = "";
  int ex = ls_scan(o->admin, &lo, &r, whole, sizeof whole);
  double secs = (double)(dlc_now_ms() - t0) / 1000.0;
  log_changes(ex ? whole : NULL, &r);
  char *body = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&body, &len);
  if (!f) {
    respond(fd, "500 Internal Server Error", "text/plain", "no memory\n", 10);
  } else {
    render(f, o, &r, ex ? whole : NULL, secs);
    fclose(f);
    respond_n(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
              len, strcmp(method, "HEAD") == 0 ? 0 : len);
  }
  free(body);
  ls_free(&r);
}

/* One scan before serving: a user the ACL does not let read the lock space,
 * a refused login or certificate is a reason not to start (its dlock_up
 * would be 0 for ever), 77; an unreachable master is not (it may come
 * back): logged, and served as dlock_up 0 meanwhile. */
static int first_scan(const obs_opts *o) {
  ls_result r;
  ls_opts lo = {o->pattern,           o->scan_count, o->max_keys,
                o->scrape_timeout_ms, o->call_ms,    o->all};
  char whole[1024] = "";
  int ex = ls_scan(o->admin, &lo, &r, whole, sizeof whole);
  if (ex == CLI_EX_AUTH) {
    cli_say_failed(o->resolved_url, ex, whole);
  } else if (ex == 0) {
    for (size_t i = 0; i < r.nerrors && !ex; i++)
      if (r.errors[i].code == CLI_EX_AUTH) {
        cli_err("not starting: master %s: %s", r.errors[i].node,
                r.errors[i].why);
        ex = CLI_EX_AUTH;
      }
    if (!ex)
      log_changes(NULL, &r);
  } else {
    log_changes(whole, &r);
    ex = 0;
  }
  ls_free(&r);
  return ex;
}

int cli_exporter(const obs_opts *o) {
  int ex = first_scan(o);
  if (ex)
    return ex;
  int lfd = listen_on(o->listen);
  if (lfd < 0)
    return CLI_EX_USAGE;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char hb[128] = "?", pb[16] = "?";
  if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, hb, sizeof hb, pb, sizeof pb,
                NI_NUMERICHOST | NI_NUMERICSERV);
  /* One line on stdout, so a script that passed port 0 learns the port. */
  char when[40];
  cli_stamp(when, sizeof when);
  printf("%s dlock exporter (a scrape: at most %.3g s): listening on "
         "%s%s%s:%s\n",
         when, (double)o->scrape_timeout_ms / 1000.0,
         strchr(hb, ':') ? "[" : "", hb, strchr(hb, ':') ? "]" : "", pb);
  fflush(stdout);
  while (!g_stop) {
    struct pollfd p = {lfd, POLLIN, 0};
    if (poll(&p, 1, 500) <= 0)
      continue;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    serve(fd, o);
    close(fd);
  }
  close(lfd);
  return 0;
}
