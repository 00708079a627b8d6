/*
 * callout.c -- the rule "no user callback runs while the library holds an
 * internal lock", stated once and enforced here (issue 38.8).
 *
 * WHY. A user callback -- the log hook (cfg.log_fn), cfg.on_lock_lost, an
 * event-loop call's completion -- may call back into the library: the
 * documented way to read counters from a log hook is dlock_client_stats,
 * which takes the client's registry mutex. Called with that mutex held (a
 * lost hold logged from inside dlock_mutex_unlock), the hook deadlocked.
 * Each earlier fix released the lock by hand around one call; the next
 * call site forgot. So the rule lives here:
 *
 *   - Every internal mutex of the library is taken and released through
 *     dlock__mu_lock / dlock__mu_trylock / dlock__mu_unlock, which count
 *     the locks the calling thread holds (tests/docs check that src/ calls
 *     pthread_mutex_lock nowhere else).
 *   - A log event raised while the thread holds any (dlock__log: an
 *     unlock's "lost" found under reg.mu) is not delivered then: it is
 *     kept, in order, and delivered by the dlock__mu_unlock that releases
 *     the thread's last lock -- no event is lost, none runs under a lock.
 *   - on_lock_lost and an async completion are called only through
 *     dlock__callout_lost / dlock__callout_done, which abort the process if
 *     the thread holds a lock: a library bug caught at its source (the
 *     tests run every such path), never a silent deadlock in a user's
 *     program.
 *
 * Thread-safety: the counts and the kept events are per thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static _Thread_local int t_depth; /* internal locks this thread holds */

/* Log events raised under a lock, delivered when the last one goes. */
typedef struct kept_event {
  struct kept_event *next;
  const dlock_config *cfg;
  int level;
  int has_name;
  char event[32];
  char name[256];
  char msg[768]; /* dlock__log's whole message */
} kept_event;
static _Thread_local kept_event *t_kept, *t_kept_tail;

void dlock__mu_lock(pthread_mutex_t *m) {
  pthread_mutex_lock(m);
  t_depth++;
}

int dlock__mu_trylock(pthread_mutex_t *m) {
  int rc = pthread_mutex_trylock(m);
  if (rc == 0)
    t_depth++;
  return rc;
}

static void deliver_kept(void) {
  while (t_kept) {
    kept_event *e = t_kept;
    t_kept = e->next;
    if (!t_kept)
      t_kept_tail = NULL;
    dlock__log_emit(e->cfg, e->level, e->has_name ? e->name : NULL, e->event,
                    e->msg);
    free(e);
  }
}

void dlock__mu_unlock(pthread_mutex_t *m) {
  if (t_depth <= 0)
    dlock__never("dlock__mu_unlock: this thread holds no internal lock");
  t_depth--;
  pthread_mutex_unlock(m);
  if (t_depth == 0 && t_kept)
    deliver_kept();
}

int dlock__mu_depth(void) { return t_depth; }

int dlock__log_keep(const dlock_config *cfg, int level, const char *name,
                    const char *event, const char *msg) {
  if (t_depth == 0)
    return 0;
  kept_event *e = malloc(sizeof *e);
  if (!e)
    return 1; /* out of memory under a lock: the event is dropped */
  e->next = NULL;
  e->cfg = cfg;
  e->level = level;
  e->has_name = name != NULL;
  snprintf(e->event, sizeof e->event, "%s", event ? event : "");
  snprintf(e->name, sizeof e->name, "%s", name ? name : "");
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  if (t_kept_tail)
    t_kept_tail->next = e;
  else
    t_kept = e;
  t_kept_tail = e;
  return 1;
}

void dlock__callout_lost(const dlock_config *cfg, const char *name) {
  if (t_depth != 0)
    dlock__never("on_lock_lost would run under an internal lock");
  if (cfg->on_lock_lost)
    cfg->on_lock_lost(name, cfg->on_lock_lost_arg);
}

void dlock__callout_done(void (*cb)(int, void *), int rc, void *arg) {
  if (t_depth != 0)
    dlock__never("a completion would run under an internal lock");
  cb(rc, arg);
}

_Noreturn void dlock__never(const char *what) {
  fprintf(stderr, "dlock: internal invariant broken: %s\n", what);
  abort();
}
