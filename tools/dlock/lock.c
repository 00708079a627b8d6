/*
 * lock.c -- the lock kinds of the CLI behind one interface (plain, --fair,
 * --fence, -s/-x), the holder field the lock is held under, the holder to
 * name in messages, and the message and exit code of a failed lock call.
 */
#include <string.h>

#include "run.h"
#include "url.h"

int lk_kind(const cli_opts *o) {
  return o->sem_n > 0   ? K_SEM
         : o->fair      ? K_FAIR
         : o->fence     ? K_FENCED
         : o->shared    ? K_READ
         : o->exclusive ? K_WRITE
                        : K_MUTEX;
}

const char *lk_kind_option(int kind) {
  switch (kind) {
  case K_FAIR:
    return "--fair";
  case K_FENCED:
    return "--fence";
  case K_READ:
    return "-s/--shared";
  case K_WRITE:
    return "-x/--exclusive";
  case K_SEM:
    return "--sem";
  default:
    return "the plain lock";
  }
}

int lk_new(dlock_client *c, const char *name, lockobj *lk) {
  switch (lk->kind) {
  case K_FAIR:
    return dlock_mutex_new_fair(c, name, &lk->m);
  case K_FENCED:
    return dlock_mutex_new_fenced(c, name, &lk->m);
  case K_READ:
  case K_WRITE:
    return dlock_rwlock_new(c, name, &lk->rw);
  case K_SEM:
    return sem_new(c, name, lk->sem_n, lk);
  default:
    return dlock_mutex_new(c, name, &lk->m);
  }
}

int lk_timed(lockobj *lk, long long wait_ms, long long lease_ms) {
  if (lk->kind == K_SEM)
    return sem_timed(lk, wait_ms, lease_ms);
  if (lk->kind == K_READ)
    return dlock_rwlock_timedrdlock(lk->rw, wait_ms, lease_ms);
  if (lk->kind == K_WRITE)
    return dlock_rwlock_timedwrlock(lk->rw, wait_ms, lease_ms);
  return dlock_mutex_timedlock(lk->m, wait_ms, lease_ms);
}

int lk_unlock(lockobj *lk) {
  if (lk->kind == K_SEM)
    return sem_unlock(lk);
  if (lk->kind == K_READ || lk->kind == K_WRITE)
    return dlock_rwlock_unlock(lk->rw);
  return dlock_mutex_unlock(lk->m);
}

int lk_validity(lockobj *lk, long long *ms) {
  *ms = -1;
  if (lk->kind == K_SEM) /* a permit has no local deadline to ask */
    return 0;
  if (lk->kind == K_READ || lk->kind == K_WRITE)
    return dlock_rwlock_validity(lk->rw, ms);
  return dlock_mutex_validity(lk->m, ms);
}

void lk_free(lockobj *lk) {
  sem_free(lk);
  dlock_rwlock_free(lk->rw);
  lk->rw = NULL;
  dlock_mutex_free(lk->m);
  lk->m = NULL;
}

int lk_owner(dlock_client *c, const char *name, int kind, char *owner,
             size_t len) {
  dlock_mutex *probe = NULL;
  int rc = dlock_mutex_new(c, name, &probe);
  if (rc == 0)
    rc = dlock_mutex_owner(probe, owner, len);
  dlock_mutex_free(probe);
  if (rc == 0 && kind == K_WRITE)
    strncat(owner, ":write", len - strlen(owner) - 1);
  return rc;
}

int lk_error(const cli_opts *o, int kind, int rc, const char *what) {
  if (rc == DLOCK_ENOTSUP && strstr(dlock_last_error(), "etcd")) {
    cli_err("%s: %s", lk_kind_option(kind), dlock_last_error()); /* etcd */
    return CLI_EX_USAGE;
  }
  if (rc == DLOCK_ENOTSUP) {
    cli_err("%s is not supported by this build of libdlock",
            lk_kind_option(kind));
    return CLI_EX_USAGE;
  }
  char det[1024], red[512];
  cli_detail(cli_url(o), det, sizeof det);
  dlc_url_redact(cli_url(o), red, sizeof red);
  if (rc == DLOCK_ECONN)
    cli_err("cannot %s lock '%s': Redis at %s unreachable: %s", what, o->name,
            red, det);
  else
    cli_err("cannot %s lock '%s': %s (%s)", what, o->name, det,
            dlock_err_name(rc));
  return cli_exit_code(rc);
}

void run_holder_of(run_state *rs, char *buf, size_t len, char *other,
                   size_t olen) {
  dlock_status st;
  buf[0] = '\0';
  other[0] = '\0';
  if (dlock_status_query(rs->c, rs->o->name, &st) != 0)
    return;
  int rw = rs->lk.kind == K_READ || rs->lk.kind == K_WRITE;
  if (st.n_holders) {
    /* who it is, as "dlock status" says it (the holder's info key) */
    dlock_client_info ci;
    if (dlock_client_info_query(rs->c, st.holders[0].owner, &ci) == 1)
      snprintf(buf, len, "%s (host %.100s, pid %lld, program %.100s)",
               st.holders[0].owner, ci.host, ci.pid, ci.program);
    else
      snprintf(buf, len, "%s", st.holders[0].owner);
  }
  if (st.locked && st.mode[0] && !rw)
    snprintf(other, olen, "a read-write lock (-s/-x)");
  else if (st.n_holders && !st.mode[0] && rw)
    snprintf(other, olen, "a plain, --fair or --fence lock");
  dlock_status_clear(&st);
}
