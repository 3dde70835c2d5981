/* codec_cmd.h: the command line of `mt-probe codec` (codec_cmd.c): Kyutai's
 * Mimi codec on a file (encode, decode, round trip). */
#ifndef MT_CMD_CODEC_CMD_H
#define MT_CMD_CODEC_CMD_H

/* The subcommand's main: argv[0] is the program name, options follow.
 * Returns the exit status (0 ok, 1 runtime error, 2 usage). */
int mt_probe_codec_main(int argc, char **argv);

#endif
