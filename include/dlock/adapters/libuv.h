/*
 * dlock/adapters/libuv.h -- attaches a dlock_async to a libuv loop.
 * Header-only (as hiredis's adapters): libdlock does not link libuv; the
 * program that includes this header does (-luv).
 *
 *   dlock_async *a;
 *   dlock_async_new(&cfg, &a);
 *   dlock_libuv_attach(a, loop);
 *   ... uv_run(loop, UV_RUN_DEFAULT) ...
 *   dlock_async_free(a);   (then run the loop once more, so the handles it
 *                           closed are freed: uv_run(loop, UV_RUN_DEFAULT))
 *
 * One uv_poll_t per socket (made on first use, closed with uv_close when
 * the library releases the socket) and one uv_timer_t. Everything runs on
 * the loop's thread.
 */
#ifndef DLOCK_ADAPTERS_LIBUV_H
#define DLOCK_ADAPTERS_LIBUV_H

#include <stdlib.h>
#include <uv.h>

#include "dlock/async.h"

typedef struct dlock_libuv__fd {
  uv_poll_t poll; /* first: the handle's close callback frees the struct */
  int mask;
  dlock_async_watch *w; /* NULL once released */
} dlock_libuv__fd;

typedef struct dlock_libuv__ctx {
  uv_loop_t *loop;
  uv_timer_t *timer;
} dlock_libuv__ctx;

static inline void dlock_libuv__free_handle(uv_handle_t *h) { free(h); }

static inline void dlock_libuv__on_poll(uv_poll_t *p, int status, int events) {
  dlock_libuv__fd *f = (dlock_libuv__fd *)p->data;
  /* An error on the socket: let the library's read or write find it. */
  if (status < 0)
    events = f->mask;
  if (f->w && (events & UV_READABLE) && (f->mask & UV_READABLE))
    dlock_async_on_readable(f->w);
  if (f->w && (events & UV_WRITABLE) && (f->mask & UV_WRITABLE))
    dlock_async_on_writable(f->w);
}

static inline int dlock_libuv__set(void *data, dlock_async_watch *w, int bit,
                                   int on) {
  dlock_libuv__ctx *u = (dlock_libuv__ctx *)data;
  dlock_libuv__fd *f = (dlock_libuv__fd *)w->ev;
  if (!f) {
    if (!on)
      return 0;
    if (!(f = (dlock_libuv__fd *)calloc(1, sizeof *f)))
      return -1;
    if (uv_poll_init(u->loop, &f->poll, w->fd) != 0) {
      free(f);
      return -1;
    }
    f->poll.data = f;
    f->w = w;
    w->ev = f;
  }
  f->mask = on ? f->mask | bit : f->mask & ~bit;
  if (f->mask)
    return uv_poll_start(&f->poll, f->mask, dlock_libuv__on_poll) == 0 ? 0 : -1;
  uv_poll_stop(&f->poll);
  return 0;
}

static inline int dlock_libuv__add_read(void *data, dlock_async_watch *w) {
  return dlock_libuv__set(data, w, UV_READABLE, 1);
}

static inline void dlock_libuv__del_read(void *data, dlock_async_watch *w) {
  (void)dlock_libuv__set(data, w, UV_READABLE, 0);
}

static inline int dlock_libuv__add_write(void *data, dlock_async_watch *w) {
  return dlock_libuv__set(data, w, UV_WRITABLE, 1);
}

static inline void dlock_libuv__del_write(void *data, dlock_async_watch *w) {
  (void)dlock_libuv__set(data, w, UV_WRITABLE, 0);
}

static inline void dlock_libuv__release(void *data, dlock_async_watch *w) {
  (void)data;
  dlock_libuv__fd *f = (dlock_libuv__fd *)w->ev;
  if (!f)
    return;
  f->w = NULL;
  w->ev = NULL;
  uv_poll_stop(&f->poll);
  uv_close((uv_handle_t *)&f->poll, dlock_libuv__free_handle);
}

static inline void dlock_libuv__on_timer(uv_timer_t *t) {
  dlock_async_on_timer((dlock_async *)t->data);
}

static inline void dlock_libuv__schedule(void *data, long long ms) {
  dlock_libuv__ctx *u = (dlock_libuv__ctx *)data;
  uv_timer_start(u->timer, dlock_libuv__on_timer, (uint64_t)ms, 0);
}

static inline void dlock_libuv__cancel(void *data) {
  uv_timer_stop(((dlock_libuv__ctx *)data)->timer);
}

static inline void dlock_libuv__cleanup(void *data) {
  dlock_libuv__ctx *u = (dlock_libuv__ctx *)data;
  uv_timer_stop(u->timer);
  uv_close((uv_handle_t *)u->timer, dlock_libuv__free_handle);
  free(u);
}

/* Attaches a to loop (which must outlive a). 0, or DLOCK_ENOMEM /
 * DLOCK_EINVAL (NULL argument, already attached). Thread-safety: the
 * loop's thread. */
DLOCK_SINCE(0, 2)
static inline int dlock_libuv_attach(dlock_async *a, uv_loop_t *loop) {
  if (!a || !loop)
    return DLOCK_EINVAL;
  dlock_libuv__ctx *u = (dlock_libuv__ctx *)calloc(1, sizeof *u);
  uv_timer_t *t = (uv_timer_t *)calloc(1, sizeof *t);
  if (!u || !t || uv_timer_init(loop, t) != 0) {
    free(u);
    free(t);
    return DLOCK_ENOMEM;
  }
  t->data = a;
  u->loop = loop;
  u->timer = t;
  dlock_async_hooks h;
  h.data = u;
  h.add_read = dlock_libuv__add_read;
  h.del_read = dlock_libuv__del_read;
  h.add_write = dlock_libuv__add_write;
  h.del_write = dlock_libuv__del_write;
  h.release = dlock_libuv__release;
  h.schedule_timer = dlock_libuv__schedule;
  h.cancel_timer = dlock_libuv__cancel;
  h.cleanup = dlock_libuv__cleanup;
  int rc = dlock_async_attach(a, &h);
  if (rc)
    dlock_libuv__cleanup(u);
  return rc;
}

#endif
