/* The multi-lock: all of N mutexes or none, members on several servers,
 * trylock/timedlock/lock/unlock errors, no partial hold left behind, and no
 * deadlock between multi-locks taking the same members in opposite order. */
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "th.h"

/* 1 if key holds field `owner` of the calling thread's mutex m. */
static int has_field(th_redis *r, const char *key, dlock_mutex *m) {
  char owner[80];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  return (int)th_cmd_int(r, "HEXISTS %s %s", key, owner);
}

typedef struct holder_arg {
  th_redis *r;
  const char *name;
  int ready_w; /* writes one byte once it holds the lock */
  int go_r;    /* reads one byte, then unlocks */
} holder_arg;

/* Worker process: holds `name` until told to release it. */
static int holder_main(void *p) {
  holder_arg *a = p;
  dlock_client *c = th_client(a->r);
  dlock_mutex *m;
  if (dlock_mutex_new(c, a->name, &m) || dlock_mutex_lock(m))
    return 2;
  if (write(a->ready_w, "x", 1) != 1)
    return 3;
  struct pollfd pf = {a->go_r, POLLIN, 0};
  if (poll(&pf, 1, 20000) != 1)
    return 4;
  char b;
  if (read(a->go_r, &b, 1) != 1)
    return 5;
  int rc = dlock_mutex_unlock(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return rc == 0 ? 0 : 6;
}

static void wait_byte(int fd) {
  struct pollfd pf = {fd, POLLIN, 0};
  CHECK_MSG(poll(&pf, 1, 10000) == 1, "worker did not report in time");
  char b;
  CHECK_EQ(read(fd, &b, 1), 1);
}

TH_CASE(all_or_nothing_member_held_by_other_process) {
  th_redis *r = th_redis_new(0, NULL);
  int ready[2], go[2];
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  holder_arg a = {r, "mb", ready[1], go[0]};
  /* Fork before the parent creates clients (single-threaded fork). */
  pid_t pid = th_fork(holder_main, &a);
  wait_byte(ready[0]);

  dlock_client *c = th_client(r);
  dlock_mutex *m[3];
  CHECK_OK(dlock_mutex_new(c, "ma", &m[0]));
  CHECK_OK(dlock_mutex_new(c, "mb", &m[1]));
  CHECK_OK(dlock_mutex_new(c, "mc", &m[2]));
  dlock_multilock *ml;
  CHECK_OK(dlock_multilock_new(m, 3, &ml));
  dlock_mutex *ma = m[0];
  m[0] = NULL; /* the array was copied */

  CHECK_RC(dlock_multilock_trylock(ml), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "mb") != NULL);
  /* No key of ours is left: "ma" was taken and released, "mb" holds only
   * the worker's field, "mc" was never reached. */
  CHECK_EQ(th_cmd_int(r, "EXISTS ma"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS mc"), 0);
  CHECK_EQ(th_cmd_int(r, "HLEN mb"), 1);
  CHECK_EQ(has_field(r, "mb", m[1]), 0);

  CHECK_RC(dlock_multilock_timedlock(ml, 300, 5000), DLOCK_ETIMEDOUT);
  CHECK(strstr(dlock_last_error(), "mb") != NULL);
  CHECK_EQ(th_cmd_int(r, "EXISTS ma"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS mc"), 0);
  CHECK_EQ(th_cmd_int(r, "HLEN mb"), 1);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_EPERM);

  /* The worker lets go; a blocking lock then gets all three. */
  CHECK_EQ(write(go[1], "x", 1), 1);
  CHECK_OK(dlock_multilock_lock(ml));
  CHECK_EQ(th_wait(pid, 10000), 0);
  CHECK_EQ(has_field(r, "ma", m[1]) + has_field(r, "mb", m[1]) +
               has_field(r, "mc", m[1]),
           3);
  CHECK_EQ(th_cmd_int(r, "HLEN mb"), 1);
  CHECK_OK(dlock_multilock_unlock(ml));
  CHECK_EQ(th_cmd_int(r, "EXISTS ma") + th_cmd_int(r, "EXISTS mb") +
               th_cmd_int(r, "EXISTS mc"),
           0);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_EPERM);
  dlock_multilock_free(ml);
  for (int i = 1; i < 3; i++)
    dlock_mutex_free(m[i]);
  dlock_mutex_free(ma);
  dlock_client_free(c);
}

typedef struct hold_for {
  dlock_mutex *m;
  int hold_ms;
  int rc;
} hold_for;

/* Takes the lock, holds it hold_ms, releases it (all on one thread). */
static void *hold_for_main(void *p) {
  hold_for *a = p;
  a->rc = dlock_mutex_lock(a->m);
  if (a->rc == 0) {
    th_sleep_ms(a->hold_ms);
    a->rc = dlock_mutex_unlock(a->m);
  }
  return NULL;
}

TH_CASE(members_on_two_servers) {
  th_redis *r1 = th_redis_new(0, NULL), *r2 = th_redis_new(0, NULL);
  dlock_client *c1 = th_client(r1), *c2 = th_client(r2), *other = th_client(r2);
  dlock_mutex *m[2], *om;
  CHECK_OK(dlock_mutex_new(c1, "x", &m[0]));
  CHECK_OK(dlock_mutex_new(c2, "y", &m[1]));
  CHECK_OK(dlock_mutex_new(other, "y", &om));
  dlock_multilock *ml;
  CHECK_RC(dlock_multilock_new(m, 0, &ml), DLOCK_EINVAL);
  CHECK_OK(dlock_multilock_new(m, 2, &ml));

  /* Another client holds "y" on the second server for 600 ms. */
  hold_for hf = {om, 600, -1};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, hold_for_main, &hf) == 0);
  for (int i = 0; i < 200 && !th_cmd_int(r2, "EXISTS y"); i++)
    th_sleep_ms(5);
  CHECK_RC(dlock_multilock_trylock(ml), DLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(r1, "EXISTS x"), 0); /* taken, then released */
  CHECK_EQ(has_field(r2, "y", m[1]), 0);

  /* A timed wait ends with both held once "y" is released. */
  CHECK_OK(dlock_multilock_timedlock(ml, 8000, 4000));
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(hf.rc);
  CHECK_EQ(has_field(r1, "x", m[0]), 1);
  CHECK_EQ(has_field(r2, "y", m[1]), 1);
  long long ttl = th_cmd_int(r1, "PTTL x");
  CHECK(ttl > 0 && ttl <= 4000);
  ttl = th_cmd_int(r2, "PTTL y");
  CHECK(ttl > 0 && ttl <= 4000);
  /* Reentrant: a second lock takes every member once more. */
  CHECK_OK(dlock_multilock_trylock(ml));
  CHECK_EQ(dlock_mutex_hold_count(m[0]), 2);
  CHECK_EQ(dlock_mutex_hold_count(m[1]), 2);
  CHECK_OK(dlock_multilock_unlock(ml));
  CHECK_EQ(has_field(r1, "x", m[0]) + has_field(r2, "y", m[1]), 2);
  CHECK_OK(dlock_multilock_unlock(ml));
  CHECK_EQ(th_cmd_int(r1, "EXISTS x") + th_cmd_int(r2, "EXISTS y"), 0);
  dlock_multilock_free(ml);
  dlock_mutex_free(m[0]);
  dlock_mutex_free(m[1]);
  dlock_mutex_free(om);
  dlock_client_free(c1);
  dlock_client_free(c2);
  dlock_client_free(other);
}

TH_CASE(unlock_reports_lost_member_and_releases_others) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m[3];
  CHECK_OK(dlock_mutex_new(c, "l1", &m[0]));
  CHECK_OK(dlock_mutex_new(c, "l2", &m[1]));
  CHECK_OK(dlock_mutex_new(c, "l3", &m[2]));
  dlock_multilock *ml;
  CHECK_OK(dlock_multilock_new(m, 3, &ml));
  CHECK_OK(dlock_multilock_timedlock(ml, 0, 10000));
  CHECK_EQ(th_cmd_int(r, "DEL l2"), 1); /* lost behind our back */
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_ELOST);
  CHECK(strstr(dlock_last_error(), "l2") != NULL);
  CHECK_EQ(th_cmd_int(r, "EXISTS l1") + th_cmd_int(r, "EXISTS l3"), 0);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_EPERM);
  /* Usable again afterwards. */
  CHECK_OK(dlock_multilock_lock(ml));
  CHECK_OK(dlock_multilock_unlock(ml));
  dlock_multilock_free(ml);
  for (int i = 0; i < 3; i++)
    dlock_mutex_free(m[i]);
  dlock_client_free(c);
}

typedef struct crosser {
  dlock_multilock *ml;
  th_redis *r;
  int iters, rc, overlaps;
} crosser;

static void *crosser_main(void *p) {
  crosser *a = p;
  for (int i = 0; i < a->iters; i++) {
    int rc = dlock_multilock_timedlock(a->ml, 15000, -1);
    if (rc) {
      a->rc = rc;
      return NULL;
    }
    /* Count holders of both keys: exactly one field each while held. */
    if (th_cmd_int(a->r, "HLEN ka") != 1 || th_cmd_int(a->r, "HLEN kb") != 1)
      a->overlaps++;
    if ((rc = dlock_multilock_unlock(a->ml)) != 0) {
      a->rc = rc;
      return NULL;
    }
  }
  a->rc = 0;
  return NULL;
}

TH_CASE(opposite_orders_do_not_deadlock) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *ab[2], *ba[2];
  CHECK_OK(dlock_mutex_new(c, "ka", &ab[0]));
  CHECK_OK(dlock_mutex_new(c, "kb", &ab[1]));
  ba[0] = ab[1];
  ba[1] = ab[0];
  dlock_multilock *m1, *m2;
  CHECK_OK(dlock_multilock_new(ab, 2, &m1));
  CHECK_OK(dlock_multilock_new(ba, 2, &m2));
  crosser x[2] = {{m1, r, 30, -1, 0}, {m2, r, 30, -1, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, crosser_main, &x[i]) == 0);
  for (int i = 0; i < 2; i++)
    CHECK(pthread_join(t[i], NULL) == 0);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(x[i].rc);
    CHECK_EQ(x[i].overlaps, 0);
  }
  CHECK_EQ(th_cmd_int(r, "EXISTS ka") + th_cmd_int(r, "EXISTS kb"), 0);
  dlock_multilock_free(m1);
  dlock_multilock_free(m2);
  dlock_mutex_free(ab[0]);
  dlock_mutex_free(ab[1]);
  dlock_client_free(c);
}

TH_CASE(bad_arguments) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m[2];
  CHECK_OK(dlock_mutex_new(c, "q", &m[0]));
  m[1] = m[0];
  dlock_multilock *ml = NULL;
  CHECK_RC(dlock_multilock_new(m, 2, &ml), DLOCK_EINVAL); /* duplicate */
  CHECK(ml == NULL);
  CHECK_RC(dlock_multilock_new(NULL, 1, &ml), DLOCK_EINVAL);
  CHECK_RC(dlock_multilock_new(m, 1, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_multilock_lock(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_multilock_unlock(NULL), DLOCK_EINVAL);
  dlock_multilock_free(NULL);
  dlock_mutex_free(m[0]);
  dlock_client_free(c);
}

TH_MAIN()
