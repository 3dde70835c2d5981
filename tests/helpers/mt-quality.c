/* mt-quality: `mt-probe quality` as a program of its own, for the tests
 * and the benchmark while mt-probe does not dispatch to it yet (and so the
 * quality probe can be tested without the rest of mt-probe). */
#include "probe/quality.h"

int main(int argc, char **argv)
{
    return mt_probe_quality_main(argc, argv);
}
