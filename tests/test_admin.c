/*
 * test_admin.c -- issue 39 in the library: the bound of a call's retries
 * (dlock_config.call_timeout_ms) against a stalled and a refusing server,
 * the operators' reads of <dlock/admin.h> on every URL form (standalone,
 * TLS, Sentinel, Cluster with a paused master), and what each client
 * publishes in its info key (holds, waits with their start, permits, the
 * kind of its locks, when it last checked in), both clients.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock/admin.h"
#include "th.h"
#include "th_cluster.h"
#include "th_drive.h"

/* ---- call_timeout_ms ------------------------------------------------------
 */

/* ms one call took; its code in *rc. */
typedef int (*call_fn)(void *arg);
static int64_t timed(call_fn fn, void *arg, int *rc) {
  int64_t t0 = th_now_ms();
  *rc = fn(arg);
  return th_now_ms() - t0;
}

static int do_trylock(void *m) { return dlock_mutex_trylock(m); }
static int do_is_locked(void *m) { return dlock_mutex_is_locked(m); }
typedef struct st_arg {
  dlock_client *c;
  const char *name;
} st_arg;
static int do_status(void *p) {
  st_arg *a = p;
  dlock_status st;
  int rc = dlock_status_query(a->c, a->name, &st);
  dlock_status_clear(&st);
  return rc;
}

/* With the defaults (3 s reply timeout, 3 retries 1.5 s apart, a 5 s
 * bound), a stalled server -- connections accepted, nothing answered --
 * costs trylock, is_locked and status one reply timeout each, not the 16.5
 * s of the whole retry policy; and dlock_client_new the same. */
TH_CASE_T(call_timeout_bounds_a_stalled_server, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  CHECK_EQ(cfg.call_timeout_ms, 5000);
  cfg.url = r->tcp_url;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "stalled", &m));
  CHECK_OK(dlock_mutex_trylock(m));
  CHECK_OK(dlock_mutex_unlock(m));
  th_redis_pause(r);
  int64_t bound = (5000 + 1000) * (int64_t)th_timeout_mult();
  int rc;
  int64_t ms = timed(do_trylock, m, &rc);
  printf("trylock on a stalled server: %s after %lld ms (%s)\n",
         dlock_err_name(rc), (long long)ms, dlock_last_error());
  CHECK_RC(rc, DLOCK_ECONN);
  CHECK_MSG(ms >= 2900 && ms <= bound, "trylock took %lld ms", (long long)ms);
  CHECK_MSG(strstr(dlock_last_error(), "call_timeout_ms"), "%s",
            dlock_last_error());
  ms = timed(do_is_locked, m, &rc);
  printf("is_locked: %s after %lld ms\n", dlock_err_name(rc), (long long)ms);
  CHECK_RC(rc, DLOCK_ECONN);
  CHECK_MSG(ms <= bound, "is_locked took %lld ms", (long long)ms);
  st_arg sa = {c, "stalled"};
  ms = timed(do_status, &sa, &rc);
  printf("status: %s after %lld ms\n", dlock_err_name(rc), (long long)ms);
  CHECK_RC(rc, DLOCK_ECONN);
  CHECK_MSG(ms <= bound, "status took %lld ms", (long long)ms);
  /* A new client's connection attempts: the same bound. */
  dlock_client *c2 = NULL;
  int64_t t0 = th_now_ms();
  rc = dlock_client_new(&cfg, &c2);
  ms = th_now_ms() - t0;
  printf("dlock_client_new: %s after %lld ms (%s)\n", dlock_err_name(rc),
         (long long)ms, dlock_last_error());
  CHECK_RC(rc, DLOCK_ECONN);
  CHECK_MSG(ms <= bound, "dlock_client_new took %lld ms", (long long)ms);
  th_redis_resume(r);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Short timeouts, so both sides are quick: with the bound a stalled server
 * costs one reply timeout; with call_timeout_ms 0 the whole policy (4
 * attempts). A refused port keeps every retry that starts in time. */
TH_CASE(call_timeout_zero_is_the_whole_policy) {
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.command_timeout_ms = 300 * th_timeout_mult();
  cfg.retry_interval_ms = 50;
  cfg.call_timeout_ms = cfg.command_timeout_ms + 100;
  dlock_client *bounded = th_client_cfg(r, &cfg);
  cfg.call_timeout_ms = 0;
  dlock_client *whole = th_client_cfg(r, &cfg);
  dlock_mutex *mb, *mw;
  CHECK_OK(dlock_mutex_new(bounded, "z", &mb));
  CHECK_OK(dlock_mutex_new(whole, "z", &mw));
  CHECK_EQ(dlock_mutex_is_locked(mb), 0);
  CHECK_EQ(dlock_mutex_is_locked(mw), 0);
  th_redis_pause(r);
  int rc;
  int64_t one = timed(do_is_locked, mb, &rc);
  CHECK_RC(rc, DLOCK_ECONN);
  int64_t all = timed(do_is_locked, mw, &rc);
  CHECK_RC(rc, DLOCK_ECONN);
  th_redis_resume(r);
  printf("stalled: bounded %lld ms, unbounded %lld ms\n", (long long)one,
         (long long)all);
  CHECK_MSG(one < 2 * (int64_t)cfg.command_timeout_ms, "bounded: %lld ms",
            (long long)one);
  CHECK_MSG(all >= 4 * (int64_t)cfg.command_timeout_ms, "unbounded: %lld ms",
            (long long)all);
  dlock_client_stats st;
  CHECK_OK(dlock_client_stats(whole, &st));
  CHECK_EQ(st.retries, 3);
  dlock_mutex_free(mb);
  dlock_mutex_free(mw);
  dlock_client_free(bounded);
  dlock_client_free(whole);
}

/* ---- dlock/admin.h ------------------------------------------------------- */

/* One command on node: its reply (the case fails on a call's failure). */
static dlock_reply *run1(dlock_admin *a, const char *node, int argc,
                         const char *const *argv) {
  dlock_admin_cmd cmd = {argc, argv, NULL};
  dlock_reply *r = NULL;
  int rc = dlock_admin_run(a, node, &cmd, 1, 2000LL * th_timeout_mult(), &r);
  CHECK_MSG(rc == 0, "run on %s: %s %s", node, dlock_err_name(rc),
            dlock_last_error());
  return r;
}

/* A redis:// URL: one node, its name host:port; pipelines answer in order;
 * writes are refused before anything is sent; replies are copies. */
TH_CASE(admin_reads_a_standalone_server) {
  th_redis *r = th_redis_new(1, NULL);
  freeReplyObject(th_cmd(r, "HSET h f v"));
  freeReplyObject(th_cmd(r, "SET s 12"));
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_admin *a;
  CHECK_OK(dlock_admin_new(c, &a));
  char **nodes;
  size_t n;
  CHECK_OK(dlock_admin_nodes(a, &nodes, &n));
  CHECK_EQ(n, 1);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", r->port);
  CHECK_STR(nodes[0], want);
  char of[64];
  CHECK_OK(dlock_admin_node_of(a, "anything", of, sizeof of));
  CHECK_STR(of, want);
  const char *t1[] = {"TYPE", "h"}, *t2[] = {"HGETALL", "h"},
             *t3[] = {"GET", "s"}, *t4[] = {"GET", "none"},
             *t5[] = {"PUBSUB", "NUMSUB", "ch"}, *t6[] = {"HLEN", "s"};
  dlock_admin_cmd cmds[6] = {{2, t1, NULL}, {2, t2, NULL}, {2, t3, NULL},
                             {2, t4, NULL}, {3, t5, NULL}, {2, t6, NULL}};
  dlock_reply *rs[6];
  CHECK_OK(dlock_admin_run(a, nodes[0], cmds, 6, 2000, rs));
  CHECK_EQ(rs[0]->type, DLOCK_REPLY_STATUS);
  CHECK_STR(rs[0]->str, "hash");
  CHECK_EQ(rs[1]->type, DLOCK_REPLY_ARRAY);
  CHECK_EQ(rs[1]->elements, 2);
  CHECK_STR(rs[1]->element[1]->str, "v");
  CHECK_EQ(rs[2]->len, 2);
  CHECK_STR(rs[2]->str, "12");
  CHECK_EQ(rs[3]->type, DLOCK_REPLY_NIL);
  CHECK_EQ(rs[4]->element[1]->type, DLOCK_REPLY_INTEGER);
  CHECK_EQ(rs[5]->type, DLOCK_REPLY_ERROR); /* WRONGTYPE: a reply */
  CHECK(strstr(rs[5]->str, "WRONGTYPE") != NULL);
  for (int i = 0; i < 6; i++)
    dlock_reply_free(rs[i]);
  const char *w[] = {"DEL", "h"};
  dlock_admin_cmd del = {2, w, NULL};
  dlock_reply *x = NULL;
  CHECK_RC(dlock_admin_run(a, nodes[0], &del, 1, 2000, &x), DLOCK_EINVAL);
  CHECK(x == NULL);
  CHECK(strstr(dlock_last_error(), "'DEL' is not one of the reads"));
  const char *cs[] = {"CLUSTER", "RESET"};
  dlock_admin_cmd cr = {2, cs, NULL};
  CHECK_RC(dlock_admin_run(a, nodes[0], &cr, 1, 2000, &x), DLOCK_EINVAL);
  CHECK_EQ(th_cmd_int(r, "EXISTS h"), 1);
  CHECK_RC(dlock_admin_run(a, "10.9.9.9:1", cmds, 1, 2000, rs), DLOCK_EINVAL);
  dlock_admin_nodes_free(nodes, n);
  dlock_admin_free(a);
  dlock_client_free(c);
}

/* TLS with a client certificate and an ACL user whose password only the
 * config carries: the admin calls use the client's settings. A user
 * without +scan gets its NOPERM as a reply, not a failure. */
TH_CASE(admin_over_mutual_tls_and_an_acl_user) {
  th_certs k;
  th_make_certs(&k);
  int port = th_free_port();
  char conf[4096];
  snprintf(conf, sizeof conf,
           "tls-port %d\ntls-cert-file %s\ntls-key-file %s\n"
           "tls-ca-cert-file %s\ntls-auth-clients yes\n",
           port, k.srv_crt, k.srv_key, k.ca);
  th_redis *r = th_redis_new(0, conf);
  freeReplyObject(th_cmd(r, "ACL SETUSER ops on >pw-ops ~* &* +@all -scan"));
  freeReplyObject(th_cmd(r, "SET k v"));
  char url[128];
  snprintf(url, sizeof url, "rediss://ops:pw-ops@127.0.0.1:%d", port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.tls_ca_file = k.ca;
  cfg.tls_cert_file = k.cli_crt;
  cfg.tls_key_file = k.cli_key;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_admin *a;
  CHECK_OK(dlock_admin_new(c, &a));
  char **nodes;
  size_t n;
  CHECK_OK(dlock_admin_nodes(a, &nodes, &n));
  CHECK_EQ(n, 1);
  const char *g[] = {"GET", "k"}, *sc[] = {"SCAN", "0"};
  dlock_reply *x = run1(a, nodes[0], 2, g);
  CHECK_STR(x->str, "v");
  dlock_reply_free(x);
  x = run1(a, nodes[0], 2, sc);
  CHECK_EQ(x->type, DLOCK_REPLY_ERROR);
  CHECK(strstr(x->str, "NOPERM") != NULL);
  dlock_reply_free(x);
  dlock_admin_nodes_free(nodes, n);
  dlock_admin_free(a);
  dlock_client_free(c);
}

/* redis-sentinel://: the master the sentinel names. A redis:// URL at the
 * sentinel's port says to use redis-sentinel://, from a lock call and from
 * an admin call. */
TH_CASE_T(admin_through_sentinel_and_the_sentinel_port_hint, 120, "slow") {
  th_redis *m = th_redis_new(1, NULL);
  th_redis *s = th_sentinel_new(m, "mm", 1, th_sentinel_down_ms(), 10000);
  char url[128];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/mm", s->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  dlock_client *c = th_client_cfg(m, &cfg);
  dlock_admin *a;
  CHECK_OK(dlock_admin_new(c, &a));
  char **nodes;
  size_t n;
  CHECK_OK(dlock_admin_nodes(a, &nodes, &n));
  CHECK_EQ(n, 1);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", m->port);
  CHECK_STR(nodes[0], want);
  const char *p[] = {"PING"};
  dlock_reply_free(run1(a, nodes[0], 1, p));
  dlock_admin_nodes_free(nodes, n);
  dlock_admin_free(a);
  dlock_client_free(c);

  snprintf(url, sizeof url, "redis://127.0.0.1:%d", s->port);
  cfg.url = url;
  c = th_client_cfg(m, &cfg);
  dlock_mutex *mx;
  CHECK_OK(dlock_mutex_new(c, "x", &mx));
  CHECK_RC(dlock_mutex_trylock(mx), DLOCK_EREDIS);
  printf("trylock: %s\n", dlock_last_error());
  char hint[200];
  snprintf(hint, sizeof hint,
           "this is a Sentinel: use redis-sentinel://127.0.0.1:%d/mm", s->port);
  CHECK_MSG(strstr(dlock_last_error(), hint), "%s", dlock_last_error());
  dlock_mutex_free(mx);
  CHECK_OK(dlock_admin_new(c, &a));
  CHECK_OK(dlock_admin_nodes(a, &nodes, &n));
  const char *sc[] = {"SCAN", "0"};
  dlock_admin_cmd cmd = {2, sc, NULL};
  dlock_reply *x = NULL;
  CHECK_RC(dlock_admin_run(a, nodes[0], &cmd, 1, 2000, &x), DLOCK_EREDIS);
  CHECK_MSG(strstr(dlock_last_error(), "use redis-sentinel://"), "%s",
            dlock_last_error());
  dlock_admin_nodes_free(nodes, n);
  dlock_admin_free(a);
  dlock_client_free(c);
}

typedef struct runner {
  dlock_admin *a;
  const char *node;
  int rc;
  int64_t ms;
  char msg[512];
} runner;

static void *run_ping(void *p) {
  runner *x = p;
  const char *ping[] = {"PING"};
  dlock_admin_cmd cmd = {1, ping, NULL};
  dlock_reply *r = NULL;
  int64_t t0 = th_now_ms();
  x->rc = dlock_admin_run(x->a, x->node, &cmd, 1, 1500, &r);
  x->ms = th_now_ms() - t0;
  snprintf(x->msg, sizeof x->msg, "%s", dlock_last_error());
  dlock_reply_free(r);
  return NULL;
}

/* redis-cluster:// with one of 3 masters paused: the three are named, the
 * paused one fails within the call's timeout with its name and "no reply
 * within", the others answer -- at the same time, each on its thread. */
TH_CASE_T(admin_cluster_with_a_paused_master, 180, "cluster slow") {
  th_cluster *cl = th_cluster_new(3, 0, 2000);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = cl->url;
  cfg.command_timeout_ms = 1000;
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  dlock_admin *a;
  CHECK_OK(dlock_admin_new(c, &a));
  char **nodes;
  size_t n;
  CHECK_OK(dlock_admin_nodes(a, &nodes, &n));
  CHECK_EQ(n, 3);
  char of[64];
  CHECK_OK(dlock_admin_node_of(a, "k1", of, sizeof of));
  int owner = th_cluster_master_of(cl, th_cluster_slot(cl, "k1"));
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", cl->node[owner]->port);
  CHECK_STR(of, want);
  th_redis_pause(cl->node[owner]);
  runner rs[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    rs[i] = (runner){a, nodes[i], 1, 0, ""};
    pthread_create(&t[i], NULL, run_ping, &rs[i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  th_redis_resume(cl->node[owner]);
  for (int i = 0; i < 3; i++) {
    printf("%s: %s in %lld ms %s\n", nodes[i], dlock_err_name(rs[i].rc),
           (long long)rs[i].ms, rs[i].msg);
    if (strcmp(nodes[i], want) == 0) {
      CHECK_RC(rs[i].rc, DLOCK_ECONN);
      CHECK(strstr(rs[i].msg, want) && strstr(rs[i].msg, "no reply within"));
      CHECK(rs[i].ms >= 1400 && rs[i].ms < 1500 + 1000 * th_timeout_mult());
    } else {
      CHECK_OK(rs[i].rc);
    }
  }
  dlock_admin_nodes_free(nodes, n);
  dlock_admin_free(a);
  dlock_client_free(c);
}

/* ---- the info key (clientnotes.c, async_info.c) ------------------------- */

/* HGET of the info key of the client whose id starts `owner`; "" when
 * absent. */
static void info_get(th_redis *r, const char *owner, const char *field,
                     char *buf, size_t len) {
  char key[64];
  snprintf(key, sizeof key, "dlock_client:{%.36s}", owner);
  redisReply *x = th_cmd(r, "HGET %s %s", key, field);
  snprintf(buf, len, "%s", x && x->type == REDIS_REPLY_STRING ? x->str : "");
  freeReplyObject(x);
}

/* Polls (bounded) until the field is present (want 1) or absent (0). */
static int info_wait(th_redis *r, const char *owner, const char *field,
                     int want, char *buf, size_t len) {
  int64_t end = th_now_ms() + 5000LL * th_timeout_mult();
  do {
    info_get(r, owner, field, buf, len);
    if ((buf[0] != '\0') == want)
      return 1;
    th_sleep_ms(20);
  } while (th_now_ms() < end);
  return 0;
}

typedef struct fair_waiter {
  dlock_mutex *m;
  int rc;
  int64_t began_ms; /* wall */
  char field[80];
} fair_waiter;

static void *fair_wait(void *p) {
  fair_waiter *w = p;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  w->began_ms = (int64_t)time(NULL) * 1000;
  w->rc = dlock_mutex_timedlock(w->m, 20000, -1);
  if (w->rc == 0)
    w->rc = dlock_mutex_unlock(w->m);
  return NULL;
}

/* A waiter's client publishes wait:<tid>:<name> with when its wait began,
 * and drops it when the wait ends; a holder of a fair lock says its kind;
 * a permit's taker lists the permit until it gives it back; every write
 * says when the client checked in. */
TH_CASE(info_key_names_waits_permits_and_kinds) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *a = th_client(r), *b = th_client(r);
  dlock_mutex *fa, *fb;
  CHECK_OK(dlock_mutex_new_fair(a, "f", &fa));
  CHECK_OK(dlock_mutex_new_fair(b, "f", &fb));
  CHECK_OK(dlock_mutex_lock(fa));
  char v[128], owner[80];
  CHECK_OK(dlock_mutex_owner(fa, owner, sizeof owner));
  CHECK_MSG(info_wait(r, owner, "kind:f", 1, v, sizeof v), "no kind:f");
  CHECK_STR(v, "fair");
  info_get(r, owner, "client", v, sizeof v);
  CHECK_STR(v, "blocking");
  info_get(r, owner, "every", v, sizeof v);
  CHECK_STR(v, "10000");
  info_get(r, owner, "checked", v, sizeof v);
  long long checked = atoll(v), now = (long long)time(NULL) * 1000;
  CHECK_MSG(checked > now - 15000 && checked < now + 2000, "checked %lld",
            checked);
  fair_waiter w = {fb, 1, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, fair_wait, &w);
  th_wait_llen(r, "redisson_lock_queue:{f}", 1, 5000);
  char field[160];
  snprintf(field, sizeof field, "wait:%s:f", strchr(w.field, ':') + 1);
  CHECK_MSG(info_wait(r, w.field, field, 1, v, sizeof v), "no %s", field);
  long long began = atoll(v);
  CHECK_MSG(began >= w.began_ms - 1000 && began <= w.began_ms + 2000,
            "wait began %lld, the thread started at %lld", began,
            (long long)w.began_ms);
  CHECK_OK(dlock_mutex_unlock(fa));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK_MSG(info_wait(r, w.field, field, 0, v, sizeof v), "%s still there: %s",
            field, v);

  dlock_permits *p;
  CHECK_OK(dlock_permits_new(a, "pm", &p));
  CHECK_OK(dlock_permits_set_permits(p, 2));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, 60000, id));
  snprintf(field, sizeof field, "permit:%s", id);
  CHECK_MSG(info_wait(r, owner, field, 1, v, sizeof v), "no %s", field);
  CHECK_MSG(strstr(v, "|pm") && atoll(v) > now - 60000, "%s = %s", field, v);
  CHECK_OK(dlock_permits_release(p, id));
  CHECK_MSG(info_wait(r, owner, field, 0, v, sizeof v), "%s stays", field);
  dlock_permits_free(p);
  dlock_mutex_free(fa);
  dlock_mutex_free(fb);
  dlock_client_free(a);
  dlock_client_free(b);
}

typedef struct watch {
  th_redis *r;
  char owner[80];
  char field[160];
  atomic_int seen; /* set by the watcher once it read the field */
  char value[64];
  atomic_int stop; /* set by the case while the watcher runs */
} watch;

static void *watch_field(void *p) {
  watch *w = p;
  int64_t end = th_now_ms() + 10000LL * th_timeout_mult();
  while (!atomic_load(&w->stop) && th_now_ms() < end) {
    char v[64];
    info_get(w->r, w->owner, w->field, v, sizeof v);
    if (v[0] && !atomic_load(&w->seen)) {
      snprintf(w->value, sizeof w->value, "%s", v);
      atomic_store(&w->seen, 1);
    }
    th_sleep_ms(20);
  }
  return NULL;
}

/* The event-loop client writes the same key: since:<owner>:<name> for its
 * holds, wait:<owner>:<name> while a call waits, client "async". */
TH_CASE(info_key_of_the_event_loop_client) {
  th_redis *r = th_redis_new(0, NULL);
  th_drive *d = th_drive_at(TH_DRIVE_ASYNC, r->url);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "am", &m));
  /* Held (watchdog) until the watcher saw the waiter's entry, or its
   * bound passed: a fixed lease raced the write on a loaded valgrind run
   * (1500 ms, then 6000 ms: "published no wait:7:am"), since the case's
   * own setup ate the lease. */
  CHECK_OK(dlock_mutex_timedlock(m, 0, -1));
  watch w = {r, "", "", 0, "", 0};
  th_drive_field(d, "am", 7, w.owner, sizeof w.owner);
  snprintf(w.field, sizeof w.field, "wait:7:am");
  pthread_t t;
  pthread_create(&t, NULL, watch_field, &w);
  long long t0 = (long long)time(NULL) * 1000;
  th_call *call = th_drive_lock_bg(d, "am", 7, -1, -1); /* waits for it */
  for (int i = 0; i < 400 * th_timeout_mult() && !atomic_load(&w.seen); i++)
    th_drive_pump(d, 25);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(th_drive_call_wait(d, call, 10000LL * th_timeout_mult()));
  atomic_store(&w.stop, 1);
  pthread_join(t, NULL);
  CHECK_MSG(atomic_load(&w.seen), "the async waiter published no %s", w.field);
  CHECK_MSG(atoll(w.value) >= t0 - 1000 && atoll(w.value) <= t0 + 2000,
            "wait began %s (call at %lld)", w.value, t0);
  char v[64];
  int ok = 0;
  int tries = 200 * th_timeout_mult();
  for (int i = 0; i < tries && !ok; i++) {
    th_drive_pump(d, 25);
    info_get(r, w.owner, "since:7:am", v, sizeof v);
    ok = v[0] != '\0';
  }
  CHECK_MSG(ok, "no since:7:am");
  info_get(r, w.owner, "client", v, sizeof v);
  CHECK_STR(v, "async");
  info_get(r, w.owner, "pid", v, sizeof v);
  CHECK_EQ(atoll(v), (long long)getpid());
  for (int i = 0; i < tries; i++) { /* the ended wait is gone */
    th_drive_pump(d, 25);
    info_get(r, w.owner, "wait:7:am", v, sizeof v);
    if (!v[0])
      break;
  }
  CHECK_STR(v, "");
  CHECK_OK(th_drive_call_end(d, call)); /* unlocks it */
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_drive_free(d);
}

TH_MAIN()
