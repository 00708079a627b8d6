/*
 * th_drive.c -- the two drivers of th_drive.h: the blocking client, and the
 * event-loop client on a private poll(2) loop (the dozen hooks of
 * dlock_async_hooks, no loop library needed).
 */
#include "th_drive.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/async.h"
#include "th.h"

#define MAX_NAMES 64
#define MAX_WATCH 16

typedef struct lost_name {
  char name[64];
  atomic_llong at;
  /* async: how late the loop ran the timer that reported it (0: not from
   * a timer, or on time) */
  atomic_llong late;
} lost_name;

typedef struct watch {
  dlock_async_watch *w;
  int rd, wr;
} watch;

struct th_drive {
  int kind;
  dlock_config cfg;
  atomic_int lost;
  lost_name names[MAX_NAMES]; /* first report per name */
  atomic_int nnames;
  pthread_mutex_t mu; /* guards names[] growth */
  /* blocking */
  dlock_client *c;
  struct {
    char name[128];
    dlock_mutex *m;
  } mx[MAX_NAMES];
  int nmx;
  /* async */
  dlock_async *a;
  watch ws[MAX_WATCH];
  int nws;
  int64_t timer_at;        /* monotonic ms; -1 none */
  atomic_llong timer_late; /* while a timer runs: its lateness; else 0 */
  dlock_client *force_c;
  char msg[512]; /* th_drive_error */
};

static void on_lost(const char *name, void *arg) {
  th_drive *d = arg;
  atomic_fetch_add(&d->lost, 1);
  pthread_mutex_lock(&d->mu);
  int n = atomic_load(&d->nnames);
  int i = 0;
  while (i < n && strcmp(d->names[i].name, name) != 0)
    i++;
  if (i == n && n < MAX_NAMES) {
    snprintf(d->names[n].name, sizeof d->names[n].name, "%s", name);
    atomic_store(&d->names[n].at, (long long)th_now_ms());
    atomic_store(&d->names[n].late, atomic_load(&d->timer_late));
    atomic_store(&d->nnames, n + 1);
  }
  pthread_mutex_unlock(&d->mu);
}

int th_drive_lost_count(const th_drive *d) {
  return atomic_load(&((th_drive *)d)->lost);
}

int64_t th_drive_lost_at(const th_drive *d, const char *name) {
  th_drive *m = (th_drive *)d;
  pthread_mutex_lock(&m->mu);
  int64_t at = 0;
  for (int i = 0; i < atomic_load(&m->nnames); i++)
    if (strcmp(m->names[i].name, name) == 0)
      at = atomic_load(&m->names[i].at);
  pthread_mutex_unlock(&m->mu);
  return at;
}

int64_t th_drive_lost_late(const th_drive *d, const char *name) {
  th_drive *m = (th_drive *)d;
  pthread_mutex_lock(&m->mu);
  int64_t late = 0;
  for (int i = 0; i < atomic_load(&m->nnames); i++)
    if (strcmp(m->names[i].name, name) == 0)
      late = atomic_load(&m->names[i].late);
  pthread_mutex_unlock(&m->mu);
  return late;
}

const char *th_drive_kind(const th_drive *d) {
  return d->kind == TH_DRIVE_ASYNC ? "async" : "blocking";
}

/* ---- the private loop ------------------------------------------------- */

static watch *find_watch(th_drive *d, dlock_async_watch *w) {
  for (int i = 0; i < d->nws; i++)
    if (d->ws[i].w == w)
      return &d->ws[i];
  return NULL;
}

static watch *get_watch(th_drive *d, dlock_async_watch *w) {
  watch *x = find_watch(d, w);
  if (x || d->nws == MAX_WATCH)
    return x;
  x = &d->ws[d->nws++];
  memset(x, 0, sizeof *x);
  x->w = w;
  return x;
}

static int h_add_read(void *data, dlock_async_watch *w) {
  watch *x = get_watch(data, w);
  if (!x)
    return -1;
  x->rd = 1;
  return 0;
}
static void h_del_read(void *data, dlock_async_watch *w) {
  watch *x = find_watch(data, w);
  if (x)
    x->rd = 0;
}
static int h_add_write(void *data, dlock_async_watch *w) {
  watch *x = get_watch(data, w);
  if (!x)
    return -1;
  x->wr = 1;
  return 0;
}
static void h_del_write(void *data, dlock_async_watch *w) {
  watch *x = find_watch(data, w);
  if (x)
    x->wr = 0;
}
static void h_release(void *data, dlock_async_watch *w) {
  th_drive *d = data;
  watch *x = find_watch(d, w);
  if (x)
    *x = d->ws[--d->nws];
}
static void h_schedule(void *data, long long ms) {
  th_drive *d = data;
  d->timer_at = th_now_ms() + ms;
}
static void h_cancel(void *data) { ((th_drive *)data)->timer_at = -1; }
static void h_cleanup(void *data) { (void)data; }

/* One turn: poll at most max_ms (or until the timer), then run what is
 * ready. */
static void turn(th_drive *d, int64_t max_ms) {
  struct pollfd pf[MAX_WATCH];
  dlock_async_watch *who[MAX_WATCH];
  int n = 0;
  for (int i = 0; i < d->nws; i++) {
    if (!d->ws[i].rd && !d->ws[i].wr)
      continue;
    pf[n].fd = d->ws[i].w->fd;
    pf[n].events =
        (short)((d->ws[i].rd ? POLLIN : 0) | (d->ws[i].wr ? POLLOUT : 0));
    pf[n].revents = 0;
    who[n++] = d->ws[i].w;
  }
  int64_t now = th_now_ms();
  int64_t wait = max_ms;
  if (d->timer_at >= 0 && d->timer_at - now < wait)
    wait = d->timer_at - now;
  if (wait < 0)
    wait = 0;
  (void)poll(pf, (nfds_t)n, (int)wait);
  for (int i = 0; i < n; i++) {
    /* A callback may have closed a socket: only live watches. */
    watch *x = find_watch(d, who[i]);
    if (!x)
      continue;
    short re = pf[i].revents;
    if (x->rd && (re & (POLLIN | POLLERR | POLLHUP)))
      dlock_async_on_readable(who[i]);
    x = find_watch(d, who[i]);
    if (x && x->wr && (re & (POLLOUT | POLLERR | POLLHUP)))
      dlock_async_on_writable(who[i]);
  }
  if (d->timer_at >= 0 && th_now_ms() >= d->timer_at) {
    atomic_store(&d->timer_late, (long long)(th_now_ms() - d->timer_at));
    d->timer_at = -1;
    dlock_async_on_timer(d->a);
    atomic_store(&d->timer_late, 0LL);
  }
}

typedef struct done {
  int n, rc;
  char msg[512]; /* dlock_last_error() in the callback */
} done;

static void on_done(int rc, void *arg) {
  done *x = arg;
  x->n++;
  x->rc = rc;
  snprintf(x->msg, sizeof x->msg, "%s", dlock_last_error());
}

/* Runs the loop until x has its callback; the bound is generous (every
 * wait of a case is far shorter). */
static int run_call(th_drive *d, done *x, const char *what) {
  int64_t end = th_now_ms() + 120000LL * th_timeout_mult();
  while (x->n == 0 && th_now_ms() < end)
    turn(d, 5);
  if (x->n == 0)
    th_fail(__FILE__, __LINE__, "async %s: no callback in 120 s", what);
  snprintf(d->msg, sizeof d->msg, "%s", x->msg);
  return x->rc;
}

/* ---- the drivers --------------------------------------------------------- */

th_drive *th_drive_new(int kind, const dlock_config *cfg) {
  th_drive *d = calloc(1, sizeof *d);
  if (!d)
    th_fail(__FILE__, __LINE__, "out of memory");
  d->kind = kind;
  d->cfg = *cfg;
  d->cfg.on_lock_lost = on_lost;
  d->cfg.on_lock_lost_arg = d;
  d->timer_at = -1;
  pthread_mutex_init(&d->mu, NULL);
  int rc;
  if (kind == TH_DRIVE_BLOCKING) {
    rc = dlock_client_new(&d->cfg, &d->c);
  } else {
    rc = dlock_async_new(&d->cfg, &d->a);
    dlock_async_hooks h = {d,           h_add_read,  h_del_read,
                           h_add_write, h_del_write, h_release,
                           h_schedule,  h_cancel,    h_cleanup};
    if (rc == 0)
      rc = dlock_async_attach(d->a, &h);
  }
  if (rc)
    th_fail(__FILE__, __LINE__, "%s client: %s: %s", th_drive_kind(d),
            dlock_err_name(rc), dlock_last_error());
  return d;
}

th_drive *th_drive_at(int kind, const char *url) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  return th_drive_new(kind, &cfg);
}

static dlock_mutex *mutex_of(th_drive *d, dlock_client *c, const char *name) {
  for (int i = 0; i < d->nmx; i++)
    if (strcmp(d->mx[i].name, name) == 0)
      return d->mx[i].m;
  if (d->nmx == MAX_NAMES || strlen(name) >= sizeof d->mx[0].name)
    th_fail(__FILE__, __LINE__, "th_drive: too many or too long names");
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(c, name, &m);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_mutex_new: %s", dlock_last_error());
  snprintf(d->mx[d->nmx].name, sizeof d->mx[0].name, "%s", name);
  d->mx[d->nmx++].m = m;
  return m;
}

static void blocking_owner(long long owner) {
  if (owner != 1)
    th_fail(__FILE__, __LINE__,
            "th_drive: the blocking driver's owner is the calling thread "
            "(owner 1), not %lld",
            owner);
}

int th_drive_lock(th_drive *d, const char *name, long long owner,
                  long long wait_ms, long long lease_ms) {
  if (d->kind == TH_DRIVE_BLOCKING) {
    blocking_owner(owner);
    int rc = dlock_mutex_timedlock(mutex_of(d, d->c, name), wait_ms, lease_ms);
    snprintf(d->msg, sizeof d->msg, "%s", rc ? dlock_last_error() : "");
    return rc;
  }
  done x = {0, 0, ""};
  int rc = dlock_async_lock(d->a, name, owner, wait_ms, lease_ms, on_done, &x);
  return rc ? rc : run_call(d, &x, "lock");
}

int th_drive_unlock(th_drive *d, const char *name, long long owner) {
  if (d->kind == TH_DRIVE_BLOCKING) {
    blocking_owner(owner);
    int rc = dlock_mutex_unlock(mutex_of(d, d->c, name));
    snprintf(d->msg, sizeof d->msg, "%s", rc ? dlock_last_error() : "");
    return rc;
  }
  done x = {0, 0, ""};
  int rc = dlock_async_unlock(d->a, name, owner, on_done, &x);
  return rc ? rc : run_call(d, &x, "unlock");
}

int th_drive_force_unlock(th_drive *d, const char *name) {
  dlock_client *c = d->c;
  if (d->kind == TH_DRIVE_ASYNC) {
    if (!d->force_c) {
      dlock_config cfg = d->cfg;
      cfg.on_lock_lost = NULL;
      int rc = dlock_client_new(&cfg, &d->force_c);
      if (rc)
        th_fail(__FILE__, __LINE__, "force client: %s", dlock_last_error());
    }
    c = d->force_c;
  }
  return dlock_mutex_force_unlock(mutex_of(d, c, name));
}

const char *th_drive_field(th_drive *d, const char *name, long long owner,
                           char *buf, size_t len) {
  if (d->kind == TH_DRIVE_BLOCKING) {
    blocking_owner(owner);
    if (dlock_mutex_owner(mutex_of(d, d->c, name), buf, len) != 0)
      th_fail(__FILE__, __LINE__, "dlock_mutex_owner: %s", dlock_last_error());
  } else {
    snprintf(buf, len, "%s:%lld", dlock_async_id(d->a), owner);
  }
  return buf;
}

dlock_mutex *th_drive_mutex(th_drive *d, const char *name) {
  return d->kind == TH_DRIVE_BLOCKING ? mutex_of(d, d->c, name) : NULL;
}

/* ---- calls left running ------------------------------------------------ */

struct th_call {
  th_drive *d;
  dlock_mutex *m; /* blocking */
  char name[128];
  long long owner, wait_ms, lease_ms;
  pthread_t t;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_int done; /* answered (x.rc) */
  int end;         /* blocking: the case asked the thread to end */
  int urc;         /* the unlock's code */
  done x;
};

static void *call_main(void *arg) {
  th_call *c = arg;
  c->x.rc = dlock_mutex_timedlock(c->m, c->wait_ms, c->lease_ms);
  snprintf(c->x.msg, sizeof c->x.msg, "%s", c->x.rc ? dlock_last_error() : "");
  atomic_store(&c->done, 1);
  pthread_mutex_lock(&c->mu);
  while (!c->end)
    pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  c->urc = c->x.rc == DLOCK_OK ? dlock_mutex_unlock(c->m) : 0;
  return NULL;
}

static void on_call_done(int rc, void *arg) {
  th_call *c = arg;
  c->x.n++;
  c->x.rc = rc;
  snprintf(c->x.msg, sizeof c->x.msg, "%s", dlock_last_error());
  atomic_store(&c->done, 1);
}

th_call *th_drive_lock_bg(th_drive *d, const char *name, long long owner,
                          long long wait_ms, long long lease_ms) {
  th_call *c = calloc(1, sizeof *c);
  if (!c || strlen(name) >= sizeof c->name)
    th_fail(__FILE__, __LINE__, "th_drive_lock_bg: out of memory or long name");
  c->d = d;
  snprintf(c->name, sizeof c->name, "%s", name);
  c->owner = owner;
  c->wait_ms = wait_ms;
  c->lease_ms = lease_ms;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (d->kind == TH_DRIVE_BLOCKING) {
    c->m = mutex_of(d, d->c, name);
    if (pthread_create(&c->t, NULL, call_main, c) != 0)
      th_fail(__FILE__, __LINE__, "th_drive_lock_bg: no thread");
    return c;
  }
  int rc =
      dlock_async_lock(d->a, name, owner, wait_ms, lease_ms, on_call_done, c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_async_lock: %s: %s", dlock_err_name(rc),
            dlock_last_error());
  return c;
}

int th_drive_call_done(th_drive *d, th_call *c) {
  if (d->kind == TH_DRIVE_ASYNC && !atomic_load(&c->done))
    turn(d, 0);
  return atomic_load(&c->done);
}

int th_drive_call_wait(th_drive *d, th_call *c, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  while (!atomic_load(&c->done) && th_now_ms() < end) {
    if (d->kind == TH_DRIVE_BLOCKING)
      th_sleep_ms(2);
    else
      turn(d, 2);
  }
  if (!atomic_load(&c->done))
    th_fail(__FILE__, __LINE__, "%s lock of '%s': no answer in %lld ms",
            th_drive_kind(d), c->name, (long long)ms);
  snprintf(d->msg, sizeof d->msg, "%s", c->x.msg);
  return c->x.rc;
}

int th_drive_call_end(th_drive *d, th_call *c) {
  int rc = 0;
  if (d->kind == TH_DRIVE_BLOCKING) {
    pthread_mutex_lock(&c->mu);
    c->end = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->t, NULL);
    rc = c->urc;
  } else if (c->x.rc == DLOCK_OK) {
    done x = {0, 0, ""};
    rc = dlock_async_unlock(d->a, c->name, c->owner, on_done, &x);
    rc = rc ? rc : run_call(d, &x, "unlock");
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
  return rc;
}

void th_drive_pump(th_drive *d, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  if (d->kind == TH_DRIVE_BLOCKING) {
    th_sleep_ms(ms);
    return;
  }
  while (th_now_ms() < end)
    turn(d, end - th_now_ms() < 5 ? end - th_now_ms() : 5);
}

int th_drive_pump_until(th_drive *d, const volatile int *flag, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST) && th_now_ms() < end) {
    if (d->kind == TH_DRIVE_BLOCKING)
      th_sleep_ms(2);
    else
      turn(d, 2);
  }
  return __atomic_load_n(flag, __ATOMIC_SEQ_CST);
}

const char *th_drive_error(const th_drive *d) { return d->msg; }

int th_drive_stats(th_drive *d, dlock_client_stats *st) {
  return d->kind == TH_DRIVE_BLOCKING ? dlock_client_stats(d->c, st)
                                      : dlock_async_stats(d->a, st);
}

void th_drive_free(th_drive *d) {
  if (!d)
    return;
  for (int i = 0; i < d->nmx; i++)
    dlock_mutex_free(d->mx[i].m);
  if (d->a)
    dlock_async_free(d->a);
  dlock_client_free(d->c);
  dlock_client_free(d->force_c);
  pthread_mutex_destroy(&d->mu);
  free(d);
}
