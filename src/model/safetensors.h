/* safetensors.h: the safetensors container (8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and data_offsets,
 * then the data), parsed from memory so the same code serves mmap'd files
 * and the fuzz harness; dtype conversion F32/F16/BF16 <-> fp32; a writer. */
#ifndef MT_SAFETENSORS_H
#define MT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* F32, F16, BF16 share values with mt_dtype (model.h). The others are
 * known (so their sizes check) but not convertible. */
enum { MT_ST_F32 = 0, MT_ST_F16 = 1, MT_ST_BF16 = 2, MT_ST_F64, MT_ST_I64,
       MT_ST_I32, MT_ST_I16, MT_ST_I8, MT_ST_U8, MT_ST_BOOL, MT_ST_U16,
       MT_ST_U32, MT_ST_U64, MT_ST_F8_E4M3, MT_ST_F8_E5M2, MT_ST_NDTYPES };

#define MT_ST_MAX_DIMS   8
#define MT_ST_MAX_HEADER (100u << 20)   /* as the reference implementation */

typedef struct mt_st_tensor {
    char          *name;
    int            dtype;
    int            ndim;
    uint64_t       shape[MT_ST_MAX_DIMS];
    uint64_t       numel;
    uint64_t       begin, end;     /* data_offsets, relative to the data */
    const uint8_t *data;           /* points into the parsed buffer */
} mt_st_tensor;

typedef struct mt_st_file {
    mt_st_tensor  *t;
    int            n;
    uint64_t       header_len;
    uint64_t       data_len;
} mt_st_file;

/* buf [len] is a whole file. Checks: length prefix present and within the
 * file, header a JSON object without duplicate keys, each entry's dtype
 * known, shape a list of non-negative integers, size without overflow,
 * data_offsets [begin, end] ordered, within the data, matching
 * dtype size * elements, and not overlapping another tensor's.
 * "__metadata__" is skipped. Messages: "FILE: tensor 'NAME': problem" or
 * "FILE: header: problem". Returns 0 or -1. */
int  mt_st_parse(const void *buf, size_t len, const char *file, mt_st_file *out,
                 char *err, size_t errlen);
void mt_st_free(mt_st_file *f);
const mt_st_tensor *mt_st_find(const mt_st_file *f, const char *name);

int         mt_st_dtype_size(int dtype);
const char *mt_st_dtype_name(int dtype);

/* t (F32, F16 or BF16) -> dst [numel]. -1 for other dtypes. */
int mt_st_to_f32(const mt_st_tensor *t, float *dst);

/* 0 when t is F32, F16 or BF16 (what mt_st_to_f32 takes); else -1 with
 * "FILE: tensor 'NAME': unsupported dtype X ..." in err. */
int mt_st_check_float(const mt_st_tensor *t, const char *file, char *err, size_t errlen);
/* "d0, d1, ..." of t's shape into buf [cap], for messages (truncated to fit). */
void mt_st_shape_str(const mt_st_tensor *t, char *buf, size_t cap);

float    mt_f16_to_f32(uint16_t h);
uint16_t mt_f32_to_f16(float f);     /* round to nearest even; subnormals,
                                        overflow to inf, NaN kept NaN */
float    mt_bf16_to_f32(uint16_t h);
uint16_t mt_f32_to_bf16(float f);    /* round to nearest even; NaN kept */

/* One tensor to write: fp32 data stored as dtype. */
typedef struct mt_st_out {
    const char  *name;
    int          ndim;
    uint64_t     shape[MT_ST_MAX_DIMS];
    const float *data;
} mt_st_out;

/* Writes path (through path.tmp + rename), tensors in the given order,
 * header padded with spaces to 8 bytes. dtype: MT_ST_F32/F16/BF16. */
int mt_st_write(const char *path, const mt_st_out *t, int n, int dtype,
                char *err, size_t errlen);

#endif
