/*
 * checker.c -- judges a soak run from the workers' logs, faults.log,
 * counts.log and the stores. The rules (docs/guarantees.md, "Under
 * faults: what the soak checks"):
 *
 * Mutual exclusion. A hold lasts from its acquisition (A) to the earlier
 * of its unlock (R: the call began) and its last known local deadline (A's
 * or a later V's `until`: what the library promises). Holds of one lock
 * (both sides of a read-write lock together) never overlap beyond the
 * kind's capacity: 1, a writer alone, SOAK_SEM_PERMITS for the semaphore,
 * SOAK_PERMITS expirable permits. An event-loop hold ends at the earliest
 * of its OK unlock, its loss report and its first lease from the wait's
 * start (no validity call); an expirable permit at the earliest of its
 * release and the wait's start + its lease (or the watchdog's first).
 *
 * Holders killed inside their unlock (an R line, no U). The unlock may
 * have run before the kill, so the hold ended somewhere between R and its
 * deadline. soak.c asks the server, once no late copy of the dead
 * process's requests is held on the wire any more, whether the hold's
 * field is still on the lock (faults.log "kill9 ... field=F at=T"):
 *   F = 1: the unlock did not run (no copy of it can arrive any more): the
 *          hold lasts to its deadline and is judged like any other;
 *   F = 0: the hold ended between R and T: a later hold that began in
 *          [R, T) is not judged (counted), one that began before R is;
 *   unknown (no answer, a rwlock side, copies still held): as F = 0 with
 *          T = the deadline.
 * A second holder that began while the first could not have released yet
 * (before R, or at any time when the field was still there) is a
 * violation.
 *
 * Lost wake-ups, per kind (mutex, fair, fenced, rwlock). After a clean
 * unlock (U rc 0) leaves the lock free (no other hold of it), the next
 * hold must begin soon while a live waiter waits across the gap: a gap
 * with a waiter whose longest stretch not excused by a fault is over
 * WAKE_BOUND_US is a lost wake-up. A waiter sleeps at most until the TTL
 * it last saw, so a fault that may cost a message excuses its lock (or
 * every lock) until its end + the longest lease (REC_LONG_US); a kill -9
 * also the longest wait (a fair lock skips a dead waiter after its
 * deadline); a paused waiter excuses its lock only until WAKE_GRACE_US
 * after it resumes -- from then on its own wait's end must pass a free
 * lock on (issue 38: "a lock left free with live waiters is always taken
 * or handed on"). soak.c keeps other faults away for a long lease after a
 * paused waiter, so the check has room.
 *
 * Holds lost on a healthy master (cluster). During a blackholed master's
 * window (faults.log "blackhole ... locks=..." + 2 leases), a loss report
 * (L) for a lock the blackholed master does not serve, with no other fault
 * near it, is a violation: nothing but renewals may run on the renewal
 * path (issue 38 item 6).
 *
 * Hangs: an H line (a library call that did not return within
 * soak_hang_ms) is a violation.
 *
 * Expirable permits: a one-attempt acquire (try_acquire) that returned a
 * permit later than its W line + the lease + SOAK_PERMIT_SLACK_MS returned
 * a permit the server may already have reclaimed (its expiry is computed
 * when the attempt is built, right after W: issue 38 item 5): a violation.
 *
 * Exact counts (counts.log, read after every late copy landed): the
 * semaphore's final value is SOAK_SEM_PERMITS + posts - acquisitions,
 * each call whose outcome is unknown (DLOCK_ECONN, killed in the call)
 * counting 0 or 1; the latch's count SOAK_LATCH_N - count-downs the same
 * way; the expirable permits all back (SOAK_PERMITS available, none
 * taken). A value outside that range is a count changed twice by one call
 * (the library's own re-sends must count once: docs/errors.md) or a call
 * that answered OK without counting.
 *
 * Also: stale fenced writes accepted (the fenced store's log only ever
 * rises), the same writes on a plain register (the Kleppmann scenario:
 * without fencing, a paused holder's late write lands after a newer
 * holder's), leaks (fds left after a client was freed, memory growth);
 * and the fault counts per class.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "soak.h"

#define MAX_EV 400000
#define MAX_F 16384
#define WAKE_BOUND_US 3000000LL /* longest free stretch a waiter may sleep */
#define WAKE_GRACE_US 1500000LL /* a resumed waiter's own wake-up */
#define REC_LONG_US ((SOAK_LONG_LEASE_MS + 1000) * 1000LL)
#define REC_KILL_US ((SOAK_LONG_LEASE_MS + SOAK_LONG_WAIT_MS + 1000) * 1000LL)
#define RSS_GROWTH_KB 16384

typedef struct hold {
  int res, kind, grp, pid;
  int64_t start, end, until, unlocked_at;
  int clean;       /* unlocked with DLOCK_OK */
  int async;       /* the event-loop client's */
  int64_t lost_at; /* async: its loss report during the hold, else 0 */
  /* Its process died after its R line (the unlock had begun) and before
   * the U line: holds of others that began in [killed_unlocking,
   * unknown_to) are not judged (see the rules above). */
  int64_t killed_unlocking, unknown_to;
} hold;
typedef struct waitrec {
  int grp;
  int64_t from, to;
} waitrec;
/* A faults.log line: its window, what it concerns. */
typedef struct fwin {
  char kind[24];
  int64_t t0, t1;
  int grp; /* the lock it concerns; -1 every lock */
  int pid; /* kill9: the process killed; wire-*: the worker's */
  int field;
  int64_t at;
  char sub[24];
  char detail[256];
} fwin;
typedef struct lostrec {
  int pid;
  char lock[64];
  int64_t t;
} lostrec;

static hold *g_h;
static int g_nh;
static waitrec *g_w;
static int g_nw;
static fwin *g_f;
static int g_nf;
static lostrec *g_l;
static int g_nl;
static struct {
  long sections[NKINDS], elost, lost_reports, fences_rejected, fences_ok;
  long fences_down; /* the store could not be reached (Redis down) */
  long async_sections, async_lost, async_cut; /* event-loop client's */
  long unknown_ends;  /* holders killed while unlocking (R without U) */
  long judged_ends;   /* ... whose field the server still had: judged */
  long unknown_after; /* acquisitions after such an R, not judged */
  long pending_retries;
  long hooks;
  int async_workers, hangs, past_lease;
  int leaks_fd, leaks_mem, workers_clean, workers;
  /* counting kinds: calls OK, calls of unknown outcome */
  long sem_acq, sem_acq_unk, sem_post, sem_post_unk, cd_ok, cd_unk;
  int lost_kind[NKINDS];
} g;

static int res_index(const char *name) {
  for (int i = 0; i < soak_nresources; i++)
    if (strcmp(soak_resources[i].name, name) == 0)
      return i;
  return -1;
}

static int grp_of(int res) {
  return res < 0 ? -1 : soak_res_of_lock(soak_resources[res].lock);
}

/* The kill -9 of process pid inside its unlock of res (or NULL). */
static const fwin *kill_verdict(int pid, int res) {
  for (int i = 0; i < g_nf; i++)
    if (strcmp(g_f[i].kind, "kill9") == 0 && g_f[i].pid == pid &&
        g_f[i].grp == grp_of(res))
      return &g_f[i];
  return NULL;
}

/* Ends the open hold of a log (its holder was killed or stopped): its
 * last known local deadline, or the server's answer (see the rules). */
static void close_hold(hold *h) {
  if (!h || h->res < 0)
    return;
  if (h->end == 0) {
    h->end = h->until > 0 ? h->until : h->start;
    h->unknown_to = h->end;
    const fwin *v =
        h->killed_unlocking > 0 ? kill_verdict(h->pid, h->res) : NULL;
    if (h->killed_unlocking > 0)
      g.unknown_ends++;
    if (v && v->field == 1) {
      h->killed_unlocking = 0; /* the hold stood: judged to its deadline */
      g.judged_ends++;
    } else if (v && v->field == 0 && v->at < h->end) {
      h->end = h->unknown_to = v->at;
    }
  } else {
    h->killed_unlocking = 0;
  }
  if (g_nh < MAX_EV)
    g_h[g_nh++] = *h;
  h->res = -1;
}

static void add_wait(int res, int64_t from, int64_t to) {
  if (res >= 0 && g_nw < MAX_EV)
    g_w[g_nw++] = (waitrec){grp_of(res), from, to};
}

/* An unlock's U line closes the hold (its end: see the rules). */
static void on_unlock(hold *cur, long long rc, int64_t t0, int64_t t1) {
  int64_t end = t0;
  /* The event-loop client has no validity call: its hold ends at the
   * unlock (an OK unlock proves the client's deadline had not passed and
   * the field was there), or at its loss report if one came first... */
  if (cur->async) {
    if (cur->lost_at > 0 && cur->lost_at < end)
      end = cur->lost_at;
    /* ...but never past its first lease counted from the wait's start: a
     * paused process learns of its loss only when it runs again (the
     * Kleppmann pause). Counted, as it may shorten a hold that was in
     * fact renewed. */
    if (cur->until < end) {
      end = cur->until > cur->start ? cur->until : cur->start;
      g.async_cut++;
    }
  } else if (cur->kind != K_SEM && cur->until > 0 && cur->until < end)
    end = cur->until > cur->start ? cur->until : cur->start;
  cur->end = end;
  cur->clean = rc == 0;
  cur->unlocked_at = t1;
  g.elost += rc != 0;
  if (cur->kind == K_SEM) {
    g.sem_post += rc == 0;
    g.sem_post_unk += rc != 0;
  }
  close_hold(cur);
}

typedef struct logstate {
  hold cur;
  int64_t wait_from;
  int wait_res, async, pid;
  int64_t count_from; /* a latch count-down begun, not answered */
  /* A permit returned later than its lease after its W line: judged by the
   * worker's X line that follows (whether the server still had it, read
   * right after the return: etcd, whose acquisition grants its lease after
   * the session, so its first send can be late) -- or, without one, at
   * the next line (Redis: one request, sent at once). */
  int late_res;
  long long late_lease, late_ms;
} logstate;

static void late_permit(int res, long long lease, long long ms,
                        const char *why) {
  if (g.past_lease < 5)
    printf("  VIOLATION: %s: a permit with a %lld ms lease %s %lld ms after "
           "its acquire began\n",
           soak_resources[res].name, lease, why, ms);
  g.past_lease++;
}

/* The judgment of a late permit when no X line came for it. */
static void late_flush(logstate *s) {
  if (s->late_res >= 0)
    late_permit(s->late_res, s->late_lease, s->late_ms, "returned");
  s->late_res = -1;
}

static void on_acquired(logstate *s, int i, long long tok, int64_t t,
                        int64_t until) {
  int k = soak_resources[i].kind;
  close_hold(&s->cur);
  s->cur =
      (hold){i, k, grp_of(i), s->pid, t, 0, until, 0, 0, s->async, 0, 0, 0};
  g.sections[k]++;
  g.async_sections += s->async;
  g.sem_acq += k == K_SEM;
  if (k == K_PERMIT && tok > 0 && s->wait_res == i &&
      t - s->wait_from > (tok + SOAK_PERMIT_SLACK_MS) * 1000) {
    s->late_res = i; /* the next line says (X), or it counts */
    s->late_lease = tok;
    s->late_ms = (long long)(t - s->wait_from) / 1000;
  }
  if (s->wait_res >= 0)
    add_wait(s->wait_res, s->wait_from, t);
  s->wait_res = -1;
}

static void on_failed(logstate *s, int i, long long rc, int64_t t) {
  if (s->wait_res >= 0)
    add_wait(s->wait_res, s->wait_from, t);
  if (i >= 0 && soak_resources[i].kind == K_SEM && rc != DLOCK_ETIMEDOUT &&
      rc != DLOCK_EBUSY && rc != DLOCK_ECANCELED)
    g.sem_acq_unk++;
  s->wait_res = -1;
}

static void read_line(const char *ln, logstate *s) {
  char res[64];
  long long a = 0, b = 0, c = 0, d = 0;
  int i;
  hold *cur = &s->cur;
  if (ln[0] == 'X') {
    /* X <res> <1: the server still has the permit just returned, 0: not> */
    if (sscanf(ln, "X %63s %lld", res, &a) == 2 && a <= 0 &&
        (i = res_index(res)) >= 0)
      late_permit(i, s->late_res == i ? s->late_lease : 0,
                  s->late_res == i ? s->late_ms : 0,
                  "returned with no life left on the server");
    s->late_res = -1;
    return;
  }
  late_flush(s);
  switch (ln[0]) {
  case 'K':
    if (strncmp(ln, "K async", 7) == 0 && !s->async) {
      s->async = 1;
      g.async_workers++;
    }
    break;
  case 'W':
    if (sscanf(ln, "W %63s %lld", res, &a) == 2) {
      s->wait_res = res_index(res);
      s->wait_from = a;
      if (s->wait_res >= 0 && soak_resources[s->wait_res].kind == K_LATCH)
        s->count_from = a, s->wait_res = -1;
    }
    break;
  case 'A':
    if (sscanf(ln, "A %63s %lld %lld %lld", res, &a, &b, &c) == 4 &&
        (i = res_index(res)) >= 0)
      on_acquired(s, i, a, b, c);
    break;
  case 'F':
    if (sscanf(ln, "F %63s %lld %lld", res, &a, &b) == 3)
      on_failed(s, res_index(res), a, b);
    break;
  case 'C':
    if (sscanf(ln, "C %63s %lld %lld %lld", res, &a, &b, &c) == 4) {
      g.cd_ok += a == 0;
      g.cd_unk += a != 0;
      s->count_from = 0;
    }
    break;
  case 'V':
    if (sscanf(ln, "V %63s %lld", res, &a) == 2 && cur->res >= 0 &&
        a > cur->until && cur->kind <= K_RW_WRITE && !cur->async)
      cur->until = a;
    break;
  case 'R':
    if (sscanf(ln, "R %63s %lld", res, &a) == 2 && cur->res >= 0 &&
        res_index(res) == cur->res)
      cur->killed_unlocking = a; /* cleared by the U line (close_hold) */
    break;
  case 'U':
    if (sscanf(ln, "U %63s %lld %lld %lld", res, &a, &b, &c) == 4 &&
        cur->res >= 0)
      on_unlock(cur, a, b, c);
    break;
  case 'P':
    g.pending_retries++;
    break;
  case 'S':
    if (sscanf(ln, "S %63s %lld %lld", res, &a, &b) == 3)
      b == 1 ? g.fences_ok++ : b == 0 ? g.fences_rejected++ : g.fences_down++;
    break;
  case 'L':
    g.lost_reports++;
    if (sscanf(ln, "L %63s %lld", res, &a) == 2) {
      if (g_nl < MAX_EV) {
        g_l[g_nl].pid = s->pid;
        snprintf(g_l[g_nl].lock, sizeof g_l[g_nl].lock, "%s", res);
        g_l[g_nl++].t = a;
      }
      if (cur->res >= 0 && cur->async && cur->lost_at == 0) {
        cur->lost_at = a;
        g.async_lost++;
      }
    }
    break;
  case 'H':
    g.hangs++;
    printf("  HANG: worker %d: %s", s->pid, ln + 2);
    break;
  case 'E': {
    long hooks = 0;
    if (sscanf(ln, "E %lld %lld %lld %lld %ld", &a, &b, &c, &d, &hooks) >= 4) {
      g.hooks += hooks;
      g.workers_clean++;
      g.leaks_fd += b > a;
      g.leaks_mem += c > 0 && d - c > RSS_GROWTH_KB;
      if (b > a || (c > 0 && d - c > RSS_GROWTH_KB))
        printf("  leak: fds %lld -> %lld, rss %lld -> %lld kB\n", a, b, c, d);
    }
    break;
  }
  default:
    break;
  }
}

static void read_log(const char *path, const char *name) {
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  g.workers++;
  logstate s = {.cur = {.res = -1}, .wait_res = -1, .late_res = -1};
  int idx;
  if (sscanf(name, "w%d-%d.log", &idx, &s.pid) != 2)
    s.pid = 0;
  char ln[512];
  while (fgets(ln, sizeof ln, f))
    read_line(ln, &s);
  late_flush(&s);
  /* The log ended inside a call (killed, or a hang): outcomes unknown. */
  if (s.wait_res >= 0 && soak_resources[s.wait_res].kind == K_SEM)
    g.sem_acq_unk++;
  if (s.count_from > 0)
    g.cd_unk++;
  if (s.cur.res >= 0 && s.cur.kind == K_SEM && s.cur.killed_unlocking > 0)
    g.sem_post_unk++;
  close_hold(&s.cur);
  fclose(f);
}

/* The lock of a faults.log detail: "res=<name>", a wire line's third
 * word, or none (every lock). */
static int detail_grp(const char *kind, const char *d, fwin *w) {
  char lock[48] = "", a[32] = "", b[32] = "";
  const char *p = strstr(d, "res=");
  if (strncmp(kind, "wire-", 5) == 0 &&
      sscanf(d, "%31s %d %47s %23s", a, &w->pid, lock, w->sub) >= 3)
    return soak_res_of_lock(lock);
  if (p && sscanf(p + 4, "%31s", b) == 1)
    return grp_of(res_index(b));
  return -1;
}

static void read_faults(const char *dir) {
  char p[512], ln[1024];
  snprintf(p, sizeof p, "%s/faults.log", dir);
  FILE *f = fopen(p, "r");
  while (f && g_nf < MAX_F && fgets(ln, sizeof ln, f)) {
    fwin *w = &g_f[g_nf];
    memset(w, 0, sizeof *w);
    int off = 0;
    long long t0, t1;
    if (sscanf(ln, "%23s %lld %lld %n", w->kind, &t0, &t1, &off) < 3)
      continue;
    w->t0 = t0;
    w->t1 = t1;
    snprintf(w->detail, sizeof w->detail, "%s", ln + off);
    w->detail[strcspn(w->detail, "\n")] = '\0';
    w->field = -1;
    w->grp = detail_grp(w->kind, w->detail, w);
    const char *q;
    if ((q = strstr(w->detail, "pid=")))
      w->pid = atoi(q + 4);
    if ((q = strstr(w->detail, "field=")))
      w->field = atoi(q + 6);
    if ((q = strstr(w->detail, "at=")))
      w->at = atoll(q + 3);
    if (strcmp(w->kind, "sem-repair") == 0) {
      g.sem_post += atol(w->detail);
      continue; /* a count change, not a fault */
    }
    if (strcmp(w->kind, "kill9") == 0 && strstr(w->detail, "phase=5"))
      snprintf(w->sub, sizeof w->sub, "unlock");
    if ((q = strstr(w->detail, "shape=")))
      sscanf(q + 6, "%23s", w->sub);
    g_nf++;
  }
  if (f)
    fclose(f);
}

static int cmp_start(const void *a, const void *b) {
  const hold *x = a, *y = b;
  if (x->grp != y->grp)
    return x->grp - y->grp;
  return x->start < y->start ? -1 : x->start > y->start;
}

static int capacity(int kind) {
  return kind == K_SEM ? SOAK_SEM_PERMITS : kind == K_PERMIT ? SOAK_PERMITS : 1;
}

/* Holds of one lock [lo, hi), sorted by start: pairs that overlap beyond
 * the capacity. */
static int overlaps(int lo, int hi) {
  int bad = 0;
  for (int i = lo; i < hi; i++) {
    int n = 1, writer = g_h[i].kind == K_RW_WRITE;
    /* Earlier starts only, and not further back than any hold can last
     * holds many starts. */
    for (int j = i - 2048 > lo ? i - 2048 : lo; j < i; j++) {
      if (g_h[j].end <= g_h[i].start)
        continue;
      /* Killed inside its unlock call: from R on the lock may have been
       * released (the rules above) -- not judged, counted. */
      if (g_h[j].killed_unlocking > 0 &&
          g_h[j].killed_unlocking <= g_h[i].start &&
          g_h[i].start < g_h[j].unknown_to) {
        g.unknown_after++;
        continue;
      }
      n++;
      writer |= g_h[j].kind == K_RW_WRITE;
    }
    int rw = g_h[i].kind == K_RW_READ || g_h[i].kind == K_RW_WRITE;
    if ((rw && writer && n > 1) || (!rw && n > capacity(g_h[i].kind))) {
      if (bad < 5)
        printf("  VIOLATION: %s held by %d at %lld us%s\n",
               soak_resources[g_h[i].res].name, n, (long long)g_h[i].start,
               g_h[i].until <= g_h[i].start && !g_h[i].async
                   ? " (the last acquire answered held, its deadline "
                     "already passed)"
                   : "");
      bad++;
    }
  }
  return bad;
}

/* How long a fault excuses a lost wake-up on lock grp after its end (-1:
 * not at all). */
static int64_t excuse(const fwin *f, int grp) {
  if (f->grp >= 0 && f->grp != grp)
    return -1;
  if (strcmp(f->kind, "pause-waiter") == 0)
    return WAKE_GRACE_US;
  if (strcmp(f->kind, "kill9") == 0)
    return REC_KILL_US;
  return REC_LONG_US;
}

/* The longest stretch of [a, b) that no fault's window excuses. */
static int64_t unexcused(int grp, int64_t a, int64_t b) {
  int64_t longest = 0, at = a;
  /* windows are few per gap: repeatedly take the one that covers `at` and
   * reaches furthest, or the next one that starts after it */
  for (int guard = 0; at < b && guard < 4 * MAX_F; guard++) {
    int64_t reach = -1, next = b;
    for (int i = 0; i < g_nf; i++) {
      int64_t e = excuse(&g_f[i], grp);
      if (e < 0)
        continue;
      int64_t s = g_f[i].t0, f = g_f[i].t1 + e;
      if (s <= at && f > at && f > reach)
        reach = f;
      else if (s > at && s < next)
        next = s;
    }
    if (reach > at) {
      at = reach;
      continue;
    }
    if (next - at > longest)
      longest = next - at;
    at = next;
  }
  return longest;
}

/* A clean unlock leaves the lock free; the next hold begins later than the
 * bound outside fault windows while a waiter waited across the gap. */
static int lost_wakeups(int lo, int hi) {
  int bad = 0;
  for (int i = lo; i < hi; i++) {
    const hold *h = &g_h[i];
    if (!h->clean || h->kind > K_RW_WRITE)
      continue;
    int64_t a = h->unlocked_at, b = -1;
    int busy = 0, j;
    /* sorted by start: the holds begun before a (not further back than
     * any hold lasts), then the first one begun after it */
    for (j = i - 2048 > lo ? i - 2048 : lo; j < hi && g_h[j].start <= a; j++)
      busy |= j != i && g_h[j].end > a; /* another hold: not free */
    if (j < hi)
      b = g_h[j].start;
    if (busy || b < 0 || b - a <= WAKE_BOUND_US)
      continue;
    int waited = 0;
    for (int w = 0; w < g_nw && !waited; w++)
      waited = g_w[w].grp == h->grp && g_w[w].from < a && g_w[w].to >= b;
    int64_t u = waited ? unexcused(h->grp, a, b) : 0;
    if (u > WAKE_BOUND_US) {
      printf("  LOST WAKE-UP: %s free %lld ms with a waiter (%lld ms of it "
             "outside fault windows) from %lld us\n",
             soak_kind_names[h->kind == K_RW_READ ? K_RW_WRITE : h->kind],
             (long long)((b - a) / 1000), (long long)(u / 1000), (long long)a);
      g.lost_kind[h->kind == K_RW_READ ? K_RW_WRITE : h->kind]++;
      bad++;
    }
  }
  return bad;
}

/* Loss reports of locks a blackholed master does not serve, with no other
 * fault near them. */
static int lost_on_healthy(void) {
  int bad = 0;
  for (int i = 0; i < g_nf; i++) {
    const fwin *b = &g_f[i];
    const char *locks = strstr(b->detail, "locks=");
    if (strcmp(b->kind, "blackhole") != 0 || !locks)
      continue;
    int64_t end = b->t1 + 2LL * SOAK_LEASE_MS * 1000 + 1000000;
    for (int l = 0; l < g_nl; l++) {
      const lostrec *r = &g_l[l];
      char key[72];
      snprintf(key, sizeof key, "%s,", r->lock);
      if (r->t < b->t0 || r->t > end || strstr(locks, key))
        continue;
      int other = 0;
      for (int k = 0; k < g_nf && !other; k++) {
        const fwin *f = &g_f[k];
        int mine = f->grp < 0 || f->grp == soak_res_of_lock(r->lock) ||
                   f->pid == r->pid;
        other = k != i && mine && f->t0 < r->t &&
                f->t1 + 2LL * SOAK_LEASE_MS * 1000 >
                    r->t - 2LL * SOAK_LEASE_MS * 1000;
      }
      if (other)
        continue;
      if (bad < 5)
        printf("  VIOLATION: %s lost at %lld us on a healthy master (%s)\n",
               r->lock, (long long)r->t, b->detail);
      bad++;
    }
  }
  return bad;
}

/* Entries of a store log that come after a higher token: stale writes. */
static long stale_in(redisContext *rc, const char *key) {
  redisReply *x = redisCommand(rc, "LRANGE %s 0 -1", key);
  long stale = 0;
  long long max = 0;
  for (size_t i = 0; x && x->type == REDIS_REPLY_ARRAY && i < x->elements;
       i++) {
    long long t = atoll(x->element[i]->str);
    if (t < max)
      stale++;
    else
      max = t;
  }
  if (x)
    freeReplyObject(x);
  return stale;
}

/* counts.log against the calls (the rules above). */
static int check_counts(const char *dir) {
  char p[512], name[32];
  snprintf(p, sizeof p, "%s/counts.log", dir);
  FILE *f = fopen(p, "r");
  if (!f) {
    printf("counts: none read (no counts.log)\n");
    return 0;
  }
  long long v, x, pending = 0, sem = -2, latch = -2, avail = -2, taken = -2;
  while (fscanf(f, "%31s %lld", name, &v) == 2) {
    if (strcmp(name, "sem0") == 0)
      sem = v;
    else if (strcmp(name, "latch0") == 0)
      latch = v;
    else if (strcmp(name, "perm0") == 0 && fscanf(f, "%lld", &x) == 1)
      avail = v, taken = x;
    else if (strcmp(name, "pending") == 0)
      pending = v;
  }
  fclose(f);
  int bad = 0;
  long long slo = SOAK_SEM_PERMITS + g.sem_post - g.sem_acq - g.sem_acq_unk,
            shi = SOAK_SEM_PERMITS + g.sem_post + g.sem_post_unk - g.sem_acq,
            llo = SOAK_LATCH_N - g.cd_ok - g.cd_unk,
            lhi = SOAK_LATCH_N - g.cd_ok;
  if (pending > 0) {
    printf("counts: %lld late copies still held at the end: not judged\n",
           pending);
    return 0;
  }
  printf("counts:");
  if (sem != -2) /* not read on etcd (no semaphore, no latch there) */
    printf(" semaphore %lld (expected %lld..%lld: %ld posts + %ld unknown, "
           "%ld acquisitions + %ld unknown),",
           sem, slo, shi, g.sem_post, g.sem_post_unk, g.sem_acq, g.sem_acq_unk);
  if (latch != -2)
    printf(" latch %lld (expected %lld..%lld: %ld count-downs + %ld "
           "unknown),",
           latch, llo, lhi, g.cd_ok, g.cd_unk);
  printf(" permits %lld available, %lld taken (expected %d, 0)\n", avail, taken,
         SOAK_PERMITS);
  if (sem != -2 && g.sections[K_SEM] + g.sem_acq_unk > 0 &&
      (sem < slo || sem > shi)) {
    printf("  VIOLATION: the semaphore counts %lld, not %lld..%lld\n", sem, slo,
           shi);
    bad++;
  }
  if (latch != -2 && g.cd_ok + g.cd_unk > 0 && (latch < llo || latch > lhi)) {
    printf("  VIOLATION: the latch counts %lld, not %lld..%lld\n", latch, llo,
           lhi);
    bad++;
  }
  if (avail != -2 && g.sections[K_PERMIT] > 0 &&
      (avail != SOAK_PERMITS || taken != 0)) {
    printf("  VIOLATION: expirable permits: %lld available, %lld taken\n",
           avail, taken);
    bad++;
  }
  return bad;
}

/* The fault counts per class (faults.log), with the sub-classes. */
static void fault_counts(void) {
  printf("fault counts:");
  for (int k = 0; k < soak_n_fault_classes; k++) {
    long n = 0;
    char subs[8][24];
    long sn[8] = {0};
    int ns = 0;
    for (int i = 0; i < g_nf; i++) {
      if (strcmp(g_f[i].kind, soak_fault_classes[k]) != 0)
        continue;
      n++;
      int s = 0;
      while (s < ns && strcmp(subs[s], g_f[i].sub) != 0)
        s++;
      if (s == ns && ns < 8 && g_f[i].sub[0])
        snprintf(subs[ns++], 24, "%s", g_f[i].sub);
      if (s < ns)
        sn[s]++;
    }
    if (n == 0)
      continue;
    printf(" %s %ld", soak_fault_classes[k], n);
    for (int s = 0; s < ns; s++)
      printf("%s%s %ld%s", s ? ", " : " (", subs[s], sn[s],
             s == ns - 1 ? ")" : "");
    printf(";");
  }
  printf("\n");
}

static void read_all(const char *dir) {
  read_faults(dir);
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[768];
  while (d && (e = readdir(d)))
    if (e->d_name[0] == 'w' && strstr(e->d_name, ".log")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      read_log(p, e->d_name);
    }
  if (d)
    closedir(d);
}

static void stores(const char *direct_url, long *fenced, long *plain) {
  redisContext *rc =
      direct_url ? redisConnectUnix(direct_url + strlen("unix://")) : NULL;
  for (int i = 0; rc && !rc->err && i < soak_nresources; i++)
    if (soak_resources[i].kind == K_FENCED) {
      char k[96];
      snprintf(k, sizeof k, "fstore:log:%s", soak_resources[i].name);
      *fenced += stale_in(rc, k);
      snprintf(k, sizeof k, "plain:log:%s", soak_resources[i].name);
      *plain += stale_in(rc, k);
    }
  if (rc)
    redisFree(rc);
}

static void summary(int viol, long fenced_stale, long plain_stale) {
  printf("critical sections: mutex %ld, fair %ld, fenced %ld, rwlock read "
         "%ld / write %ld, semaphore %ld, expirable permits %ld; latch "
         "count-downs %ld (unlocks not OK: %ld; pending unlocks called "
         "again: %ld; lock-lost reports: %ld)\n",
         g.sections[K_MUTEX], g.sections[K_FAIR], g.sections[K_FENCED],
         g.sections[K_RW_READ], g.sections[K_RW_WRITE], g.sections[K_SEM],
         g.sections[K_PERMIT], g.cd_ok + g.cd_unk, g.elost, g.pending_retries,
         g.lost_reports);
  printf("worker processes: %d (%d ended cleanly; %d on the event-loop "
         "client; log-hook calls, each calling back into the library: %ld)\n",
         g.workers, g.workers_clean, g.async_workers, g.hooks);
  printf("event-loop client: %ld critical sections (plain mutex), %ld "
         "ended by a loss report, %ld judged only to their first lease\n",
         g.async_sections, g.async_lost, g.async_cut);
  printf("mutual-exclusion violations: %d\n", viol);
  printf("holders killed inside their unlock call: %ld (%ld judged to their "
         "deadline: the server still had them; %ld later acquisitions "
         "before their end not judged: the unlock may have run)\n",
         g.unknown_ends, g.judged_ends, g.unknown_after);
  printf("expirable permits returned past their lease: %d\n", g.past_lease);
  printf("hangs (a call past the watchdog's bound): %d\n", g.hangs);
  printf("fenced store: %ld writes accepted, %ld stale rejected, %ld stale "
         "accepted (%ld not delivered: Redis down)\n",
         g.fences_ok, g.fences_rejected, fenced_stale, g.fences_down);
  printf("without fencing (the same writes, plain register): %ld stale "
         "writes accepted%s\n",
         plain_stale, plain_stale ? " <- Kleppmann scenario caught" : "");
}

int soak_check(const char *dir, const char *direct_url, int paused_in_cs) {
  g_h = calloc(MAX_EV, sizeof *g_h);
  g_w = calloc(MAX_EV, sizeof *g_w);
  g_f = calloc(MAX_F, sizeof *g_f);
  g_l = calloc(MAX_EV, sizeof *g_l);
  if (!g_h || !g_w || !g_f || !g_l)
    return 1;
  read_all(dir);
  qsort(g_h, (size_t)g_nh, sizeof *g_h, cmp_start);
  int viol = 0, lost = 0;
  for (int lo = 0, hi; lo < g_nh; lo = hi) {
    for (hi = lo; hi < g_nh && g_h[hi].grp == g_h[lo].grp; hi++)
      ;
    viol += overlaps(lo, hi);
    lost += lost_wakeups(lo, hi);
  }
  int healthy = lost_on_healthy();
  long fenced_stale = 0, plain_stale = 0;
  stores(direct_url, &fenced_stale, &plain_stale);
  summary(viol, fenced_stale, plain_stale);
  printf("holds lost on a healthy master: %d\n", healthy);
  int counts = check_counts(dir);
  printf("lost wake-ups: %d (mutex %d, fair %d, fenced %d, rwlock %d)\n", lost,
         g.lost_kind[K_MUTEX], g.lost_kind[K_FAIR], g.lost_kind[K_FENCED],
         g.lost_kind[K_RW_WRITE]);
  printf("leaks: fd %d, memory %d\n", g.leaks_fd, g.leaks_mem);
  fault_counts();
  int problems = viol + (int)fenced_stale + lost + g.leaks_fd + g.leaks_mem +
                 healthy + g.hangs + g.past_lease + counts;
  /* Whether another holder comes (and writes) within a pause is the
   * schedule's chance, not a rule: two such pauses without one stale write
   * say the checker is blind. */
  if (paused_in_cs >= 2 && plain_stale == 0) {
    printf("checker: %d fenced holders were paused past their lease but no "
           "stale plain write was seen -- the checker missed Kleppmann\n",
           paused_in_cs);
    problems++;
  }
  free(g_h);
  free(g_w);
  free(g_f);
  free(g_l);
  return problems;
}
