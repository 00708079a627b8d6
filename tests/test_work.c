/*
 * test_work.c -- the Redis work of the path taken most (issue 30: "count
 * each command of the two scripts and remove what the layout does not need
 * on the path taken").
 *
 * An uncontended lock/unlock pair is two script calls. Since the short
 * scripts (scripts.c: acquire_first, unlock_last) they carry 5 and 6 KEYS
 * and ARGV instead of 13 and 13 (the acquire's own tombstone key is the
 * request binding of safety round 4), and call 6 commands in all instead
 * of 8:
 * the first hold needs no queue keys, one EXISTS answers the final
 * release's two questions (a tombstone? a queue?), and HDEL of the
 * holder's field is the HGET and DEL. Each KEYS/ARGV string
 * and each redis.call is Redis time on every pair; the work is read here
 * off MONITOR, exactly, for both clients. The short unlock builds the
 * policy's other key names from the queue's only when a queue exists: the
 * braced-name case checks those names.
 */
#include "th.h"
#include "th_drive.h"

#include <stdlib.h>
#include <string.h>

/* One MONITOR line's arguments. */
typedef struct mon_line {
  int argc;
  char *argv[40];
  size_t lens[40];
  int lua; /* run by a script ("[0 lua]") */
} mon_line;

static void mon_line_free(mon_line *l) {
  for (int i = 0; i < l->argc; i++)
    free(l->argv[i]);
  l->argc = 0;
}

/* Reads MONITOR lines until the ECHO of `end`; tallies the script calls
 * whose first key is `name` (their KEYS + ARGV strings) and the commands
 * scripts ran on keys of that lock (first argument `name`, or a key with
 * "{name}" in it: the client's info write names its own key and is left
 * out). */
typedef struct tally {
  int scripts, strings, calls, lindex;
} tally;

static void read_until(redisContext *mon, const char *name, const char *end,
                       tally *t) {
  char tagged[96];
  snprintf(tagged, sizeof tagged, "{%s}", name);
  for (int i = 0; i < 500; i++) {
    redisReply *x = NULL;
    if (redisGetReply(mon, (void **)&x) != REDIS_OK || !x)
      th_fail(__FILE__, __LINE__, "MONITOR: %s", mon->errstr);
    CHECK(x->type == REDIS_REPLY_STATUS);
    mon_line l = {0};
    l.lua = strstr(x->str, " lua]") != NULL;
    l.argc = th_monitor_parse(x->str, l.argv, l.lens, 40);
    freeReplyObject(x);
    if (l.argc == 2 && strcasecmp(l.argv[0], "ECHO") == 0 &&
        strcmp(l.argv[1], end) == 0) {
      mon_line_free(&l);
      return;
    }
    if (!l.lua && l.argc >= 4 &&
        (strcasecmp(l.argv[0], "EVALSHA") == 0 ||
         strcasecmp(l.argv[0], "EVAL") == 0) &&
        strcmp(l.argv[3], name) == 0) {
      t->scripts++;
      t->strings += l.argc - 3;
    } else if (l.lua && l.argc >= 2 &&
               (strcmp(l.argv[1], name) == 0 || strstr(l.argv[1], tagged))) {
      t->calls++;
      if (strcasecmp(l.argv[0], "lindex") == 0)
        t->lindex++;
    }
    mon_line_free(&l);
  }
  th_fail(__FILE__, __LINE__, "MONITOR: no ECHO %s in 500 lines", end);
}

#define PAIRS 5

/* Fails on 399d060: 25 KEYS/ARGV strings and 8 commands per pair (a LINDEX
 * of the queue on every final release). */
static void pair_work_body(int kind) {
  th_redis *r = th_redis_new(0, NULL);
  th_drive *d = th_drive_at(kind, r->url);
  /* first: the scripts get loaded (NOSCRIPT, then EVAL) */
  CHECK_OK(th_drive_lock(d, "pw", 1, -1, 30000));
  CHECK_OK(th_drive_unlock(d, "pw", 1));
  redisContext *mon = th_monitor_start(r);
  for (int i = 0; i < PAIRS; i++) {
    CHECK_OK(th_drive_lock(d, "pw", 1, -1, 30000));
    CHECK_OK(th_drive_unlock(d, "pw", 1));
  }
  freeReplyObject(th_cmd(r, "ECHO pw-end"));
  tally t = {0};
  read_until(mon, "pw", "pw-end", &t);
  redisFree(mon);
  printf("%s: %d pairs: %d script calls, %d KEYS+ARGV strings, %d commands "
         "run by them\n",
         th_drive_kind(d), PAIRS, t.scripts, t.strings, t.calls);
  CHECK_EQ(t.scripts, 2 * PAIRS);
  /* acquire_first: 3 KEYS (lock, marker, the attempt's tombstone: safety
   * round 4's request binding costs one string, no command), 2 ARGV;
   * unlock_last: 4 KEYS, 2 ARGV */
  CHECK_MSG(t.strings == 11 * PAIRS, "%s: %d KEYS+ARGV strings in %d pairs",
            th_drive_kind(d), t.strings, PAIRS);
  /* EXISTS (lock, tombstone), HSET, PEXPIRE; EXISTS (tombstone, queue),
   * HDEL, PUBLISH */
  CHECK_MSG(t.calls == 6 * PAIRS, "%s: %d commands in %d pairs",
            th_drive_kind(d), t.calls, PAIRS);
  CHECK_EQ(t.lindex, 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS pw"), 0);
  th_drive_free(d);
}

TH_CASE(uncontended_pair_work_blocking) { pair_work_body(TH_DRIVE_BLOCKING); }
TH_CASE(uncontended_pair_work_async) { pair_work_body(TH_DRIVE_ASYNC); }

/* The same counts for a reentrant hold: its inner acquire and unlock keep
 * the full scripts (they carry the count), its first and last the short
 * ones; the hold count is right at each step. */
TH_CASE(reentrant_hold_mixes_short_and_full_scripts) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "rw", &m));
  char field[128];
  CHECK_OK(dlock_mutex_owner(m, field, sizeof field));
  for (int round = 0; round < 2; round++) {
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_lock(m));
    redisReply *x = th_cmd(r, "HGET rw %s", field);
    CHECK(x->type == REDIS_REPLY_STRING && strcmp(x->str, "3") == 0);
    freeReplyObject(x);
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_OK(dlock_mutex_unlock(m));
    x = th_cmd(r, "HGET rw %s", field);
    CHECK(x->type == REDIS_REPLY_STRING && strcmp(x->str, "1") == 0);
    freeReplyObject(x);
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_EQ(th_cmd_int(r, "EXISTS rw"), 0);
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- the policy behind the short unlock, on a braced name ---------------
 * A name with '{' keeps its own hash tag: dlock's keys are
 * "dlock_lock_queue::<name>" and so on (names.c). The short unlock passes
 * the queue only and builds the deadlines, grant channel and marker names
 * from the queue's suffix; a wrong name would find no deadline for the
 * head and drop it, or write the slice record elsewhere. A fake waiter (a
 * subscriber that never attempts) is queued by hand, as in test_mutex.c. */

#define BRACED "pb{x}y"
#define FAKE_ID "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
#define GRANT_CH "dlock_grant__channel::" BRACED ":" FAKE_ID

/* Queues the fake waiter (wait id wid) whose entry joined `age_ms` ago
 * (negative: in the future). */
static redisContext *queue_fake(th_redis *r, const char *wid,
                                long long age_ms) {
  redisContext *sub = th_subscriber(r, GRANT_CH);
  freeReplyObject(th_cmd(
      r, "RPUSH dlock_lock_queue::" BRACED " " FAKE_ID ":42|30000|%s", wid));
  freeReplyObject(th_cmd(r, "HSET dlock_lock_waits::" BRACED " %s 0 t%s %lld",
                         wid, wid, th_server_ms(r) - age_ms));
  return sub;
}

TH_CASE(short_unlock_runs_the_policy_on_braced_names) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, BRACED, &m));
  /* A young head: the lock is freed, the head asked to retry, its slice
   * recorded in the deadlines hash ("h"). It joined "a minute from now",
   * so no slow run (valgrind) ages it past the policy's 20 ms before the
   * unlock. */
  CHECK_OK(dlock_mutex_lock(m));
  redisContext *sub = queue_fake(r, "00000000000000b1", -60000);
  CHECK_OK(dlock_mutex_unlock(m));
  th_expect_message(sub, GRANT_CH, "42|00000000000000b1|r");
  CHECK_EQ(th_cmd_int(r, "EXISTS " BRACED), 0);
  CHECK_EQ(th_cmd_int(r, "HEXISTS dlock_lock_waits::" BRACED " h"), 1);
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue::" BRACED), 1);
  redisFree(sub);
  freeReplyObject(
      th_cmd(r, "DEL dlock_lock_queue::" BRACED " dlock_lock_waits::" BRACED));
  /* An old head: handed the lock inside the unlock (its field, the marker
   * naming it), the queue keys gone with its entry. */
  CHECK_OK(dlock_mutex_lock(m));
  sub = queue_fake(r, "00000000000000b2", 1000);
  CHECK_OK(dlock_mutex_unlock(m));
  th_expect_message(sub, GRANT_CH, "42|00000000000000b2");
  redisReply *x = th_cmd(r, "HGET " BRACED " " FAKE_ID ":42");
  CHECK(x->type == REDIS_REPLY_STRING && strcmp(x->str, "1") == 0);
  freeReplyObject(x);
  x = th_cmd(r, "GET dlock_lock_granted::" BRACED);
  CHECK(x->type == REDIS_REPLY_STRING);
  CHECK_STR(x->str, FAKE_ID ":42|00000000000000b2");
  freeReplyObject(x);
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(r, "EXISTS dlock_lock_queue::" BRACED), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS dlock_lock_waits::" BRACED), 0);
  redisFree(sub);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_MAIN()
