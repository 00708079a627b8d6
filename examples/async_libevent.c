/* A small libevent server that serialises work per key with dlock's
 * event-loop client (include/dlock/async.h): no threads, many requests in
 * flight, the work for one key never overlapping -- in this process or in
 * any other that locks the same names (dlock, Redisson).
 *
 * Usage:
 *   async_libevent [redis-url] [port]     serve on 127.0.0.1:port (7000):
 *       each line a client sends names a key; the server locks "job:<key>",
 *       works 10 ms, unlocks, and answers "done <key> <n>" (n = jobs done
 *       on that key so far)
 *   async_libevent [redis-url] --demo N   N jobs on 4 keys in one loop,
 *       then prints how many overlapped (0) and exits 0 if none did
 *
 *   cc async_libevent.c $(pkg-config --cflags --libs dlock libevent)
 */
#include <dlock.h>
#include <dlock/adapters/libevent.h>
#include <dlock/async.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 64

/* Per key: is a job inside its critical section, how many ran. */
static struct {
  char name[64];
  int busy, done;
} keys[NKEYS];
static int overlaps, finished, failed, wanted;
static long long next_owner = 1;
static struct event_base *base;
static dlock_async *client;

/* A client connection: freed when it has closed and no job answers it. */
typedef struct conn {
  struct bufferevent *bev;
  int pending, closed;
} conn;

typedef struct job {
  int key;
  long long owner; /* one owner per job: jobs exclude each other */
  char lock[80];
  conn *reply_to; /* NULL in --demo */
  struct event *work;
} job;

static void conn_put(conn *c) {
  if (c->closed && c->pending == 0) {
    bufferevent_free(c->bev);
    free(c);
  }
}

static int key_slot(const char *name) {
  for (int i = 0; i < NKEYS; i++) {
    if (!keys[i].name[0])
      snprintf(keys[i].name, sizeof keys[i].name, "%s", name);
    if (strcmp(keys[i].name, name) == 0)
      return i;
  }
  return -1;
}

static void job_end(job *j, int rc) {
  if (rc != DLOCK_OK) {
    fprintf(stderr, "%s: %s: %s\n", j->lock, dlock_err_name(rc),
            dlock_last_error());
    failed++;
  } else if (j->reply_to && !j->reply_to->closed) {
    evbuffer_add_printf(bufferevent_get_output(j->reply_to->bev),
                        "done %s %d\n", keys[j->key].name, keys[j->key].done);
  }
  if (j->reply_to) {
    j->reply_to->pending--;
    conn_put(j->reply_to);
  }
  if (j->work)
    event_free(j->work);
  free(j);
  if (++finished == wanted)
    event_base_loopexit(base, NULL);
}

static void unlocked(int rc, void *arg) { job_end(arg, rc); }

/* The critical section ends: leave it, then unlock. */
static void work_done(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  job *j = arg;
  keys[j->key].busy = 0;
  keys[j->key].done++;
  if (dlock_async_unlock(client, j->lock, j->owner, unlocked, j) != 0)
    job_end(j, DLOCK_ECLOSED);
}

/* Holding the lock: the work takes 10 ms of loop time. */
static void locked(int rc, void *arg) {
  job *j = arg;
  if (rc != DLOCK_OK) {
    job_end(j, rc);
    return;
  }
  if (keys[j->key].busy)
    overlaps++;
  keys[j->key].busy = 1;
  struct timeval ten_ms = {0, 10000};
  j->work = evtimer_new(base, work_done, j);
  evtimer_add(j->work, &ten_ms);
}

static void job_start(const char *key, conn *reply_to) {
  job *j = calloc(1, sizeof *j);
  int k = key_slot(key);
  if (!j || k < 0) {
    free(j);
    return;
  }
  j->key = k;
  j->owner = next_owner++;
  j->reply_to = reply_to;
  snprintf(j->lock, sizeof j->lock, "job:%s", key);
  /* wait up to 30 s for the key; watchdog lease while working */
  if (dlock_async_lock(client, j->lock, j->owner, 30000, -1, locked, j) != 0) {
    fprintf(stderr, "lock: %s\n", dlock_last_error());
    free(j);
    return;
  }
  if (reply_to)
    reply_to->pending++;
}

/* ---- the server ------------------------------------------------------------
 */

static void on_line(struct bufferevent *bev, void *arg) {
  conn *c = arg;
  char *line;
  size_t n;
  while ((line = evbuffer_readln(bufferevent_get_input(bev), &n,
                                 EVBUFFER_EOL_CRLF))) {
    if (n > 0 && n < 60)
      job_start(line, c);
    free(line);
  }
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
  (void)bev;
  conn *c = arg;
  /* A client that leaves: its queued jobs still run (unanswered). */
  if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
    c->closed = 1;
    conn_put(c);
  }
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *sa, int len, void *arg) {
  (void)l;
  (void)sa;
  (void)len;
  (void)arg;
  conn *c = calloc(1, sizeof *c);
  if (!c ||
      !(c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE))) {
    free(c);
    evutil_closesocket(fd);
    return;
  }
  bufferevent_setcb(c->bev, on_line, NULL, on_event, c);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

int main(int argc, char **argv) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  int demo = argc > 3 && strcmp(argv[2], "--demo") == 0 ? atoi(argv[3]) : 0;
  int port = !demo && argc > 2 ? atoi(argv[2]) : 7000;
  base = event_base_new();
  int rc = dlock_async_new(&cfg, &client);
  if (rc == 0)
    rc = dlock_libevent_attach(client, base);
  if (rc) {
    fprintf(stderr, "dlock: %s: %s\n", dlock_err_name(rc), dlock_last_error());
    return 1;
  }
  struct evconnlistener *listener = NULL;
  if (demo > 0) {
    wanted = demo;
    const char *names[4] = {"a", "b", "c", "d"};
    for (int i = 0; i < demo; i++)
      job_start(names[i % 4], NULL);
  } else {
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(0x7f000001);
    sin.sin_port = htons((unsigned short)port);
    listener = evconnlistener_new_bind(
        base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
        (struct sockaddr *)&sin, sizeof sin);
    if (!listener) {
      perror("listen");
      return 1;
    }
    printf("serving on 127.0.0.1:%d (client id %s)\n", port,
           dlock_async_id(client));
  }
  event_base_dispatch(base);
  if (demo > 0)
    printf("%d jobs on 4 keys: %d done, %d failed, %d overlapped\n", demo,
           finished - failed, failed, overlaps);
  if (listener)
    evconnlistener_free(listener);
  dlock_async_free(client);
  event_base_free(base);
  return demo > 0 && (failed || overlaps || finished != demo) ? 1 : 0;
}
