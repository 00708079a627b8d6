/* main.c -- entry point of the dlock command-line tool (see cli.h). */
#include <stdio.h>

#include "cli.h"

int main(int argc, char **argv) {
  cli_opts o;
  char err[512];
  int obs_ex;
  if (cli_obs_dispatch(argc, argv, &obs_ex)) /* list, top, exporter */
    return obs_ex;
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) {
    cli_err("%s (see dlock --help)", err);
    return CLI_EX_USAGE;
  }
  if (o.cmd == CLI_HELP) {
    cli_usage(stdout);
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
  }
  if (o.cmd == CLI_VERSION) {
    printf("dlock %s\n", dlock_version_string());
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFT;
  }
  int ex = cli_settings(&o);
  if (ex == 0)
    ex = o.cmd == CLI_STATUS   ? cli_status(&o)
         : o.cmd == CLI_UNLOCK ? cli_unlock(&o)
                               : cli_run(&o);
  dlock_config_dispose(&o.cfg);
  return ex;
}
