/*
 * operon_wit_admission.c — the admission exports (validate, mutate), built
 * by `operon build` only for a world with admission
 * ("reconciler-with-admission", "reconciler-with-admission-and-conversion").
 * operon_validate and operon_mutate are weak: an author who writes only one
 * of them gets the other's default (allow; leave the object as it is).
 */
#include "operon.h"
#include "operon_wit.h"

#include <stdlib.h>
#include <string.h>

extern operon_result_t operon_validate(const operon_review_t *, operon_admission_t *) __attribute__((weak));
extern operon_result_t operon_mutate(const operon_review_t *, operon_admission_t *) __attribute__((weak));
extern const operon_host_t operon_wit_host;

static operon_str_t str_in(const operon_wit_string_t *s) { return (operon_str_t){(const char *)s->ptr, s->len}; }

static char *c_string(const operon_wit_string_t *s) {
    char *out = malloc(s->len + 1);
    if (!out) abort();
    if (s->len) memcpy(out, s->ptr, s->len);
    out[s->len] = '\0';
    return out;
}

static operon_wit_string_t take_string(char *s) {
    operon_wit_string_t out = {(uint8_t *)s, s ? strlen(s) : 0};
    if (s && !*s) {
        free(s);
        out.ptr = NULL;
    }
    return out;
}

static void run(operon_admission_fn fn, exports_operon_reconciler_admission_review_t *review,
                operon_raw_admission_t *out) {
    operon_str_t sub_resource, namespace_, object, old_object;
    if (review->sub_resource.is_some) sub_resource = str_in(&review->sub_resource.val);
    if (review->namespace_.is_some) namespace_ = str_in(&review->namespace_.val);
    if (review->object.is_some) object = str_in(&review->object.val);
    if (review->old_object.is_some) old_object = str_in(&review->old_object.val);
    operon_gvk_t kind = {c_string(&review->kind.group), c_string(&review->kind.version), c_string(&review->kind.kind)};
    operon_raw_review_t raw = {
        .uid = str_in(&review->uid),
        .operation = (operon_operation_t)review->operation,
        .kind = kind,
        .sub_resource = review->sub_resource.is_some ? &sub_resource : NULL,
        .namespace_ = review->namespace_.is_some ? &namespace_ : NULL,
        .name = str_in(&review->name),
        .object = review->object.is_some ? &object : NULL,
        .old_object = review->old_object.is_some ? &old_object : NULL,
        .username = str_in(&review->user_info.username),
        .dry_run = review->dry_run,
    };
    operon_run_admission(&operon_wit_host, fn, &raw, out);
    free((void *)kind.group);
    free((void *)kind.version);
    free((void *)kind.kind);
    exports_operon_reconciler_admission_review_free(review);
}

static bool deny(operon_raw_admission_t *out, exports_operon_reconciler_admission_denial_t *err) {
    err->message = take_string(out->message);
    out->message = NULL;
    err->code.is_some = out->code != 0;
    err->code.val = out->code;
    operon_raw_admission_free(out);
    return false;
}

bool exports_operon_reconciler_admission_validate(exports_operon_reconciler_admission_review_t *review,
                                                  operon_wit_list_string_t *ret,
                                                  exports_operon_reconciler_admission_denial_t *err) {
    operon_raw_admission_t out;
    run(operon_validate, review, &out);
    if (out.denied) return deny(&out, err);
    ret->ptr = NULL;
    ret->len = out.warnings_len;
    if (out.warnings_len) {
        ret->ptr = calloc(out.warnings_len, sizeof *ret->ptr);
        if (!ret->ptr) abort();
        for (size_t i = 0; i < out.warnings_len; i++) ret->ptr[i] = take_string(out.warnings[i]);
    }
    free(out.warnings);
    out.warnings = NULL;
    out.warnings_len = 0;
    operon_raw_admission_free(&out);
    return true;
}

bool exports_operon_reconciler_admission_mutate(exports_operon_reconciler_admission_review_t *review,
                                                exports_operon_reconciler_admission_option_object_t *ret,
                                                exports_operon_reconciler_admission_denial_t *err) {
    operon_raw_admission_t out;
    run(operon_mutate, review, &out);
    if (out.denied) return deny(&out, err);
    ret->is_some = out.patched != NULL;
    if (out.patched) ret->val = take_string(out.patched);
    out.patched = NULL;
    operon_raw_admission_free(&out);
    return true;
}
