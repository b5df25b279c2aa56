/*
 * operon_wit_conversion.c — the conversion export (convert), built by
 * `operon build` only for a world with conversion
 * ("reconciler-with-conversion", "reconciler-with-admission-and-conversion").
 * operon_convert is required there: a project without it does not link.
 */
#include "operon.h"
#include "operon_wit.h"

#include <stdlib.h>
#include <string.h>

extern const operon_host_t operon_wit_host;

static operon_str_t str_in(const operon_wit_string_t *s) { return (operon_str_t){(const char *)s->ptr, s->len}; }

static operon_wit_string_t take_string(char *s) {
    operon_wit_string_t out = {(uint8_t *)s, s ? strlen(s) : 0};
    if (s && !*s) {
        free(s);
        out.ptr = NULL;
    }
    return out;
}

bool exports_operon_reconciler_conversion_convert(exports_operon_reconciler_conversion_list_object_t *objects,
                                                  operon_wit_string_t *desired_api_version,
                                                  exports_operon_reconciler_conversion_list_object_t *ret,
                                                  operon_wit_string_t *err) {
    operon_str_t *in = calloc(objects->len ? objects->len : 1, sizeof *in);
    if (!in) abort();
    for (size_t i = 0; i < objects->len; i++) in[i] = str_in(&objects->ptr[i]);
    operon_raw_conversion_t out;
    operon_run_convert(&operon_wit_host, operon_convert, in, objects->len, str_in(desired_api_version), &out);
    free(in);
    exports_operon_reconciler_conversion_list_object_free(objects);
    operon_wit_string_free(desired_api_version);
    if (out.failed) {
        *err = take_string(out.error);
        out.error = NULL;
        operon_raw_conversion_free(&out);
        return false;
    }
    ret->ptr = NULL;
    ret->len = out.len;
    if (out.len) {
        ret->ptr = calloc(out.len, sizeof *ret->ptr);
        if (!ret->ptr) abort();
        for (size_t i = 0; i < out.len; i++) ret->ptr[i] = take_string(out.objects[i]);
    }
    free(out.objects);
    out.objects = NULL;
    out.len = 0;
    operon_raw_conversion_free(&out);
    return true;
}
