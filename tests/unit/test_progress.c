/* test_progress.c: mt-probe's progress line (src/probe/progress.c): the
 * text (run i of n, elapsed, time left), nothing at all when off (stderr
 * not a terminal), redrawn in place at most every 0.5 s. Clock injected. */
#include "probe/progress.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define S 1000000000ull

int main(void)
{
    char b[256];
    mt_progress_format(b, sizeof b, "soak", "run", 2.5, 10, 25, "window");
    is_str(b, "soak: run 3 of 10 (25%), 0:25 elapsed, about 1:15 left; window",
           "format: the run under way, elapsed, time left from the share done");
    mt_progress_format(b, sizeof b, "quality", "position", 0, 4096, 0.2, NULL);
    is_str(b, "quality: position 1 of 4096 (0%), 0:00 elapsed, time left not known yet",
           "format: nothing done yet, no estimate");
    mt_progress_format(b, sizeof b, "soak", "run", 4, 4, 3725, "");
    is_str(b, "soak: run 4 of 4 (100%), 1:02:05 elapsed, finishing",
           "format: all done, hours");

    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    mt_progress p;
    mt_progress_start(&p, 0, f, "soak", 0);
    mt_progress_show(&p, 1 * S, 1, "run", 0.5, 2, NULL);
    mt_progress_clear(&p);
    fflush(f);
    is_int(len, 0, "off (not a terminal): nothing written");

    mt_progress_start(&p, 1, f, "soak", 0);
    mt_progress_show(&p, 1 * S, 0, "run", 0.5, 2, NULL);
    fflush(f);
    ok(len > 0 && mem[0] == '\r' && strstr(mem, "soak: run 1 of 2 (25%), 0:01 elapsed, about 0:03 left"),
       "on: the line, from a carriage return");
    ok(strstr(mem, "\033[K") != NULL, "and erasing what a longer line left");
    size_t l1 = len;
    mt_progress_show(&p, 1 * S + S / 4, 0, "run", 0.6, 2, NULL);
    fflush(f);
    is_int(len, l1, "redrawn at most every 0.5 s");
    mt_progress_show(&p, 2 * S, 0, "run", 1, 2, NULL);
    fflush(f);
    ok(len > l1 && strstr(mem + l1, "run 2 of 2"), "after 0.5 s: redrawn");
    size_t l2 = len;
    mt_progress_clear(&p);
    fflush(f);
    ok(len == l2 + 4 && memcmp(mem + l2, "\r\033[K", 4) == 0, "clear erases the line");
    mt_progress_clear(&p);
    fflush(f);
    is_int(len, l2 + 4, "a second clear writes nothing");
    fclose(f);
    free(mem);
    return tap_done();
}
