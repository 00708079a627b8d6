/*
 * spawn.c -- the command of "dlock NAME -- COMMAND": resolved like execvp
 * before the lock is taken (a missing command fails early), its
 * environment and the fds it must not inherit prepared before the fork,
 * and the fork itself: its own process group, PR_SET_PDEATHSIG = SIGTERM,
 * the original signal mask, the terminal's foreground when dlock has it.
 * Between fork and exec the child uses async-signal-safe calls only; an
 * exec failure comes back over a close-on-exec pipe (126/127).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "run.h"

extern char **environ;

void plan_free(plan *p) {
  for (size_t i = 0; i < p->ncands; i++)
    free(p->cands[i]);
  free(p->cands);
  free(p->envp);
  for (int i = 0; i < 3; i++)
    free(p->env_own[i]);
  free(p->close_fds);
  free(p->initial);
  memset(p, 0, sizeof *p);
}

/* Lists the open fds (sorted ascending by readdir order is not promised,
 * so callers only test membership). Returns 0 or -1. */
static int list_fds(int **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  size_t cap = 0;
  struct dirent *e;
  int self = dirfd(d);
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    int fd = atoi(e->d_name);
    if (fd == self)
      continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      int *np = realloc(*out, nc * sizeof *np);
      if (!np) {
        closedir(d);
        free(*out);
        *out = NULL;
        *n = 0;
        return -1;
      }
      *out = np;
      cap = nc;
    }
    (*out)[(*n)++] = fd;
  }
  closedir(d);
  return 0;
}

static int in_list(const int *l, size_t n, int fd) {
  for (size_t i = 0; i < n; i++)
    if (l[i] == fd)
      return 1;
  return 0;
}

/* The paths execvp would try for file: file itself when it has a '/',
 * else each $PATH entry (default "/bin:/usr/bin"; empty = "."). 0 or -1
 * (out of memory). */
static int plan_candidates(plan *p, const char *file) {
  if (strchr(file, '/')) {
    p->cands = calloc(1, sizeof *p->cands);
    if (!p->cands || !(p->cands[0] = strdup(file)))
      return -1;
    p->ncands = 1;
    return 0;
  }
  const char *path = getenv("PATH");
  if (!path)
    path = "/bin:/usr/bin";
  size_t parts = 1;
  for (const char *s = path; *s; s++)
    parts += *s == ':';
  p->cands = calloc(parts, sizeof *p->cands);
  if (!p->cands)
    return -1;
  for (const char *s = path;;) {
    size_t n = strcspn(s, ":");
    size_t len = (n ? n : 1) + 1 + strlen(file) + 1;
    char *c = malloc(len);
    if (!c)
      return -1;
    snprintf(c, len, "%.*s/%s", n ? (int)n : 1, n ? s : ".", file);
    p->cands[p->ncands++] = c;
    if (!s[n])
      return 0;
    s += n + 1;
  }
}

/* Fails before the lock is taken when the command cannot run at all. */
static int plan_check(const plan *p, const char *file) {
  int exists = 0;
  for (size_t i = 0; i < p->ncands; i++) {
    if (access(p->cands[i], X_OK) == 0)
      return 0;
    exists |= access(p->cands[i], F_OK) == 0;
  }
  if (exists) {
    cli_err("cannot run '%s': %s", file, strerror(EACCES));
    return CLI_EX_NOEXEC;
  }
  cli_err("cannot run '%s': command not found", file);
  return CLI_EX_NOTFOUND;
}

int plan_init(const cli_opts *o, plan *p) {
  memset(p, 0, sizeof *p);
  p->initial_ok = list_fds(&p->initial, &p->ninitial) == 0;
  if (o->shell_cmd) {
    p->sh_argv[0] = (char *)"sh";
    p->sh_argv[1] = (char *)"-c";
    p->sh_argv[2] = (char *)o->shell_cmd;
    p->sh_argv[3] = NULL;
    p->argv = p->sh_argv;
  } else {
    p->argv = o->argv;
  }
  const char *file = o->shell_cmd ? "/bin/sh" : p->argv[0];
  if (!*file) {
    cli_err("cannot run '': empty command name");
    return CLI_EX_NOTFOUND;
  }
  if (plan_candidates(p, file) != 0) {
    cli_err("out of memory");
    return CLI_EX_SOFT;
  }
  return plan_check(p, file);
}

int plan_env(plan *p, const char *name, const char *owner, const char *token) {
  size_t n = 0;
  for (char **e = environ; *e; e++)
    n++;
  p->envp = calloc(n + 4, sizeof *p->envp);
  if (!p->envp)
    return -1;
  size_t k = 0;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "DLOCK_NAME=", 11) != 0 &&
        strncmp(*e, "DLOCK_OWNER=", 12) != 0 &&
        strncmp(*e, "DLOCK_TOKEN=", 12) != 0)
      p->envp[k++] = *e;
  const char *keys[3] = {"DLOCK_NAME", "DLOCK_OWNER", "DLOCK_TOKEN"};
  const char *vals[3] = {name, owner, token};
  for (int i = 0; i < 3; i++) {
    if (!vals[i])
      continue;
    size_t len = strlen(keys[i]) + 1 + strlen(vals[i]) + 1;
    if (!(p->env_own[i] = malloc(len)))
      return -1;
    snprintf(p->env_own[i], len, "%s=%s", keys[i], vals[i]);
    p->envp[k++] = p->env_own[i];
  }
  p->envp[k] = NULL;
  return 0;
}

/* The fds opened since dlock started (client sockets, our pipes): the
 * child closes them. err_fd stays (close-on-exec). */
static void plan_fds(plan *p, int err_fd) {
  int *now = NULL;
  size_t n = 0;
  if (!p->initial_ok || list_fds(&now, &n) != 0)
    return;
  p->close_fds = calloc(n ? n : 1, sizeof *p->close_fds);
  if (p->close_fds)
    for (size_t i = 0; i < n; i++)
      if (now[i] > 2 && now[i] != err_fd &&
          !in_list(p->initial, p->ninitial, now[i]))
        p->close_fds[p->nclose++] = now[i];
  free(now);
}

/* In the child: async-signal-safe calls only. */
static void child_exec(const plan *p, int err_fd, pid_t parent, int tty_fd,
                       const sigset_t *orig_mask, int chld_ignored) {
  setpgid(0, 0);
  if (tty_fd >= 0)
    tcsetpgrp(tty_fd, getpid()); /* SIGTTOU is still blocked here */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent)
    _exit(CLI_EX_LOST); /* dlock is already gone: never run unprotected */
  for (size_t i = 0; i < p->nclose; i++)
    close(p->close_fds[i]);
  if (chld_ignored) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGCHLD, &ign, NULL);
  }
  sigprocmask(SIG_SETMASK, orig_mask, NULL);
  int err = ENOENT, eacces = 0;
  for (size_t i = 0; i < p->ncands; i++) {
    execve(p->cands[i], p->argv, p->envp);
    err = errno;
    if (err == EACCES)
      eacces = 1;
    else if (err != ENOENT && err != ENOTDIR && err != ELOOP &&
             err != ENAMETOOLONG)
      break;
  }
  if (eacces && (err == ENOENT || err == ENOTDIR))
    err = EACCES;
  ssize_t w = write(err_fd, &err, sizeof err);
  (void)w;
  _exit(CLI_EX_NOTFOUND);
}

void take_tty_back(sup *s) {
  if (s->tty_fd >= 0)
    tcsetpgrp(s->tty_fd, getpgrp());
}

/* The terminal: if dlock is in the foreground of its controlling terminal,
 * the command's group gets it while the command runs. */
static int foreground_tty(void) {
  int tfd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (tfd >= 0 && tcgetpgrp(tfd) == getpgrp())
    return tfd;
  if (tfd >= 0)
    close(tfd);
  return -1;
}

/* After the fork: the exec error the child reported (0: it ran). */
static int exec_error(int rd) {
  int err = 0;
  ssize_t n;
  do {
    n = read(rd, &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof err ? err : 0;
}

int spawn_command(const run_sigs *sg, plan *p, sup *s) {
  int ep[2];
  if (pipe2(ep, O_CLOEXEC) != 0) {
    cli_err("signalfd/pipe: %s", strerror(errno));
    return CLI_EX_SOFT;
  }
  s->tty_fd = foreground_tty();
  plan_fds(p, ep[1]);
  /* Orphans of the command become dlock's children: reaped at once, so
   * "is anything of the group still alive" is answered right. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t parent = getpid();
  s->pid = fork();
  if (s->pid == 0)
    child_exec(p, ep[1], parent, s->tty_fd, &sg->orig, sg->chld_ignored);
  close(ep[1]);
  if (s->pid < 0) {
    cli_err("fork: %s", strerror(errno));
    close(ep[0]);
    return CLI_EX_SOFT;
  }
  setpgid(s->pid, s->pid);
  if (s->tty_fd >= 0)
    tcsetpgrp(s->tty_fd, s->pid);
  int err = exec_error(ep[0]);
  close(ep[0]);
  if (!err)
    return 0;
  while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  s->pid = -1;
  take_tty_back(s);
  cli_err("cannot run '%s': %s", p->argv[0], strerror(err));
  return err == ENOENT ? CLI_EX_NOTFOUND : CLI_EX_NOEXEC;
}
