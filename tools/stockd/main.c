/*
 * main.c -- dlock-stockd: the listening socket, --threads event loops on
 * it, and a clean stop on SIGINT / SIGTERM (the loops end, waits for a
 * lock are cancelled, every thread is joined and everything freed).
 *
 *   dlock-stockd [--listen HOST:PORT] [--redis URL] [--strategy NAME] ...
 *
 * Prints "dlock-stockd: listening on HOST:PORT ..." on stdout once it
 * accepts connections (with port 0: the port the kernel chose).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stockd.h"

/* A listening TCP socket on host:port (non-blocking, backlog 1024);
 * fills *bound with the port. -1 after printing why. */
static int listen_on(const char *host, int port, int *bound) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "dlock-stockd: %s: %s\n", host, gai_strerror(rc));
    return -1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
    fprintf(stderr, "dlock-stockd: listen on %s:%d: %s\n", host, port,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  memset(&ss, 0, sizeof ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    fprintf(stderr, "dlock-stockd: getsockname: %s\n", strerror(errno));
    close(fd);
    return -1;
  }
  *bound =
      ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

static void *loop_main(void *arg) {
  sd_thread *t = arg;
  event_base_dispatch(t->base);
  return NULL;
}

/* Runs the loops until SIGINT / SIGTERM. 0, or an exit status. */
static int serve(sd_service *svc, int lfd, sigset_t *sigs) {
  int nt = (int)svc->o->threads;
  sd_thread *ts = calloc((size_t)nt, sizeof *ts);
  pthread_t *tid = calloc((size_t)nt, sizeof *tid);
  int started = 0, rc = 0;
  for (int i = 0; ts && tid && i < nt; i++) {
    /* each loop's evhttp owns (and closes) its own copy of the socket */
    int fd = dup(lfd);
    if (fd < 0 || sd_thread_init(&ts[i], svc, i, fd) != 0) {
      if (fd >= 0 && !ts[i].http)
        close(fd);
      sd_thread_free(&ts[i]);
      rc = SD_EX_SOFTWARE;
      break;
    }
    if (pthread_create(&tid[i], NULL, loop_main, &ts[i]) != 0) {
      sd_thread_free(&ts[i]);
      rc = SD_EX_SOFTWARE;
      break;
    }
    started++;
  }
  if (rc == 0) {
    const sd_opts *o = svc->o;
    printf("dlock-stockd: listening on %s:%lld (instance %s, strategy %s, "
           "%d threads)\n",
           o->host, o->port, o->name, o->strategy->name, nt);
    fflush(stdout);
    int sig = 0;
    sigwait(sigs, &sig);
  } else {
    fprintf(stderr, "dlock-stockd: could not start the request threads\n");
  }
  atomic_store(&svc->stopping, 1);
  for (int i = 0; i < svc->n; i++)
    sk_engine_cancel_waits(&svc->p[i].e);
  for (int i = 0; i < started; i++)
    event_base_loopexit(ts[i].base, NULL);
  for (int i = 0; i < started; i++) {
    pthread_join(tid[i], NULL);
    sd_thread_free(&ts[i]);
  }
  free(ts);
  free(tid);
  return rc;
}

int main(int argc, char **argv) {
  sd_opts o;
  int exit_now = 0;
  int rc = sd_parse_args(argc, argv, &o, &exit_now);
  if (rc != 0 || exit_now)
    return rc;
  /* signals: SIGINT / SIGTERM are taken by sigwait in the main thread
   * (blocked everywhere, inherited by the threads); SIGPIPE ignored */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (evthread_use_pthreads() != 0) {
    fprintf(stderr, "dlock-stockd: libevent without thread support\n");
    return SD_EX_SOFTWARE;
  }
  int port = 0;
  int lfd = listen_on(o.host, (int)o.port, &port);
  if (lfd < 0)
    return SD_EX_UNAVAILABLE;
  o.port = port;
  if (!o.name[0])
    snprintf(o.name, sizeof o.name, "%.40s:%d", o.host, port);
  sd_service svc;
  if (sd_service_init(&svc, &o) != 0) {
    close(lfd);
    return SD_EX_UNAVAILABLE;
  }
  rc = serve(&svc, lfd, &sigs);
  close(lfd);
  sd_service_free(&svc);
  sd_health_free();
  libevent_global_shutdown();
  return rc;
}
