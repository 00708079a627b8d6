/* Smoke tests: the basic lock cycle and the Redis layout, from outside. */
#include "th.h"

TH_CASE(lock_unlock_layout) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "smoke", &m));
  CHECK_OK(dlock_mutex_lock(m));
  char owner[128];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  CHECK_EQ(strncmp(owner, dlock_client_id(c), 36), 0);
  redisReply *h = th_cmd(r, "HGETALL smoke");
  CHECK_EQ(h->elements, 2);
  CHECK_STR(h->element[0]->str, owner);
  CHECK_STR(h->element[1]->str, "1");
  freeReplyObject(h);
  long long pttl = th_cmd_int(r, "PTTL smoke");
  CHECK_MSG(pttl > 29000 && pttl <= 30000, "pttl %lld", pttl);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS smoke"), 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_EPERM);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_MAIN()
