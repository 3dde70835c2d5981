/* quality.h: `mt-probe quality`, the quality-under-the-bound probe.
 *
 * Runs the C decoder (token adapter) of a byte-level model over a text
 * stream under one KV policy and prints perplexity by position bucket, and
 * the repetition and distinct-n of free generation from a prompt. See
 * mt-probe(1), section QUALITY, and bench/RESULTS.md.
 */
#ifndef MT_PROBE_QUALITY_H
#define MT_PROBE_QUALITY_H

/* The subcommand's main: argv[0] is the program name, options follow.
 * Prints results on stdout and errors on stderr; returns the exit status
 * (0 ok, 1 runtime error, 2 usage). */
int mt_probe_quality_main(int argc, char **argv);

#endif
