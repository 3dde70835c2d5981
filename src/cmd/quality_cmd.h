/* quality_cmd.h: the command line of `mt-probe quality` (quality_cmd.c),
 * linked into every program and into tests/helpers/mt-quality. */
#ifndef MT_CMD_QUALITY_CMD_H
#define MT_CMD_QUALITY_CMD_H

/* The subcommand's main: argv[0] is the program name, options follow.
 * Prints results on stdout and errors on stderr; returns the exit status
 * (0 ok, 1 runtime error, 2 usage). */
int mt_probe_quality_main(int argc, char **argv);

#endif
