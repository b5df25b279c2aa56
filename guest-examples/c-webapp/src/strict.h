/* Strict reading of decoded JSON, with serde's wording (see strict.c). */
#ifndef STRICT_H
#define STRICT_H

#include "operon.h"

typedef struct strict {
    const char *error; /* the first error, NULL while all is well */
} strict_t;

const operon_json_t *strict_object(strict_t *r, const operon_json_t *v, const char *expected);
const operon_json_t *strict_required(strict_t *r, const operon_json_t *object, const char *key);
const char *strict_str(strict_t *r, const operon_json_t *v);
/* NULL when v is NULL (absent) or JSON null. */
const char *strict_opt_str(strict_t *r, const operon_json_t *v);
const operon_json_t *strict_seq(strict_t *r, const operon_json_t *v);
int32_t strict_i32(strict_t *r, const operon_json_t *v);
int64_t strict_i64(strict_t *r, const operon_json_t *v);
/* Stores into *out and returns true when v is present and not null. */
bool strict_opt_i32(strict_t *r, const operon_json_t *v, int32_t *out);
bool strict_opt_i64(strict_t *r, const operon_json_t *v, int64_t *out);

#endif
