/*
 * holds.c -- the client's hold registry: what this process holds, per lock
 * name, lock family and thread.
 *
 * WHY PER NAME AND NOT PER OBJECT. The server counts holds per hash field
 * ("<uuid>:<tid>", plus ":write" for a write lock), whatever object the
 * thread used. Two objects of one name in one thread are one reentrant lock:
 * the acquire scripts write the count the client expects (an idempotent
 * retry), so that count must be the thread's count on the name, not on the
 * object (issue 9.2).
 *
 * LAYOUT. One entry per (family, name) with live lock objects; the family is
 * what the hash field and the renewal look like: 'M' the mutex variants
 * (plain, fair, fenced share fields), 'W' write locks (":write"), 'R' read
 * locks (their own renewal). An entry keeps a short list of per-thread hold
 * records -- only threads that hold the lock now, or whose unlock ended
 * without an answer. A record is freed as soon as its thread holds nothing
 * (issue 10: 60k short-lived threads must not leave 60k records), so lookup
 * walks a list as long as the number of threads holding this one lock.
 *
 * LIFETIME. Objects attach to their entry when created and detach when
 * freed; the last detach forgets the entry's holds (their renewal stops)
 * and frees it. Records are freed only with c->reg.mu held; a record freed
 * while a renewal batch may point at it goes to a graveyard emptied by the
 * watchdog when the batch ends, so the batch never reads freed memory.
 *
 * THREADS THAT EXIT HOLDING LOCKS. A thread's first hold on a client notes
 * the client (with a reference) in a thread-specific list whose destructor
 * runs when the thread exits. For every hold the thread still has, the
 * destructor stops renewal, forgets the record and reports the loss
 * (on_lock_lost, DLOCK__LOST_THREAD_EXIT): the key expires with its lease
 * and another thread or process can take it -- instead of the watchdog
 * renewing it for a thread that will never unlock it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

struct dlock__lockent {
  const dlock__mutex_ops *ops; /* the family's renewal and field suffix */
  int objects;                 /* live lock objects of this entry */
  dlock__hold *holds;          /* per thread, via next */
  size_t name_len;
  const char *name; /* points into key, after the family tag */
  size_t key_len;
  char key[];
};

static char family_tag(const dlock__mutex_ops *ops) {
  if (ops->renew)
    return 'R';
  return ops->field_suffix && ops->field_suffix[0] ? 'W' : 'M';
}

const char *dlock__lockent_name(const dlock__lockent *e, size_t *len) {
  if (len)
    *len = e->name_len;
  return e->name;
}

const dlock__mutex_ops *dlock__lockent_ops(const dlock__lockent *e) {
  return e->ops;
}

int dlock__reg_attach(dlock_client *c, const char *name, size_t name_len,
                      const dlock__mutex_ops *ops, dlock__lockent **out) {
  char tag = family_tag(ops);
  size_t kl = name_len + 1;
  char stackkey[256];
  char *key = kl <= sizeof stackkey ? stackkey : dlock__malloc(kl);
  if (!key)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  key[0] = tag;
  memcpy(key + 1, name, name_len);
  dlock__mu_lock(&c->reg.mu);
  int rc = 0;
  if (!c->reg.locks.b && dlock__map_init(&c->reg.locks, 64) != 0)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  dlock__lockent *e = rc ? NULL : dlock__map_get(&c->reg.locks, key, kl);
  if (!rc && !e) {
    e = dlock__calloc(1, sizeof *e + kl + 1);
    if (!e) {
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    } else {
      memcpy(e->key, key, kl);
      e->key[kl] = '\0';
      e->key_len = kl;
      e->name = e->key + 1;
      e->name_len = name_len;
      e->ops = ops;
      if (dlock__map_put(&c->reg.locks, e->key, kl, e) != 0) {
        free(e);
        e = NULL;
        rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
      }
    }
  }
  if (e)
    e->objects++;
  dlock__mu_unlock(&c->reg.mu);
  if (key != stackkey)
    free(key);
  *out = e;
  return rc;
}

/* Frees h now, or after the renewal batch in flight (reg.mu held). */
static void hold_free(dlock_client *c, dlock__hold *h) {
  /* A published hold start (clientinfo.c) goes with the next write, soon:
   * the thread's next hold of the name must not show this one's. */
  if (h->since_pub && c->er.info_at)
    dlock__info_soon(c);
  dlock__wd_remove(c, h);
  if (c->wd.busy) {
    h->next = c->reg.grave;
    c->reg.grave = h;
  } else {
    dlock__hold_free(h);
  }
}

void dlock__reg_detach(dlock_client *c, dlock__lockent *e) {
  dlock__mu_lock(&c->reg.mu);
  if (--e->objects > 0) {
    dlock__mu_unlock(&c->reg.mu);
    return;
  }
  /* The batch in flight may point at the entry's name: wait for it. */
  dlock__wd_quiesce(c);
  dlock__hold *h = e->holds, *keep = NULL;
  while (h) {
    dlock__hold *nx = h->next;
    if (h->unlock_pending) {
      /* A release with an unknown outcome outlives its object: the next
       * object of the name finds it and settles it before it acquires
       * (safety round 4); the entry stays for it, without objects. */
      dlock__eng_forget(h);
      dlock__wd_remove(c, h);
      h->next = keep;
      keep = h;
    } else {
      hold_free(c, h);
    }
    h = nx;
  }
  e->holds = keep;
  if (keep) {
    dlock__mu_unlock(&c->reg.mu);
    return;
  }
  dlock__map_del(&c->reg.locks, e->key, e->key_len);
  dlock__mu_unlock(&c->reg.mu);
  free(e);
}

dlock__hold *dlock__hold_find(dlock__lockent *e, uint64_t tid) {
  for (dlock__hold *h = e->holds; h; h = h->next)
    if (h->tid == tid)
      return h;
  return NULL;
}

dlock__hold *dlock__hold_get(dlock__lockent *e, uint64_t tid) {
  dlock__hold *h = dlock__hold_find(e, tid);
  if (h)
    return h;
  h = dlock__calloc(1, sizeof *h);
  if (!h)
    return NULL;
  h->tid = tid;
  h->e = e;
  h->next = e->holds;
  e->holds = h;
  return h;
}

int dlock__reg_thread_holds(dlock_client *c, const char *name, size_t len,
                            uint64_t tid) {
  static const char tags[] = {'M', 'W', 'R'};
  char stackkey[256];
  char *key = len + 1 <= sizeof stackkey ? stackkey : dlock__malloc(len + 1);
  if (!key)
    return 0;
  memcpy(key + 1, name, len);
  int held = 0;
  dlock__mu_lock(&c->reg.mu);
  for (size_t i = 0; i < sizeof tags && !held && c->reg.locks.b; i++) {
    key[0] = tags[i];
    dlock__lockent *e = dlock__map_get(&c->reg.locks, key, len + 1);
    dlock__hold *h = e ? dlock__hold_find(e, tid) : NULL;
    held = h && h->count > 0;
  }
  dlock__mu_unlock(&c->reg.mu);
  if (key != stackkey)
    free(key);
  return held;
}

void dlock__hold_put(dlock_client *c, dlock__hold *h) {
  if (h->count > 0 || h->unlock_pending > 0 || h->releasing)
    return;
  dlock__hold **pp = &h->e->holds;
  while (*pp && *pp != h)
    pp = &(*pp)->next;
  if (*pp)
    *pp = h->next;
  hold_free(c, h);
}

void dlock__hold_grave_empty(dlock_client *c) {
  dlock__hold *h = c->reg.grave;
  c->reg.grave = NULL;
  while (h) {
    dlock__hold *nx = h->next;
    dlock__hold_free(h);
    h = nx;
  }
}

size_t dlock_client_hold_records(dlock_client *c) {
  if (!c)
    return 0;
  dlock__mu_lock(&c->reg.mu);
  size_t n = 0;
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      dlock__lockent *e = me->val;
      for (dlock__hold *h = e->holds; h; h = h->next)
        n++;
    }
  dlock__mu_unlock(&c->reg.mu);
  return n;
}

int64_t dlock__holds_now(dlock_client *c) {
  int64_t n = 0;
  dlock__mu_lock(&c->reg.mu);
  int64_t now = dlock__now_ms();
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      const dlock__lockent *e = me->val;
      for (const dlock__hold *h = e->holds; h; h = h->next)
        n += h->count > 0 && !h->lost && now < h->valid_until;
    }
  dlock__mu_unlock(&c->reg.mu);
  return n;
}

/* The info key's hold start times (clientinfo.c): appends
 * "since:<tid>:<name>\0<ms>\0" for each current hold to b (at most
 * DLOCK__INFO_HOLDS_MAX); returns how many. Takes reg.mu. */
int dlock__holds_since(dlock_client *c, dlock__sb *b) {
  int n = 0;
  dlock__mu_lock(&c->reg.mu);
  int64_t now = dlock__now_ms();
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      const dlock__lockent *e = me->val;
      for (const dlock__hold *h = e->holds; h; h = h->next) {
        if (h->count <= 0 || h->lost || n >= DLOCK__INFO_HOLDS_MAX ||
            (!h->since_pub && now - h->since_at < DLOCK__SINCE_AFTER_MS))
          continue;
        ((dlock__hold *)h)->since_pub = 1;
        dlock__sb_adds(b, "since:");
        dlock__sb_addu64(b, h->tid);
        dlock__sb_add(b, ":", 1);
        dlock__sb_add(b, e->name, e->name_len);
        dlock__sb_add(b, "", 1);
        char ms[24];
        dlock__sb_add(b, ms, dlock__fmt_i64(ms, h->since_ms) + 1);
        n++;
      }
    }
  dlock__mu_unlock(&c->reg.mu);
  return n;
}

int dlock__holds_since_due(dlock_client *c, int64_t now, int64_t *next) {
  int due = 0;
  *next = 0;
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      const dlock__lockent *e = me->val;
      for (const dlock__hold *h = e->holds; h; h = h->next) {
        if (h->count <= 0 || h->lost || h->since_pub)
          continue;
        int64_t at = h->since_at + DLOCK__SINCE_AFTER_MS;
        if (at <= now)
          due = 1;
        else if (*next == 0 || at < *next)
          *next = at;
      }
    }
  return due;
}

void dlock__holds_destroy(dlock_client *c) {
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      dlock__lockent *e = me->val;
      dlock__hold *h = e->holds;
      while (h) {
        dlock__hold *nx = h->next;
        dlock__hold_free(h);
        h = nx;
      }
      e->holds = NULL;
      /* The entry itself belongs to its objects (freed by the last one) --
       * unless none is left: one kept only for its pending releases. */
    }
  for (int again = 1; again && c->reg.locks.b;) {
    again = 0;
    for (size_t i = 0; i < c->reg.locks.nb && !again; i++)
      for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
        dlock__lockent *e = me->val;
        if (e->objects == 0) {
          dlock__map_del(&c->reg.locks, e->key, e->key_len);
          free(e);
          again = 1; /* the bucket changed: look again */
          break;
        }
      }
  }
  dlock__hold_grave_empty(c);
  if (c->reg.locks.b && c->reg.locks.n == 0)
    dlock__map_free(&c->reg.locks);
}

int dlock__registry_init(dlock__registry *r) {
  memset(r, 0, sizeof *r);
  if (pthread_mutex_init(&r->mu, NULL) != 0)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  /* The watchdog's sleeps are measured on the monotonic clock. */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0) {
    pthread_mutex_destroy(&r->mu);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

void dlock__registry_destroy(dlock__registry *r, int forked) {
  if (forked) /* in a fork child they may be copies of locked ones */
    return;
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

void dlock__hold_free(dlock__hold *h) {
  if (!h)
    return;
  free(h->modes);
  free(h->marks);
  free(h);
}

dlock__hold *dlock__holdlist_find(dlock__hold **list, uint64_t tid,
                                  int create) {
  for (dlock__hold *h = *list; h; h = h->next)
    if (h->tid == tid)
      return h;
  if (!create)
    return NULL;
  dlock__hold *h = dlock__calloc(1, sizeof *h);
  if (h) {
    h->tid = tid;
    h->next = *list;
    *list = h;
  }
  return h;
}

void dlock__holdlist_drop(dlock__hold **list, dlock__hold *h) {
  dlock__hold **pp = list;
  while (*pp && *pp != h)
    pp = &(*pp)->next;
  if (*pp) {
    *pp = h->next;
    dlock__hold_free(h);
  }
}

void dlock__holdlist_free(dlock__hold **list) {
  while (*list) {
    dlock__hold *nx = (*list)->next;
    dlock__hold_free(*list);
    *list = nx;
  }
}

int dlock__hold_push_mode(dlock__hold *h, char mode) {
  if (h->nmodes == h->modes_cap) {
    size_t nc = h->modes_cap ? h->modes_cap * 2 : 8;
    char *nm = realloc(h->modes, nc);
    if (!nm)
      return DLOCK_ENOMEM;
    h->modes = nm;
    h->modes_cap = nc;
  }
  h->modes[h->nmodes++] = mode;
  return 0;
}

/* ---- threads that exit holding locks ------------------------------------ */

typedef struct exit_ent {
  dlock_client *c; /* with a reference */
} exit_ent;

typedef struct exit_rec {
  uint64_t tid;
  size_t n, cap;
  exit_ent *clients;
} exit_rec;

static pthread_key_t g_exit_key;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;
static int g_exit_ok;

/* Forgets every hold of thread tid on c and reports each (reg.mu taken). */
static void forget_thread(dlock_client *c, uint64_t tid) {
  dlock__lost_note *lost = NULL;
  dlock__mu_lock(&c->reg.mu);
  for (size_t i = 0; c->reg.locks.b && i < c->reg.locks.nb; i++)
    for (dlock__map_ent *me = c->reg.locks.b[i]; me; me = me->next) {
      dlock__lockent *e = me->val;
      dlock__hold *h = dlock__hold_find(e, tid);
      if (!h || h->releasing)
        continue;
      if (h->count > 0 && !h->lost)
        dlock__lost_add(&lost, e->name, DLOCK__LOST_THREAD_EXIT);
      dlock__eng_forget(h); /* engine.c: every hold of the record goes */
      dlock__hold_put(c, h);
    }
  dlock__lost_report(c, lost);
  dlock__mu_unlock(&c->reg.mu);
}

static void thread_exit(void *p) {
  exit_rec *r = p;
  for (size_t i = 0; i < r->n; i++) {
    dlock_client *c = r->clients[i].c;
    if (!atomic_load(&c->closing) && c->fork_gen == dlock__fork_gen())
      forget_thread(c, r->tid);
    dlock__client_unref(c);
  }
  free(r->clients);
  free(r);
}

static void exit_key_init(void) {
  g_exit_ok = pthread_key_create(&g_exit_key, thread_exit) == 0;
}

void dlock__thread_note(dlock_client *c) {
  pthread_once(&g_exit_once, exit_key_init);
  if (!g_exit_ok)
    return;
  exit_rec *r = pthread_getspecific(g_exit_key);
  for (size_t i = 0; r && i < r->n; i++)
    if (r->clients[i].c == c)
      return;
  /* Gives back the references on clients freed since: a long-lived thread
   * that uses many clients in turn keeps only the live ones. */
  for (size_t i = 0; r && i < r->n;) {
    if (atomic_load(&r->clients[i].c->closing)) {
      dlock__client_unref(r->clients[i].c);
      r->clients[i] = r->clients[--r->n];
    } else {
      i++;
    }
  }
  if (!r) {
    if (!(r = dlock__calloc(1, sizeof *r)))
      return;
    r->tid = dlock__tid();
    if (pthread_setspecific(g_exit_key, r) != 0) {
      free(r);
      return;
    }
  }
  if (r->n == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 4;
    exit_ent *nv = realloc(r->clients, nc * sizeof *nv);
    if (!nv)
      return;
    r->clients = nv;
    r->cap = nc;
  }
  dlock__client_ref(c);
  r->clients[r->n++].c = c;
}
