/*
 * faultproxy.c -- the fault-injecting proxy of faultproxy.h: an accept
 * thread, and per connection one thread per direction. The request thread
 * parses commands and queues, per command, the fault it carries (usually
 * none); the reply thread parses replies, pops the queue in order and
 * applies the fault to that reply's bytes. A held request (FP_HOLD) is
 * not forwarded: a thread of its own delivers it later on a fresh server
 * connection.
 */
#include "faultproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "th.h"

#define FP_QUEUE 4096 /* commands in flight per connection */

struct fp_proxy {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int lfd, port, target_port;
  char host[64];
  char url[64];
  char match[128]; /* armed fault: match[0] != 0 */
  int mode, delay_ms;
  /* A fault moved by NOSCRIPT: only the EVAL with as many arguments as
   * the EVALSHA that missed (0: any request) -- another script naming the
   * lock, sent meanwhile (the client info write lists held lock names),
   * must not take it. */
  size_t match_argc;
  /* FP_HOLD rules: hold the next n requests whose first argument is verb
   * (NULL: any) and that contain match, each delay_ms. */
  struct {
    char verb[16], match[128];
    int delay_ms, n;
  } hold[4];
  int late_noscript; /* held copies the server refused with NOSCRIPT */
  int fired;
  char count_match[128];
  int count;
};

typedef struct fp_late fp_late;
static void late_unref(fp_late *l);

typedef struct fp_conn {
  fp_proxy *p;
  int cfd, sfd;
  pthread_mutex_t mu;
  int refs;
  int q[FP_QUEUE], delay[FP_QUEUE]; /* per command: mode (0 none), delay */
  size_t argc[FP_QUEUE];            /* per command: its argument count */
  unsigned head, tail;
  /* The connection's AUTH / HELLO / SELECT requests, replayed before a
   * held request on its own connection (requests thread only). */
  char hs[1024];
  size_t hsl;
  int nhs;
  fp_late *hold; /* collecting the bytes behind a held request */
} fp_conn;

/* A held request on its way (FP_HOLD), and what follows it on its
 * connection: TCP keeps a stream in order, so the bytes after a held
 * request wait behind it -- they are collected here until the late copy
 * goes, and go with it (a proxy that forwarded them would hand the client
 * their replies as the held request's: no network does that). Their
 * replies go to the late copy's connection, so a request that comes after
 * that ends the client's connection (a reset, as a link that lost them). */
struct fp_late {
  fp_proxy *p;
  pthread_mutex_t mu;
  int refs; /* the connection (while it collects) and the thread */
  int sent; /* the thread took the bytes: nothing more joins them */
  int delay_ms;
  int nhs;     /* handshake requests replayed before the held one */
  char *bytes; /* the handshake, the held request, what followed it */
  size_t len, cap;
};

static int write_all(int fd, const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static void conn_kill(fp_conn *c) {
  shutdown(c->cfd, SHUT_RDWR);
  shutdown(c->sfd, SHUT_RDWR);
}

static void conn_unref(fp_conn *c) {
  pthread_mutex_lock(&c->mu);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (!last)
    return;
  if (c->hold)
    late_unref(c->hold);
  close(c->cfd);
  close(c->sfd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static int req_contains(const redisReply *r, const char *m) {
  if (r->type != REDIS_REPLY_ARRAY)
    return 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    if (e->type == REDIS_REPLY_STRING && memmem(e->str, e->len, m, strlen(m)))
      return 1;
  }
  return 0;
}

/* The fault the request r carries (claiming an armed one), queued; a held
 * request (FP_HOLD) is not queued (no reply comes for it on this
 * connection): returns its delay then, else 0. */
static int classify(fp_conn *c, const redisReply *r) {
  fp_proxy *p = c->p;
  int mode = 0, delay = 0;
  size_t argc = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
  pthread_mutex_lock(&p->mu);
  if (p->count_match[0] && req_contains(r, p->count_match))
    p->count++;
  for (int i = 0; i < 4 && !mode; i++)
    if (p->hold[i].n > 0 && req_contains(r, p->hold[i].match) &&
        (!p->hold[i].verb[0] ||
         (argc > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
          strcasecmp(r->element[0]->str, p->hold[i].verb) == 0))) {
      mode = FP_HOLD;
      delay = p->hold[i].delay_ms;
      p->hold[i].n--;
    }
  if (!mode && p->match[0] && req_contains(r, p->match) &&
      (!p->match_argc ||
       (argc == p->match_argc && r->element[0]->type == REDIS_REPLY_STRING &&
        strcasecmp(r->element[0]->str, "EVAL") == 0))) {
    mode = p->mode;
    delay = p->delay_ms;
    p->match[0] = '\0';
    p->match_argc = 0;
  }
  pthread_mutex_unlock(&p->mu);
  if (mode == FP_HOLD)
    return delay > 0 ? delay : 1;
  pthread_mutex_lock(&c->mu);
  if (c->tail - c->head < FP_QUEUE) {
    c->q[c->tail % FP_QUEUE] = mode;
    c->delay[c->tail % FP_QUEUE] = delay;
    c->argc[c->tail % FP_QUEUE] = argc;
    c->tail++;
  }
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static int connect_target(const fp_proxy *p);
static void fired(fp_proxy *p);

/* Delivers a held request after its delay on a connection of its own and
 * reads what comes back (the handshake's replies, then its own), so it has
 * run when it counts as fired. */
static void late_unref(fp_late *l) {
  pthread_mutex_lock(&l->mu);
  int last = --l->refs == 0;
  pthread_mutex_unlock(&l->mu);
  if (last) {
    pthread_mutex_destroy(&l->mu);
    free(l->bytes);
    free(l);
  }
}

/* Appends b[0..n) to what waits behind the held request: 1, or 0 when the
 * late copy went already (the stream flows again). */
static int late_add(fp_late *l, const char *b, size_t n) {
  pthread_mutex_lock(&l->mu);
  int ok = !l->sent;
  if (ok && l->len + n > l->cap) {
    size_t cap = (l->len + n) * 2;
    char *nb = realloc(l->bytes, cap);
    ok = nb != NULL;
    if (nb) {
      l->bytes = nb;
      l->cap = cap;
    }
  }
  if (ok && n > 0) {
    memcpy(l->bytes + l->len, b, n);
    l->len += n;
  }
  pthread_mutex_unlock(&l->mu);
  return ok;
}

/* Delivers a held request, and what followed it, after its delay on a
 * connection of its own and reads what comes back (the handshake's
 * replies, then the held request's: so it has run when it counts as
 * fired). */
static void *late_main(void *arg) {
  fp_late *l = arg;
  th_sleep_ms(l->delay_ms);
  pthread_mutex_lock(&l->mu);
  l->sent = 1;
  pthread_mutex_unlock(&l->mu);
  int fd = connect_target(l->p);
  int noscript = 0, got = 0;
  redisReader *rd = redisReaderCreate();
  if (fd >= 0 && rd && write_all(fd, l->bytes, l->len) == 0) {
    shutdown(fd, SHUT_WR);
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
      redisReaderFeed(rd, buf, (size_t)n);
      void *rep;
      while (redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
        const redisReply *x = rep;
        if (got++ == l->nhs) /* the held request's own */
          noscript = x->type == REDIS_REPLY_ERROR && x->str &&
                     strncmp(x->str, "NOSCRIPT", 8) == 0;
        freeReplyObject(rep);
      }
    }
  }
  if (rd)
    redisReaderFree(rd);
  if (fd >= 0)
    close(fd);
  if (noscript) {
    pthread_mutex_lock(&l->p->mu);
    l->p->late_noscript++;
    pthread_mutex_unlock(&l->p->mu);
  }
  fired(l->p);
  late_unref(l);
  return NULL;
}

/* Remembers a handshake request (AUTH, HELLO, SELECT) of the connection. */
static void note_handshake(fp_conn *c, const redisReply *r, const char *b,
                           size_t n) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
      r->element[0]->type != REDIS_REPLY_STRING)
    return;
  const char *verb = r->element[0]->str;
  if ((strcasecmp(verb, "AUTH") == 0 || strcasecmp(verb, "HELLO") == 0 ||
       strcasecmp(verb, "SELECT") == 0) &&
      c->hsl + n <= sizeof c->hs) {
    memcpy(c->hs + c->hsl, b, n);
    c->hsl += n;
    c->nhs++;
  }
}

/* Sends request bytes b[0..n) on their way: now, or held (delay_ms > 0):
 * then what follows on the connection waits with them (requests()). */
static int pass_request(fp_conn *c, int delay_ms, const char *b, size_t n) {
  if (delay_ms <= 0)
    return write_all(c->sfd, b, n);
  fp_late *l = calloc(1, sizeof *l);
  if (!l)
    return -1;
  pthread_mutex_init(&l->mu, NULL);
  l->p = c->p;
  l->refs = 2;
  l->delay_ms = delay_ms;
  l->nhs = c->nhs;
  if (!late_add(l, c->hs, c->hsl) || !late_add(l, b, n)) {
    late_unref(l);
    late_unref(l);
    return -1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, late_main, l) != 0) {
    late_unref(l);
    late_unref(l);
    return -1;
  }
  pthread_detach(t);
  c->hold = l;
  return 0;
}

/* Requests are passed on one by one (each whole), so a held one can be
 * taken out of the stream. */
static void *requests(void *arg) {
  fp_conn *c = arg;
  redisReader *rd = redisReaderCreate();
  size_t cap = 65536, len = 0;
  char *pend = malloc(cap);
  int alive = rd && pend;
  while (alive) {
    if (cap - len < 16384) {
      char *np = realloc(pend, cap * 2);
      if (!np)
        break;
      pend = np;
      cap *= 2;
    }
    ssize_t n = recv(c->cfd, pend + len, cap - len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || redisReaderFeed(rd, pend + len, (size_t)n) != REDIS_OK)
      break;
    len += (size_t)n;
    void *req;
    while (alive && redisReaderGetReply(rd, &req) == REDIS_OK && req) {
      size_t end = len - (rd->len - rd->pos); /* this request's end */
      note_handshake(c, req, pend, end);
      if (c->hold && !late_add(c->hold, pend, end))
        alive = 0; /* the late copy went with the held requests' replies:
                      this connection's stream is broken, it ends */
      else if (!c->hold)
        alive = pass_request(c, classify(c, req), pend, end) == 0;
      freeReplyObject(req);
      memmove(pend, pend + end, len - end);
      len -= end;
    }
  }
  free(pend);
  redisReaderFree(rd);
  conn_kill(c);
  conn_unref(c);
  return NULL;
}

static int pop_fault(fp_conn *c, int *delay, size_t *argc) {
  int mode = 0;
  pthread_mutex_lock(&c->mu);
  if (c->head != c->tail) {
    mode = c->q[c->head % FP_QUEUE];
    *delay = c->delay[c->head % FP_QUEUE];
    *argc = c->argc[c->head % FP_QUEUE];
    c->head++;
  }
  pthread_mutex_unlock(&c->mu);
  return mode;
}

static void fired(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  p->fired++;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Passes on or faults one reply (bytes b[0..n)); -1 to end the
 * connection. */
static int one_reply(fp_conn *c, const redisReply *r, const char *b, size_t n) {
  int delay = 0;
  size_t argc = 0;
  int mode = pop_fault(c, &delay, &argc);
  if (mode && r->type == REDIS_REPLY_ERROR &&
      strncmp(r->str, "NOSCRIPT", 8) == 0) {
    /* Not run: the fault moves to the EVAL the client sends next. */
    pthread_mutex_lock(&c->p->mu);
    /* The client's EVAL carries the same keys: match them again. */
    c->p->mode = mode;
    c->p->delay_ms = delay;
    if (!c->p->match[0])
      snprintf(c->p->match, sizeof c->p->match, "%s", c->p->count_match);
    c->p->match_argc = argc;
    pthread_mutex_unlock(&c->p->mu);
    mode = 0;
  }
  switch (mode) {
  case FP_LOSE:
    fired(c->p);
    return -1;
  case FP_CUT:
    (void)write_all(c->cfd, b, n / 2);
    fired(c->p);
    return -1;
  case FP_DELAY:
    th_sleep_ms(delay);
    fired(c->p);
    break;
  default:
    break;
  }
  return write_all(c->cfd, b, n);
}

static void *replies(void *arg) {
  fp_conn *c = arg;
  redisReader *rd = redisReaderCreate();
  size_t cap = 65536, len = 0;
  char *pend = malloc(cap);
  int alive = rd && pend;
  while (alive) {
    if (cap - len < 16384) {
      char *np = realloc(pend, cap * 2);
      if (!np)
        break;
      pend = np;
      cap *= 2;
    }
    ssize_t n = recv(c->sfd, pend + len, cap - len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || redisReaderFeed(rd, pend + len, (size_t)n) != REDIS_OK)
      break;
    len += (size_t)n;
    void *rep;
    while (alive && redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
      size_t end = len - (rd->len - rd->pos); /* this reply's last byte + 1 */
      alive = one_reply(c, rep, pend, end) == 0;
      freeReplyObject(rep);
      memmove(pend, pend + end, len - end);
      len -= end;
    }
  }
  free(pend);
  redisReaderFree(rd);
  conn_kill(c);
  conn_unref(c);
  return NULL;
}

static int connect_target(const fp_proxy *p) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_port = htons((uint16_t)p->target_port);
  inet_pton(AF_INET, p->host, &sa.sin_addr);
  if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof sa) == 0)
    return s;
  if (s >= 0)
    close(s);
  return -1;
}

static void *accept_main(void *arg) {
  fp_proxy *p = arg;
  for (;;) {
    int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0)
      continue;
    int sfd = connect_target(p);
    fp_conn *c = sfd >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
      close(cfd);
      if (sfd >= 0)
        close(sfd);
      continue;
    }
    c->p = p;
    c->cfd = cfd;
    c->sfd = sfd;
    c->refs = 2;
    pthread_mutex_init(&c->mu, NULL);
    pthread_t t1, t2;
    if (pthread_create(&t1, NULL, requests, c) != 0 ||
        pthread_create(&t2, NULL, replies, c) != 0)
      abort(); /* a half-started pair cannot be cleaned up */
    pthread_detach(t1);
    pthread_detach(t2);
  }
  return NULL;
}

fp_proxy *fp_new(const char *host, int target_port) {
  fp_proxy *p = calloc(1, sizeof *p);
  CHECK(p != NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  snprintf(p->host, sizeof p->host, "%s", host ? host : "127.0.0.1");
  p->target_port = target_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  CHECK(p->lfd >= 0);
  CHECK(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  CHECK(listen(p->lfd, 128) == 0);
  CHECK(getsockname(p->lfd, (struct sockaddr *)&sa, &sl) == 0);
  p->port = ntohs(sa.sin_port);
  snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, accept_main, p) == 0);
  pthread_detach(t);
  return p;
}

const char *fp_url(const fp_proxy *p) { return p->url; }
int fp_port(const fp_proxy *p) { return p->port; }

void fp_arm(fp_proxy *p, const char *match, int mode, int delay_ms) {
  pthread_mutex_lock(&p->mu);
  snprintf(p->match, sizeof p->match, "%s", match);
  snprintf(p->count_match, sizeof p->count_match, "%s", match);
  p->match_argc = 0;
  p->count = 0;
  p->mode = mode;
  p->delay_ms = delay_ms;
  pthread_mutex_unlock(&p->mu);
}

void fp_hold(fp_proxy *p, const char *verb, const char *match, int delay_ms,
             int n) {
  pthread_mutex_lock(&p->mu);
  int i = 0;
  while (i < 4 && p->hold[i].n > 0)
    i++;
  if (i == 4)
    i = 3; /* the last rule is replaced */
  snprintf(p->hold[i].verb, sizeof p->hold[i].verb, "%s", verb ? verb : "");
  snprintf(p->hold[i].match, sizeof p->hold[i].match, "%s", match);
  p->hold[i].delay_ms = delay_ms;
  p->hold[i].n = n > 0 ? n : 1;
  pthread_mutex_unlock(&p->mu);
}

void fp_arm_hold(fp_proxy *p, const char *match, int delay_ms, int n) {
  fp_hold(p, NULL, match, delay_ms, n);
}

int fp_fired(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->fired;
  pthread_mutex_unlock(&p->mu);
  return n;
}

int fp_late_noscript(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->late_noscript;
  pthread_mutex_unlock(&p->mu);
  return n;
}

int fp_wait_fired(fp_proxy *p, int n, int64_t timeout_ms) {
  int64_t end = th_now_ms() + timeout_ms;
  while (fp_fired(p) < n) {
    if (th_now_ms() >= end)
      return -1;
    th_sleep_ms(5);
  }
  return 0;
}

void fp_count_reset(fp_proxy *p, const char *match) {
  pthread_mutex_lock(&p->mu);
  snprintf(p->count_match, sizeof p->count_match, "%s", match);
  p->count = 0;
  pthread_mutex_unlock(&p->mu);
}

int fp_count(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->count;
  pthread_mutex_unlock(&p->mu);
  return n;
}
