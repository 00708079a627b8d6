/*
 * checker.c -- judges a soak run from the workers' logs and the stores:
 * mutual exclusion (holds of one resource, each from its acquisition to
 * the earlier of its unlock and its last known local deadline, never
 * overlap beyond the resource's capacity; rwlock writers alone), stale
 * fenced writes accepted (the fenced store's log only ever rises), the
 * same writes on a plain register (the Kleppmann scenario: without
 * fencing, a paused holder's late write lands after a newer holder's),
 * lost wake-ups (a waiter kept waiting while the resource was free for
 * longer than the re-check bound, outside fault windows), and leaks (fds
 * left after a client was freed, memory growth).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "soak.h"

#define MAX_EV 400000
#define WAKE_BOUND_US 3000000LL /* longest free gap a waiter may sleep */
#define RSS_GROWTH_KB 16384

typedef struct hold {
  int res, kind;
  int64_t start, end, until, unlocked_at;
  int clean;       /* unlocked with DLOCK_OK */
  int async;       /* the event-loop client's */
  int64_t lost_at; /* async: its loss report during the hold, else 0 */
  /* Its process died after its R line (the unlock had begun) and before
   * the U line: whether the unlock ran is unknown. The hold may have ended
   * at any time from then to its deadline. */
  int64_t killed_unlocking;
} hold;
typedef struct waitrec {
  int res;
  int64_t from, to;
} waitrec;

static hold *g_h;
static int g_nh;
static waitrec *g_w;
static int g_nw;
static int64_t g_faults[4096][2];
static int g_nf;
static struct {
  long sections[8], elost, lost_reports, fences_rejected, fences_ok;
  long fences_down; /* the store could not be reached (Redis down) */
  long async_sections, async_lost, async_cut; /* event-loop client's */
  long unknown_ends;  /* holders killed while unlocking (R without U) */
  long unknown_after; /* acquisitions after such an R, before its deadline */
  int async_workers;
  int leaks_fd, leaks_mem, workers_clean, workers;
} g;

static int res_index(const char *name) {
  for (int i = 0; i < soak_nresources; i++)
    if (strcmp(soak_resources[i].name, name) == 0)
      return i;
  return -1;
}

/* Ends the open hold of a log (its holder was killed or stopped): its
 * last known local deadline. */
static void close_hold(hold *h) {
  if (!h || h->res < 0)
    return;
  if (h->end == 0) {
    h->end = h->until > 0 ? h->until : h->start;
    if (h->killed_unlocking > 0)
      g.unknown_ends++;
  } else {
    h->killed_unlocking = 0;
  }
  if (g_nh < MAX_EV)
    g_h[g_nh++] = *h;
  h->res = -1;
}

static void read_line(const char *ln, hold *cur, int64_t *wait_from,
                      int *wait_res, int *async) {
  char res[64];
  long long a = 0, b = 0, c = 0, d = 0;
  int i;
  switch (ln[0]) {
  case 'K':
    if (strncmp(ln, "K async", 7) == 0 && !*async) {
      *async = 1;
      g.async_workers++;
    }
    break;
  case 'W':
    if (sscanf(ln, "W %63s %lld", res, &a) == 2) {
      *wait_res = res_index(res);
      *wait_from = a;
    }
    break;
  case 'A':
    if (sscanf(ln, "A %63s %lld %lld %lld", res, &a, &b, &c) != 4 ||
        (i = res_index(res)) < 0)
      break;
    close_hold(cur);
    *cur = (hold){i, soak_resources[i].kind, b, 0, c, 0, 0, *async, 0, 0};
    g.sections[soak_resources[i].kind]++;
    g.async_sections += *async;
    if (*wait_res >= 0 && g_nw < MAX_EV)
      g_w[g_nw++] = (waitrec){*wait_res, *wait_from, b};
    *wait_res = -1;
    break;
  case 'F':
    if (sscanf(ln, "F %63s %lld %lld", res, &a, &b) == 3 && *wait_res >= 0 &&
        g_nw < MAX_EV)
      g_w[g_nw++] = (waitrec){*wait_res, *wait_from, b};
    *wait_res = -1;
    break;
  case 'V':
    if (sscanf(ln, "V %63s %lld", res, &a) == 2 && cur->res >= 0 &&
        a > cur->until && cur->kind <= K_FENCED)
      cur->until = a;
    break;
  case 'R':
    if (sscanf(ln, "R %63s %lld", res, &a) == 2 && cur->res >= 0 &&
        res_index(res) == cur->res)
      cur->killed_unlocking = a; /* cleared by the U line (close_hold) */
    break;
  case 'U':
    if (sscanf(ln, "U %63s %lld %lld %lld", res, &a, &b, &c) == 4 &&
        cur->res >= 0) {
      int64_t end = b;
      /* The event-loop client has no validity call: its hold ends at the
       * unlock (an OK unlock proves the client's deadline had not passed
       * and the field was there), or at its loss report if one came
       * first... */
      if (cur->async) {
        if (cur->lost_at > 0 && cur->lost_at < end)
          end = cur->lost_at;
        /* ...but never past its first lease counted from the wait's
         * start: a paused process learns of its loss only when it runs
         * again (the Kleppmann pause). Counted, as it may shorten a hold
         * that was in fact renewed. */
        if (cur->until < end) {
          end = cur->until > cur->start ? cur->until : cur->start;
          g.async_cut++;
        }
      } else if (cur->kind != K_SEM && cur->until > 0 && cur->until < end)
        end = cur->until;
      cur->end = end;
      cur->clean = a == 0;
      cur->unlocked_at = c;
      g.elost += a != 0;
      close_hold(cur);
    }
    break;
  case 'S':
    if (sscanf(ln, "S %63s %lld %lld", res, &a, &b) == 3)
      b == 1 ? g.fences_ok++ : b == 0 ? g.fences_rejected++ : g.fences_down++;
    break;
  case 'L':
    g.lost_reports++;
    if (sscanf(ln, "L %63s %lld", res, &a) == 2 && cur->res >= 0 &&
        cur->async && cur->lost_at == 0) {
      cur->lost_at = a;
      g.async_lost++;
    }
    break;
  case 'E':
    if (sscanf(ln, "E %lld %lld %lld %lld", &a, &b, &c, &d) == 4) {
      g.workers_clean++;
      g.leaks_fd += b > a;
      g.leaks_mem += c > 0 && d - c > RSS_GROWTH_KB;
      if (b > a || (c > 0 && d - c > RSS_GROWTH_KB))
        printf("  leak: fds %lld -> %lld, rss %lld -> %lld kB\n", a, b, c, d);
    }
    break;
  default:
    break;
  }
}

static void read_log(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  g.workers++;
  hold cur = {.res = -1};
  int64_t wait_from = 0;
  int wait_res = -1, async = 0;
  char ln[512];
  while (fgets(ln, sizeof ln, f))
    read_line(ln, &cur, &wait_from, &wait_res, &async);
  close_hold(&cur);
  fclose(f);
}

static void read_faults(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/faults.log", dir);
  FILE *f = fopen(p, "r");
  char kind[32];
  long long a, b;
  while (f && g_nf < 4096 &&
         fscanf(f, "%31s %lld %lld%*[^\n]", kind, &a, &b) == 3) {
    g_faults[g_nf][0] = a;
    g_faults[g_nf][1] = b + (int64_t)SOAK_LEASE_MS * 2000; /* + recovery */
    g_nf++;
  }
  if (f)
    fclose(f);
}

static int cmp_start(const void *a, const void *b) {
  const hold *x = a, *y = b;
  if (x->res != y->res)
    return x->res - y->res;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* Holds of one resource [lo, hi), sorted by start: pairs that overlap
 * beyond the capacity. */
static int overlaps(int lo, int hi) {
  int bad = 0;
  for (int i = lo; i < hi; i++) {
    int cap = g_h[i].kind == K_SEM ? SOAK_SEM_PERMITS : 1;
    int n = 1, writer = g_h[i].kind == K_RW_WRITE;
    /* Earlier starts only, and not further back than any hold can last
     * (a lease) holds many starts. */
    for (int j = i - 512 > lo ? i - 512 : lo; j < i; j++) {
      if (g_h[j].end <= g_h[i].start)
        continue;
      /* Its holder was killed inside its unlock call: from its R line on,
       * the lock may have been released (the unlock ran before the kill)
       * -- not judged, counted. */
      if (g_h[j].killed_unlocking > 0 &&
          g_h[j].killed_unlocking <= g_h[i].start) {
        g.unknown_after++;
        continue;
      }
      n++;
      writer |= g_h[j].kind == K_RW_WRITE;
    }
    int rw = g_h[i].kind == K_RW_READ || g_h[i].kind == K_RW_WRITE;
    if ((rw && writer && n > 1) || (!rw && n > cap)) {
      if (bad < 5)
        printf("  VIOLATION: %s held by %d at %lld us\n",
               soak_resources[g_h[i].res].name, n, (long long)g_h[i].start);
      bad++;
    }
  }
  return bad;
}

static int in_fault(int64_t a, int64_t b) {
  for (int i = 0; i < g_nf; i++)
    if (a < g_faults[i][1] && b > g_faults[i][0])
      return 1;
  return 0;
}

/* A clean unlock, then nobody acquires for longer than the bound while a
 * waiter waited across the whole gap. */
static int lost_wakeups(int lo, int hi) {
  int bad = 0;
  for (int i = lo; i + 1 < hi; i++) {
    const hold *h = &g_h[i], *nx = &g_h[i + 1];
    if (!h->clean || h->kind > K_FENCED)
      continue;
    int64_t a = h->unlocked_at, b = nx->start;
    if (b - a <= WAKE_BOUND_US || in_fault(a, b))
      continue;
    for (int w = 0; w < g_nw; w++)
      if (g_w[w].res == h->res && g_w[w].from < a && g_w[w].to >= b) {
        printf("  LOST WAKE-UP: %s free %lld ms with a waiter\n",
               soak_resources[h->res].name, (long long)((b - a) / 1000));
        bad++;
        break;
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

int soak_check(const char *dir, const char *direct_url, int paused_in_cs) {
  g_h = calloc(MAX_EV, sizeof *g_h);
  g_w = calloc(MAX_EV, sizeof *g_w);
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[768];
  while (d && (e = readdir(d)))
    if (e->d_name[0] == 'w' && strstr(e->d_name, ".log")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      read_log(p);
    }
  if (d)
    closedir(d);
  read_faults(dir);
  qsort(g_h, (size_t)g_nh, sizeof *g_h, cmp_start);
  int viol = 0, lost = 0;
  for (int lo = 0, hi; lo < g_nh; lo = hi) {
    for (hi = lo; hi < g_nh && g_h[hi].res == g_h[lo].res; hi++)
      ;
    viol += overlaps(lo, hi);
    lost += lost_wakeups(lo, hi);
  }
  redisContext *rc =
      direct_url ? redisConnectUnix(direct_url + strlen("unix://")) : NULL;
  long fenced_stale = 0, plain_stale = 0;
  for (int i = 0; rc && !rc->err && i < soak_nresources; i++)
    if (soak_resources[i].kind == K_FENCED) {
      char k[96];
      snprintf(k, sizeof k, "fstore:log:%s", soak_resources[i].name);
      fenced_stale += stale_in(rc, k);
      snprintf(k, sizeof k, "plain:log:%s", soak_resources[i].name);
      plain_stale += stale_in(rc, k);
    }
  if (rc)
    redisFree(rc);
  printf("critical sections: mutex %ld, fair %ld, fenced %ld, rwlock read "
         "%ld / write %ld, semaphore %ld (unlocks not OK: %ld; lock-lost "
         "reports: %ld)\n",
         g.sections[K_MUTEX], g.sections[K_FAIR], g.sections[K_FENCED],
         g.sections[K_RW_READ], g.sections[K_RW_WRITE], g.sections[K_SEM],
         g.elost, g.lost_reports);
  printf("worker processes: %d (%d ended cleanly; %d on the event-loop "
         "client)\n",
         g.workers, g.workers_clean, g.async_workers);
  printf("event-loop client: %ld critical sections (plain mutex), %ld "
         "ended by a loss report, %ld judged only to their first lease\n",
         g.async_sections, g.async_lost, g.async_cut);
  printf("mutual-exclusion violations: %d\n", viol);
  printf("holders killed inside their unlock call: %ld (%ld later "
         "acquisitions before their deadline not judged: the unlock may "
         "have run)\n",
         g.unknown_ends, g.unknown_after);
  printf("fenced store: %ld writes accepted, %ld stale rejected, %ld stale "
         "accepted (%ld not delivered: Redis down)\n",
         g.fences_ok, g.fences_rejected, fenced_stale, g.fences_down);
  printf("without fencing (the same writes, plain register): %ld stale "
         "writes accepted%s\n",
         plain_stale, plain_stale ? " <- Kleppmann scenario caught" : "");
  printf("lost wake-ups: %d\n", lost);
  printf("leaks: fd %d, memory %d\n", g.leaks_fd, g.leaks_mem);
  int problems = viol + (int)fenced_stale + lost + g.leaks_fd + g.leaks_mem;
  if (paused_in_cs > 0 && plain_stale == 0) {
    printf("checker: %d fenced holders were paused past their lease but no "
           "stale plain write was seen -- the checker missed Kleppmann\n",
           paused_in_cs);
    problems++;
  }
  free(g_h);
  free(g_w);
  return problems;
}
