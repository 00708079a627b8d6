/* conn.c -- slow clients get 408. evhttp drops a connection whose request
 * times out without a word; the issue wants a 4xx. So each thread makes
 * its connections' bufferevents itself (evhttp's bevcb) and keeps a list
 * of them: a callback on the input buffer notes the first byte of each
 * request (its deadline: --client-timeout seconds later), one on the
 * output buffer notes the response (no deadline). A sweep every 100 ms
 * answers requests past their deadline with "408 Request Timeout",
 * written straight to the socket, which is then shut down: evhttp reads
 * EOF and frees the connection as usual. evhttp's own idle timeout is
 * longer than ours (http.c), so ours fires first.
 *
 * Lifetimes: the list holds a reference to each bufferevent, so its
 * socket stays open (the bufferevent closes it when the last reference
 * goes) until the sweep sees evhttp has let go (no callbacks left) and
 * drops ours. The fd a 408 goes to is therefore always that connection's.
 * Everything here runs on the owning thread's event loop. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "stockd.h"

#define SWEEP_MS 100

struct sd_conn {
  struct sd_conn *next;
  struct bufferevent *bev;
  long long deadline_us; /* 0: no request being read */
};

static const char resp_408[] = "HTTP/1.1 408 Request Timeout\r\n"
                               "Content-Type: text/plain\r\n"
                               "Connection: close\r\n"
                               "Content-Length: 43\r\n\r\n"
                               "request timeout: the request came too slow\n";

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info,
                     void *arg) {
  (void)buf;
  sd_conn *c = arg;
  if (info->n_added > 0 && c->deadline_us == 0)
    c->deadline_us = -1; /* a request began: the sweep sets its deadline */
}

static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info,
                      void *arg) {
  (void)buf;
  sd_conn *c = arg;
  if (info->n_added > 0)
    c->deadline_us = 0;
}

static int evhttp_let_go(struct bufferevent *bev) {
  bufferevent_data_cb r = NULL, w = NULL;
  bufferevent_event_cb e = NULL;
  void *arg = NULL;
  bufferevent_getcb(bev, &r, &w, &e, &arg);
  return !r && !w && !e;
}

static void send_408(sd_conn *c) {
  c->deadline_us = 0;
  evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd < 0)
    return;
  sd_metrics_request(SD_EP_OTHER, 408);
  ssize_t n =
      send(fd, resp_408, sizeof resp_408 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n; /* a client that is gone gets nothing: fine */
  shutdown(fd, SHUT_RDWR);
}

static void sweep(evutil_socket_t fd_unused, short what, void *arg) {
  (void)fd_unused;
  (void)what;
  sd_thread *t = arg;
  long long now = dlc_now_us();
  long long timeout_us = t->svc->o->client_timeout_s * 1000000LL;
  for (sd_conn **pp = &t->conns; *pp;) {
    sd_conn *c = *pp;
    if (evhttp_let_go(c->bev)) {
      *pp = c->next;
      bufferevent_decref(c->bev);
      free(c);
      continue;
    }
    if (c->deadline_us == -1)
      c->deadline_us = now + timeout_us;
    else if (c->deadline_us > 0 && now >= c->deadline_us)
      send_408(c);
    pp = &c->next;
  }
}

struct bufferevent *sd_conn_bev(struct event_base *base, void *arg) {
  sd_thread *t = arg;
  sd_conn *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (!c->bev) {
    free(c);
    return NULL;
  }
  bufferevent_incref(c->bev); /* ours, dropped by the sweep */
  evbuffer_add_cb(bufferevent_get_input(c->bev), on_input, c);
  evbuffer_add_cb(bufferevent_get_output(c->bev), on_output, c);
  c->next = t->conns;
  t->conns = c;
  return c->bev;
}

int sd_conn_start(sd_thread *t) {
  t->sweep = event_new(t->base, -1, EV_PERSIST, sweep, t);
  struct timeval tv = {0, (suseconds_t)SWEEP_MS * 1000};
  return t->sweep && event_add(t->sweep, &tv) == 0 ? 0 : -1;
}

void sd_conn_stop(sd_thread *t) {
  if (t->sweep)
    event_free(t->sweep);
  t->sweep = NULL;
  while (t->conns) {
    sd_conn *c = t->conns;
    t->conns = c->next;
    bufferevent_decref(c->bev);
    free(c);
  }
}
