/* main.c -- entry point of the dlock command-line tool (see cli.h). */
#include <stdio.h>

#include "cli.h"

int main(int argc, char **argv) {
  cli_opts o;
  char err[512];
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) {
    cli_err("%s (see dlock --help)", err);
    return CLI_EX_USAGE;
  }
  switch (o.cmd) {
  case CLI_HELP:
    cli_usage(stdout);
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
  case CLI_VERSION:
    printf("dlock %s\n", dlock_version_string());
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
  case CLI_STATUS:
    return cli_status(&o);
  case CLI_UNLOCK:
    return cli_unlock(&o);
  case CLI_RUN:
  default:
    return cli_run(&o);
  }
}
