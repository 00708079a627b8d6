/*
 * sentinel.c -- finding and following the master of a redis-sentinel://
 * client (docs/sentinel.md).
 *
 * It owns c->sent: the master's address as last discovered, its generation
 * and the watcher thread. Every connection of the client is made by
 * dlock__link_open, which asks dlock__sentinel_target where the master is;
 * this file answers from its cache or discovers:
 *
 *   for each sentinel, starting with the one that answered last:
 *     SENTINEL GET-MASTER-ADDR-BY-NAME <name>  -> host, port
 *     connect to host:port (the data nodes' credentials), ROLE
 *     -> "master": use it; a replica, or no answer: the next sentinel
 *
 * The cache is dropped (dlock__sentinel_invalidate) when the master refuses
 * a connection or answers READONLY (conn.c), and the watcher replaces it on
 * a +switch-master message. Whenever the address changes, gen increases:
 * links made for an older generation are stale, and their owners (the
 * router's pool and shared connection, the subscriber, the watchdog's
 * renewal connection) close them and connect to the new master.
 *
 * THE WATCHER is one thread per sentinel client (none for other URLs). It
 * subscribes to +switch-master and +promoted-slave on one sentinel; when
 * that sentinel fails it moves to the next. After each (re)subscription it
 * checks the master once, since a switch may have happened while nobody
 * listened. +promoted-slave comes seconds before +switch-master (which
 * waits for the other replicas to be reconfigured), and until then the old
 * master, when alive, still takes writes: the watcher moves the client at
 * the first of the two.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/net.h"
#include "client/client.h"

/* ---- state ---------------------------------------------------------------
 */

int dlock__sentinel_init(dlock_client *c) {
  dlock__sentinel *s = &c->sent;
  memset(s, 0, sizeof *s);
  s->pipe[0] = s->pipe[1] = -1;
  atomic_init(&s->gen, 1);
  atomic_init(&s->stop, 0);
  if (pthread_mutex_init(&s->mu, NULL) != 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (pthread_mutex_init(&s->disc_mu, NULL) != 0) {
    pthread_mutex_destroy(&s->mu);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

void dlock__sentinel_destroy(dlock_client *c, int forked) {
  dlock__sentinel *s = &c->sent;
  free(s->host);
  s->host = NULL;
  for (int i = 0; i < 2; i++)
    if (s->pipe[i] >= 0)
      close(s->pipe[i]);
  s->pipe[0] = s->pipe[1] = -1;
  if (!forked) {
    pthread_mutex_destroy(&s->disc_mu);
    pthread_mutex_destroy(&s->mu);
  }
}

int dlock__link_stale(dlock_client *c, const dlock__link *l) {
  return c->url.sentinel && l->addr_gen != atomic_load(&c->sent.gen);
}

/* Wakes the threads that hold links (the subscriber polls its pipe). */
static void wake_subscriber(dlock_client *c) {
  if (c->ps.pipe[1] >= 0) {
    char b = 1;
    ssize_t w = write(c->ps.pipe[1], &b, 1);
    (void)w;
  }
}

/* Records host:port as the master (mu held). A new address is a new
 * generation: returns 1 then, with the old address ("" none) in old[0..n)
 * for master_log. */
static int set_master(dlock_client *c, const char *host, int port, char *old,
                      size_t n) {
  dlock__sentinel *s = &c->sent;
  int same = s->host && strcmp(s->host, host) == 0 && s->port == port;
  old[0] = '\0';
  if (!same && s->host)
    snprintf(old, n, "%s:%d", s->host, s->port);
  if (!same) {
    char *h = dlock__strdup(host);
    if (!h)
      return 0; /* out of memory: the next target discovers again */
    free(s->host);
    s->host = h;
    s->port = port;
    atomic_fetch_add(&s->gen, 1);
    atomic_store(&c->sync.replicas, -1);
  }
  s->known = 1;
  return !same;
}

/* Logs a new master (no lock held): a failover followed when there was
 * another one before. */
static void master_log(dlock_client *c, const char *old, const char *host,
                       int port, const char *how) {
  if (old[0])
    dlock__log(&c->cfg, DLOCK_LOG_INFO, NULL, "failover",
               "master of '%s' moved from %s to %s:%d (%s)", c->url.master_name,
               old, host, port, how);
  else
    dlock__log(&c->cfg, DLOCK_LOG_DEBUG, NULL, "master",
               "master of '%s' is %s:%d (%s)", c->url.master_name, host, port,
               how);
}

void dlock__sentinel_invalidate(dlock_client *c, unsigned gen) {
  if (!c->url.sentinel)
    return;
  dlock__mu_lock(&c->sent.mu);
  if (atomic_load(&c->sent.gen) == gen)
    c->sent.known = 0;
  dlock__mu_unlock(&c->sent.mu);
}

/* ---- the answers, parsed (both clients: async_route.c too) -------------- */

int dlock__sentinel_addr_reply(const redisReply *r, const char *name,
                               char *host, size_t n, int *port, char *why,
                               size_t wn) {
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(why, wn, "%s", r->str);
    return DLOCK_EREDIS;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    snprintf(why, wn, "it does not know a master named '%s'", name);
    return DLOCK_ECONN;
  }
  snprintf(host, n, "%s", r->element[0]->str);
  *port = atoi(r->element[1]->str);
  return 0;
}

const char *dlock__sentinel_role(const redisReply *r) {
  if (r->type == REDIS_REPLY_ERROR)
    return r->str;
  if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING)
    return strcmp(r->element[0]->str, "master") == 0 ? NULL
                                                     : r->element[0]->str;
  return "no role";
}

int dlock__sentinel_switch_msg(const char *payload, const char *name,
                               char *host, size_t n, int *port) {
  char mn[256], oh[256], nh[256];
  int op, np;
  if (sscanf(payload, "%255s %255s %d %255s %d", mn, oh, &op, nh, &np) != 5 ||
      strcmp(mn, name) != 0)
    return 0;
  snprintf(host, n, "%s", nh);
  *port = np;
  return 1;
}

int dlock__sentinel_promoted_msg(const char *payload, const char *name) {
  const char *at = strstr(payload, " @ ");
  size_t n = strlen(name);
  return at && strncmp(at + 3, name, n) == 0 && at[3 + n] == ' ';
}

/* ---- asking the sentinels ----------------------------------------------- */

/* The URL of sentinel i: its address, the sentinels' credentials, the
 * client's TLS setting. Borrowed strings: not freed. */
static dlock__url sentinel_url(const dlock_client *c, int i) {
  dlock__url u;
  memset(&u, 0, sizeof u);
  u.tls = c->url.tls;
  u.host = c->url.sentinels[i].host;
  u.port = c->url.sentinels[i].port;
  u.user = c->url.sentinel_user;
  u.password = c->url.sentinel_password;
  return u;
}

/* SENTINEL GET-MASTER-ADDR-BY-NAME on sentinel i: 0 and host (in buf) /
 * port, or a code with why in the thread's message. */
static int ask_sentinel(dlock_client *c, int i, char *buf, size_t n,
                        int *port) {
  dlock__url su = sentinel_url(c, i);
  dlock__link *l;
  int rc = dlock__link_open(c, &su, &l);
  if (rc)
    return rc;
  const char *av[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                       c->url.master_name};
  size_t al[3] = {8, 23, strlen(c->url.master_name)};
  redisReply *r = dlock__link_cmd(l, 3, av, al);
  char why[300];
  if (!r)
    rc = dlock__link_fail(l, c->cfg.command_timeout_ms, "SENTINEL");
  else if ((rc = dlock__sentinel_addr_reply(r, c->url.master_name, buf, n, port,
                                            why, sizeof why)) != 0)
    dlock__fail(rc, "%s", why);
  if (r)
    freeReplyObject(r);
  dlock__link_free(l);
  return rc;
}

/* ROLE on host:port with the data nodes' credentials: 0 if it says
 * "master", else a code with why. */
static int check_role(dlock_client *c, const char *host, int port) {
  dlock__url mu = c->url;
  mu.sentinel = 0;
  mu.host = (char *)host;
  mu.port = port;
  dlock__link *l;
  int rc = dlock__link_open(c, &mu, &l);
  if (rc)
    return rc;
  const char *av[1] = {"ROLE"};
  size_t al[1] = {4};
  redisReply *r = dlock__link_cmd(l, 1, av, al);
  const char *role = r ? dlock__sentinel_role(r) : NULL;
  if (!r)
    rc = dlock__link_fail(l, c->cfg.command_timeout_ms, "ROLE");
  else if (r->type == REDIS_REPLY_ERROR)
    rc = dlock__fail(DLOCK_EREDIS, "ROLE: %s", r->str);
  else if (role)
    rc = dlock__fail(DLOCK_ECONN, "%s:%d says it is not a master (%s)", host,
                     port, role);
  if (r)
    freeReplyObject(r);
  dlock__link_free(l);
  return rc;
}

/* Asks the sentinels in turn (disc_mu held). 0 with the master recorded,
 * or DLOCK_ECONN naming what every sentinel said. */
static int discover(dlock_client *c) {
  dlock__sentinel *s = &c->sent;
  int n = c->url.n_sentinels;
  dlock__sb why;
  dlock__sb_init(&why);
  for (int k = 0; k < n; k++) {
    int i = (s->next + k) % n;
    char host[256];
    int port = 0;
    int rc = ask_sentinel(c, i, host, sizeof host, &port);
    int role_rc = rc == 0 ? check_role(c, host, port) : 0;
    /* The round's rule, the event-loop client's too (ioverdict.c): this
     * master when it says ROLE master, else the next sentinel. */
    if (dlock__sentinel_turn(rc, role_rc, k + 1, n) == DLOCK__SENT_USE) {
      char old[300];
      dlock__mu_lock(&s->mu);
      int moved = set_master(c, host, port, old, sizeof old);
      s->next = i;
      dlock__mu_unlock(&s->mu);
      if (moved)
        master_log(c, old, host, port, "asked the sentinels");
      dlock__sb_free(&why);
      return 0;
    }
    char line[600];
    snprintf(line, sizeof line, "%ssentinel %s:%d: %s", k ? "; " : "",
             c->url.sentinels[i].host, c->url.sentinels[i].port,
             dlock_last_error());
    dlock__sb_adds(&why, line);
  }
  int rc = dlock__fail(DLOCK_ECONN,
                       "no master '%s' found through %d sentinel%s (%s)",
                       c->url.master_name, n, n == 1 ? "" : "s",
                       why.oom ? "out of memory" : why.p);
  dlock__sb_free(&why);
  return rc;
}

/* Copies the known master into target (mu held). 1 if there is one. */
static int copy_master(dlock_client *c, dlock__url *target, char *buf, size_t n,
                       unsigned *gen) {
  dlock__sentinel *s = &c->sent;
  if (!s->known || !s->host)
    return 0;
  snprintf(buf, n, "%s", s->host);
  *target = c->url;
  target->sentinel = 0;
  target->host = buf;
  target->port = s->port;
  *gen = atomic_load(&s->gen);
  return 1;
}

int dlock__sentinel_target(dlock_client *c, dlock__url *target, char *buf,
                           size_t n, unsigned *gen) {
  dlock__sentinel *s = &c->sent;
  dlock__mu_lock(&s->mu);
  int have = copy_master(c, target, buf, n, gen);
  dlock__mu_unlock(&s->mu);
  if (have)
    return 0;
  dlock__mu_lock(&s->disc_mu);
  dlock__mu_lock(&s->mu);
  have = copy_master(c, target, buf, n, gen); /* found meanwhile? */
  dlock__mu_unlock(&s->mu);
  int rc = have ? 0 : discover(c);
  if (rc == 0 && !have) {
    dlock__mu_lock(&s->mu);
    if (!copy_master(c, target, buf, n, gen))
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    dlock__mu_unlock(&s->mu);
  }
  dlock__mu_unlock(&s->disc_mu);
  return rc;
}

/* ---- the watcher ---------------------------------------------------------
 */

/* "+switch-master" payload "<name> <old ip> <old port> <new ip> <new
 * port>": records the new master when the name is ours. */
static void on_switch(dlock_client *c, const char *payload) {
  char nh[256];
  int np;
  if (!dlock__sentinel_switch_msg(payload, c->url.master_name, nh, sizeof nh,
                                  &np))
    return;
  char old[300];
  dlock__mu_lock(&c->sent.mu);
  int moved = set_master(c, nh, np, old, sizeof old);
  dlock__mu_unlock(&c->sent.mu);
  if (moved)
    master_log(c, old, nh, np, "+switch-master");
  wake_subscriber(c);
}

/* "+promoted-slave" payload "slave <ip:port> <ip> <port> @ <name> <ip>
 * <port>": the replica the sentinels chose answers as a master now. The
 * old master may still take writes until the failover ends (then comes
 * +switch-master), so the client moves at once: it asks the sentinels
 * (who name the promoted replica from now on) and checks ROLE. */
static void on_promoted(dlock_client *c, const char *payload) {
  if (!dlock__sentinel_promoted_msg(payload, c->url.master_name))
    return;
  dlock__sentinel *s = &c->sent;
  dlock__mu_lock(&s->disc_mu);
  dlock__mu_lock(&s->mu);
  s->known = 0;
  dlock__mu_unlock(&s->mu);
  if (discover(c) == 0)
    wake_subscriber(c);
  dlock__mu_unlock(&s->disc_mu);
}

/* Sleeps ms unless woken by stop. */
static void watch_pause(dlock_client *c, int ms) {
  struct pollfd p = {c->sent.pipe[0], POLLIN, 0};
  (void)poll(&p, 1, ms);
}

/* A switch may have happened while nobody listened: when sentinel i names
 * another master than the one known, the next connection discovers. */
static void recheck(dlock_client *c, int i) {
  char host[256];
  int port = 0;
  if (ask_sentinel(c, i, host, sizeof host, &port) != 0)
    return;
  dlock__mu_lock(&c->sent.mu);
  if (c->sent.host && (strcmp(c->sent.host, host) != 0 || c->sent.port != port))
    c->sent.known = 0;
  dlock__mu_unlock(&c->sent.mu);
}

/* Subscribes on sentinel i and handles messages until the link fails or
 * the client stops. */
static void watch_one(dlock_client *c, int i) {
  dlock__url su = sentinel_url(c, i);
  dlock__link *l;
  if (dlock__link_open(c, &su, &l) != 0)
    return;
  const char *av[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
  size_t al[3] = {9, 14, 15};
  redisReply *r = dlock__link_cmd(l, 3, av, al);
  int ok = r && r->type == REDIS_REPLY_ARRAY;
  if (r)
    freeReplyObject(r);
  if (ok)
    recheck(c, i);
  while (ok && !atomic_load(&c->sent.stop)) {
    struct pollfd p[2] = {{c->sent.pipe[0], POLLIN, 0}, {l->fd, POLLIN, 0}};
    if (dlock__link_pending(l) == 0 && poll(p, 2, 1000) <= 0)
      continue;
    if (p[0].revents)
      break;
    if (dlock__link_read(l) != 0)
      break;
    while (ok && dlock__link_next(l, &r) == 0 && r) {
      if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
          r->element[1]->type == REDIS_REPLY_STRING &&
          r->element[2]->type == REDIS_REPLY_STRING) {
        if (strcmp(r->element[1]->str, "+switch-master") == 0)
          on_switch(c, r->element[2]->str);
        else
          on_promoted(c, r->element[2]->str);
      }
      freeReplyObject(r);
    }
  }
  dlock__link_free(l);
}

static void *watch_main(void *arg) {
  dlock_client *c = arg;
  /* dlock_client_free ends its connects and reads at once */
  dlock__io_guard(c->abort_pipe[0], 0, 0);
  dlock__mu_lock(&c->sent.mu);
  int first = c->sent.next; /* the sentinel that answered last */
  dlock__mu_unlock(&c->sent.mu);
  for (int i = first; !atomic_load(&c->sent.stop);
       i = (i + 1) % c->url.n_sentinels) {
    watch_one(c, i);
    if (!atomic_load(&c->sent.stop))
      watch_pause(c, 200);
  }
  return NULL;
}

int dlock__sentinel_start(dlock_client *c) {
  if (!c->url.sentinel)
    return 0;
  if (pipe2(c->sent.pipe, O_CLOEXEC) != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot make a pipe: %s", strerror(errno));
  if (dlock__thread_start(&c->sent.thread, watch_main, c) != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot start the sentinel watcher");
  c->sent.started = 1;
  return 0;
}

void dlock__sentinel_stop(dlock_client *c) {
  if (!c->sent.started)
    return;
  atomic_store(&c->sent.stop, 1);
  char b = 1;
  ssize_t w = write(c->sent.pipe[1], &b, 1);
  (void)w;
  pthread_join(c->sent.thread, NULL);
  c->sent.started = 0;
  /* The pipe goes with the thread, not with the memory: a thread that
   * used the client keeps a reference to it (holds.c) until it exits, and
   * the fds must not wait for that. */
  for (int i = 0; i < 2; i++)
    if (c->sent.pipe[i] >= 0)
      close(c->sent.pipe[i]);
  c->sent.pipe[0] = c->sent.pipe[1] = -1;
}
