/*
 * dlock/adapters/libevent.h -- attaches a dlock_async to a libevent 2
 * event_base. Header-only (as hiredis's adapters): libdlock does not link
 * libevent; the program that includes this header does (-levent or
 * -levent_core).
 *
 *   dlock_async *a;
 *   dlock_async_new(&cfg, &a);
 *   dlock_libevent_attach(a, base);
 *   ... event_base_dispatch(base) ...
 *   dlock_async_free(a);          (before event_base_free(base))
 *
 * One read and one write event per socket (created on first use,
 * EV_PERSIST), one timer event. Everything runs on the thread that runs the
 * base.
 */
#ifndef DLOCK_ADAPTERS_LIBEVENT_H
#define DLOCK_ADAPTERS_LIBEVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "dlock/async.h"

typedef struct dlock_libevent__fd {
  struct event *rd, *wr;
} dlock_libevent__fd;

typedef struct dlock_libevent__ctx {
  struct event_base *base;
  struct event *timer;
} dlock_libevent__ctx;

static inline void dlock_libevent__on_read(evutil_socket_t fd, short what,
                                           void *arg) {
  (void)fd;
  (void)what;
  dlock_async_on_readable((dlock_async_watch *)arg);
}

static inline void dlock_libevent__on_write(evutil_socket_t fd, short what,
                                            void *arg) {
  (void)fd;
  (void)what;
  dlock_async_on_writable((dlock_async_watch *)arg);
}

static inline void dlock_libevent__on_timer(evutil_socket_t fd, short what,
                                            void *arg) {
  (void)fd;
  (void)what;
  dlock_async_on_timer((dlock_async *)arg);
}

/* The socket's events, made on first use: NULL when out of memory. */
static inline struct event **
dlock_libevent__slot(dlock_libevent__ctx *e, dlock_async_watch *w, int write) {
  dlock_libevent__fd *f = (dlock_libevent__fd *)w->ev;
  if (!f && !(f = (dlock_libevent__fd *)calloc(1, sizeof *f)))
    return NULL;
  w->ev = f;
  struct event **ev = write ? &f->wr : &f->rd;
  if (!*ev)
    *ev = event_new(
        e->base, w->fd, (short)((write ? EV_WRITE : EV_READ) | EV_PERSIST),
        write ? dlock_libevent__on_write : dlock_libevent__on_read, w);
  return *ev ? ev : NULL;
}

static inline int dlock_libevent__add(void *data, dlock_async_watch *w,
                                      int write) {
  struct event **ev =
      dlock_libevent__slot((dlock_libevent__ctx *)data, w, write);
  return ev && event_add(*ev, NULL) == 0 ? 0 : -1;
}

static inline int dlock_libevent__add_read(void *data, dlock_async_watch *w) {
  return dlock_libevent__add(data, w, 0);
}

static inline int dlock_libevent__add_write(void *data, dlock_async_watch *w) {
  return dlock_libevent__add(data, w, 1);
}

static inline void dlock_libevent__del_read(void *data, dlock_async_watch *w) {
  (void)data;
  dlock_libevent__fd *f = (dlock_libevent__fd *)w->ev;
  if (f && f->rd)
    event_del(f->rd);
}

static inline void dlock_libevent__del_write(void *data, dlock_async_watch *w) {
  (void)data;
  dlock_libevent__fd *f = (dlock_libevent__fd *)w->ev;
  if (f && f->wr)
    event_del(f->wr);
}

static inline void dlock_libevent__release(void *data, dlock_async_watch *w) {
  (void)data;
  dlock_libevent__fd *f = (dlock_libevent__fd *)w->ev;
  if (!f)
    return;
  if (f->rd)
    event_free(f->rd);
  if (f->wr)
    event_free(f->wr);
  free(f);
  w->ev = NULL;
}

static inline void dlock_libevent__schedule(void *data, long long ms) {
  dlock_libevent__ctx *e = (dlock_libevent__ctx *)data;
  struct timeval tv;
  tv.tv_sec = (time_t)(ms / 1000);
  tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
  evtimer_add(e->timer, &tv);
}

static inline void dlock_libevent__cancel(void *data) {
  evtimer_del(((dlock_libevent__ctx *)data)->timer);
}

static inline void dlock_libevent__cleanup(void *data) {
  dlock_libevent__ctx *e = (dlock_libevent__ctx *)data;
  event_free(e->timer);
  free(e);
}

/* Attaches a to base (which must outlive a). 0, or DLOCK_ENOMEM /
 * DLOCK_EINVAL (NULL argument, already attached). Thread-safety: the
 * base's thread. */
DLOCK_SINCE(0, 2)
static inline int dlock_libevent_attach(dlock_async *a,
                                        struct event_base *base) {
  if (!a || !base)
    return DLOCK_EINVAL;
  dlock_libevent__ctx *e = (dlock_libevent__ctx *)calloc(1, sizeof *e);
  if (!e)
    return DLOCK_ENOMEM;
  e->base = base;
  e->timer = evtimer_new(base, dlock_libevent__on_timer, a);
  if (!e->timer) {
    free(e);
    return DLOCK_ENOMEM;
  }
  dlock_async_hooks h;
  h.data = e;
  h.add_read = dlock_libevent__add_read;
  h.del_read = dlock_libevent__del_read;
  h.add_write = dlock_libevent__add_write;
  h.del_write = dlock_libevent__del_write;
  h.release = dlock_libevent__release;
  h.schedule_timer = dlock_libevent__schedule;
  h.cancel_timer = dlock_libevent__cancel;
  h.cleanup = dlock_libevent__cleanup;
  int rc = dlock_async_attach(a, &h);
  if (rc)
    dlock_libevent__cleanup(e);
  return rc;
}

#endif
