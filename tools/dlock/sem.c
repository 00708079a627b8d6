/*
 * sem.c -- "dlock --sem N NAME -- COMMAND": at most N commands at once
 * across machines, on expirable permits (dlock_permits, Redisson's
 * RPermitExpirableSemaphore layout: docs/permits.md), and "dlock status
 * NAME" for such a name (the taken permits and their expiry).
 *
 * Each dlock makes the total N (Redisson setPermits: idempotent while every
 * user of NAME gives the same N), then takes one permit: with -l its fixed
 * lease, else the watchdog lease (--watchdog), renewed while dlock runs. A
 * dlock that is SIGKILLed (or whose machine dies) leaves its permit in the
 * set; it comes back to the others when its lease ends (the next acquire
 * attempt of anyone reclaims it; waiters re-check at that moment).
 *
 * The rest of "dlock NAME -- COMMAND" (signals, the watcher thread that
 * cancels the wait, the command's supervision, the loss callback) is the
 * lock's: lock.c calls in here for the K_SEM kind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "json.h"
#include "lockscan.h"
#include "run.h"

int sem_new(dlock_client *c, const char *name, long long n, lockobj *lk) {
  int rc = dlock_permits_new(c, name, &lk->pm);
  dlock_permit *list = NULL;
  size_t taken = 0;
  long long avail = 0;
  /* The total is one for every user of NAME: another N changes it for all
   * of them (Redisson setPermits), which is worth a warning. */
  if (rc == 0 && dlock_permits_list(lk->pm, &list, &taken, &avail) == 1 &&
      avail + (long long)taken != n)
    cli_err("warning: --sem %lld changes the total of '%s' from %lld to %lld "
            "permits (for every user of it; %zu taken now)",
            n, name, avail + (long long)taken, n, taken);
  dlock_permits_list_free(list);
  if (rc == 0)
    rc = dlock_permits_set_permits(lk->pm, n);
  return rc;
}

int sem_timed(lockobj *lk, long long wait_ms, long long lease_ms) {
  return dlock_permits_acquire(lk->pm, wait_ms, lease_ms > 0 ? lease_ms : -1,
                               lk->permit);
}

int sem_unlock(lockobj *lk) {
  int rc = dlock_permits_release(lk->pm, lk->permit);
  if (rc == 0)
    lk->permit[0] = '\0';
  return rc;
}

void sem_free(lockobj *lk) {
  dlock_permits_free(lk->pm);
  lk->pm = NULL;
}

void sem_loss_reason(run_state *rs, int probe, const char *lease, char *why,
                     size_t len) {
  dlock_permit *list = NULL;
  size_t n = 0;
  int rc = dlock_permits_list(rs->lk.pm, &list, &n, NULL);
  int found = 0;
  long long now = dlc_wall_ms();
  for (size_t i = 0; rc >= 0 && i < n; i++)
    if (strcmp(list[i].id, rs->lk.permit) == 0)
      found = list[i].expires_at_ms < 0 || list[i].expires_at_ms > now;
  dlock_permits_list_free(list);
  if (rc >= 0 && !found)
    snprintf(why, len,
             "its permit %s is gone (its lease ran out, or it was released "
             "elsewhere)",
             rs->lk.permit);
  else if (rc < 0 && probe)
    snprintf(why, len,
             "renewals of its permit failed until the %s s lease ran out "
             "(%s)",
             lease, dlock_err_name(rc));
}

/* "2026-11-25T19:40:00.123Z" for ms since the epoch. */
static void fmt_time(long long ms, char *buf, size_t len) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  char sec[32];
  if (!gmtime_r(&t, &tm) ||
      !strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm))
    snprintf(buf, len, "%lld", ms);
  else
    snprintf(buf, len, "%s.%03lldZ", sec, ms % 1000);
}

/* Who took permit id (lockscan's reading of NAME), or NULL. */
static const ls_holder *taker(const ls_lock *lk, const char *id) {
  for (size_t i = 0; lk && i < lk->nholders; i++)
    if (strcasecmp(lk->holders[i].owner, id) == 0)
      return &lk->holders[i];
  return NULL;
}

static void print_json(const cli_opts *o, const dlock_permit *list, size_t n,
                       long long avail, const ls_lock *lk) {
  fputs("{\"name\":", stdout);
  dlc_json_str(stdout, o->name);
  printf(",\"kind\":\"permits\",\"available\":%lld,\"permits\":[", avail);
  for (size_t i = 0; i < n; i++) {
    const ls_holder *h = taker(lk, list[i].id);
    int known = h && h->who.known;
    printf("%s{\"id\":\"%s\",\"expires_at_ms\":%lld,\"since_ms\":",
           i ? "," : "", list[i].id, list[i].expires_at_ms);
    if (h && h->since_ms > 0)
      printf("%lld", h->since_ms);
    else
      fputs("null", stdout);
    fputs(",\"client\":", stdout);
    if (!known) {
      fputs("null}", stdout);
      continue;
    }
    fputs("{\"host\":", stdout);
    dlc_json_str(stdout, h->who.host);
    printf(",\"pid\":%lld,\"program\":", h->who.pid);
    dlc_json_str(stdout, h->who.program);
    fputs(",\"id\":", stdout);
    dlc_json_str(stdout, h->who.client);
    fputs("}}", stdout);
  }
  fputs("]}\n", stdout);
}

static void print_text(const cli_opts *o, const dlock_permit *list, size_t n,
                       long long avail, const ls_lock *lk) {
  printf("permits '%s': %lld available, %zu taken\n", o->name, avail, n);
  long long now = dlc_wall_ms();
  for (size_t i = 0; i < n; i++) {
    long long e = list[i].expires_at_ms;
    char t[40], d[32], who[600] = "";
    const ls_holder *h = taker(lk, list[i].id);
    if (h && h->who.known) {
      char s[40] = "?";
      if (h->since_ms > 0)
        fmt_time(h->since_ms, s, sizeof s);
      snprintf(who, sizeof who,
               "  host %.128s  pid %lld  program %.64s  since %s", h->who.host,
               h->who.pid, h->who.program, s);
    }
    if (e < 0) {
      printf("  permit %s  no expiry%s\n", list[i].id, who);
      continue;
    }
    fmt_time(e, t, sizeof t);
    cli_fmt_secs(e > now ? e - now : now - e, d, sizeof d);
    if (e > now)
      printf("  permit %s  expires in %s s (%s)%s\n", list[i].id, d, t, who);
    else
      printf("  permit %s  expired %s s ago (%s), back at the next call%s\n",
             list[i].id, d, t, who);
  }
  for (size_t i = 0; lk && i < lk->nwaiters; i++) {
    const ls_waiter *w = &lk->waiters[i];
    char s[40] = "?";
    if (w->since_ms > 0)
      fmt_time(w->since_ms, s, sizeof s);
    if (w->who.known)
      printf("  waiter %s  host %.128s  pid %lld  program %.64s  since %s\n",
             w->owner, w->who.host, w->who.pid, w->who.program, s);
    else
      printf("  waiter %s  since %s\n", w->owner, s);
  }
}

int sem_status(const cli_opts *o, dlock_client *c, const ls_lock *lk, int *ex) {
  dlock_permits *p = NULL;
  if (dlock_permits_new(c, o->name, &p) != 0)
    return 0;
  dlock_permit *list = NULL;
  size_t n = 0;
  long long avail = 0;
  /* Another kind's key (a lock's hash: WRONGTYPE; a string that is no
   * count: EPROTO): not ours to show, the lock status says what it is. */
  int rc = dlock_permits_list(p, &list, &n, &avail);
  dlock_permits_free(p);
  if (rc <= 0 && n == 0) {
    dlock_permits_list_free(list);
    return 0;
  }
  if (o->json)
    print_json(o, list, n, avail, lk);
  else
    print_text(o, list, n, avail, lk);
  dlock_permits_list_free(list);
  *ex = fflush(stdout) != 0 ? CLI_EX_SOFT : n ? 0 : CLI_EX_FREE;
  return 1;
}
