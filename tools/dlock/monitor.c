/*
 * monitor.c -- noticing and explaining a lost lock while the command runs.
 * Watchdog leases: the client's on_lock_lost callback writes 'L' to the
 * events pipe (the main loop SIGTERMs the group at once) and wakes the
 * monitor thread, which asks Redis what happened, for the message ('R').
 * Fixed leases (-l): the monitor polls the holders every third of the
 * lease (0.1..10 s) to notice a deletion early ('D').
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

static void post(run_state *rs, char what) {
  ssize_t w;
  do {
    w = write(rs->evt_wr, &what, 1);
  } while (w < 0 && errno == EINTR);
}

/* on_lock_lost: runs on the client's watchdog thread; must not block. */
void mon_on_lost(const char *name, void *arg) {
  (void)name;
  run_state *rs = arg;
  pthread_mutex_lock(&rs->mu);
  rs->mon_probe = 1;
  pthread_cond_signal(&rs->cv);
  pthread_mutex_unlock(&rs->mu);
  post(rs, 'L');
}

static int is_mine(const dlock_status *st, const char *owner) {
  size_t n = strlen(owner);
  for (size_t i = 0; i < st->n_holders; i++) {
    const char *h = st->holders[i].owner;
    if (strncmp(h, owner, n) == 0 && (h[n] == '\0' || h[n] == ':'))
      return 1;
  }
  return 0;
}

/* With rs->mu held: waits for a probe, the poll interval or the stop.
 * Returns -1 to stop, else whether the callback asked (1) or it is a
 * poll (0). */
static int mon_wait(run_state *rs) {
  for (;;) {
    if (!rs->mon_stop && !rs->mon_probe) {
      if (rs->poll_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(rs->poll_ms / 1000);
        ts.tv_nsec += (long)(rs->poll_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rs->cv, &rs->mu, &ts);
      } else {
        pthread_cond_wait(&rs->cv, &rs->mu);
      }
    }
    if (rs->mon_stop && !rs->mon_probe)
      return -1;
    int probe = rs->mon_probe;
    rs->mon_probe = 0;
    if (probe || rs->poll_ms > 0)
      return probe;
  }
}

/* Asks Redis about the lock; why stays "" while it is still ours. */
static void loss_reason(run_state *rs, int probe, const char *lease, char *why,
                        size_t len) {
  const cli_opts *o = rs->o;
  if (rs->lk.kind == K_SEM) {
    sem_loss_reason(rs, probe, lease, why, len);
    return;
  }
  dlock_status st;
  int rc = dlock_status_query(rs->c, o->name, &st);
  char det[1024] = "";
  if (rc)
    cli_detail(cli_url(o), det, sizeof det);
  int mine = rc == 0 && is_mine(&st, rs->owner);
  if (rc == 0 && !mine) {
    if (!st.locked && rs->lease_end >= 0 && dlc_now_ms() >= rs->lease_end - 50)
      /* Noticed by this poll before the main loop's timer. */
      snprintf(why, len,
               "its fixed lease (-l %s) ran out while the command was "
               "still running",
               lease);
    else if (!st.locked)
      snprintf(why, len,
               "its key is gone (deleted, force-unlocked or expired)");
    else
      snprintf(why, len, "it is now held by %s",
               st.n_holders ? st.holders[0].owner : "another client");
  } else if (probe && rc == DLOCK_ECONN) {
    snprintf(why, len,
             "Redis was unreachable for longer than the %s s lease (%.300s)",
             lease, det);
  } else if (probe && rc) {
    snprintf(why, len,
             "renewal failed until the %s s lease ran out "
             "(%.300s)",
             lease, det);
  } else if (probe) {
    snprintf(why, len,
             "renewals failed until the %s s lease ran out (Redis slow "
             "or unreachable)",
             lease);
  }
  if (rc == 0)
    dlock_status_clear(&st);
}

static void *monitor_main(void *arg) {
  run_state *rs = arg;
  const cli_opts *o = rs->o;
  char lease[32];
  cli_fmt_secs(o->lease_ms > 0 ? o->lease_ms : o->watchdog_ms, lease,
               sizeof lease);
  pthread_mutex_lock(&rs->mu);
  int probe;
  while ((probe = mon_wait(rs)) >= 0) {
    pthread_mutex_unlock(&rs->mu);
    char why[768] = "";
    loss_reason(rs, probe, lease, why, sizeof why);
    pthread_mutex_lock(&rs->mu);
    if (why[0]) {
      snprintf(rs->reason, sizeof rs->reason, "%s", why);
      rs->reason_ready = 1;
      post(rs, probe ? 'R' : 'D');
      break; /* one report is all the main loop needs */
    }
  }
  pthread_mutex_unlock(&rs->mu);
  return NULL;
}

int mon_init(run_state *rs) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rs->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&rs->mu, NULL);
  int evp[2];
  if (pipe2(evp, O_CLOEXEC | O_NONBLOCK) != 0) {
    cli_err("pipe: %s", strerror(errno));
    return CLI_EX_SOFT;
  }
  rs->evt_rd = evp[0];
  rs->evt_wr = evp[1];
  return 0;
}

void mon_destroy(run_state *rs) {
  if (rs->evt_rd >= 0)
    close(rs->evt_rd);
  if (rs->evt_wr >= 0)
    close(rs->evt_wr);
  rs->evt_rd = rs->evt_wr = -1;
  pthread_cond_destroy(&rs->cv);
  pthread_mutex_destroy(&rs->mu);
}

void mon_start(run_state *rs, long long lease_end) {
  const cli_opts *o = rs->o;
  rs->lease_end = lease_end;
  if (o->lease_ms > 0) {
    long long pm = o->lease_ms / 3;
    rs->poll_ms = pm < 100 ? 100 : pm > 10000 ? 10000 : pm;
  }
  if (pthread_create(&rs->mon, NULL, monitor_main, rs) == 0)
    rs->mon_started = 1;
}

void mon_stop(run_state *rs) {
  if (!rs->mon_started)
    return;
  pthread_mutex_lock(&rs->mu);
  rs->mon_stop = 1;
  pthread_cond_signal(&rs->cv);
  pthread_mutex_unlock(&rs->mu);
  pthread_join(rs->mon, NULL);
  rs->mon_started = 0;
}
