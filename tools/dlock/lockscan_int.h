/*
 * lockscan_int.h -- what lockscan.c (scanning the masters) and lockwho.c
 * (who the holders and waiters are) share. Not used elsewhere.
 */
#ifndef DLOCK_LOCKSCAN_INT_H
#define DLOCK_LOCKSCAN_INT_H

#include "lockscan.h"

#define LS_UUID_LEN 36

/* A set of strings (small: linear search). */
typedef struct strset {
  char **v;
  size_t n, cap;
} strset;
int set_add(strset *s, const char *p, size_t n);
int set_has(const strset *s, const char *p, size_t n);
void set_free(strset *s);

/* A pipeline of commands whose arguments it owns. */
typedef struct pipe {
  dlock_admin_cmd *cmd;
  char **args; /* LS_MAX_ARGS per command */
  size_t n, cap;
  int oom;
} pipe;
#define LS_MAX_ARGS 6
/* Appends a command of argc (<= LS_MAX_ARGS) copied strings. */
void pipe_add(pipe *p, int argc, const char *const *argv);
void pipe_reset(pipe *p);
void pipe_free(pipe *p);

/* One master's part of a scan (one thread each). */
typedef struct nscan {
  dlock_admin *a;
  const ls_opts *o;
  const char *pattern;
  const char *node;
  long long t0; /* dlc_now_ms at the start */
  ls_lock *locks;
  size_t n, cap;
  strset evidence; /* names a once key, permits set or channel points at */
  strset clients;  /* client ids of the info keys the scan met */
  strset copies;   /* "<id>\t<key>": copies of info keys (a Cluster's) */
  long long keys, commands;
  int truncated;
  int failed, code;
  char why[600];
} nscan;

/* Runs p on s's master within the call's time: 0 with rs[0..p->n), or -1
 * with s->failed set (why, code); a refusal of the ACL user (NOPERM) in
 * any reply fails it too (77). */
int ls_run(nscan *s, const pipe *p, dlock_reply **rs);
/* Records why s's master failed; returns -1. */
int ls_fail(nscan *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ls_replies_free(dlock_reply **rs, size_t n);

/* Reply helpers: integer (an integer or a decimal string; 0 otherwise), the
 * string of a string/status reply (NULL otherwise), an array's size. */
long long r_int(const dlock_reply *r);
const char *r_str(const dlock_reply *r);
size_t r_n(const dlock_reply *r);

/* The lock `name` of type t ('h' hash, 's' string) read on s's master:
 * appended to s->locks when it is one (evident: something says a string
 * is a counting kind). 0, or -1 (s->failed). */
int ls_read_one(nscan *s, const char *name, char t, int evident);

/* Names the holders and waiters of r->locks, sorted by name (lockwho.c):
 * reads the info keys of the clients they name and of those in `seen`,
 * within o's time from t0 (dlc_now_ms). Failures of masters go to
 * r->errors. */
void ls_name_all(dlock_admin *a, const ls_opts *o, long long t0, ls_result *r,
                 const strset *seen, const strset *copies);
/* The masters into r (nodes, node_ok): 0, or the exit code with why. */
int ls_list_nodes(dlock_admin *a, ls_result *r, char *err, size_t el);
/* Runs fn on every healthy master at once (ss[i] for r->nodes[i]). */
void ls_run_all(nscan *ss, const ls_result *r, void *(*fn)(void *));
/* A master's SCAN MATCH dlock_client:* (the info keys' ids in clients). */
void *ls_info_thread(void *arg);
/* Moves the masters' locks into r, their failures to r->errors, the info
 * keys they met into seen (ids) and copies ("<id>\t<node>\t<key>"): 0 or
 * -1 (OOM). */
int ls_merge(ls_result *r, nscan *ss, strset *seen, strset *copies);

/* Appends a failed master to r->errors (once per name). */
void ls_add_error(ls_result *r, const char *node, int code, const char *why);

void copy_n(char *dst, size_t cap, const char *p, size_t n);

#endif
