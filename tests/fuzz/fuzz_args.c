/*
 * fuzz_args.c -- libFuzzer target: the dlock CLI's command line parser
 * (cli_parse, tools/dlock/args.c). The input is argv after the program
 * name, words separated by NUL bytes (at most 64 words).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char prog[] = "dlock";
  char *argv[MAX_WORDS + 2];
  int argc = 0;
  argv[argc++] = prog;
  for (size_t i = 0; i <= size && argc <= MAX_WORDS;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  cli_opts o;
  char err[256];
  err[0] = '\0';
  if (cli_parse(argc, argv, &o, err, sizeof err) == 0) {
    /* What the result promises (cli.h): a name for every subcommand but
     * --help/--version, and for run a command. */
    if (o.cmd != CLI_HELP && o.cmd != CLI_VERSION && (!o.name || !*o.name))
      abort();
    if (o.cmd == CLI_RUN && !o.argv && !o.shell_cmd)
      abort();
  } else if (!err[0] || !memchr(err, '\0', sizeof err)) {
    abort(); /* every refusal says why, in one terminated line */
  }
  free(buf);
  return 0;
}
