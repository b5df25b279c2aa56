/*
 * Strict reading of the parent, worded as serde words it in the Rust
 * example ("missing field `image`", "invalid type: string \"x\", expected
 * i32", "invalid value: integer `70000000000`, expected i32"): the shared
 * fixtures pin that wording for every language.
 */
#include "strict.h"

#include <stdio.h>
#include <string.h>

/* serde's Unexpected: how a value is named in "invalid type" errors. */
static const char *unexpected(const operon_json_t *v) {
    int64_t i;
    double d;
    bool b;
    switch (operon_json_type(v)) {
    case OPERON_MISSING:
    case OPERON_NULL:
        return "null";
    case OPERON_BOOL:
        operon_json_bool(v, &b);
        return b ? "boolean `true`" : "boolean `false`";
    case OPERON_INT:
        operon_json_int(v, &i);
        return operon_sprintf("integer `%lld`", (long long)i);
    case OPERON_FLOAT: {
        operon_json_number(v, &d);
        char text[64];
        snprintf(text, sizeof text, "%.17g", d);
        /* Rust prints the shortest text that round-trips, with a ".0". */
        for (int precision = 1; precision <= 17; precision++) {
            snprintf(text, sizeof text, "%.*g", precision, d);
            double back;
            sscanf(text, "%lf", &back);
            if (back == d) break;
        }
        return operon_sprintf("floating point `%s%s`", text, strpbrk(text, ".e") ? "" : ".0");
    }
    case OPERON_STRING: {
        const char *s = operon_json_string(v);
        size_t n = operon_json_string_len(v);
        char *quoted = operon_alloc(n * 2 + 3);
        size_t k = 0;
        quoted[k++] = '"';
        for (size_t j = 0; j < n; j++) {
            if (s[j] == '"' || s[j] == '\\') quoted[k++] = '\\';
            quoted[k++] = s[j];
        }
        quoted[k++] = '"';
        quoted[k] = '\0';
        return operon_sprintf("string %s", quoted);
    }
    case OPERON_ARRAY:
        return "sequence";
    default:
        return "map";
    }
}

static void invalid_type(strict_t *r, const operon_json_t *v, const char *expected) {
    if (!r->error) r->error = operon_sprintf("invalid type: %s, expected %s", unexpected(v), expected);
}

const operon_json_t *strict_object(strict_t *r, const operon_json_t *v, const char *expected) {
    if (r->error) return NULL;
    if (operon_json_type(v) != OPERON_OBJECT) {
        invalid_type(r, v, expected);
        return NULL;
    }
    return v;
}

const operon_json_t *strict_required(strict_t *r, const operon_json_t *object, const char *key) {
    if (r->error || !object) return NULL;
    const operon_json_t *v = operon_json_get(object, key);
    if (!v) r->error = operon_sprintf("missing field `%s`", key);
    return v;
}

const char *strict_str(strict_t *r, const operon_json_t *v) {
    if (r->error) return "";
    const char *s = operon_json_string(v);
    if (!s) {
        invalid_type(r, v, "a string");
        return "";
    }
    return s;
}

const char *strict_opt_str(strict_t *r, const operon_json_t *v) {
    if (r->error || operon_json_type(v) <= OPERON_NULL) return NULL;
    return strict_str(r, v);
}

const operon_json_t *strict_seq(strict_t *r, const operon_json_t *v) {
    if (r->error) return NULL;
    if (operon_json_type(v) != OPERON_ARRAY) {
        invalid_type(r, v, "a sequence");
        return NULL;
    }
    return v;
}

static int64_t integer(strict_t *r, const operon_json_t *v, const char *expected, int64_t min, int64_t max) {
    if (r->error) return 0;
    int64_t n;
    if (!operon_json_int(v, &n)) {
        double d;
        /* An integer literal beyond int64 is a double here, but an integer to serde. */
        if (operon_json_type(v) == OPERON_FLOAT && operon_json_number(v, &d) && d == (double)(long long)d) {
            const char *text = operon_json_text(v, NULL);
            if (!strpbrk(text, ".eE")) {
                r->error = operon_sprintf("invalid value: integer `%s`, expected %s", text, expected);
                return 0;
            }
        }
        invalid_type(r, v, expected);
        return 0;
    }
    if (n < min || n > max) {
        r->error = operon_sprintf("invalid value: integer `%lld`, expected %s", (long long)n, expected);
        return 0;
    }
    return n;
}

int32_t strict_i32(strict_t *r, const operon_json_t *v) { return (int32_t)integer(r, v, "i32", INT32_MIN, INT32_MAX); }

int64_t strict_i64(strict_t *r, const operon_json_t *v) { return integer(r, v, "i64", INT64_MIN, INT64_MAX); }

bool strict_opt_i32(strict_t *r, const operon_json_t *v, int32_t *out) {
    if (r->error || operon_json_type(v) <= OPERON_NULL) return false;
    *out = strict_i32(r, v);
    return !r->error;
}

bool strict_opt_i64(strict_t *r, const operon_json_t *v, int64_t *out) {
    if (r->error || operon_json_type(v) <= OPERON_NULL) return false;
    *out = strict_i64(r, v);
    return !r->error;
}
