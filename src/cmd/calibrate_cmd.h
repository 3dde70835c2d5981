/* calibrate_cmd.h: the command line of `mt-probe calibrate`
 * (calibrate_cmd.c), linked into every program. */
#ifndef MT_CMD_CALIBRATE_CMD_H
#define MT_CMD_CALIBRATE_CMD_H

/* The subcommand's main: argv[0] is the program name, options follow.
 * Writes the profile to -o or stdout, the grid and the fit on stderr;
 * returns the exit status (0 ok, 1 runtime error, 2 usage). serve_bin:
 * the mt-serve --served runs when --serve does not name one (NULL: none
 * found). */
int mt_probe_calibrate_main(int argc, char **argv, const char *serve_bin);

#endif
