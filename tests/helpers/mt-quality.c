/* mt-quality: `mt-probe quality` as a program of its own, for the tests
 * and the benchmark (so the quality probe can be tested without the rest
 * of mt-probe). Linked with the src/cmd objects that are not mains. */
#include "cmd/quality_cmd.h"

int main(int argc, char **argv)
{
    return mt_probe_quality_main(argc, argv);
}
