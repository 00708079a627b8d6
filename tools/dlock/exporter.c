/*
 * exporter.c -- `dlock exporter --listen ADDR`: Prometheus metrics of a
 * whole Redis's lock space (lockscan.c) on GET /metrics, in the text
 * exposition format 0.0.4. One scan per scrape, bounded by
 * --scrape-timeout and --max-keys; per-lock series for at most
 * --max-locks locks (the ones with the most waiters, then the oldest
 * holds). Requests are served one at a time on one thread: a scan is
 * the whole cost, and two at once would only double Redis's load.
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

/* A label value: backslash, quote and newline escaped. */
static void label(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '\\')
      fputs("\\\\", f);
    else if (*s == '"')
      fputs("\\\"", f);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type,
                 const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const g_kinds[] = {"mutex",  "fair",      "fenced",
                                      "rwlock", "semaphore", "permits",
                                      "latch",  "counter"};
#define NKINDS (sizeof g_kinds / sizeof g_kinds[0])

typedef struct prow {
  const ls_lock *l;
  long long waiters, oldest_ms;
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

/* The exposition of one scrape into f. */
static void render(FILE *f, const obs_opts *o, const ls_result *r, int ok,
                   double secs) {
  head(f, "dlock_up", "gauge",
       "1 if the last scrape read every Redis node, else 0");
  fprintf(f, "dlock_up %d\n", ok);
  head(f, "dlock_scrape_duration_seconds", "gauge",
       "How long the scan of the lock space took");
  fprintf(f, "dlock_scrape_duration_seconds %.6f\n", secs);
  if (!ok)
    return;
  head(f, "dlock_scrape_keys_scanned", "gauge", "Keys the scan looked at");
  fprintf(f, "dlock_scrape_keys_scanned %lld\n", r->keys_scanned);
  head(f, "dlock_scrape_commands", "gauge", "Redis commands the scan sent");
  fprintf(f, "dlock_scrape_commands %lld\n", r->commands);
  head(f, "dlock_scrape_truncated", "gauge",
       "1 if --max-keys or --scrape-timeout cut the scan short");
  fprintf(f, "dlock_scrape_truncated %d\n", r->truncated);
  head(f, "dlock_redis_nodes", "gauge", "Redis masters scanned");
  fprintf(f, "dlock_redis_nodes %zu\n", r->nodes);

  long long wall = ls_wall_ms();
  long long held[NKINDS] = {0}, waiting[NKINDS] = {0}, oldest = 0;
  prow *rows = calloc(r->n + 1, sizeof *rows);
  for (size_t i = 0; i < r->n; i++) {
    const ls_lock *l = &r->locks[i];
    size_t k = 0;
    while (k < NKINDS && strcmp(g_kinds[k], l->kind) != 0)
      k++;
    if (k < NKINDS && l->nholders > 0)
      held[k]++;
    long long w = (long long)l->nwaiters + l->subscribers;
    if (k < NKINDS)
      waiting[k] += w;
    long long old = 0;
    for (size_t j = 0; j < l->nholders; j++)
      if (l->holders[j].since_ms > 0 && wall - l->holders[j].since_ms > old)
        old = wall - l->holders[j].since_ms;
    if (old > oldest)
      oldest = old;
    if (rows) {
      rows[i].l = l;
      rows[i].waiters = w;
      rows[i].oldest_ms = old;
    }
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
  if (!rows)
    return;
  qsort(rows, r->n, sizeof *rows, prow_cmp);
  size_t n = r->n < (size_t)o->max_locks ? r->n : (size_t)o->max_locks;
  head(f, "dlock_series_truncated", "gauge",
       "Locks left out of the per-lock series by --max-locks");
  fprintf(f, "dlock_series_truncated %zu\n", r->n - n);
  head(f, "dlock_lock_holders", "gauge", "Holders of a lock");
  for (size_t i = 0; i < n; i++) {
    fputs("dlock_lock_holders", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %zu\n", rows[i].l->nholders);
  }
  head(f, "dlock_lock_waiters", "gauge",
       "Waiters of a lock (queue entries, or subscribed clients)");
  for (size_t i = 0; i < n; i++) {
    fputs("dlock_lock_waiters", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %lld\n", rows[i].waiters);
  }
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
  head(f, "dlock_lock_hold_age_seconds", "gauge",
       "Age of a lock's oldest published hold");
  for (size_t i = 0; i < n; i++) {
    if (rows[i].oldest_ms <= 0)
      continue;
    fputs("dlock_lock_hold_age_seconds", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %.3f\n", (double)rows[i].oldest_ms / 1000.0);
  }
  head(f, "dlock_lock_ttl_seconds", "gauge",
       "Time to live of a lock's key (-1: none)");
  for (size_t i = 0; i < n; i++) {
    fputs("dlock_lock_ttl_seconds", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %.3f\n",
            rows[i].l->ttl_ms < 0 ? -1.0 : (double)rows[i].l->ttl_ms / 1000.0);
  }
  head(f, "dlock_lock_dead_holders", "gauge",
       "Holders whose client info key is gone (dead, or not dlock)");
  for (size_t i = 0; i < n; i++) {
    long long d = 0;
    for (size_t j = 0; j < rows[i].l->nholders; j++)
      d += rows[i].l->holders[j].alive == 0;
    fputs("dlock_lock_dead_holders", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %lld\n", d);
  }
  head(f, "dlock_permits_available", "gauge",
       "A semaphore's (or permits object's) available permits");
  for (size_t i = 0; i < n; i++) {
    const char *k = rows[i].l->kind;
    if (strcmp(k, "semaphore") != 0 && strcmp(k, "permits") != 0)
      continue;
    fputs("dlock_permits_available", f);
    lock_labels(f, rows[i].l);
    fprintf(f, " %lld\n", rows[i].l->value);
  }
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
  int ok = obs_scan(o, o->scrape_timeout_ms, &r) == 0;
  double secs = (double)(dlc_now_ms() - t0) / 1000.0;
  char *body = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&body, &len);
  if (!f) {
    respond(fd, "500 Internal Server Error", "text/plain", "no memory\n", 10);
  } else {
    render(f, o, ok ? &r : NULL, ok, secs);
    fclose(f);
    respond_n(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
              len, strcmp(method, "HEAD") == 0 ? 0 : len);
  }
  free(body);
  if (ok)
    ls_free(&r);
}

int cli_exporter(const obs_opts *o) {
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
  printf("dlock exporter: listening on %s%s%s:%s\n", strchr(hb, ':') ? "[" : "",
         hb, strchr(hb, ':') ? "]" : "", pb);
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
