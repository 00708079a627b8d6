/* admin.c -- "dlock status" (holders, every waiter -- the hand-over queue,
 * the fair queue, the waits only a client's info key names -- who each is
 * and since when; exit 0 held, 3 free) and "dlock unlock --force" (the fair
 * path when the name is a fair lock's). The lock is read as `dlock list`
 * reads it (lockscan.h: its kind from the keys and its holders' info keys,
 * its waiters). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"
#include "etcd_admin.h"
#include "lockscan.h"

static int redis_fail(const cli_opts *o, int rc, const char *what) {
  char det[2048];
  cli_detail(cli_url(o), det, sizeof det);
  cli_err("%s lock '%s': %s (%s)", what, o->name, det, dlock_err_name(rc));
  return cli_exit_code(rc);
}

/* What the status shows: the snapshot, the fair queue, and who each
 * holder and waiter is (from its client's info key, when it has one). */
typedef struct who {
  const char *owner;
  long long count; /* -1: a waiter */
  int known;       /* info found */
  dlock_client_info info;
  long long since_ms;  /* when the hold (the wait) began; 0: unknown */
  const char *queue;   /* a waiter's: "handover", "fair", "none" */
  char conn_name[256]; /* its connection name; "": unknown */
} who;

typedef struct view {
  dlock_status st;
  ls_lock lk; /* kind and waiters as `dlock list` reads them */
  who *w;     /* holders, then waiters */
  size_t n;
} view;

/* The lock as lockscan reads it (its kind, every waiter and since when):
 * 0, or the exit code after printing why. */
static int read_lock(const cli_opts *o, dlock_client *c, ls_lock *lk) {
  dlock_admin *a = NULL;
  char err[1024];
  if (cli_etcd_url(cli_url(o))) { /* no keyspace to read: the library's */
    int rc = cli_etcd_read_lock(c, o->name, lk);
    return rc ? redis_fail(o, rc, "cannot read") : 0;
  }
  int ex = dlock_admin_new(c, &a) ? CLI_EX_SOFT : 0;
  if (ex) {
    cli_err("%s", dlock_last_error());
    return ex;
  }
  ls_opts lo = {
      NULL,
      0,
      0,
      0,
      o->cfg.command_timeout_ms > 0 ? o->cfg.command_timeout_ms : 2000,
      0};
  ex = ls_read(a, o->name, &lo, lk, err, sizeof err);
  if (ex)
    cli_say_failed(cli_url(o), ex, err);
  dlock_admin_free(a);
  return ex;
}

/* What the lock's reading (lockscan: a Cluster client's copy of its info
 * key on another master included) says of owner: 1 with *info, or 0. */
static int who_from_scan(const ls_lock *lk, const char *owner,
                         dlock_client_info *info) {
  const ls_who *w = NULL;
  for (size_t i = 0; !w && i < lk->nholders; i++)
    if (strcmp(lk->holders[i].owner, owner) == 0 && lk->holders[i].who.known)
      w = &lk->holders[i].who;
  for (size_t i = 0; !w && i < lk->nwaiters; i++)
    if (strcmp(lk->waiters[i].owner, owner) == 0 && lk->waiters[i].who.known)
      w = &lk->waiters[i].who;
  if (!w)
    return 0;
  memset(info, 0, sizeof *info);
  snprintf(info->host, sizeof info->host, "%s", w->host);
  snprintf(info->program, sizeof info->program, "%s", w->program);
  info->pid = w->pid;
  return 1;
}

/* Fills v (holders' and waiters' info). 0 or a DLOCK_E* code. */
static int view_fetch(dlock_client *c, const char *name, view *v) {
  int rc = dlock_status_query(c, name, &v->st);
  if (rc)
    return rc;
  size_t n = v->st.n_holders + v->lk.nwaiters;
  v->w = calloc(n ? n : 1, sizeof *v->w);
  if (!v->w)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    who *x = &v->w[i];
    int holder = i < v->st.n_holders;
    const ls_waiter *lw = holder ? NULL : &v->lk.waiters[i - v->st.n_holders];
    x->owner = holder ? v->st.holders[i].owner : lw->owner;
    x->count = holder ? v->st.holders[i].count : -1;
    if (lw) {
      x->since_ms = lw->since_ms;
      x->queue = lw->queue;
    }
    x->known = dlock_client_info_query(c, x->owner, &x->info) == 1;
    if (!x->known) /* its info key's master does not answer: a copy's */
      x->known = who_from_scan(&v->lk, x->owner, &x->info);
    if (x->known && dlock_client_conn_name_query(c, x->owner, x->conn_name,
                                                 sizeof x->conn_name) != 1)
      x->conn_name[0] = '\0';
    if (holder && x->known &&
        dlock_hold_since_query(c, x->owner, name, &x->since_ms) != 1)
      x->since_ms = 0;
  }
  v->n = n;
  return 0;
}

static void view_free(view *v) {
  dlock_status_clear(&v->st);
  ls_lock_free(&v->lk);
  free(v->w);
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

static void json_who(const who *x) {
  fputs("{\"owner\":", stdout);
  dlc_json_str(stdout, x->owner);
  if (x->count >= 0)
    printf(",\"count\":%lld", x->count);
  if (x->queue) {
    printf(",\"queue\":\"%s\"", x->queue);
  }
  if (x->since_ms > 0)
    printf(",\"since_ms\":%lld", x->since_ms);
  else
    fputs(",\"since_ms\":null", stdout);
  fputs(",\"client\":", stdout);
  if (!x->known) {
    fputs("null}", stdout);
    return;
  }
  fputs("{\"host\":", stdout);
  dlc_json_str(stdout, x->info.host);
  printf(",\"pid\":%lld,\"program\":", x->info.pid);
  dlc_json_str(stdout, x->info.program);
  printf(",\"started_ms\":%lld,\"conn_name\":", x->info.started_ms);
  if (x->conn_name[0])
    dlc_json_str(stdout, x->conn_name);
  else
    fputs("null", stdout);
  fputs("}}", stdout);
}

static void print_json(const cli_opts *o, const view *v) {
  const dlock_status *st = &v->st;
  fputs("{\"name\":", stdout);
  dlc_json_str(stdout, o->name);
  fputs(",\"kind\":", stdout);
  if (v->lk.kind)
    printf("\"%s\"", v->lk.kind);
  else
    fputs("null", stdout);
  printf(",\"locked\":%s,\"mode\":", st->locked ? "true" : "false");
  if (st->mode[0])
    dlc_json_str(stdout, st->mode);
  else
    fputs("null", stdout);
  printf(",\"ttl_ms\":%lld,\"holders\":[", st->ttl_ms);
  for (size_t i = 0; i < v->n; i++) {
    if (i == st->n_holders)
      fputs("],\"waiters\":[", stdout);
    else if (i)
      fputs(",", stdout);
    json_who(&v->w[i]);
  }
  if (v->n == st->n_holders)
    fputs("],\"waiters\":[", stdout);
  fputs("]}\n", stdout);
}

/* "  host vm, pid 12, program job, since 2026-...Z" or "": since the hold
 * began, or for a hold whose start is not known (a client before 0.3, a
 * hold younger than its client's next info write) since its client
 * started. */
static void text_who(const who *x, char *buf, size_t len) {
  buf[0] = '\0';
  char t[40];
  if (!x->known) {
    if (x->since_ms > 0) { /* a waiter its queue dates */
      fmt_time(x->since_ms, t, sizeof t);
      snprintf(buf, len, "  since %s", t);
    }
    return;
  }
  fmt_time(x->since_ms > 0 ? x->since_ms : x->info.started_ms, t, sizeof t);
  int n =
      snprintf(buf, len, "  host %.200s  pid %lld  program %.200s  since %s",
               x->info.host, x->info.pid, x->info.program, t);
  if (x->conn_name[0] && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, "  conn %.250s", x->conn_name);
}

static void print_status(const cli_opts *o, const view *v) {
  if (o->json) {
    print_json(o, v);
    return;
  }
  const dlock_status *st = &v->st;
  if (!st->locked) {
    printf("lock '%s' is free\n", o->name);
  } else {
    char ttl[64] = "no expiry";
    if (st->ttl_ms >= 0) {
      cli_fmt_secs(st->ttl_ms, ttl, sizeof ttl - 2);
      size_t n = strlen(ttl);
      snprintf(ttl + n, sizeof ttl - n, " s");
    }
    const char *k = v->lk.kind;
    char kind[64] = "", mode[32] = "";
    if (k && strcmp(k, "mutex") != 0 && strcmp(k, "rwlock") != 0)
      snprintf(kind, sizeof kind, " (%s lock)", k);
    if (st->mode[0])
      snprintf(mode, sizeof mode, " (%.8s mode)", st->mode);
    printf("lock '%s' is held%s%s, ttl %s\n", o->name, kind, mode, ttl);
  }
  for (size_t i = 0; i < v->n; i++) {
    char w[1024];
    text_who(&v->w[i], w, sizeof w);
    if (i < st->n_holders)
      printf("  holder %s  count %lld%s\n", v->w[i].owner, v->w[i].count, w);
    else
      printf("  waiter %zu %s%s\n", i - st->n_holders + 1, v->w[i].owner, w);
  }
}

int cli_status(const cli_opts *o) {
  dlock_client *c = NULL;
  int ex = cli_connect(o, o->watchdog_ms, -1, NULL, NULL, &c);
  if (ex)
    return ex;
  view v;
  memset(&v, 0, sizeof v);
  if ((ex = read_lock(o, c, &v.lk)) != 0 || sem_status(o, c, &v.lk, &ex)) {
    ls_lock_free(&v.lk);
    dlock_client_free(c);
    return ex;
  }
  int rc = view_fetch(c, o->name, &v);
  if (rc) {
    ex = redis_fail(o, rc, "cannot read");
  } else {
    print_status(o, &v);
    ex = fflush(stdout) != 0 ? CLI_EX_SOFT : v.st.locked ? 0 : CLI_EX_FREE;
  }
  view_free(&v);
  dlock_client_free(c);
  return ex;
}

/* 1 if field is a lock holder's field as Redisson and dlock write it:
 * "<client UUID>:<thread id>", for a rwlock writer with ":write". */
static int is_holder_field(const char *f) {
  size_t n = strlen(f);
  if (n < 38 || f[36] != ':')
    return 0;
  for (size_t i = 0; i < 36; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? f[i] != '-' : !isxdigit((unsigned char)f[i]))
      return 0;
  }
  size_t i = 37;
  while (i < n && isdigit((unsigned char)f[i]))
    i++;
  return i > 37 && (i == n || strcmp(f + i, ":write") == 0);
}

int cli_unlock(const cli_opts *o) {
  dlock_client *c = NULL;
  int ex = cli_connect(o, o->watchdog_ms, -1, NULL, NULL, &c);
  if (ex)
    return ex;
  dlock_mutex *m = NULL;
  dlock_status st;
  memset(&st, 0, sizeof st);
  /* Read first: refuses keys that are not locks (the delete itself would
   * remove any key of that name), and names the holders it removes. */
  int rc = dlock_status_query(c, o->name, &st);
  if (rc) {
    ex = redis_fail(o, rc, "cannot release");
    goto out;
  }
  for (size_t i = 0; i < st.n_holders; i++) {
    if (!is_holder_field(st.holders[i].owner)) {
      cli_err("'%s' is a hash but not a lock (its field '%s' is not "
              "<client id>:<thread id>); not deleted",
              o->name, st.holders[i].owner);
      ex = CLI_EX_SOFT;
      goto out;
    }
  }
  /* A fair lock's waiters are woken on their own channels: its force
   * unlock, whether or not --fair says so (its queue, or its holder's
   * info key, tells). */
  ls_lock lk;
  int fair = o->fair;
  if (!fair && read_lock(o, c, &lk) == 0) {
    fair = lk.kind && strcmp(lk.kind, "fair") == 0;
    ls_lock_free(&lk);
  }
  if (fair && !o->fair)
    cli_debug(o, "'%s' is a fair lock: released as one", o->name);
  rc = fair ? dlock_mutex_new_fair(c, o->name, &m)
            : dlock_mutex_new(c, o->name, &m);
  if (rc == DLOCK_ENOTSUP) {
    cli_err("--fair is not supported by this build of libdlock");
    ex = CLI_EX_USAGE;
    goto out;
  }
  if (rc) {
    ex = redis_fail(o, rc, "cannot use");
    goto out;
  }
  rc = dlock_mutex_force_unlock(m);
  if (rc < 0) {
    ex = redis_fail(o, rc, "cannot release");
    goto out;
  }
  if (!o->quiet) {
    if (rc == 0) {
      printf("lock '%s' was not held: nothing to release\n", o->name);
    } else {
      printf("released lock '%s'", o->name);
      for (size_t i = 0; i < st.n_holders; i++)
        printf("%s%s (count %lld)", i ? ", " : " held by ", st.holders[i].owner,
               st.holders[i].count);
      printf("\n");
    }
  }
  ex = fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
out:
  dlock_status_clear(&st);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return ex;
}
