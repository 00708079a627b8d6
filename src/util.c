/*
 * util.c -- small self-contained helpers: clocks, randomness, UUIDs, SHA1
 * (for EVALSHA digests), thread ids, fork detection, a string builder, the
 * Redisson key-naming rules and a string hash map.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ---- clocks ------------------------------------------------------------- */

int64_t dlock__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dlock__now_ms(void) { return dlock__now_us() / 1000; }

struct timespec dlock__abstime(clockid_t clk, int64_t ms) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  if (ms < 0)
    ms = 0;
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

void dlock__sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- randomness --------------------------------------------------------- */

int dlock__random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static _Thread_local uint64_t t_rng[2];

void dlock__rand_reset_thread(void) {
  t_rng[0] = 0;
  t_rng[1] = 0;
}

uint64_t dlock__rand64(void) {
  /* xorshift128+, seeded once per thread from the kernel. */
  if (t_rng[0] == 0 && t_rng[1] == 0) {
    if (dlock__random_bytes(t_rng, sizeof t_rng) != 0 ||
        (t_rng[0] == 0 && t_rng[1] == 0)) {
      t_rng[0] = (uint64_t)dlock__now_us() | 1;
      t_rng[1] = (uint64_t)(uintptr_t)&t_rng;
    }
  }
  uint64_t s1 = t_rng[0];
  const uint64_t s0 = t_rng[1];
  t_rng[0] = s0;
  s1 ^= s1 << 23;
  t_rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
  return t_rng[1] + s0;
}

static const char hexdig[] = "0123456789abcdef";

void dlock__uuid4(char out[DLOCK__UUID_LEN + 1]) {
  unsigned char b[16];
  if (dlock__random_bytes(b, sizeof b) != 0) {
    uint64_t x = dlock__rand64(), y = dlock__rand64();
    memcpy(b, &x, 8);
    memcpy(b + 8, &y, 8);
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  char *o = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      *o++ = '-';
    *o++ = hexdig[b[i] >> 4];
    *o++ = hexdig[b[i] & 15];
  }
  *o = '\0';
}

void dlock__request_id(char out[33]) {
  uint64_t a = dlock__rand64(), b = dlock__rand64();
  for (int i = 0; i < 16; i++) {
    out[i] = hexdig[(a >> (i * 4)) & 15];
    out[16 + i] = hexdig[(b >> (i * 4)) & 15];
  }
  out[32] = '\0';
}

/* ---- SHA1 (FIPS 180-1), only for script digests ------------------------ */

static uint32_t rol32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
  uint32_t w[80];
  for (size_t i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 80; i++)
    w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int i = 0; i < 80; i++) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999u;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1u;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDCu;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6u;
    }
    uint32_t t = rol32(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rol32(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

void dlock__sha1_hex(const char *data, size_t len, char out[41]) {
  uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u,
                   0xC3D2E1F0u};
  const unsigned char *p = (const unsigned char *)data;
  size_t left = len;
  while (left >= 64) {
    sha1_block(h, p);
    p += 64;
    left -= 64;
  }
  unsigned char tail[128];
  memset(tail, 0, sizeof tail);
  memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tl = left + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++)
    tail[tl - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha1_block(h, tail);
  if (tl == 128)
    sha1_block(h, tail + 64);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 4; j++) {
      unsigned v = (h[i] >> (24 - 8 * j)) & 0xff;
      out[i * 8 + j * 2] = hexdig[v >> 4];
      out[i * 8 + j * 2 + 1] = hexdig[v & 15];
    }
  out[40] = '\0';
}

/* ---- thread ids and fork detection -------------------------------------- */

static atomic_uint_fast64_t g_next_tid = 1;
static _Thread_local uint64_t t_tid;

uint64_t dlock__tid(void) {
  if (t_tid == 0)
    t_tid = atomic_fetch_add(&g_next_tid, 1);
  return t_tid;
}

static atomic_uint g_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* Every socket the library has open, one bit per descriptor (lock-free, so
 * the fork handler can read it whatever the parent's threads were doing).
 * Descriptors past DLOCK__FD_BITS are not tracked. */
#define DLOCK__FD_BITS 65536
static atomic_uint_fast64_t g_fds[DLOCK__FD_BITS / 64];

void dlock__fd_track(int fd) {
  if (fd >= 0 && fd < DLOCK__FD_BITS)
    atomic_fetch_or(&g_fds[fd / 64], (uint_fast64_t)1 << (fd % 64));
}

void dlock__fd_untrack(int fd) {
  if (fd >= 0 && fd < DLOCK__FD_BITS)
    atomic_fetch_and(&g_fds[fd / 64], ~((uint_fast64_t)1 << (fd % 64)));
}

/* In a fork child: the library's sockets are the parent's, and a child
 * that keeps them keeps the parent "connected" (a dead waiter still
 * subscribed, handed locks) after the parent died. Each is replaced by
 * /dev/null under the same number (dup3: the number stays taken, so the
 * child's later dlock_client_free closes /dev/null, never a file the child
 * opened meanwhile). Async-signal-safe calls only. */
static void release_parent_sockets(void) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0)
    return;
  for (int w = 0; w < DLOCK__FD_BITS / 64; w++) {
    uint_fast64_t bits = atomic_load(&g_fds[w]);
    for (int b = 0; bits && b < 64; b++, bits >>= 1)
      if ((bits & 1) && w * 64 + b != null_fd)
        (void)dup3(null_fd, w * 64 + b, O_CLOEXEC);
  }
  close(null_fd);
}

static void on_fork_child(void) {
  atomic_fetch_add(&g_fork_gen, 1);
  release_parent_sockets();
  /* The child's only thread is the forking one; its generator state is a copy
   * of the parent's, so sibling children would draw the same unlock request
   * ids (and one sibling's unlock latch would swallow the other's unlock).
   * Reseed it from the kernel on next use. */
  dlock__rand_reset_thread();
}
static void install_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

unsigned dlock__fork_gen(void) {
  pthread_once(&g_atfork_once, install_atfork);
  return atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
}

/* ---- background threads ------------------------------------------------- */

typedef struct thread_start {
  void *(*fn)(void *);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running;
} thread_start;

static void *thread_trampoline(void *p) {
  thread_start *ts = p;
  void *(*fn)(void *) = ts->fn;
  void *arg = ts->arg;
  pthread_mutex_lock(&ts->mu);
  ts->running = 1;
  pthread_cond_signal(&ts->cv);
  pthread_mutex_unlock(&ts->mu);
  return fn(arg);
}

int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  thread_start ts = {fn, arg, PTHREAD_MUTEX_INITIALIZER,
                     PTHREAD_COND_INITIALIZER, 0};
  int rc = pthread_create(t, NULL, thread_trampoline, &ts);
  if (rc == 0) {
    pthread_mutex_lock(&ts.mu);
    while (!ts.running)
      pthread_cond_wait(&ts.cv, &ts.mu);
    pthread_mutex_unlock(&ts.mu);
  }
  pthread_cond_destroy(&ts.cv);
  pthread_mutex_destroy(&ts.mu);
  return rc;
}

/* ---- memory ------------------------------------------------------------- */

void *dlock__malloc(size_t n) { return malloc(n ? n : 1); }

void *dlock__calloc(size_t n, size_t m) {
  if (m != 0 && n > SIZE_MAX / m)
    return NULL;
  return calloc(n ? n : 1, m ? m : 1);
}

char *dlock__strndup(const char *s, size_t n) {
  char *p = dlock__malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

char *dlock__strdup(const char *s) { return dlock__strndup(s, strlen(s)); }

/* ---- string builder ----------------------------------------------------- */

void dlock__sb_init(dlock__sb *b) {
  b->p = b->inl;
  b->len = 0;
  b->cap = sizeof b->inl;
  b->oom = 0;
  b->heap = 0;
  b->inl[0] = '\0';
}

void dlock__sb_init_buf(dlock__sb *b, char *buf, size_t cap) {
  dlock__sb_init(b);
  b->p = buf;
  b->cap = cap;
  buf[0] = '\0';
}

void dlock__sb_free(dlock__sb *b) {
  if (b->heap)
    free(b->p);
  dlock__sb_init(b);
}

void dlock__sb_reset(dlock__sb *b) {
  b->len = 0;
  b->p[0] = '\0';
}

void dlock__sb_add(dlock__sb *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap * 2;
    while (nc < b->len + n + 1)
      nc *= 2;
    char *np = malloc(nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    memcpy(np, b->p, b->len + 1);
    if (b->heap)
      free(b->p);
    b->p = np;
    b->heap = 1;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void dlock__sb_adds(dlock__sb *b, const char *s) {
  dlock__sb_add(b, s, strlen(s));
}

size_t dlock__fmt_i64(char *buf, int64_t v) {
  char tmp[24];
  int i = (int)sizeof tmp;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    tmp[--i] = '-';
  size_t n = sizeof tmp - (size_t)i;
  memcpy(buf, tmp + i, n);
  buf[n] = '\0';
  return n;
}

void dlock__sb_addu64(dlock__sb *b, uint64_t v) {
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  dlock__sb_add(b, tmp + i, sizeof tmp - (size_t)i);
}

void dlock__sb_addi64(dlock__sb *b, int64_t v) {
  if (v < 0) {
    dlock__sb_add(b, "-", 1);
    dlock__sb_addu64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    dlock__sb_addu64(b, (uint64_t)v);
  }
}

void dlock__prefix_name(dlock__sb *b, const char *prefix, const char *name) {
  dlock__sb_adds(b, prefix);
  if (strchr(name, '{')) {
    dlock__sb_add(b, ":", 1);
    dlock__sb_adds(b, name);
  } else {
    dlock__sb_add(b, ":{", 2);
    dlock__sb_adds(b, name);
    dlock__sb_add(b, "}", 1);
  }
}

void dlock__own_name(dlock__sb *b, const char *prefix, const char *name) {
  dlock__sb_adds(b, prefix);
  if (strchr(name, '{')) {
    dlock__sb_add(b, "::", 2);
    dlock__sb_adds(b, name);
  } else {
    dlock__sb_add(b, ":{", 2);
    dlock__sb_adds(b, name);
    dlock__sb_add(b, "}", 1);
  }
}

void dlock__unlock_latch_key(dlock__sb *b, const char *name, const char *rid) {
  dlock__prefix_name(b, "redisson_unlock_latch", name);
  dlock__sb_add(b, ":", 1);
  dlock__sb_add(b, rid, 32);
}

void dlock__suffix_name(dlock__sb *b, const char *name, const char *suffix) {
  if (strchr(name, '{')) {
    dlock__sb_adds(b, name);
    dlock__sb_add(b, ":", 1);
  } else {
    dlock__sb_add(b, "{", 1);
    dlock__sb_adds(b, name);
    dlock__sb_add(b, "}:", 2);
  }
  dlock__sb_adds(b, suffix);
}

size_t dlock__field(const dlock_client *c, uint64_t tid, char *buf) {
  memcpy(buf, c->id, DLOCK__UUID_LEN);
  buf[DLOCK__UUID_LEN] = ':';
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    tmp[--i] = (char)('0' + tid % 10);
    tid /= 10;
  } while (tid);
  size_t n = sizeof tmp - (size_t)i;
  memcpy(buf + DLOCK__UUID_LEN + 1, tmp + i, n);
  buf[DLOCK__UUID_LEN + 1 + n] = '\0';
  return DLOCK__UUID_LEN + 1 + n;
}

/* ---- hash map ----------------------------------------------------------- */

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

int dlock__map_init(dlock__map *m, size_t nb) {
  m->nb = nb ? nb : 16;
  m->n = 0;
  m->b = dlock__calloc(m->nb, sizeof(dlock__map_ent *));
  return m->b ? 0 : DLOCK_ENOMEM;
}

void dlock__map_free(dlock__map *m) {
  if (!m->b)
    return;
  for (size_t i = 0; i < m->nb; i++) {
    dlock__map_ent *e = m->b[i];
    while (e) {
      dlock__map_ent *nx = e->next;
      free(e);
      e = nx;
    }
  }
  free(m->b);
  m->b = NULL;
  m->n = 0;
}

void *dlock__map_get(const dlock__map *m, const char *key, size_t klen) {
  uint64_t h = fnv1a(key, klen);
  for (dlock__map_ent *e = m->b[h % m->nb]; e; e = e->next)
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
      return e->val;
  return NULL;
}

static void map_grow(dlock__map *m) {
  size_t nb = m->nb * 2;
  dlock__map_ent **b = dlock__calloc(nb, sizeof(dlock__map_ent *));
  if (!b)
    return; /* keep working with longer chains */
  for (size_t i = 0; i < m->nb; i++) {
    dlock__map_ent *e = m->b[i];
    while (e) {
      dlock__map_ent *nx = e->next;
      e->next = b[e->hash % nb];
      b[e->hash % nb] = e;
      e = nx;
    }
  }
  free(m->b);
  m->b = b;
  m->nb = nb;
}

int dlock__map_put(dlock__map *m, const char *key, size_t klen, void *val) {
  uint64_t h = fnv1a(key, klen);
  dlock__map_ent *e = dlock__malloc(sizeof *e);
  if (!e)
    return DLOCK_ENOMEM;
  e->key = key;
  e->klen = klen;
  e->hash = h;
  e->val = val;
  e->next = m->b[h % m->nb];
  m->b[h % m->nb] = e;
  if (++m->n > m->nb * 2)
    map_grow(m);
  return 0;
}

void *dlock__map_del(dlock__map *m, const char *key, size_t klen) {
  uint64_t h = fnv1a(key, klen);
  for (dlock__map_ent **pp = &m->b[h % m->nb]; *pp; pp = &(*pp)->next) {
    dlock__map_ent *e = *pp;
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) {
      void *v = e->val;
      *pp = e->next;
      free(e);
      m->n--;
      return v;
    }
  }
  return NULL;
}

int dlock__check_lease(long long lease_ms, const char *what, const char *name) {
  if (lease_ms <= DLOCK_LEASE_MAX_MS)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s '%s': lease %lld ms is longer than the longest "
                     "accepted (DLOCK_LEASE_MAX_MS, %lld ms)",
                     what, name, lease_ms, DLOCK_LEASE_MAX_MS);
}

int dlock__chobj_init(dlock__chobj *o, dlock_client *c, const char *name,
                      const char *kind,
                      void (*chan)(dlock__sb *b, const char *name)) {
  memset(o, 0, sizeof *o);
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "%s name is NULL or empty", kind);
  dlock__sb ch;
  dlock__sb_init(&ch);
  chan(&ch, name);
  size_t n = strlen(name);
  char *buf = ch.oom ? NULL : dlock__malloc(n + 1 + ch.len + 1);
  if (buf) {
    memcpy(buf, name, n + 1);
    memcpy(buf + n + 1, ch.p, ch.len);
    buf[n + 1 + ch.len] = '\0';
    o->c = c;
    o->name = buf;
    o->name_len = n;
    o->channel = buf + n + 1;
    o->channel_len = ch.len;
    pthread_mutex_init(&o->once_mu, NULL);
    dlock__client_ref(c);
  }
  dlock__sb_free(&ch);
  return buf ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory");
}

void dlock__chobj_destroy(dlock__chobj *o) {
  if (o->name) {
    pthread_mutex_destroy(&o->once_mu);
    dlock__client_unref(o->c);
  }
  free(o->name);
  o->name = o->channel = NULL;
}

static void once_key(dlock__sb *b, const char *name, const char *rid) {
  dlock__own_name(b, "dlock_once", name);
  dlock__sb_add(b, ":", 1);
  dlock__sb_add(b, rid, 32);
}

int dlock__once_begin(dlock__chobj *o, dlock__once *w) {
  dlock__request_id(w->rid);
  dlock__sb_init(&w->key);
  dlock__sb_init(&w->prev);
  char prev[33];
  pthread_mutex_lock(&o->once_mu);
  memcpy(prev, o->once_prev, sizeof prev);
  o->once_prev[0] = '\0';
  pthread_mutex_unlock(&o->once_mu);
  w->has_prev = prev[0] != '\0';
  once_key(&w->key, o->name, w->rid);
  if (w->has_prev)
    once_key(&w->prev, o->name, prev);
  if (w->key.oom || w->prev.oom) {
    dlock__sb_free(&w->key);
    dlock__sb_free(&w->prev);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

int dlock__chobj_count(dlock__chobj *o, const struct dlock__script *sc,
                       int with_channel, int nargs, const char **args,
                       const size_t *alens) {
  dlock__once w;
  int rc = dlock__once_begin(o, &w);
  if (rc)
    return rc;
  const char *keys[4] = {o->name};
  size_t klens[4] = {o->name_len};
  int nk = 1;
  if (with_channel) {
    keys[nk] = o->channel;
    klens[nk++] = o->channel_len;
  }
  keys[nk] = w.key.p;
  klens[nk++] = w.key.len;
  if (w.has_prev) {
    keys[nk] = w.prev.p;
    klens[nk++] = w.prev.len;
  }
  const char *av[4];
  size_t al[4];
  for (int i = 0; i < nargs && i < 3; i++) {
    av[i] = args[i];
    al[i] = alens[i];
  }
  char ts[24];
  av[nargs] = ts;
  al[nargs] = dlock__fmt_i64(ts, o->c->latch_ttl_ms);
  redisReply *r = NULL;
  long long v = 0;
  rc = dlock__eval(o->c, sc, nk, keys, klens, nargs + 1, av, al, &r);
  if (rc == 0)
    rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  dlock__once_end(o, &w, rc == 0 && v == 1);
  return rc ? rc : v == 1;
}

void dlock__once_end(dlock__chobj *o, dlock__once *w, int stored) {
  if (stored) {
    /* A concurrent call may have recorded its own meanwhile; the one
     * overwritten here is left to its TTL. */
    pthread_mutex_lock(&o->once_mu);
    memcpy(o->once_prev, w->rid, sizeof o->once_prev);
    pthread_mutex_unlock(&o->once_mu);
  }
  dlock__sb_free(&w->key);
  dlock__sb_free(&w->prev);
}
