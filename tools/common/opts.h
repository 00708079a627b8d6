/*
 * opts.h -- one option-parsing style for the three tools: a table of
 * options, a parser for option words, and --help text generated from the
 * same table (so a flag and its description cannot drift apart).
 *
 * Accepted forms: --name, --name=VALUE, --name VALUE, -x, -xVALUE,
 * -x VALUE, and bundled flags (-vq). A table may also accept unambiguous
 * prefixes of long names (--strat for --strategy), as getopt_long does.
 * Every mistake comes back as one line in err (no program name).
 */
#ifndef DLOCK_COMMON_OPTS_H
#define DLOCK_COMMON_OPTS_H

#include <stddef.h>
#include <stdio.h>

/* dlc_opt.flags */
#define DLC_OPT_JOIN 1u /* --help: on the previous entry's line */

typedef struct dlc_opt {
  const char *lng;   /* long name, without "--" */
  char shrt;         /* short letter, 0: long only */
  const char *arg;   /* value placeholder ("SECS"), NULL: a flag */
  int id;            /* the tool's own code */
  unsigned scope;    /* the tool's own bits (the CLI: its subcommands) */
  const char *help;  /* NULL: not listed (an alias); "\n" starts a new
                        line in the description column */
  const char *label; /* left column of --help instead of "-x, --name ARG" */
  unsigned flags;    /* DLC_OPT_* */
} dlc_opt;

typedef struct dlc_optset {
  const dlc_opt *opts;
  size_t n;
  int help_col;    /* the column where descriptions start */
  int indent_long; /* 1: long-only options line up under "-x, " */
  int prefixes;    /* 1: unambiguous prefixes of long names match */
} dlc_optset;

/* Called for every option found; val is NULL for a flag. Returns 0 to go
 * on, -1 after writing why into err, or > 0 to stop parsing (--help): the
 * parsers below return that value as it is. */
typedef int (*dlc_opt_fn)(void *ctx, const dlc_opt *o, const char *val,
                          char *err, size_t errlen);

/* Parses the option word argv[*i] (it starts with '-' and is not "-" or
 * "--"); may consume argv[*i + 1] as a value (then *i is advanced).
 * 0, -1 (err written) or what fn returned. */
int dlc_opt_word(const dlc_optset *s, int argc, char **argv, int *i,
                 dlc_opt_fn fn, void *ctx, char *err, size_t errlen);

/* Parses argv[1..] as options only: "--" ends them, and any other word
 * (before or after it) is an error. 0, -1 (err written) or what fn
 * returned. */
int dlc_opt_parse_all(const dlc_optset *s, int argc, char **argv, dlc_opt_fn fn,
                      void *ctx, char *err, size_t errlen);

/* The option lines of --help, from the table. */
void dlc_opt_help(FILE *f, const dlc_optset *s);

/* Whole-string decimal integer in [lo, hi]. 0, or -1 with
 * "NAME: not a number: 'S'" / "NAME: V is out of range LO..HI" in err. */
int dlc_opt_ll(const char *name, const char *s, long long lo, long long hi,
               long long *out, char *err, size_t errlen);

/* Writes a message into err and returns -1 (for dlc_opt_fn bodies). */
int dlc_opt_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
