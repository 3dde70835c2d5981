/* fuzz_safetensors.c: libFuzzer harness for the safetensors container
 * parser (src/model/safetensors.c). Any bytes go in as a whole file; the parser
 * must return 0 or -1 with a message naming the file, and every tensor it
 * accepts must lie inside the buffer with a size that matches its dtype
 * and shape, and convert (when F32/F16/BF16) without reading outside. */
#include "model/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    mt_st_file f;
    if (mt_st_parse(data, size, "fuzz.safetensors", &f, err, sizeof err) != 0) {
        if (strncmp(err, "fuzz.safetensors: ", 18) != 0)
            abort();
        return 0;
    }
    for (int i = 0; i < f.n; i++) {
        const mt_st_tensor *t = &f.t[i];
        if (t->data < data || t->end < t->begin || t->end > f.data_len ||
            t->end - t->begin != t->numel * (uint64_t)mt_st_dtype_size(t->dtype) ||
            (size_t)(t->data - data) + (t->end - t->begin) > size)
            abort();
        if (mt_st_find(&f, t->name) == NULL)
            abort();
        if (t->numel <= 4096 && (t->dtype == MT_ST_F32 || t->dtype == MT_ST_F16 ||
                                 t->dtype == MT_ST_BF16)) {
            float buf[4096];
            if (mt_st_to_f32(t, buf) != 0)
                abort();
        }
    }
    mt_st_free(&f);
    return 0;
}
