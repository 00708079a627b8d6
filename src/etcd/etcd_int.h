/*
 * etcd_int.h -- what the etcd store's files share among themselves (the
 * rest of the library sees etcd.h and, through it, the ops table only).
 * libcurl and json-c appear here and in the etcd_*.c files, nowhere else.
 *
 * Files, one concept each:
 *   etcd_json.c    request bodies, base64, key layout, reply parsing
 *   etcd_http.c    the transport: one request = a libcurl easy handle on a
 *                  multi handle driven by poll (blocking calls drive a
 *                  private multi; the lease thread drives one multi for all
 *                  its requests and streams), endpoints, auth, errors
 *   etcd_lease.c   the session lease and the lease thread
 *   etcd_lock.c    the mutex recipe and the per-name gate
 *   etcd_status.c  status, waiters, names, client info, force unlock
 *   etcd_permits.c expirable permits
 *   etcd_sem.c     the counting semaphore
 *   etcd_client.c  the client's start and stop, the kinds refused
 *   etcd_ops.c     the ops table the client and the kinds call it through
 *
 * LOCK ORDER: e->mu before c->reg.mu; neither is held across a request;
 * a loss is reported (dlock__lost_report) holding c->reg.mu only.
 */
#ifndef DLOCK_ETCD_INT_H
#define DLOCK_ETCD_INT_H

#include <curl/curl.h>
#include <json-c/json.h>

#include "etcd/etcd.h"

/* ---- the ops table's entries (etcd_ops.c; client/store.h) -------------
 * What the client (client.c, clientinfo.c) and the kinds (mutex.c,
 * permits.c, sem.c) call through c->store on an etcd:// client: first the
 * client's (etcd_client.c; its info key: etcd_status.c). */

/* Starts the etcd side of client c (c->url parsed as etcd://, identity
 * done): checks the config (watchdog_timeout_ms whole seconds >= 2 s, no
 * sync_replicas), the registry, the cancel pipe, the transport, and unless
 * lazy_connect the session lease (authenticating first): 0, or DLOCK_EINVAL
 * / DLOCK_ENOTSUP / DLOCK_ECONN / DLOCK_EAUTH / DLOCK_EPROTO / DLOCK_ETLS /
 * DLOCK_ENOMEM with nothing left to undo but the identity. */
int dlock__etcd_client_start(dlock_client *c);
/* dlock_client_free: stops the lease thread (the session lease is revoked,
 * so the client's keys go at once). Not in a fork child. */
void dlock__etcd_client_stop(dlock_client *c);
/* The memory (the last reference went); forked: in a fork child. */
void dlock__etcd_client_release(dlock_client *c, int forked);

/* dlock__mutex_create: 0 when the kind of ops exists on etcd (the mutex,
 * fair -- every etcd mutex is FIFO --, fenced, spin), else DLOCK_ENOTSUP
 * (read-write locks). */
int dlock__etcd_kind_check(dlock_client *c, const struct dlock__mutex_ops *ops,
                           const char *name);
/* dlock_client_info_query: the client's info key. 1, 0 or a code. */
int dlock__etcd_client_info(dlock_client *c, const char *owner,
                            dlock_client_info *info);

/* ---- the mutex (etcd_lock.c): the public calls' etcd side -------------- */

int dlock__etcd_mutex_attach(dlock_mutex *m);  /* dlock__mutex_create */
void dlock__etcd_mutex_detach(dlock_mutex *m); /* dlock_mutex_free */
int dlock__etcd_acquire(dlock_mutex *m, long long wait_ms, long long lease_ms);
int dlock__etcd_release(dlock_mutex *m);
int dlock__etcd_force_unlock(dlock_mutex *m);
int dlock__etcd_is_locked(dlock_mutex *m);
int dlock__etcd_is_held(dlock_mutex *m);
int dlock__etcd_hold_count(dlock_mutex *m);
int dlock__etcd_ttl(dlock_mutex *m, long long *ttl_ms);

/* ---- expirable permits (etcd_permits.c) --------------------------------
 * A dlock_permits of an etcd client is a dlock__etcd_permits whose first
 * member is a dlock__chobj, as the Redis object's (permits.c reads only
 * that member before it dispatches through the client's table). */
int dlock__etcd_permits_new(dlock_client *c, const char *name,
                            dlock_permits **out);
void dlock__etcd_permits_free(dlock_permits *p);
int dlock__etcd_permits_acquire(dlock_permits *p, long long wait_ms,
                                long long lease_ms,
                                char id_out[DLOCK_PERMIT_ID_LEN + 1]);
int dlock__etcd_permits_release(dlock_permits *p, const char *id);
int dlock__etcd_permits_update_lease(dlock_permits *p, const char *id,
                                     long long lease_ms);
int dlock__etcd_permits_available(dlock_permits *p, long long *n);
int dlock__etcd_permits_set(dlock_permits *p, long long permits, int only_new);
int dlock__etcd_permits_list(dlock_permits *p, dlock_permit **out, size_t *n,
                             long long *available);

/* ---- the counting semaphore (etcd_sem.c) --------------------------------
 * A dlock_sem of an etcd client is an object of etcd_sem.c whose first
 * member is a dlock__chobj, as the Redis object's (sem.c checks it, then
 * dispatches through the client's table). wait: wait_ms as
 * dlock_sem_timedwait; DLOCK_EBUSY and DLOCK_ETIMEDOUT come back without a
 * message (sem.c words them, as it does the Redis store's). */
int dlock__etcd_sem_new(dlock_client *c, const char *name, dlock_sem **out);
void dlock__etcd_sem_free(dlock_sem *s);
int dlock__etcd_sem_init(dlock_sem *s, long long permits);
int dlock__etcd_sem_wait(dlock_sem *s, long long wait_ms);
int dlock__etcd_sem_post(dlock_sem *s);
int dlock__etcd_sem_value(dlock_sem *s, long long *v);

/* ---- JSON, base64, keys (etcd_json.c) ----------------------------------- */

/* Appends the base64 of p[0..n) to b. */
void dlock__etcd_b64(dlock__sb *b, const char *p, size_t n);
/* Decodes base64 s (NUL-terminated) into out (replacing it): 0 or -1. */
int dlock__etcd_unb64(const char *s, dlock__sb *out);
/* Appends a JSON string of the int64 v ("\"123\"": the gateway's form). */
void dlock__etcd_jint(dlock__sb *b, int64_t v);
/* Member k of object o, or NULL. */
json_object *dlock__etcd_get(json_object *o, const char *k);
/* Member k as an int64 (the gateway sends them as strings); 0 when absent
 * or not a number. */
int64_t dlock__etcd_int(json_object *o, const char *k);
/* o's "header"."revision", 0 when absent. */
int64_t dlock__etcd_rev(json_object *o);

/* The key of lock `name` of this client: <prefix><name>/<lease hex>. */
void dlock__etcd_key(const dlock__etcd *e, dlock__sb *b, const char *name,
                     int64_t lease);
/* The range of lock `name`'s keys: <prefix><name>/ to <prefix><name>0. */
void dlock__etcd_range(const dlock__etcd *e, dlock__sb *from, dlock__sb *to,
                       const char *name);

/* One key of a range reply, decoded. */
typedef struct dlock__etcd_kv {
  char *key; /* decoded, NUL-terminated */
  size_t klen;
  char *value; /* decoded (empty when the reply had none) */
  size_t vlen;
  int64_t create, mod, lease;
  int64_t version; /* puts since its creation (1: just created) */
} dlock__etcd_kv;
typedef struct dlock__etcd_kvs {
  dlock__etcd_kv *v;
  size_t n;
} dlock__etcd_kvs;
/* The kvs of range reply r (a "response_range" or a /v3/kv/range answer)
 * whose key is a lock key of `from` (one more segment: no '/' after it;
 * keys of a longer name "a/b" are not "a"'s waiters), in the reply's order.
 * from = NULL: every kv. 0 or DLOCK_ENOMEM / DLOCK_EPROTO. */
int dlock__etcd_kvs_parse(json_object *r, const dlock__sb *from,
                          dlock__etcd_kvs *out);
void dlock__etcd_kvs_free(dlock__etcd_kvs *k);

/* ---- the transport (etcd_http.c) ---------------------------------------- */

/* How a request may be sent. */
enum {
  DLOCK__ETCD_RETRY = 0,   /* the retry policy, every endpoint in turn */
  DLOCK__ETCD_ONCE = 1,    /* sent at most once (force unlock) */
  DLOCK__ETCD_NOAUTH = 2,  /* no token (the authenticate call itself) */
  DLOCK__ETCD_ONEROUND = 4 /* every endpoint once, no second round (the
                              lease thread tries again on its own clock) */
};

/* A finished request: its answer and how it ended. */
typedef struct dlock__etcd_res {
  json_object *json; /* the answer (unary), the caller puts it */
  long http;         /* HTTP status (0: none) */
  int code;          /* the gateway's gRPC code in an error reply, else 0 */
  int sends;         /* copies sent */
  int ep;            /* the endpoint that answered */
  int64_t sent;      /* monotonic ms the answered copy was sent */
} dlock__etcd_res;

typedef struct dlock__etcd_req dlock__etcd_req;
/* A stream's line handler: 0 go on, 1 stop the stream (done, rc 0). */
typedef int dlock__etcd_line_fn(dlock__etcd_req *r, json_object *line);
/* A request's completion (async driver): r->done set with r->rc and r->res;
 * or r->done 0: not finished, to be started again at r->retry_at (the owner
 * keeps it on its list for dlock__etcd_async_due). */
typedef void dlock__etcd_done_fn(dlock__etcd_req *r);

/* One HTTP request to the gateway, unary or streamed, on any multi. */
struct dlock__etcd_req {
  dlock__etcd *e;
  CURL *easy;
  struct curl_slist *hdrs;
  char path[40];
  dlock__sb body;
  dlock__sb in;     /* the answer's bytes (unary) or the partial line */
  int flags;        /* DLOCK__ETCD_* */
  int timeout_ms;   /* whole request (unary); 0: none (streams) */
  int stream;       /* answers line by line to on_line */
  int ep;           /* the endpoint of the current copy */
  int tried;        /* endpoints tried in this round */
  int rounds;       /* rounds of every endpoint */
  int reauthed;     /* a refused token was renewed once */
  int stopped;      /* on_line said stop */
  int running;      /* on a multi */
  int done;         /* finished: rc and res set */
  int rc;           /* 0 or a code (message in why) */
  int64_t retry_at; /* async: the next copy not before (monotonic ms) */
  char why[300];
  dlock__etcd_res res;
  dlock__etcd_line_fn *on_line;
  dlock__etcd_done_fn *on_done;
  void *arg;
  struct dlock__etcd_req *next; /* the async driver's list */
};

/* The transport of a client: endpoints, credentials and TLS, a pool of
 * easy handles (each with the multi that keeps its connection). */
typedef struct dlock__etcd_http dlock__etcd_http;
int dlock__etcd_http_new(dlock_client *c, dlock__etcd_http **out);
void dlock__etcd_http_free(dlock__etcd_http *h);
/* Closes the pooled connections (dlock_client_free: the client's memory
 * may outlive it -- a thread that locked through it keeps it until the
 * thread exits -- its connections must not); a call still in flight
 * closes its own when it ends (the client is closing). */
void dlock__etcd_http_close(dlock__etcd_http *h);
/* The readiness check of the etcd objects' kind marks (dlock__counter_kind:
 * an etcd semaphore or permits object is never run as a Redis counter):
 * DLOCK_ENOTSUP. */
int dlock__etcd_no_counter(dlock__chobj *o);
/* Authenticates now when the URL names a user: 0 or a code. */
int dlock__etcd_http_auth(dlock__etcd *e);
/* The endpoint i as text ("127.0.0.1:2379"), for messages. */
const char *dlock__etcd_ep_name(const dlock__etcd *e, int i);

/* A blocking unary call: POST path with body (JSON), the answer's JSON in
 * res->json (the caller json_object_put()s it). Drives a pooled easy handle
 * on its own multi with poll. Under the retry policy (flags) and the
 * calling thread's call deadline (dlock__call_deadline). 0, or DLOCK_ECONN
 * (no endpoint answered, or no quorum), DLOCK_EAUTH, DLOCK_EPROTO (not an
 * etcd gateway), DLOCK_ETLS, DLOCK_EREDIS (the gateway's error reply:
 * res->code says which), DLOCK_ENOMEM -- with the message set. */
int dlock__etcd_call(dlock__etcd *e, const char *path, const dlock__sb *body,
                     int flags, dlock__etcd_res *res);
/* dlock__etcd_call with a body given as text. */
int dlock__etcd_calls(dlock__etcd *e, const char *path, const char *body,
                      int flags, dlock__etcd_res *res);

/* A blocking wait on a watch of key (or [key, end) when end is given)
 * from revision `from` (DELETE events only when noput): 1 when an event
 * came, 0 when `until` (monotonic ms, -1 none) passed, the stream ended,
 * b was cancelled (b may be NULL) or the client is closing -- the caller
 * looks at the keys again either way -- or DLOCK_ENOMEM. The lease thread
 * wakes it (curl_multi_wakeup) on a cancel. */
int dlock__etcd_watch_wait(dlock__etcd *e, const char *key, size_t klen,
                           const char *end, size_t elen, int64_t from,
                           int noput, int64_t until, const dlock__budget *b);

/* The first event on key from revision `from` (history included: a watch
 * from a past revision replays it): 1 with *ev (the event object: "type"
 * absent means PUT, "kv" the key's state after it; the caller
 * json_object_put()s it), 0 when none came by `until` (monotonic ms), the
 * stream ended or was cancelled (`from` compacted away) or the client is
 * closing, or DLOCK_ENOMEM. */
int dlock__etcd_watch_first(dlock__etcd *e, const char *key, size_t klen,
                            int64_t from, int64_t until, json_object **ev);

/* Prepares r (zeroed by the caller) for path/body; the body is copied. 0 or
 * DLOCK_ENOMEM. Free with dlock__etcd_req_free. */
int dlock__etcd_req_init(dlock__etcd_req *r, dlock__etcd *e, const char *path,
                         const char *body, size_t len, int flags);
void dlock__etcd_req_free(dlock__etcd_req *r);
/* Sends (a copy of) r on multi m with a fresh easy handle of r's own. 0 or
 * a code (r->done set). */
int dlock__etcd_req_start(dlock__etcd_req *r, CURLM *m);
/* Takes r off m (an unfinished stream is ended). */
void dlock__etcd_req_stop(dlock__etcd_req *r, CURLM *m);
/* A transfer of m finished with cc: classifies it (the answer, an error,
 * another endpoint to try: r->retry_at set and 1 returned -- the caller
 * starts it again then), else 0 with r->done, r->rc and r->res set. */
int dlock__etcd_req_finish(dlock__etcd_req *r, CURLM *m, CURLcode cc);
/* Drives every transfer of m that made progress: finished ones go to
 * dlock__etcd_req_finish, then to their on_done (or are started again
 * when due: dlock__etcd_async_due). */
void dlock__etcd_multi_reap(CURLM *m);
/* The requests of an async driver waiting to be sent again: started when
 * due; *next lowered to the earliest retry time. */
void dlock__etcd_async_due(dlock__etcd_req **list, CURLM *m, int64_t now,
                           int64_t *next);
/* A waiting request whose retry is due, or no longer wanted, off the list. */
void dlock__etcd_async_unlist(dlock__etcd_req **list, dlock__etcd_req *r);

/* ---- the client's etcd state (etcd_client.c, etcd_lease.c) -------------- */

typedef struct dlock__etcd_gate dlock__etcd_gate;
typedef struct dlock__etcd_waitreg dlock__etcd_waitreg;
typedef struct dlock__etcd_permits dlock__etcd_permits;

/* The session: one lease per client, kept alive every TTL/3. */
typedef struct dlock__etcd_session {
  int64_t id;      /* the lease; 0 none (granted on the next need) */
  int64_t ttl_ms;  /* its TTL as the server last said */
  int64_t ok_sent; /* send time of the last grant/keepalive answered with
                      TTL > 0: every key on it lives past ok_sent + ttl */
  int64_t ka_sent; /* the keepalive in flight (0 none) */
  int64_t ka_next; /* when the next keepalive is due */
  uint32_t gen;    /* bumped when a new lease replaces a dead one */
  int granting;    /* a thread is granting one (others wait on lease_cv) */
  int fails;       /* keepalives in a row without an answer */
  int info_done;   /* the client info key was written for this lease */
} dlock__etcd_session;

struct dlock__etcd {
  dlock_client *c;
  dlock__etcd_http *http;
  char *prefix; /* "" or ending in '/' */
  size_t prefix_len;
  pthread_mutex_t mu; /* the session, the gates, the waits */
  pthread_cond_t lease_cv;
  dlock__etcd_session s;
  dlock__etcd_gate *gates;
  dlock__etcd_waitreg *waits; /* blocked calls to wake (cancel, close) */
  int64_t ttl_want_s;         /* the session's TTL asked for (seconds) */
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_int connected;         /* the last request reached a member */
  atomic_uint poke;             /* the lease thread looks again now */
  _Atomic int64_t wake_at;      /* when the sleeping lease thread looks next */
  CURLM *lm;                    /* the lease thread's multi */
  unsigned cancel_seen;         /* the cancel generation last passed on */
  dlock__lost_note *lost;       /* losses to report (the lease thread, e->mu) */
  dlock__etcd_permits *permits; /* permits objects (etcd_permits.c), e->mu */
};

/* A blocked call's wake-up: the lease thread wakes it on a cancel, when the
 * client closes or the session dies (registered under e->mu). */
struct dlock__etcd_waitreg {
  dlock__etcd_waitreg *next;
  CURLM *m; /* woken with curl_multi_wakeup */
};
void dlock__etcd_wait_register(dlock__etcd *e, dlock__etcd_waitreg *w);
void dlock__etcd_wait_unregister(dlock__etcd *e, dlock__etcd_waitreg *w);

/* The session now: a live lease (granted here when there is none), its
 * snapshot in *s. 0 or a code. Any thread without e->mu. */
int dlock__etcd_session_get(dlock__etcd *e, dlock__etcd_session *s);
/* The lease thread: started by dlock__etcd_client_start. */
int dlock__etcd_lease_start(dlock__etcd *e);
void dlock__etcd_lease_stop(dlock__etcd *e);
/* Wakes the lease thread (a gate changed: a hold to watch, a key to
 * delete). Any thread. */
void dlock__etcd_lease_poke(dlock__etcd *e);
/* Grants a lease of ttl_s seconds: 0 with *id, *ttl_ms and *sent (the
 * grant's send time), or a code. */
int dlock__etcd_grant(dlock__etcd *e, int64_t ttl_s, int64_t *id,
                      int64_t *ttl_ms, int64_t *sent);
/* Revokes lease id (best effort when quiet). 0, DLOCK_ELOST (no such
 * lease: expired), or a code. */
int dlock__etcd_revoke(dlock__etcd *e, int64_t id);

/* ---- gates: what this client does with one lock name (etcd_gate.c) ---- */

struct dlock__etcd_gate {
  dlock__etcd_gate *next;
  int objects;         /* live mutex objects of this name */
  dlock__lockent *ent; /* their registry entry (valid while objects > 0) */
  uint64_t owner;      /* the thread in the recipe or holding; 0 none */
  int busy;            /* the owner is inside a call */
  void *queue;         /* local threads waiting for the gate (FIFO) */
  pthread_cond_t cv;   /* monotonic: gate waits */
  /* The key on etcd (e->mu): */
  int64_t rev;       /* our key's create revision; 0: no key known */
  int64_t key_lease; /* the lease hex in its name (a session lease) */
  int64_t lease;     /* the lease attached to it (session or hold's) */
  uint32_t sess_gen; /* the session it was made under */
  int maybe;         /* a key may exist whose revision we do not know (its
                        create had no answer): looked for later */
  int64_t maybe_at;  /* ... next at this time (monotonic ms) */
  int maybe_n;       /* ... looks done */
  int held;          /* the key is the owner's hold */
  int fixed;         /* the hold has its own lease (revoked at unlock) */
  int64_t watch_rev; /* the own-key watch starts after this revision */
  int64_t held_at;   /* monotonic ms the hold began (its watch starts later) */
  uint32_t hold_gen; /* the record's generation of the hold */
  void *watch;       /* the lease thread's watch of the key */
  dlock__etcd_req *sweep; /* the lease thread's delete of a stale key */
  int64_t sweep_rev;      /* ... of the key of that revision */
  size_t name_len;
  char name[];
};

/* A hold's own-key watch starts once the hold has lasted this long. */
#define DLOCK__ETCD_WATCH_AFTER_MS 100

/* The lease thread's look at the gates (e->mu held): the own-key watches
 * to start or stop, the stale keys to delete, gates to free. */
void dlock__etcd_gates_tick(dlock__etcd *e, int64_t now, int64_t *next);
/* The session died (e->mu held): every gate on it loses its key; the
 * holds' losses go to *lost. */
void dlock__etcd_gates_session_lost(dlock__etcd *e, uint32_t gen,
                                    dlock__lost_note **lost);
/* A keepalive sent at `sent` confirmed ttl_ms (e->mu held): the holds on
 * the session move their deadlines (dlock__eng_renewed). */
void dlock__etcd_gates_renewed(dlock__etcd *e, int64_t sent, int64_t ttl_ms);
/* The engine's expiry verdict for every hold (e->mu held): losses to
 * *lost, *next lowered to the next deadline. */
void dlock__etcd_gates_expiry(dlock__etcd *e, int64_t now, int64_t *next,
                              dlock__lost_note **lost);
/* Frees every gate (client teardown). */
void dlock__etcd_gates_free(dlock__etcd *e);

/* The gate of lock `name`, made when missing (e->mu held); NULL on OOM. */
dlock__etcd_gate *dlock__etcd_gate_get(dlock__etcd *e, const char *name,
                                       size_t len);
/* The calling thread takes gate g (the one local thread in the recipe or
 * holding, FIFO among this client's threads; e->mu taken inside): 0, or
 * DLOCK_EBUSY (wait_ms 0 and another local thread has it),
 * DLOCK_ETIMEDOUT / DLOCK_ECANCELED / DLOCK_ECLOSED (b says so; worded for
 * `what`). g->busy is set. */
int dlock__etcd_gate_enter(dlock__etcd *e, dlock__etcd_gate *g, uint64_t tid,
                           const dlock__budget *b, const char *what);
/* The owner's call ends (e->mu held): busy cleared; when not holding, the
 * gate passes to the next local thread. */
void dlock__etcd_gate_done(dlock__etcd *e, dlock__etcd_gate *g, uint64_t tid);
/* The body of a delete of g's key at revision rev: a txn that deletes it
 * only while its create revision is rev (a copy that comes late can never
 * delete a later key of the same name: revisions are never reused). */
int dlock__etcd_delete_body(dlock__etcd *e, const dlock__etcd_gate *g,
                            int64_t key_lease, int64_t rev, dlock__sb *b);

/* The watchdog permits' loss reports (e->mu held): a permit on a session
 * that died, or whose local deadline passed unrenewed, is noted once in
 * *lost with its object's name; *next lowered to the session's deadline
 * while such permits are held. etcd_permits.c. */
void dlock__etcd_permits_tick(dlock__etcd *e, int64_t now, int64_t *next,
                              dlock__lost_note **lost);

/* The keys of lock `name` now (one linearizable read), sorted by create
 * revision, values too unless keys_only. 0 or a code. etcd_status.c. */
int dlock__etcd_read_keys(dlock__etcd *e, const char *name,
                          dlock__etcd_kvs *kvs, int keys_only);

/* Messages: the endpoint that answered or failed, "etcd 127.0.0.1:2379". */
const char *dlock__etcd_where(const dlock__etcd *e, int ep);

#endif
