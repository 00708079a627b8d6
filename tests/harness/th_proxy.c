/*
 * th_proxy.c -- the blackholing TCP proxy of th_proxy.h: one thread per
 * proxy, poll() over the listening socket and every connection pair.
 */
#include "th_proxy.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "th.h"

#define TH_PROXY_MAX 64 /* connection pairs */

struct th_proxy {
  int lfd;
  int target_port;
  atomic_int blackhole;
  atomic_int tarpit; /* th_proxy_unreachable: the listener is not polled */
  int fill[4];       /* connections filling the listen queue (or -1) */
  atomic_int reply_delay_ms;
  atomic_int silence_done;
  atomic_int silence_req;    /* th_proxy_silence asked, not yet applied */
  char silent[TH_PROXY_MAX]; /* pair drops the server's replies */
  char url[64];
  int a[TH_PROXY_MAX], b[TH_PROXY_MAX]; /* client side, server side */
  pthread_t thread;
};

static int connect_target(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons((uint16_t)port);
  if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof sa) == 0)
    return s;
  if (s >= 0)
    close(s);
  return -1;
}

static void close_pair(th_proxy *p, int i) {
  p->silent[i] = 0;
  close(p->a[i]);
  if (p->b[i] >= 0)
    close(p->b[i]);
  p->a[i] = p->b[i] = -1;
}

/* Moves what is readable on from to to (or drops it); -1 on EOF/error. */
static int pump(th_proxy *p, int from, int to, int reply) {
  char buf[16384];
  ssize_t n = read(from, buf, sizeof buf);
  if (n <= 0)
    return n < 0 && (errno == EINTR || errno == EAGAIN) ? 0 : -1;
  if (atomic_load(&p->blackhole) || to < 0)
    return 0;
  int d = atomic_load(&p->reply_delay_ms);
  if (reply && d > 0)
    th_sleep_ms(d);
  for (ssize_t off = 0; off < n;) {
    ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    off += w;
  }
  return 0;
}

static void *proxy_main(void *arg) {
  th_proxy *p = arg;
  for (;;) {
    struct pollfd pf[1 + 2 * TH_PROXY_MAX];
    int idx[1 + 2 * TH_PROXY_MAX];
    int n = 0;
    if (!atomic_load(&p->tarpit)) {
      pf[n].fd = p->lfd;
      pf[n].events = POLLIN;
      idx[n++] = -1;
    }
    for (int i = 0; i < TH_PROXY_MAX; i++) {
      if (p->a[i] < 0)
        continue;
      pf[n].fd = p->a[i];
      pf[n].events = POLLIN;
      idx[n++] = i;
      if (p->b[i] >= 0) {
        pf[n].fd = p->b[i];
        pf[n].events = POLLIN;
        idx[n++] = TH_PROXY_MAX + i;
      }
    }
    if (poll(pf, (nfds_t)n, 20) < 0 && errno != EINTR)
      break;
    if (atomic_exchange(&p->silence_req, 0)) {
      for (int i = 0; i < TH_PROXY_MAX; i++)
        p->silent[i] = (char)(p->a[i] >= 0);
      atomic_store(&p->silence_done, 1);
    }
    for (int k = 0; k < n; k++) {
      if (!pf[k].revents)
        continue;
      if (idx[k] < 0) {
        int fd = accept(p->lfd, NULL, NULL);
        if (fd < 0)
          continue;
        int i = 0;
        while (i < TH_PROXY_MAX && p->a[i] >= 0)
          i++;
        if (i == TH_PROXY_MAX) {
          close(fd);
          continue;
        }
        p->a[i] = fd;
        /* A blackholed path swallows new connections too. */
        p->b[i] =
            atomic_load(&p->blackhole) ? -1 : connect_target(p->target_port);
        continue;
      }
      int i = idx[k] % TH_PROXY_MAX, from_client = idx[k] < TH_PROXY_MAX;
      if (p->a[i] < 0)
        continue;
      int rc = from_client    ? pump(p, p->a[i], p->b[i], 0)
               : p->silent[i] ? pump(p, p->b[i], -1, 1)
                              : pump(p, p->b[i], p->a[i], 1);
      if (rc < 0)
        close_pair(p, i);
    }
  }
  return NULL;
}

th_proxy *th_proxy_new(int target_port) {
  th_proxy *p = calloc(1, sizeof *p);
  if (!p)
    th_fail(__FILE__, __LINE__, "out of memory");
  for (int i = 0; i < TH_PROXY_MAX; i++)
    p->a[i] = p->b[i] = -1;
  for (int i = 0; i < 4; i++)
    p->fill[i] = -1;
  p->target_port = target_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof sa;
  if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(p->lfd, 64) != 0 ||
      getsockname(p->lfd, (struct sockaddr *)&sa, &l) != 0)
    th_fail(__FILE__, __LINE__, "proxy: %s", strerror(errno));
  snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", ntohs(sa.sin_port));
  if (pthread_create(&p->thread, NULL, proxy_main, p) != 0)
    th_fail(__FILE__, __LINE__, "proxy: cannot start its thread");
  pthread_detach(p->thread);
  return p;
}

const char *th_proxy_url(th_proxy *p) { return p->url; }

void th_proxy_blackhole(th_proxy *p, int on) {
  atomic_store(&p->blackhole, on);
}

void th_proxy_reply_delay(th_proxy *p, int ms) {
  atomic_store(&p->reply_delay_ms, ms);
}

void th_proxy_silence(th_proxy *p) {
  atomic_store(&p->silence_done, 0);
  atomic_store(&p->silence_req, 1);
  while (!atomic_load(&p->silence_done))
    th_sleep_ms(1);
}

/* A non-blocking connect to the proxy: the socket, *done = 1 when it
 * completed within ms (it was accepted into the listen queue). */
static int try_connect(th_proxy *p, int ms, int *done) {
  struct sockaddr_in sa;
  socklen_t l = sizeof sa;
  getsockname(p->lfd, (struct sockaddr *)&sa, &l);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0)
    th_fail(__FILE__, __LINE__, "proxy: socket: %s", strerror(errno));
  *done = connect(s, (struct sockaddr *)&sa, sizeof sa) == 0;
  if (!*done) {
    struct pollfd pf = {s, POLLOUT, 0};
    int e = 0;
    socklen_t el = sizeof e;
    *done = poll(&pf, 1, ms) == 1 &&
            getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0;
  }
  return s;
}

void th_proxy_unreachable(th_proxy *p, int on) {
  if (!on) {
    atomic_store(&p->blackhole, 0);
    listen(p->lfd, 64);
    for (int i = 0; i < 4; i++)
      if (p->fill[i] >= 0)
        close(p->fill[i]);
    for (int i = 0; i < 4; i++)
      p->fill[i] = -1;
    atomic_store(&p->tarpit, 0);
    return;
  }
  atomic_store(&p->blackhole, 1);
  atomic_store(&p->tarpit, 1);
  th_sleep_ms(60); /* the proxy's poll (20 ms) no longer has the listener */
  /* A backlog of 0: the kernel queues one connection; after that it drops
   * the SYNs (a full accept queue), and connects hang as on a dead route. */
  if (listen(p->lfd, 0) != 0)
    th_fail(__FILE__, __LINE__, "proxy: listen: %s", strerror(errno));
  for (int i = 0; i < 4; i++) {
    int done = 0;
    int s = try_connect(p, 300, &done);
    if (!done) {
      close(s);
      return; /* this one hangs: so will the client's */
    }
    p->fill[i] = s;
  }
  th_fail(__FILE__, __LINE__, "proxy: connects still complete");
}
