/*
 * wire.c -- the soak's wire adversary (wire.h): an accept thread per
 * proxy, two threads per connection (requests parsed one by one, so one
 * can be taken out of the stream; replies parsed in order against a queue
 * of the faults their requests carry), and a thread per late copy. The
 * ideas are tests/faultproxy's (FP_HOLD, FP_DELAY, FP_CUT); here the
 * faults are drawn at random under one rate limit instead of armed by a
 * test, and logged.
 */
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "soak.h"

#define QN 1024        /* requests in flight per connection */
#define NPEND 128      /* worker processes with late copies held */
#define NBURST 32      /* "all" and "tomb" sub-modes in force */
#define LOCKLEN 48     /* a lock name in a log line */
#define HOLD_MIN 700   /* ms a late copy / held reply waits, at least */
#define HOLD_SPAN 2300 /* ... and at most HOLD_MIN + HOLD_SPAN */
#define BURST_MS 2500  /* "all": how long re-sends are held too */
#define TOMB_MS 4000   /* "tomb": how long the tombstone is waited for */

struct wire {
  int lfd, port;
  atomic_int target, blackhole;
  char url[64];
  int dummy[2]; /* blackhole: our own connections filling the backlog */
};

enum { R_NONE, R_HOLD, R_CUT };

typedef struct conn {
  wire *w;
  int cfd, sfd;
  pthread_mutex_t mu;
  int refs;
  struct {
    int mode, delay, pid, idx;
    int64_t t0;
    char lock[LOCKLEN], sub[16];
  } q[QN];
  unsigned head, tail;
  char hs[1024]; /* AUTH / HELLO / SELECT, replayed before a late copy */
  size_t hsl;
  int nhs;
  int pid, idx;      /* the worker, from CLIENT SETNAME soak-w<idx>-<pid> */
  int sub;           /* a subscriber connection: never faulted */
  atomic_int raw;    /* a replication link: bytes passed on as they come */
  struct late *held; /* collecting the requests behind a held one
                        (requests thread only) */
} conn;

/* A burst: requests of pid whose bytes hash to h ("all"), or that name
 * redisson_unlock_latch and lock ("tomb"), are held `delay` ms too -- or
 * cut like the first (cut: R_CUT their replies, -1 the requests). */
typedef struct burst {
  int pid, idx, tomb, delay, cut;
  uint64_t h;
  int64_t until;
  char lock[LOCKLEN];
} burst;

static struct {
  pthread_mutex_t mu;
  wire_log_fn *log;
  unsigned seed;
  int gap_ms, mask;
  int64_t next_at;
  char focus[LOCKLEN];
  int64_t focus_until;
  /* the lock the next fault goes to (drawn evenly: traffic is not) */
  char locks[16][LOCKLEN];
  int nlocks;
  char want[LOCKLEN];
  int64_t want_until;
  struct {
    int pid, n;
  } pend[NPEND];
  burst b[NBURST];
  long count[3];
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int rnd(int n) {
  return n > 0 ? (int)(rand_r(&G.seed) % (unsigned)n) : 0;
}

void wire_setup(wire_log_fn *log, unsigned seed, int mean_gap_ms) {
  pthread_mutex_lock(&G.mu);
  G.log = log;
  G.seed = seed;
  G.gap_ms = mean_gap_ms > 10 ? mean_gap_ms : 10;
  G.next_at = soak_now_us() + (int64_t)G.gap_ms * 1000;
  pthread_mutex_unlock(&G.mu);
}

void wire_locks(const char *const *locks, int n) {
  pthread_mutex_lock(&G.mu);
  G.nlocks = 0;
  for (int i = 0; i < n && G.nlocks < 16; i++)
    snprintf(G.locks[G.nlocks++], LOCKLEN, "%s", locks[i]);
  pthread_mutex_unlock(&G.mu);
}

void wire_enable(int mask) {
  pthread_mutex_lock(&G.mu);
  G.mask = mask;
  pthread_mutex_unlock(&G.mu);
}

void wire_focus(const char *lock, int ms) {
  pthread_mutex_lock(&G.mu);
  snprintf(G.focus, sizeof G.focus, "%s", lock ? lock : "");
  G.focus_until = soak_now_us() + (int64_t)ms * 1000;
  pthread_mutex_unlock(&G.mu);
}

static void pend_add(int pid, int d) {
  int free_at = -1;
  for (int i = 0; i < NPEND; i++) {
    if (G.pend[i].n > 0 && G.pend[i].pid == pid) {
      G.pend[i].n += d;
      return;
    }
    if (G.pend[i].n <= 0 && free_at < 0)
      free_at = i;
  }
  if (free_at >= 0 && d > 0)
    G.pend[free_at].pid = pid, G.pend[free_at].n = d;
}

int wire_pending(int pid) {
  int n = 0;
  pthread_mutex_lock(&G.mu);
  for (int i = 0; i < NPEND; i++)
    if (G.pend[i].n > 0 && (pid == 0 || G.pend[i].pid == pid))
      n += G.pend[i].n;
  pthread_mutex_unlock(&G.mu);
  return n;
}

long wire_count(int cls) {
  int i = cls == WIRE_LATE ? 0 : cls == WIRE_REPLY ? 1 : 2;
  pthread_mutex_lock(&G.mu);
  long n = G.count[i];
  pthread_mutex_unlock(&G.mu);
  return n;
}

static void logf_fault(int cls, const char *kind, int64_t t0, int idx, int pid,
                       const char *lock, const char *sub) {
  char d[160];
  snprintf(d, sizeof d, "w%d %d %s %s", idx, pid, lock, sub);
  pthread_mutex_lock(&G.mu);
  G.count[cls]++;
  wire_log_fn *log = G.log;
  if (log)
    log(kind, t0, soak_now_us(), d);
  pthread_mutex_unlock(&G.mu);
}

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

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static int connect_port(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof sa) == 0)
    return s;
  if (s >= 0)
    close(s);
  return -1;
}

static void conn_kill(conn *c) {
  shutdown(c->cfd, SHUT_RDWR);
  shutdown(c->sfd, SHUT_RDWR);
}

static void late_unref(struct late *l);

static void conn_unref(conn *c) {
  pthread_mutex_lock(&c->mu);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (!last)
    return;
  if (c->held)
    late_unref(c->held);
  close(c->cfd);
  close(c->sfd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- late copies ------------------------------------------------------ */

/* A held request on its way, and what follows it on its connection: a
 * stream keeps its order, so the requests after a held one wait behind it
 * and go with it (forwarding them would hand the client their replies as
 * the held one's, which no network does). Their replies go to the late
 * copy's own connection: a request that comes after it went ends the
 * client's connection (a reset). */
typedef struct late {
  pthread_mutex_t mu;
  int refs; /* the connection (while it collects) and the thread */
  int sent; /* the thread took the bytes: nothing more joins them */
  int target, delay_ms, nreq, pid, idx;
  int64_t t0;
  char lock[LOCKLEN], sub[16];
  char *bytes; /* the handshake, the held request, what followed it */
  size_t len, cap;
} late;

static void late_unref(late *l) {
  pthread_mutex_lock(&l->mu);
  int last = --l->refs == 0;
  pthread_mutex_unlock(&l->mu);
  if (last) {
    pthread_mutex_destroy(&l->mu);
    free(l->bytes);
    free(l);
  }
}

/* Appends n0 requests b[0..n) behind the held one: 1, or 0 when the late
 * copy went already. */
static int late_add(late *l, const char *b, size_t n, int n0) {
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
  if (ok) {
    memcpy(l->bytes + l->len, b, n);
    l->len += n;
    l->nreq += n0;
  }
  pthread_mutex_unlock(&l->mu);
  return ok;
}

/* Delivers a held request (and what followed it) after its delay on a
 * connection of its own and reads its replies (bounded), so it has run
 * when it is logged. */
static void *late_main(void *arg) {
  late *l = arg;
  sleep_ms(l->delay_ms);
  pthread_mutex_lock(&l->mu);
  l->sent = 1;
  pthread_mutex_unlock(&l->mu);
  int fd = connect_port(l->target);
  if (fd >= 0) {
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  if (fd >= 0 && write_all(fd, l->bytes, l->len) == 0) {
    redisReader *rd = redisReaderCreate();
    char buf[4096];
    int got = 0;
    ssize_t n;
    while (rd && got < l->nreq && (n = recv(fd, buf, sizeof buf, 0)) > 0) {
      void *rep;
      if (redisReaderFeed(rd, buf, (size_t)n) != REDIS_OK)
        break;
      while (redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
        freeReplyObject(rep);
        got++;
      }
    }
    if (rd)
      redisReaderFree(rd);
  }
  if (fd >= 0)
    close(fd);
  logf_fault(0, "wire-late", l->t0, l->idx, l->pid, l->lock, l->sub);
  pthread_mutex_lock(&G.mu);
  pend_add(l->pid, -1);
  pthread_mutex_unlock(&G.mu);
  late_unref(l);
  return NULL;
}

/* Holds request b[0..n) for delay ms; c->held collects what follows. */
static int hold_request(conn *c, const char *b, size_t n, int delay,
                        const char *lock, const char *sub) {
  late *l = calloc(1, sizeof *l);
  if (!l)
    return -1;
  pthread_mutex_init(&l->mu, NULL);
  l->refs = 2;
  l->target = atomic_load(&c->w->target);
  l->delay_ms = delay;
  l->pid = c->pid;
  l->idx = c->idx;
  l->t0 = soak_now_us();
  snprintf(l->lock, sizeof l->lock, "%s", lock);
  snprintf(l->sub, sizeof l->sub, "%s", sub);
  if (!late_add(l, c->hs, c->hsl, c->nhs) || !late_add(l, b, n, 1)) {
    late_unref(l);
    late_unref(l);
    return -1;
  }
  pthread_mutex_lock(&G.mu);
  pend_add(c->pid, 1);
  pthread_mutex_unlock(&G.mu);
  pthread_t t;
  if (pthread_create(&t, NULL, late_main, l) != 0) {
    pthread_mutex_lock(&G.mu);
    pend_add(c->pid, -1);
    pthread_mutex_unlock(&G.mu);
    late_unref(l);
    late_unref(l);
    return -1;
  }
  pthread_detach(t);
  c->held = l;
  return 0;
}

/* ---- deciding a request's fate --------------------------------------- */

static uint64_t fnv(const char *b, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)b[i]) * 1099511628211ull;
  return h;
}

static int arg_is(const redisReply *r, size_t i, const char *s) {
  return r->type == REDIS_REPLY_ARRAY && i < r->elements &&
         r->element[i]->type == REDIS_REPLY_STRING &&
         strcasecmp(r->element[i]->str, s) == 0;
}

/* The soak lock the request names ("soak-..."), into out; 0 if none. */
static int lock_of(const redisReply *r, char out[LOCKLEN]) {
  for (size_t i = 1; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    const redisReply *e = r->element[i];
    const char *p = e->type == REDIS_REPLY_STRING
                        ? memmem(e->str, e->len, "soak-", 5)
                        : NULL;
    /* a worker's connection name (soak-w<idx>-<pid>) is no lock */
    while (p && (size_t)(p - e->str) + 6 < e->len && p[5] == 'w' &&
           p[6] >= '0' && p[6] <= '9')
      p = memmem(p + 5, e->len - (size_t)(p + 5 - e->str), "soak-", 5);
    if (!p)
      continue;
    size_t k = 0, left = e->len - (size_t)(p - e->str);
    while (k < left && k < LOCKLEN - 1 &&
           (p[k] == '-' || (p[k] >= 'a' && p[k] <= 'z') ||
            (p[k] >= '0' && p[k] <= '9')))
      k++;
    memcpy(out, p, k);
    out[k] = '\0';
    return 1;
  }
  return 0;
}

static int names(const redisReply *r, const char *s) {
  for (size_t i = 1; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
    if (r->element[i]->type == REDIS_REPLY_STRING &&
        memmem(r->element[i]->str, r->element[i]->len, s, strlen(s)))
      return 1;
  return 0;
}

/* What happens to a request: 0 forward (with reply fault *rmode), or a
 * hold delay > 0 (*sub says which), or -1 cut mid-request. G.mu held. */
static int decide(conn *c, const redisReply *r, const char *b, size_t n,
                  const char *lock, int *rmode, int *rdelay, char sub[16]) {
  int64_t now = soak_now_us();
  uint64_t h = fnv(b, n);
  for (int i = 0; i < NBURST; i++) {
    burst *x = &G.b[i];
    if (x->until <= now || x->pid != c->pid)
      continue;
    if (x->cut && x->h == h) {
      if (x->cut == R_CUT)
        *rmode = R_CUT;
      snprintf(sub, 16, "%s", "all-copy");
      return x->cut == R_CUT ? 0 : -1;
    }
    if ((!x->tomb && x->h == h) ||
        (x->tomb && names(r, "redisson_unlock_latch") &&
         strcmp(x->lock, lock) == 0)) {
      snprintf(sub, 16, "%s", x->tomb ? "tomb-copy" : "all-copy");
      if (x->tomb)
        x->until = now + BURST_MS; /* and the tombstone's re-sends */
      x->h = h;
      x->tomb = 0;
      return x->delay;
    }
  }
  int focus = G.focus_until > now && strcmp(G.focus, lock) == 0;
  if (!G.mask || (now < G.next_at && !focus))
    return 0;
  if (G.nlocks > 0 && G.want_until <= now) { /* draw the lock */
    snprintf(G.want, LOCKLEN, "%s", G.locks[rnd(G.nlocks)]);
    G.want_until = now + 3000000;
  }
  if ((G.nlocks > 0 && !focus && strcmp(G.want, lock) != 0) || rnd(3) != 0)
    return 0;
  G.want_until = 0;
  G.next_at =
      now + (int64_t)(G.gap_ms / 2 + rnd(G.gap_ms)) * 1000 / (focus ? 4 : 1);
  int classes[3], nc = 0;
  for (int k = 0; k < 3; k++)
    if (G.mask & (1 << k))
      classes[nc++] = k;
  int cls = classes[rnd(nc)];
  int delay = HOLD_MIN + rnd(HOLD_SPAN);
  if (cls == 1) {
    *rmode = R_HOLD;
    *rdelay = delay;
    return 0;
  }
  if (cls == 2) { /* mid-reply (it ran) or mid-request (it did not) */
    int reply = rnd(2), all = rnd(2);
    snprintf(sub, 16, "%s%s", all ? "all-" : "", reply ? "reply" : "request");
    for (int i = 0; all && i < NBURST; i++)
      if (G.b[i].until <= now) { /* and its re-sends: DLOCK_ECONN */
        G.b[i] = (burst){c->pid,
                         c->idx,
                         0,
                         0,
                         reply ? R_CUT : -1,
                         h,
                         now + BURST_MS * 1000LL,
                         ""};
        break;
      }
    if (reply)
      *rmode = R_CUT;
    return reply ? 0 : -1;
  }
  int m = rnd(3);
  snprintf(sub, 16, "%s", m == 0 ? "one" : m == 1 ? "all" : "tomb");
  for (int i = 0; m && i < NBURST; i++)
    if (G.b[i].until <= now) {
      G.b[i] = (burst){c->pid,
                       c->idx,
                       m == 2,
                       delay,
                       0,
                       h,
                       now + (m == 2 ? TOMB_MS : BURST_MS) * 1000LL,
                       ""};
      if (m == 2) /* the tombstone lands after the copy, or is lost */
        G.b[i].delay = rnd(2) ? delay + 1500 : 8000;
      snprintf(G.b[i].lock, LOCKLEN, "%s", lock);
      break;
    }
  return delay;
}

/* The worker a connection belongs to: CLIENT SETNAME soak-w<idx>-<pid>. */
static void note_request(conn *c, const redisReply *r, const char *b,
                         size_t n) {
  if (arg_is(r, 0, "AUTH") || arg_is(r, 0, "HELLO") || arg_is(r, 0, "SELECT")) {
    if (c->hsl + n <= sizeof c->hs) {
      memcpy(c->hs + c->hsl, b, n);
      c->hsl += n;
      c->nhs++;
    }
  } else if (arg_is(r, 0, "CLIENT") && arg_is(r, 1, "SETNAME") &&
             r->elements == 3) {
    int idx, pid;
    if (sscanf(r->element[2]->str, "soak-w%d-%d", &idx, &pid) == 2)
      c->idx = idx, c->pid = pid;
  } else if (arg_is(r, 0, "SUBSCRIBE") || arg_is(r, 0, "SSUBSCRIBE") ||
             arg_is(r, 0, "PSUBSCRIBE")) {
    c->sub = 1;
  } else if (arg_is(r, 0, "SYNC") || arg_is(r, 0, "PSYNC")) {
    atomic_store(&c->raw, 1);
  }
}

static void queue_reply(conn *c, int mode, int delay, const char *lock,
                        const char *sub) {
  pthread_mutex_lock(&c->mu);
  if (c->tail - c->head < QN) {
    unsigned i = c->tail++ % QN;
    c->q[i].mode = mode;
    c->q[i].delay = delay;
    c->q[i].pid = c->pid;
    c->q[i].idx = c->idx;
    c->q[i].t0 = soak_now_us();
    snprintf(c->q[i].lock, LOCKLEN, "%s", lock);
    snprintf(c->q[i].sub, sizeof c->q[i].sub, "%s", sub);
  }
  pthread_mutex_unlock(&c->mu);
}

/* One whole request b[0..n): forwarded, held, faulted or dropped. */
static int one_request(conn *c, const redisReply *r, const char *b, size_t n) {
  note_request(c, r, b, n);
  if (c->held) /* behind a held request: waits with it, or the link ends */
    return late_add(c->held, b, n, 1) ? 0 : -1;
  if (atomic_load(&c->w->blackhole))
    return 0;
  char lock[LOCKLEN] = "";
  int rmode = R_NONE, rdelay = 0, hold = 0;
  char sub[16] = "";
  if (c->pid > 0 && !c->sub && !atomic_load(&c->raw) && lock_of(r, lock)) {
    pthread_mutex_lock(&G.mu);
    hold = decide(c, r, b, n, lock, &rmode, &rdelay, sub);
    pthread_mutex_unlock(&G.mu);
  }
  if (hold > 0)
    return hold_request(c, b, n, hold, lock, sub);
  if (hold < 0) {
    (void)write_all(c->sfd, b, n / 2);
    logf_fault(2, "wire-cut", soak_now_us(), c->idx, c->pid, lock, sub);
    return -1;
  }
  queue_reply(c, rmode, rdelay, lock, sub);
  return write_all(c->sfd, b, n);
}

/* Raw forwarding (a replication link), until either side ends. */
static void raw_pump(int from, int to) {
  char buf[16384];
  ssize_t n;
  while ((n = recv(from, buf, sizeof buf, 0)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0 && write_all(to, buf, (size_t)n) != 0)
      break;
}

static void *requests(void *arg) {
  conn *c = arg;
  redisReader *rd = redisReaderCreate();
  size_t cap = 65536, len = 0;
  char *pend = malloc(cap);
  int alive = rd && pend;
  while (alive && !atomic_load(&c->raw)) {
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
    while (alive && !atomic_load(&c->raw) &&
           redisReaderGetReply(rd, &req) == REDIS_OK && req) {
      size_t end = len - (rd->len - rd->pos);
      alive = one_request(c, req, pend, end) == 0;
      freeReplyObject(req);
      memmove(pend, pend + end, len - end);
      len -= end;
    }
  }
  if (alive && atomic_load(&c->raw)) { /* what came after PSYNC, then raw */
    if (len == 0 || write_all(c->sfd, pend, len) == 0)
      raw_pump(c->cfd, c->sfd);
  }
  free(pend);
  if (rd)
    redisReaderFree(rd);
  conn_kill(c);
  conn_unref(c);
  return NULL;
}

/* Passes on or faults one reply b[0..n); -1 ends the connection. */
static int one_reply(conn *c, const redisReply *r, const char *b, size_t n) {
  int mode = R_NONE, delay = 0, pid = 0, idx = 0;
  int64_t t0 = 0;
  char lock[LOCKLEN] = "", sub[16] = "";
  pthread_mutex_lock(&c->mu);
  if (c->head != c->tail) {
    unsigned i = c->head++ % QN;
    mode = c->q[i].mode;
    delay = c->q[i].delay;
    pid = c->q[i].pid;
    idx = c->q[i].idx;
    t0 = c->q[i].t0;
    memcpy(lock, c->q[i].lock, LOCKLEN);
    memcpy(sub, c->q[i].sub, sizeof sub);
  }
  pthread_mutex_unlock(&c->mu);
  if (atomic_load(&c->w->blackhole))
    return 0;
  if (mode && r->type == REDIS_REPLY_ERROR &&
      strncmp(r->str, "NOSCRIPT", 8) == 0)
    mode = R_NONE; /* it did not run: no fault */
  if (mode == R_CUT) {
    (void)write_all(c->cfd, b, n / 2);
    logf_fault(2, "wire-cut", t0, idx, pid, lock, sub);
    return -1;
  }
  if (mode == R_HOLD) {
    sleep_ms(delay);
    int rc = write_all(c->cfd, b, n);
    logf_fault(1, "wire-reply", t0, idx, pid, lock, "held");
    return rc;
  }
  return write_all(c->cfd, b, n);
}

static void *replies(void *arg) {
  conn *c = arg;
  redisReader *rd = redisReaderCreate();
  size_t cap = 65536, len = 0;
  char *pend = malloc(cap);
  int alive = rd && pend;
  while (alive && !atomic_load(&c->raw)) {
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
    if (n <= 0)
      break;
    if (atomic_load(&c->raw)) { /* PSYNC went out: the rest is raw */
      len += (size_t)n;
      break;
    }
    if (redisReaderFeed(rd, pend + len, (size_t)n) != REDIS_OK)
      break;
    len += (size_t)n;
    void *rep;
    while (alive && redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
      size_t end = len - (rd->len - rd->pos);
      alive = one_reply(c, rep, pend, end) == 0;
      freeReplyObject(rep);
      memmove(pend, pend + end, len - end);
      len -= end;
    }
  }
  if (alive && atomic_load(&c->raw)) {
    if (len == 0 || write_all(c->cfd, pend, len) == 0)
      raw_pump(c->sfd, c->cfd);
  }
  free(pend);
  if (rd)
    redisReaderFree(rd);
  conn_kill(c);
  conn_unref(c);
  return NULL;
}

/* A connection accepted during a blackhole: read and dropped until its
 * client gives up. */
static void *swallow(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0 || (n < 0 && errno == EINTR))
    ;
  close(fd);
  return NULL;
}

static void start_conn(wire *w, int cfd) {
  pthread_t t1, t2;
  if (atomic_load(&w->blackhole)) {
    if (pthread_create(&t1, NULL, swallow, (void *)(intptr_t)cfd) != 0)
      close(cfd);
    else
      pthread_detach(t1);
    return;
  }
  int sfd = connect_port(atomic_load(&w->target));
  conn *c = sfd >= 0 ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    close(cfd);
    if (sfd >= 0)
      close(sfd);
    return;
  }
  c->w = w;
  c->cfd = cfd;
  c->sfd = sfd;
  c->refs = 2;
  pthread_mutex_init(&c->mu, NULL);
  if (pthread_create(&t1, NULL, requests, c) != 0) {
    conn_kill(c);
    c->refs = 1;
    conn_unref(c);
    return;
  }
  pthread_detach(t1);
  if (pthread_create(&t2, NULL, replies, c) != 0) {
    conn_kill(c); /* the requests thread sees it and lets go */
    conn_unref(c);
    return;
  }
  pthread_detach(t2);
}

static void *accept_main(void *arg) {
  wire *w = arg;
  for (;;) {
    struct pollfd pf = {w->lfd, POLLIN, 0};
    if (atomic_load(&w->blackhole) || poll(&pf, 1, 50) <= 0) {
      if (atomic_load(&w->blackhole))
        sleep_ms(20); /* nothing accepted: the backlog stays full */
      continue;
    }
    int cfd = accept4(w->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd >= 0) { /* blocking I/O from here on */
      int fl = fcntl(cfd, F_GETFL);
      fcntl(cfd, F_SETFL, fl & ~O_NONBLOCK);
    }
    if (cfd < 0) {
      if (errno != EINTR && errno != ECONNABORTED)
        sleep_ms(10);
      continue;
    }
    start_conn(w, cfd);
  }
  return NULL;
}

wire *wire_new(int target_port) {
  wire *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  atomic_store(&w->target, target_port);
  w->dummy[0] = w->dummy[1] = -1;
  w->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  int one = 1;
  pthread_t t;
  if (w->lfd < 0 ||
      setsockopt(w->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(w->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(w->lfd, 128) != 0 ||
      getsockname(w->lfd, (struct sockaddr *)&sa, &sl) != 0 ||
      pthread_create(&t, NULL, accept_main, w) != 0) {
    if (w->lfd >= 0)
      close(w->lfd);
    free(w);
    return NULL;
  }
  pthread_detach(t);
  w->port = ntohs(sa.sin_port);
  snprintf(w->url, sizeof w->url, "redis://127.0.0.1:%d", w->port);
  return w;
}

int wire_port(const wire *w) { return w->port; }
void wire_set_target(wire *w, int port) { atomic_store(&w->target, port); }
const char *wire_url(const wire *w) { return w->url; }
/* Blackholed, the proxy also stops accepting, with a backlog of one
 * filled by connections of its own: the kernel then drops new SYNs, so a
 * client's connect hangs until its connect timeout (as a node whose
 * packets are dropped). Connections open now get nothing either way. */
void wire_blackhole(wire *w, int on) {
  if (on == atomic_load(&w->blackhole))
    return;
  atomic_store(&w->blackhole, on);
  if (on) {
    sleep_ms(60); /* the accept thread is past its last accept */
    listen(w->lfd, 0);
    for (int i = 0; i < 2; i++) {
      w->dummy[i] =
          socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      struct sockaddr_in sa = {.sin_family = AF_INET};
      sa.sin_port = htons((uint16_t)w->port);
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (w->dummy[i] >= 0)
        (void)connect(w->dummy[i], (struct sockaddr *)&sa, sizeof sa);
    }
  } else {
    listen(w->lfd, 128);
    for (int i = 0; i < 2; i++) {
      if (w->dummy[i] >= 0)
        close(w->dummy[i]);
      w->dummy[i] = -1;
    }
  }
}
