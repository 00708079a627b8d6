/* admin.c -- "dlock status" and "dlock unlock --force". */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json.h"

static int redis_fail(const cli_opts *o, int rc, const char *what) {
  char det[2048];
  cli_detail(cli_url(o), det, sizeof det);
  cli_err("%s lock '%s': %s (%s)", what, o->name, det, dlock_err_name(rc));
  return cli_exit_code(rc);
}

static void print_status(const cli_opts *o, const dlock_status *st) {
  if (o->json) {
    fputs("{\"name\":", stdout);
    dlc_json_str(stdout, o->name);
    printf(",\"locked\":%s,\"mode\":", st->locked ? "true" : "false");
    if (st->mode[0])
      dlc_json_str(stdout, st->mode);
    else
      fputs("null", stdout);
    printf(",\"ttl_ms\":%lld,\"holders\":[", st->ttl_ms);
    for (size_t i = 0; i < st->n_holders; i++) {
      fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
      dlc_json_str(stdout, st->holders[i].owner);
      printf(",\"count\":%lld}", st->holders[i].count);
    }
    fputs("]}\n", stdout);
    return;
  }
  if (!st->locked) {
    printf("lock '%s' is free\n", o->name);
    return;
  }
  char ttl[64] = "no expiry";
  if (st->ttl_ms >= 0) {
    cli_fmt_secs(st->ttl_ms, ttl, sizeof ttl - 2);
    size_t n = strlen(ttl);
    snprintf(ttl + n, sizeof ttl - n, " s");
  }
  printf("lock '%s' is held%s%s%s, ttl %s\n", o->name, st->mode[0] ? " (" : "",
         st->mode, st->mode[0] ? " mode)" : "", ttl);
  for (size_t i = 0; i < st->n_holders; i++)
    printf("  holder %s  count %lld\n", st->holders[i].owner,
           st->holders[i].count);
}

int cli_status(const cli_opts *o) {
  dlock_client *c = NULL;
  int ex = cli_connect(o, o->watchdog_ms, NULL, NULL, &c);
  if (ex)
    return ex;
  dlock_status st;
  int rc = dlock_status_query(c, o->name, &st);
  if (rc) {
    ex = redis_fail(o, rc, "cannot read");
  } else {
    print_status(o, &st);
    dlock_status_clear(&st);
    ex = fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
  }
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
  int ex = cli_connect(o, o->watchdog_ms, NULL, NULL, &c);
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
  rc = o->fair ? dlock_mutex_new_fair(c, o->name, &m)
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
