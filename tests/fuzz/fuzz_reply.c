/*
 * fuzz_reply.c -- libFuzzer target: how the library handles what a server
 * answers. A fake server (a thread on a unix socket in a temp dir) answers
 * the connection handshake (PING, AUTH, SELECT, CLIENT) correctly and every
 * other command -- the lock scripts, GET, PUBLISH -- with the next segment
 * of the input: malformed or truncated RESP, wrong types (a string where a
 * script returns an integer, arrays, nil, errors), several replies at once.
 * After a segment that is not exactly complete RESP the connection is
 * closed (the client sees EOF, not a timeout); when the segments run out,
 * so is every new command's connection.
 *
 * Input: byte 0 picks the operation sequence (ops below), the rest is the
 * segments, separated by "\n---\n". The client is a real one (public API,
 * lazy connect, no retries, short timeouts), made and freed per input.
 * Not a mock of Redis for behaviour tests: nothing here says what Redis
 * does, only what the library survives.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "dlock.h"

#define SEP "\n---\n"
#define MAX_SEGS 16

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int conns; /* connections being served: 0 before the input is freed */
  const uint8_t *seg[MAX_SEGS];
  size_t len[MAX_SEGS];
  int n, next;
  char url[160];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The next segment of the current input, or 0 when none is left. */
static int take_segment(const uint8_t **p, size_t *n) {
  pthread_mutex_lock(&g.mu);
  int ok = g.next < g.n;
  if (ok) {
    *p = g.seg[g.next];
    *n = g.len[g.next];
    g.next++;
  }
  pthread_mutex_unlock(&g.mu);
  return ok;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0)
      return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

/* 1 if p[0..n) is one or more complete RESP replies and nothing else. */
static int complete_resp(const uint8_t *p, size_t n) {
  if (n == 0)
    return 0;
  redisReader *r = redisReaderCreate();
  int ok = 0;
  if (r && redisReaderFeed(r, (const char *)p, n) == REDIS_OK) {
    void *rep;
    int got = 0;
    while (redisReaderGetReply(r, &rep) == REDIS_OK && rep) {
      freeReplyObject(rep);
      got++;
    }
    ok = got > 0 && r->err == 0 && r->len == r->pos;
  }
  redisReaderFree(r);
  return ok;
}

/* The answer to one request; 0 to go on, -1 to close the connection. */
static int answer(int fd, const redisReply *req) {
  if (req->type != REDIS_REPLY_ARRAY || req->elements == 0 ||
      req->element[0]->type != REDIS_REPLY_STRING)
    return -1;
  const char *cmd = req->element[0]->str;
  if (strcasecmp(cmd, "PING") == 0)
    return write_all(fd, "+PONG\r\n", 7);
  if (strcasecmp(cmd, "AUTH") == 0 || strcasecmp(cmd, "SELECT") == 0 ||
      strcasecmp(cmd, "CLIENT") == 0)
    return write_all(fd, "+OK\r\n", 5);
  const uint8_t *p;
  size_t n;
  if (!take_segment(&p, &n))
    return -1;
  if (write_all(fd, p, n) != 0)
    return -1;
  return complete_resp(p, n) ? 0 : -1;
}

static void *serve_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  redisReader *rd = redisReaderCreate();
  char buf[16384];
  int alive = rd != NULL;
  while (alive) {
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k <= 0 || redisReaderFeed(rd, buf, (size_t)k) != REDIS_OK)
      break;
    void *req;
    while (alive && redisReaderGetReply(rd, &req) == REDIS_OK && req) {
      alive = answer(fd, req) == 0;
      freeReplyObject(req);
    }
  }
  redisReaderFree(rd);
  shutdown(fd, SHUT_RDWR);
  close(fd);
  pthread_mutex_lock(&g.mu);
  g.conns--;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  return NULL;
}

static void *accept_loop(void *arg) {
  int lfd = (int)(intptr_t)arg;
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      continue;
    pthread_t t;
    pthread_mutex_lock(&g.mu);
    g.conns++;
    pthread_mutex_unlock(&g.mu);
    if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) != 0)
      abort();
    pthread_detach(t);
  }
  return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  static char dir[] = "/tmp/dlock-fuzz-reply-XXXXXX";
  if (!mkdtemp(dir))
    abort();
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s", dir);
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(lfd, 64) != 0)
    abort();
  /* The socket file goes now; the listening socket stays open. */
  snprintf(g.url, sizeof g.url, "unix://%s", sa.sun_path);
  pthread_t t;
  if (pthread_create(&t, NULL, accept_loop, (void *)(intptr_t)lfd) != 0)
    abort();
  pthread_detach(t);
  return 0;
}

static void split(const uint8_t *p, size_t n) {
  pthread_mutex_lock(&g.mu);
  g.n = g.next = 0;
  const size_t sl = sizeof SEP - 1;
  while (g.n < MAX_SEGS) {
    const uint8_t *e = memmem(p, n, SEP, sl);
    size_t k = e ? (size_t)(e - p) : n;
    g.seg[g.n] = p;
    g.len[g.n++] = k;
    if (!e)
      break;
    p += k + sl;
    n -= k + sl;
  }
  pthread_mutex_unlock(&g.mu);
}

static void mutex_ops(dlock_client *c, int variant) {
  dlock_mutex *m = NULL;
  int rc = variant == 1   ? dlock_mutex_new_fair(c, "fz", &m)
           : variant == 2 ? dlock_mutex_new_fenced(c, "fz", &m)
                          : dlock_mutex_new(c, "fz", &m);
  if (rc)
    return;
  long long v;
  uint64_t tok;
  if (dlock_mutex_timedlock(m, 0, variant == 3 ? 1000 : -1) == DLOCK_OK) {
    dlock_mutex_is_held(m);
    dlock_mutex_validity(m, &v);
    dlock_mutex_token(m, &tok);
    if (dlock_mutex_timedlock(m, 0, -1) == DLOCK_OK) /* reentrant */
      dlock_mutex_unlock(m);
    dlock_mutex_unlock(m);
  }
  dlock_mutex_is_locked(m);
  dlock_mutex_ttl(m, &v);
  dlock_mutex_force_unlock(m);
  dlock_mutex_free(m);
}

static void rw_ops(dlock_client *c) {
  dlock_rwlock *rw;
  if (dlock_rwlock_new(c, "fz", &rw))
    return;
  if (dlock_rwlock_timedrdlock(rw, 0, -1) == DLOCK_OK)
    dlock_rwlock_unlock(rw);
  if (dlock_rwlock_timedwrlock(rw, 0, 1000) == DLOCK_OK) {
    if (dlock_rwlock_downgrade(rw, 1000) == DLOCK_OK)
      dlock_rwlock_unlock(rw);
    dlock_rwlock_unlock(rw);
  }
  dlock_rwlock_free(rw);
}

static void count_ops(dlock_client *c) {
  dlock_sem *s;
  long long v;
  if (dlock_sem_new(c, "fz", &s) == 0) {
    dlock_sem_init(s, 2);
    if (dlock_sem_trywait(s) == DLOCK_OK)
      dlock_sem_post(s);
    dlock_sem_value(s, &v);
    dlock_sem_free(s);
  }
  dlock_latch *l;
  if (dlock_latch_new(c, "fz", &l) == 0) {
    dlock_latch_init(l, 2);
    dlock_latch_count_down(l);
    dlock_latch_count(l, &v);
    dlock_latch_timedawait(l, 0);
    dlock_latch_free(l);
  }
}

static void status_ops(dlock_client *c) {
  dlock_status st;
  if (dlock_status_query(c, "fz", &st) == DLOCK_OK)
    dlock_status_clear(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  split(data + 1, size - 1);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = g.url;
  cfg.lazy_connect = 1;
  cfg.retry_attempts = 0;
  cfg.retry_interval_ms = 0;
  cfg.command_timeout_ms = 100;
  cfg.connect_timeout_ms = 100;
  cfg.multiplex = data[0] & 0x80 ? 0 : 1;
  cfg.pool_size = 2;
  dlock_client *c;
  if (dlock_client_new(&cfg, &c) != DLOCK_OK)
    abort(); /* lazy: nothing to fail on */
  switch ((data[0] & 0x7f) % 7) {
  case 0:
  case 1:
  case 2:
  case 3:
    mutex_ops(c, (data[0] & 0x7f) % 7);
    break;
  case 4:
    rw_ops(c);
    break;
  case 5:
    count_ops(c);
    break;
  default:
    status_ops(c);
    break;
  }
  dlock_client_free(c);
  /* The client closed its connections: wait until their threads are done
   * with this input's bytes (bounded; a server thread stuck is a bug). */
  pthread_mutex_lock(&g.mu);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 10;
  while (g.conns > 0)
    if (pthread_cond_timedwait(&g.cv, &g.mu, &dl) != 0)
      abort();
  pthread_mutex_unlock(&g.mu);
  return 0;
}
