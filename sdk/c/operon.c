/*
 * operon.c — the Operon C SDK: an arena, a bounded JSON parser and writer,
 * the request and outcome of a reconcile, and the one code path from the
 * wire request to the wire outcome (operon_run_reconcile). Plain C11 with
 * libc only: it builds natively for tests and for wasm32-wasi alike.
 */
#include "operon.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- arena */

/* Every allocation of a call is a malloc'd block linked into one list; a
 * mark is the list head at some time, and releasing frees back to it. One
 * block per allocation keeps sanitizers precise. */
typedef struct block {
    struct block *next;
    max_align_t data[];
} block_t;

static block_t *arena;

static void *oom(void) {
    fputs("operon: out of memory\n", stderr);
    abort();
}

static void *arena_alloc(size_t size) {
    if (size > SIZE_MAX - sizeof(block_t)) return oom();
    block_t *b = malloc(sizeof(block_t) + (size ? size : 1));
    if (!b) return oom();
    b->next = arena;
    arena = b;
    return b->data;
}

static void *arena_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return oom();
    void *p = arena_alloc(n * size);
    memset(p, 0, n * size);
    return p;
}

void *operon_alloc(size_t size) { return arena_calloc(1, size); }

void *operon_arena_mark(void) { return arena; }

void operon_arena_release(void *mark) {
    while (arena && arena != (block_t *)mark) {
        block_t *next = arena->next;
        free(arena);
        arena = next;
    }
}

static char *arena_strndup(const char *s, size_t len) {
    if (len == SIZE_MAX) return oom();
    char *out = arena_alloc(len + 1);
    if (len) memcpy(out, s, len);
    out[len] = '\0';
    return out;
}

static const char *arena_vsprintf(const char *format, va_list args) {
    if (!format) return "";
    va_list copy;
    va_copy(copy, args);
    int n = vsnprintf(NULL, 0, format, copy);
    va_end(copy);
    if (n < 0) return "";
    char *out = arena_alloc((size_t)n + 1);
    vsnprintf(out, (size_t)n + 1, format, args);
    return out;
}

const char *operon_sprintf(const char *format, ...) {
    va_list args;
    va_start(args, format);
    const char *s = arena_vsprintf(format, args);
    va_end(args);
    return s;
}

static char *xstrndup(const char *s, size_t len) {
    if (len == SIZE_MAX) return oom();
    char *out = malloc(len + 1);
    if (!out) return oom();
    if (len) memcpy(out, s, len);
    out[len] = '\0';
    return out;
}

static char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

/* ------------------------------------------------------------- values */

struct operon_json {
    operon_type_t type;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            char *ptr;
            size_t len;
        } s;
        struct {
            operon_json_t **items;
            char **keys; /* objects only */
            size_t len, cap;
        } c;
    } u;
};

static operon_json_t *new_value(operon_type_t type) {
    operon_json_t *v = arena_calloc(1, sizeof *v);
    v->type = type;
    return v;
}

operon_json_t *operon_json_object(void) { return new_value(OPERON_OBJECT); }
operon_json_t *operon_json_array(void) { return new_value(OPERON_ARRAY); }
operon_json_t *operon_json_null(void) { return new_value(OPERON_NULL); }

operon_json_t *operon_json_boolean(bool b) {
    operon_json_t *v = new_value(OPERON_BOOL);
    v->u.b = b;
    return v;
}

operon_json_t *operon_json_integer(int64_t n) {
    operon_json_t *v = new_value(OPERON_INT);
    v->u.i = n;
    return v;
}

operon_json_t *operon_json_double(double d) {
    operon_json_t *v = new_value(OPERON_FLOAT);
    v->u.f = d;
    return v;
}

static operon_json_t *string_n(const char *s, size_t len) {
    operon_json_t *v = new_value(OPERON_STRING);
    v->u.s.ptr = arena_strndup(s, len);
    v->u.s.len = len;
    return v;
}

operon_json_t *operon_json_str(const char *s) { return s ? string_n(s, strlen(s)) : operon_json_null(); }

operon_json_t *operon_json_strf(const char *format, ...) {
    va_list args;
    va_start(args, format);
    const char *s = arena_vsprintf(format, args);
    va_end(args);
    return string_n(s, strlen(s));
}

static void grow(operon_json_t *c) {
    if (c->u.c.len < c->u.c.cap) return;
    size_t cap = c->u.c.cap ? c->u.c.cap * 2 : 4;
    if (cap > SIZE_MAX / sizeof(void *)) oom();
    operon_json_t **items = arena_alloc(cap * sizeof *items);
    if (c->u.c.len) memcpy(items, c->u.c.items, c->u.c.len * sizeof *items);
    c->u.c.items = items;
    if (c->type == OPERON_OBJECT) {
        char **keys = arena_alloc(cap * sizeof *keys);
        if (c->u.c.len) memcpy(keys, c->u.c.keys, c->u.c.len * sizeof *keys);
        c->u.c.keys = keys;
    }
    c->u.c.cap = cap;
}

operon_json_t *operon_json_push(operon_json_t *array, operon_json_t *value) {
    if (!array || array->type != OPERON_ARRAY) return array;
    grow(array);
    array->u.c.items[array->u.c.len++] = value ? value : operon_json_null();
    return array;
}

operon_json_t *operon_json_set(operon_json_t *object, const char *key, operon_json_t *value) {
    if (!object || object->type != OPERON_OBJECT || !key) return object;
    for (size_t i = 0; i < object->u.c.len; i++) {
        if (strcmp(object->u.c.keys[i], key) == 0) {
            if (value) {
                object->u.c.items[i] = value;
            } else {
                object->u.c.len--;
                memmove(&object->u.c.items[i], &object->u.c.items[i + 1], (object->u.c.len - i) * sizeof(void *));
                memmove(&object->u.c.keys[i], &object->u.c.keys[i + 1], (object->u.c.len - i) * sizeof(void *));
            }
            return object;
        }
    }
    if (!value) return object;
    grow(object);
    object->u.c.keys[object->u.c.len] = arena_strndup(key, strlen(key));
    object->u.c.items[object->u.c.len++] = value;
    return object;
}

operon_json_t *operon_json_copy(const operon_json_t *v) {
    if (!v) return NULL;
    switch (v->type) {
    case OPERON_STRING:
        return string_n(v->u.s.ptr, v->u.s.len);
    case OPERON_ARRAY: {
        operon_json_t *out = operon_json_array();
        for (size_t i = 0; i < v->u.c.len; i++) operon_json_push(out, operon_json_copy(v->u.c.items[i]));
        return out;
    }
    case OPERON_OBJECT: {
        operon_json_t *out = operon_json_object();
        for (size_t i = 0; i < v->u.c.len; i++) {
            grow(out);
            out->u.c.keys[out->u.c.len] = arena_strndup(v->u.c.keys[i], strlen(v->u.c.keys[i]));
            out->u.c.items[out->u.c.len++] = operon_json_copy(v->u.c.items[i]);
        }
        return out;
    }
    default: {
        operon_json_t *out = new_value(v->type);
        out->u = v->u;
        return out;
    }
    }
}

/* ------------------------------------------------------------ reading */

operon_type_t operon_json_type(const operon_json_t *v) { return v ? v->type : OPERON_MISSING; }

const operon_json_t *operon_json_get(const operon_json_t *v, const char *key) {
    if (!v || v->type != OPERON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < v->u.c.len; i++)
        if (strcmp(v->u.c.keys[i], key) == 0) return v->u.c.items[i];
    return NULL;
}

const operon_json_t *operon_json_at(const operon_json_t *v, const char *path) {
    if (!path) return NULL;
    while (v) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (v->type != OPERON_OBJECT) return NULL;
        const operon_json_t *next = NULL;
        for (size_t i = 0; i < v->u.c.len; i++) {
            const char *k = v->u.c.keys[i];
            if (strncmp(k, path, n) == 0 && k[n] == '\0') {
                next = v->u.c.items[i];
                break;
            }
        }
        if (!dot) return next;
        v = next;
        path = dot + 1;
    }
    return NULL;
}

const char *operon_json_string(const operon_json_t *v) {
    return v && v->type == OPERON_STRING ? v->u.s.ptr : NULL;
}

const char *operon_json_string_at(const operon_json_t *v, const char *path, const char *fallback) {
    const char *s = operon_json_string(operon_json_at(v, path));
    return s ? s : fallback;
}

size_t operon_json_string_len(const operon_json_t *v) { return v && v->type == OPERON_STRING ? v->u.s.len : 0; }

bool operon_json_int(const operon_json_t *v, int64_t *out) {
    if (!v || v->type != OPERON_INT) return false;
    if (out) *out = v->u.i;
    return true;
}

bool operon_json_number(const operon_json_t *v, double *out) {
    if (!v || (v->type != OPERON_INT && v->type != OPERON_FLOAT)) return false;
    if (out) *out = v->type == OPERON_INT ? (double)v->u.i : v->u.f;
    return true;
}

bool operon_json_bool(const operon_json_t *v, bool *out) {
    if (!v || v->type != OPERON_BOOL) return false;
    if (out) *out = v->u.b;
    return true;
}

size_t operon_json_len(const operon_json_t *v) {
    return v && (v->type == OPERON_ARRAY || v->type == OPERON_OBJECT) ? v->u.c.len : 0;
}

const operon_json_t *operon_json_item(const operon_json_t *array, size_t i) {
    return array && array->type == OPERON_ARRAY && i < array->u.c.len ? array->u.c.items[i] : NULL;
}

const char *operon_json_key(const operon_json_t *object, size_t i) {
    return object && object->type == OPERON_OBJECT && i < object->u.c.len ? object->u.c.keys[i] : NULL;
}

const operon_json_t *operon_json_value(const operon_json_t *object, size_t i) {
    return object && object->type == OPERON_OBJECT && i < object->u.c.len ? object->u.c.items[i] : NULL;
}

bool operon_json_equal(const operon_json_t *a, const operon_json_t *b) {
    if (!a || !b) return a == b;
    double x, y;
    if (operon_json_number(a, &x) && operon_json_number(b, &y)) {
        if (a->type == OPERON_INT && b->type == OPERON_INT) return a->u.i == b->u.i;
        return x == y;
    }
    if (a->type != b->type) return false;
    switch (a->type) {
    case OPERON_BOOL:
        return a->u.b == b->u.b;
    case OPERON_STRING:
        return a->u.s.len == b->u.s.len && memcmp(a->u.s.ptr, b->u.s.ptr, a->u.s.len) == 0;
    case OPERON_ARRAY:
        if (a->u.c.len != b->u.c.len) return false;
        for (size_t i = 0; i < a->u.c.len; i++)
            if (!operon_json_equal(a->u.c.items[i], b->u.c.items[i])) return false;
        return true;
    case OPERON_OBJECT:
        if (a->u.c.len != b->u.c.len) return false;
        for (size_t i = 0; i < a->u.c.len; i++)
            if (!operon_json_equal(a->u.c.items[i], operon_json_get(b, a->u.c.keys[i]))) return false;
        return true;
    default:
        return true;
    }
}

/* ------------------------------------------------------------- parser */

typedef struct parser {
    const char *p, *start, *end;
    const char *error;
    int depth;
} parser_t;

static operon_json_t *fail(parser_t *ps, const char *what) {
    if (!ps->error) ps->error = operon_sprintf("%s at byte %zu", what, (size_t)(ps->p - ps->start));
    return NULL;
}

static void skip_ws(parser_t *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool literal(parser_t *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return false;
    ps->p += n;
    return true;
}

static int hex4(parser_t *ps) {
    if (ps->end - ps->p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    ps->p += 4;
    return v;
}

/* Parses a string after its opening quote into an arena buffer. Escapes
 * only shrink the text (\uXXXX is 6 bytes for at most 3 of UTF-8; a
 * surrogate pair 12 for 4), so the raw length bounds the output. */
static bool parse_string(parser_t *ps, char **out, size_t *out_len) {
    const char *q = ps->p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\') q++;
        q++;
    }
    if (q >= ps->end) return fail(ps, "unterminated string"), false;
    char *buf = arena_alloc((size_t)(q - ps->p) + 1);
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) return fail(ps, "control character in string"), false;
        if (c != '\\') {
            buf[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        if (ps->p >= ps->end) return fail(ps, "unterminated string"), false;
        char e = *ps->p++;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            long cp = hex4(ps);
            if (cp < 0) return fail(ps, "invalid \\u escape"), false;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, "lone surrogate in \\u escape"), false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (!literal(ps, "\\u")) return fail(ps, "lone surrogate in \\u escape"), false;
                long lo = hex4(ps);
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(ps, "invalid surrogate pair"), false;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                buf[n++] = (char)cp;
            } else if (cp < 0x800) {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xE0 | (cp >> 12));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[n++] = (char)(0xF0 | (cp >> 18));
                buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return fail(ps, "invalid escape"), false;
        }
    }
    ps->p++; /* closing quote */
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return true;
}

static operon_json_t *parse_number(parser_t *ps) {
    const char *s = ps->p;
    bool integer = true;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "invalid number");
    if (*ps->p == '0') ps->p++;
    else while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        integer = false;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "invalid number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integer = false;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "invalid number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    /* strtoll/strtod need a terminated copy: the input is length-counted. */
    char *text = arena_strndup(s, (size_t)(ps->p - s));
    if (integer) {
        bool negative = text[0] == '-';
        uint64_t magnitude = 0;
        bool overflow = false;
        for (const char *d = text + negative; *d; d++) {
            unsigned digit = (unsigned)(*d - '0');
            if (magnitude > (UINT64_MAX - digit) / 10) {
                overflow = true;
                break;
            }
            magnitude = magnitude * 10 + digit;
        }
        if (!overflow && (negative ? magnitude <= (uint64_t)INT64_MAX + 1 : magnitude <= (uint64_t)INT64_MAX)) {
            int64_t n = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
            if (negative && magnitude == (uint64_t)INT64_MAX + 1) n = INT64_MIN;
            return operon_json_integer(n);
        }
    }
    return operon_json_double(strtod(text, NULL));
}

static operon_json_t *parse_value(parser_t *ps) {
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end of JSON");
    switch (*ps->p) {
    case '{': {
        if (++ps->depth > OPERON_JSON_MAX_DEPTH) return fail(ps, "JSON nested too deeply");
        ps->p++;
        operon_json_t *o = operon_json_object();
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            ps->depth--;
            return o;
        }
        for (;;) {
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a key");
            ps->p++;
            char *key;
            size_t key_len;
            if (!parse_string(ps, &key, &key_len)) return NULL;
            if (strlen(key) != key_len) return fail(ps, "\\u0000 in a key");
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':'");
            ps->p++;
            operon_json_t *v = parse_value(ps);
            if (!v) return NULL;
            if (operon_json_get(o, key)) return fail(ps, operon_sprintf("duplicate key \"%s\"", key));
            grow(o);
            o->u.c.keys[o->u.c.len] = key;
            o->u.c.items[o->u.c.len++] = v;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == '}') {
                ps->p++;
                ps->depth--;
                return o;
            }
            return fail(ps, "expected ',' or '}'");
        }
    }
    case '[': {
        if (++ps->depth > OPERON_JSON_MAX_DEPTH) return fail(ps, "JSON nested too deeply");
        ps->p++;
        operon_json_t *a = operon_json_array();
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            ps->depth--;
            return a;
        }
        for (;;) {
            operon_json_t *v = parse_value(ps);
            if (!v) return NULL;
            operon_json_push(a, v);
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                ps->depth--;
                return a;
            }
            return fail(ps, "expected ',' or ']'");
        }
    }
    case '"': {
        ps->p++;
        char *s;
        size_t len;
        if (!parse_string(ps, &s, &len)) return NULL;
        operon_json_t *v = new_value(OPERON_STRING);
        v->u.s.ptr = s;
        v->u.s.len = len;
        return v;
    }
    case 't':
        if (literal(ps, "true")) return operon_json_boolean(true);
        break;
    case 'f':
        if (literal(ps, "false")) return operon_json_boolean(false);
        break;
    case 'n':
        if (literal(ps, "null")) return operon_json_null();
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps);
    }
    return fail(ps, "expected a value");
}

operon_json_t *operon_json_parse(const char *text, size_t len, const char **error) {
    parser_t ps = {text, text, text + len, NULL, 0};
    operon_json_t *v = text ? parse_value(&ps) : fail(&ps, "no JSON text");
    if (v) {
        skip_ws(&ps);
        if (ps.p != ps.end) v = fail(&ps, "trailing characters after JSON");
    }
    if (!v && error) *error = ps.error;
    return v;
}

/* ------------------------------------------------------------- writer */

typedef struct buffer {
    char *data;
    size_t len, cap;
} buffer_t;

static void put(buffer_t *b, const char *s, size_t n) {
    if (n > SIZE_MAX - b->len - 1) oom();
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) oom();
            cap *= 2;
        }
        char *data = realloc(b->data, cap);
        if (!data) oom();
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void put_string(buffer_t *b, const char *s, size_t n) {
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            put(b, s + i - run, run);
            run = 0;
            put(b, esc, strlen(esc));
        } else {
            run++;
        }
    }
    put(b, s + n - run, run);
    put(b, "\"", 1);
}

static void write_value(buffer_t *b, const operon_json_t *v) {
    char num[40];
    switch (operon_json_type(v)) {
    case OPERON_MISSING:
    case OPERON_NULL:
        put(b, "null", 4);
        break;
    case OPERON_BOOL:
        v->u.b ? put(b, "true", 4) : put(b, "false", 5);
        break;
    case OPERON_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        put(b, num, strlen(num));
        break;
    case OPERON_FLOAT:
        if (!isfinite(v->u.f)) {
            put(b, "null", 4); /* JSON has no NaN or infinity */
            break;
        }
        snprintf(num, sizeof num, "%.17g", v->u.f);
        put(b, num, strlen(num));
        if (!strpbrk(num, ".eE")) put(b, ".0", 2); /* stays a float */
        break;
    case OPERON_STRING:
        put_string(b, v->u.s.ptr, v->u.s.len);
        break;
    case OPERON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < v->u.c.len; i++) {
            if (i) put(b, ",", 1);
            write_value(b, v->u.c.items[i]);
        }
        put(b, "]", 1);
        break;
    case OPERON_OBJECT:
        put(b, "{", 1);
        for (size_t i = 0; i < v->u.c.len; i++) {
            if (i) put(b, ",", 1);
            put_string(b, v->u.c.keys[i], strlen(v->u.c.keys[i]));
            put(b, ":", 1);
            write_value(b, v->u.c.items[i]);
        }
        put(b, "}", 1);
        break;
    }
}

/* malloc'd text of v. */
static char *write_malloc(const operon_json_t *v, size_t *len) {
    buffer_t b = {0};
    write_value(&b, v);
    if (len) *len = b.len;
    return b.data;
}

const char *operon_json_text(const operon_json_t *v, size_t *len) {
    size_t n;
    char *text = write_malloc(v, &n);
    char *out = arena_strndup(text, n);
    free(text);
    if (len) *len = n;
    return out;
}

/* -------------------------------------------------------------- kinds */

const operon_gvk_t OPERON_CONFIGMAP = {"", "v1", "ConfigMap"};
const operon_gvk_t OPERON_SECRET = {"", "v1", "Secret"};
const operon_gvk_t OPERON_SERVICE = {"", "v1", "Service"};
const operon_gvk_t OPERON_DEPLOYMENT = {"apps", "v1", "Deployment"};
const operon_gvk_t OPERON_INGRESS = {"networking.k8s.io", "v1", "Ingress"};

static const char *nz(const char *s) { return s ? s : ""; }

const char *operon_api_version(operon_gvk_t kind) {
    if (!kind.group || !*kind.group) return nz(kind.version);
    return operon_sprintf("%s/%s", kind.group, nz(kind.version));
}

bool operon_gvk_equal(operon_gvk_t a, operon_gvk_t b) {
    return strcmp(nz(a.group), nz(b.group)) == 0 && strcmp(nz(a.version), nz(b.version)) == 0 &&
           strcmp(nz(a.kind), nz(b.kind)) == 0;
}

bool operon_is_kind(const operon_json_t *object, operon_gvk_t kind) {
    const char *api_version = operon_json_string(operon_json_get(object, "apiVersion"));
    const char *k = operon_json_string(operon_json_get(object, "kind"));
    return api_version && k && strcmp(k, nz(kind.kind)) == 0 && strcmp(api_version, operon_api_version(kind)) == 0;
}

operon_json_t *operon_new_object(operon_gvk_t kind, const char *name) {
    operon_json_t *o = operon_json_object();
    operon_json_set(o, "apiVersion", operon_json_str(operon_api_version(kind)));
    operon_json_set(o, "kind", operon_json_str(nz(kind.kind)));
    operon_json_set(o, "metadata", operon_json_set(operon_json_object(), "name", operon_json_str(nz(name))));
    return o;
}

/* --------------------------------------------------------------- time */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    /* Howard Hinnant's algorithm: days since 1970-01-01 of a proleptic
     * Gregorian date, exact for every year. */
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char **p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if ((*p)[i] < '0' || (*p)[i] > '9') return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

static bool expect(const char **p, const char *one_of) {
    if (!**p || !strchr(one_of, **p)) return false;
    (*p)++;
    return true;
}

bool operon_time_parse(const char *text, int64_t *unix_ms) {
    if (!text) return false;
    const char *p = text;
    int year, month, day, hour, minute, second, ms = 0;
    if (!digits(&p, 4, &year) || !expect(&p, "-") || !digits(&p, 2, &month) || !expect(&p, "-") ||
        !digits(&p, 2, &day) || !expect(&p, "Tt ") || !digits(&p, 2, &hour) || !expect(&p, ":") ||
        !digits(&p, 2, &minute) || !expect(&p, ":") || !digits(&p, 2, &second))
        return false;
    static const int month_days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (month < 1 || month > 12 || day < 1 || day > month_days[month - 1] || (month == 2 && day == 29 && !leap) ||
        hour > 23 || minute > 59 || second > 60)
        return false;
    if (second == 60) second = 59; /* a leap second, as jiff (the host) reads it */
    if (*p == '.' || *p == ',') {
        p++;
        int n = 0;
        for (; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3) ms = ms * 10 + (*p - '0');
        if (n == 0 || n > 9) return false;
        for (; n < 3; n++) ms *= 10;
    }
    int offset = 0; /* minutes east of UTC */
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om = 0;
        if (!digits(&p, 2, &oh) || oh > 23) return false;
        if (*p == ':' || (*p >= '0' && *p <= '9')) {
            if (*p == ':') p++;
            if (!digits(&p, 2, &om) || om > 59) return false;
        }
        offset = sign * (oh * 60 + om);
    } else {
        return false;
    }
    if (*p) return false;
    int64_t days = days_from_civil(year, (unsigned)month, (unsigned)day);
    *unix_ms = ((days * 24 + hour) * 60 + minute - offset) * 60000 + (int64_t)second * 1000 + ms;
    return true;
}

const char *operon_time_format(int64_t unix_ms) {
    int64_t days = unix_ms / 86400000, rest = unix_ms % 86400000;
    if (rest < 0) rest += 86400000, days--;
    /* Hinnant's civil_from_days. */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    unsigned day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = (int64_t)yoe + era * 400 + (month <= 2);
    return operon_sprintf("%04lld-%02u-%02uT%02d:%02d:%02d.%03dZ", (long long)year, month, day, (int)(rest / 3600000),
                          (int)(rest / 60000 % 60), (int)(rest / 1000 % 60), (int)(rest % 1000));
}

/* ------------------------------------------------------ request, outcome */

const char *operon_readiness_name(operon_readiness_status_t status) {
    switch (status) {
    case OPERON_READINESS_CURRENT: return "current";
    case OPERON_READINESS_IN_PROGRESS: return "in-progress";
    case OPERON_READINESS_FAILED: return "failed";
    case OPERON_READINESS_TERMINATING: return "terminating";
    default: return "unknown";
    }
}

const char *operon_describe(const operon_request_t *req) {
    if (*req->namespace_) return operon_sprintf("%s %s/%s", req->kind, req->namespace_, req->name);
    return operon_sprintf("%s %s", req->kind, req->name);
}

const operon_json_t *const *operon_children_of(const operon_request_t *req, operon_gvk_t kind, size_t *len) {
    for (size_t i = 0; i < req->children_len; i++) {
        if (operon_gvk_equal(req->children[i].kind, kind)) {
            if (len) *len = req->children[i].len;
            return req->children[i].objects;
        }
    }
    if (len) *len = 0;
    return NULL;
}

/* The index of the child of kind called name in its group, or -1. */
static const operon_children_t *find_child(const operon_request_t *req, operon_gvk_t kind, const char *name,
                                           size_t *index) {
    for (size_t g = 0; g < req->children_len; g++) {
        const operon_children_t *group = &req->children[g];
        if (!operon_gvk_equal(group->kind, kind)) continue;
        for (size_t i = 0; i < group->len; i++) {
            const char *child = operon_json_string_at(group->objects[i], "metadata.name", NULL);
            if (child && name && strcmp(child, name) == 0) {
                *index = i;
                return group;
            }
        }
        return NULL;
    }
    return NULL;
}

const operon_json_t *operon_child(const operon_request_t *req, operon_gvk_t kind, const char *name) {
    size_t i;
    const operon_children_t *group = find_child(req, kind, name, &i);
    return group ? group->objects[i] : NULL;
}

const operon_readiness_t *operon_child_readiness(const operon_request_t *req, operon_gvk_t kind, const char *name) {
    size_t i;
    const operon_children_t *group = find_child(req, kind, name, &i);
    return group ? &group->readiness[i] : NULL;
}

bool operon_children_current(const operon_request_t *req) {
    for (size_t g = 0; g < req->children_len; g++)
        for (size_t i = 0; i < req->children[g].len; i++)
            if (req->children[g].readiness[i].status != OPERON_READINESS_CURRENT) return false;
    return true;
}

typedef struct event {
    bool warning;
    const char *reason, *message;
    struct event *next;
} event_t;

typedef struct desired {
    operon_json_t *object;
    struct desired *next;
} desired_t;

struct operon_outcome {
    desired_t *desired, **desired_tail;
    operon_json_t *status;
    event_t *events, **events_tail;
    bool has_requeue, finalized;
    uint64_t requeue_after_ms;
    const char *requeue_at;
    bool needs_finalizer_set, needs_finalizer;
    bool has_parent_metadata;
    operon_json_t *labels, *annotations;
    bool failed, terminal;
    const char *failure;
    operon_json_t *failure_status;
};

void operon_apply(operon_outcome_t *out, operon_json_t *object) {
    desired_t *d = arena_calloc(1, sizeof *d);
    d->object = object;
    *out->desired_tail = d;
    out->desired_tail = &d->next;
}

void operon_set_status(operon_outcome_t *out, operon_json_t *status) { out->status = status; }

static void push_event(operon_outcome_t *out, bool warning, const char *reason, const char *format, va_list args) {
    event_t *e = arena_calloc(1, sizeof *e);
    e->warning = warning;
    e->reason = arena_strndup(nz(reason), strlen(nz(reason)));
    e->message = arena_vsprintf(format, args);
    *out->events_tail = e;
    out->events_tail = &e->next;
}

void operon_event(operon_outcome_t *out, const char *reason, const char *format, ...) {
    va_list args;
    va_start(args, format);
    push_event(out, false, reason, format, args);
    va_end(args);
}

void operon_warning(operon_outcome_t *out, const char *reason, const char *format, ...) {
    va_list args;
    va_start(args, format);
    push_event(out, true, reason, format, args);
    va_end(args);
}

void operon_requeue_after_ms(operon_outcome_t *out, uint64_t ms) {
    out->has_requeue = true;
    out->requeue_after_ms = ms;
}

void operon_requeue_at(operon_outcome_t *out, const char *rfc3339) {
    out->requeue_at = rfc3339 ? arena_strndup(rfc3339, strlen(rfc3339)) : NULL;
}

void operon_finalized(operon_outcome_t *out) { out->finalized = true; }

void operon_needs_finalizer(operon_outcome_t *out, bool needs) {
    out->needs_finalizer_set = true;
    out->needs_finalizer = needs;
}

void operon_parent_metadata(operon_outcome_t *out, operon_json_t *labels, operon_json_t *annotations) {
    out->has_parent_metadata = true;
    out->labels = labels;
    out->annotations = annotations;
}

static operon_result_t record_failure(operon_outcome_t *out, bool terminal, operon_json_t *status, const char *format,
                                      va_list args) {
    if (!out->failed) { /* the first failure wins */
        out->failed = true;
        out->terminal = terminal;
        out->failure = arena_vsprintf(format, args);
        out->failure_status = status;
    }
    return OPERON_FAILED;
}

operon_result_t operon_terminal(operon_outcome_t *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    operon_result_t r = record_failure(out, true, NULL, format, args);
    va_end(args);
    return r;
}

operon_result_t operon_transient(operon_outcome_t *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    operon_result_t r = record_failure(out, false, NULL, format, args);
    va_end(args);
    return r;
}

operon_result_t operon_terminal_with_status(operon_outcome_t *out, operon_json_t *status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    operon_result_t r = record_failure(out, true, status, format, args);
    va_end(args);
    return r;
}

operon_result_t operon_transient_with_status(operon_outcome_t *out, operon_json_t *status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    operon_result_t r = record_failure(out, false, status, format, args);
    va_end(args);
    return r;
}

const operon_json_t *operon_find_condition(const operon_json_t *conditions, const char *type) {
    for (size_t i = 0; i < operon_json_len(conditions); i++) {
        const operon_json_t *c = operon_json_item(conditions, i);
        const char *t = operon_json_string(operon_json_get(c, "type"));
        if (t && type && strcmp(t, type) == 0) return c;
    }
    return NULL;
}

operon_json_t *operon_condition(const operon_json_t *previous_conditions, const char *type, const char *status,
                                int64_t observed_generation, const char *transition_time, const char *reason,
                                const char *message) {
    const operon_json_t *previous = operon_find_condition(previous_conditions, type);
    const char *previous_status = operon_json_string(operon_json_get(previous, "status"));
    const char *previous_time = operon_json_string(operon_json_get(previous, "lastTransitionTime"));
    if (previous_status && previous_time && status && strcmp(previous_status, status) == 0)
        transition_time = previous_time;
    operon_json_t *c = operon_json_object();
    operon_json_set(c, "type", operon_json_str(nz(type)));
    operon_json_set(c, "status", operon_json_str(nz(status)));
    operon_json_set(c, "observedGeneration", operon_json_integer(observed_generation));
    operon_json_set(c, "lastTransitionTime", operon_json_str(nz(transition_time)));
    operon_json_set(c, "reason", operon_json_str(nz(reason)));
    operon_json_set(c, "message", operon_json_str(nz(message)));
    return c;
}

/* ---------------------------------------------------------------- host */

static const operon_host_t *current_host;

operon_result_t operon_get(operon_outcome_t *out, operon_gvk_t kind, const char *namespace_, const char *name,
                           const operon_json_t **object) {
    *object = NULL;
    if (!current_host) return operon_transient(out, "operon_get called outside a reconcile");
    char *text = NULL, *error = NULL;
    int found = current_host->get(current_host->self, kind, nz(namespace_), nz(name), &text, &error);
    if (found < 0) {
        operon_transient(out, "cannot get %s %s %s: %s", operon_api_version(kind), nz(kind.kind), nz(name), nz(error));
        free(error);
        return OPERON_FAILED;
    }
    if (found == 0) return OPERON_OK;
    const char *parse_error = NULL;
    *object = operon_json_parse(text, strlen(text), &parse_error);
    free(text);
    if (!*object) return operon_terminal(out, "%s %s is invalid: %s", nz(kind.kind), nz(name), parse_error);
    return OPERON_OK;
}

operon_result_t operon_list(operon_outcome_t *out, operon_gvk_t kind, const char *namespace_,
                            const char *label_selector, const operon_json_t *const **objects, size_t *len) {
    *objects = NULL;
    *len = 0;
    if (!current_host) return operon_transient(out, "operon_list called outside a reconcile");
    char **texts = NULL, *error = NULL;
    size_t n = 0;
    if (current_host->list(current_host->self, kind, nz(namespace_), nz(label_selector), &texts, &n, &error) < 0) {
        operon_transient(out, "cannot list %s %s: %s", operon_api_version(kind), nz(kind.kind), nz(error));
        free(error);
        return OPERON_FAILED;
    }
    const operon_json_t **parsed = arena_calloc(n ? n : 1, sizeof *parsed);
    operon_result_t result = OPERON_OK;
    for (size_t i = 0; i < n; i++) {
        const char *parse_error = NULL;
        if (result == OPERON_OK) {
            parsed[i] = operon_json_parse(texts[i], strlen(texts[i]), &parse_error);
            if (!parsed[i]) result = operon_terminal(out, "a listed %s is invalid: %s", nz(kind.kind), parse_error);
        }
        free(texts[i]);
    }
    free(texts);
    if (result == OPERON_OK) {
        *objects = parsed;
        *len = n;
    }
    return result;
}

void operon_log_fields(operon_level_t level, const char *message, size_t nfields, const char *const *fields) {
    if (current_host && current_host->log) current_host->log(current_host->self, level, nz(message), nfields, fields);
}

void operon_log(operon_level_t level, const char *format, ...) {
    va_list args;
    va_start(args, format);
    const char *message = arena_vsprintf(format, args);
    va_end(args);
    operon_log_fields(level, message, 0, NULL);
}

/* ------------------------------------------------------------- egress */

const char *operon_http_error_name(operon_http_error_kind_t kind) {
    static const char *const names[] = {"denied", "invalid", "timeout", "unreachable", "tooLarge", "budget", "notRecorded"};
    return (size_t)kind < OPERON_LEN(names) ? names[kind] : "unknown";
}

bool operon_http(const operon_http_request_t *req, operon_http_response_t *res, operon_http_error_t *err) {
    memset(res, 0, sizeof *res);
    memset(err, 0, sizeof *err);
    res->body = "";
    if (!req || !req->url) {
        *err = (operon_http_error_t){OPERON_HTTP_INVALID, "operon_http: the request has no URL"};
        return false;
    }
    if (!current_host || !current_host->fetch) {
        *err = (operon_http_error_t){OPERON_HTTP_DENIED, current_host ? "this host makes no HTTP calls"
                                                                      : "operon_http called outside a reconcile"};
        return false;
    }
    operon_http_request_t call = *req;
    if (!call.method) call.method = "GET";
    if (call.body && !call.body_len) call.body_len = strlen(call.body);
    if (!call.headers) call.headers_len = 0;
    if (!current_host->fetch(current_host->self, &call, res, err)) {
        if (!err->message) err->message = "";
        return false;
    }
    if (!res->body) res->body = "";
    return true;
}

bool operon_http_ok(const operon_http_response_t *res) { return res && res->status >= 200 && res->status < 300; }

const char *operon_http_header(const operon_http_response_t *res, const char *name) {
    for (size_t i = 0; res && name && i < res->headers_len; i++) {
        const char *a = res->headers[i].name, *b = name;
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return res->headers[i].value;
    }
    return NULL;
}

const operon_json_t *operon_http_json(const operon_http_response_t *res, const char **error) {
    const char *parse_error = NULL;
    const operon_json_t *v = operon_json_parse(res->body ? res->body : "", res->body ? res->body_len : 0, &parse_error);
    if (!v && error) *error = operon_sprintf("the HTTP answer (status %u) is not JSON: %s", (unsigned)res->status, parse_error);
    return v;
}

const char *operon_http_describe(const operon_http_request_t *req) {
    const char *method = req->method ? req->method : "GET";
    char *upper = arena_strndup(method, strlen(method));
    for (char *p = upper; *p; p++) *p = (char)toupper((unsigned char)*p);
    const char *out = operon_sprintf("%s %s", upper, nz(req->url));
    if (req->body) out = operon_sprintf("%s (%zu bytes of body)", out, req->body_len ? req->body_len : strlen(req->body));
    if (req->credential) {
        /* Quoted as the Rust runner quotes it (Debug of a string). */
        const char *quoted = "\"";
        for (const char *c = req->credential; *c; c++)
            quoted = *c == '"' || *c == '\\' ? operon_sprintf("%s\\%c", quoted, *c) : operon_sprintf("%s%c", quoted, *c);
        out = operon_sprintf("%s with credential %s\"", out, quoted);
    }
    return out;
}

/* ------------------------------------------------------------ run path */

static operon_json_t *parse_wire(operon_str_t s, const char **error) { return operon_json_parse(s.ptr, s.len, error); }

static void fail_raw(operon_raw_outcome_t *out, bool terminal, const char *message) {
    out->failed = true;
    out->terminal = terminal;
    out->failure = xstrdup(message);
}

void operon_run_reconcile(const operon_host_t *host, const operon_raw_request_t *raw, operon_raw_outcome_t *out) {
    memset(out, 0, sizeof *out);
    void *mark = operon_arena_mark();
    const operon_host_t *previous_host = current_host;
    current_host = host;

    const char *error = NULL;
    operon_json_t *parent = parse_wire(raw->object, &error);
    if (!parent || parent->type != OPERON_OBJECT) {
        fail_raw(out, true,
                 operon_sprintf("the parent is not a Kubernetes object: %s", error ? error : "not a JSON object"));
        goto done;
    }
    operon_request_t req = {0};
    req.object = parent;
    req.name = operon_json_string_at(parent, "metadata.name", "");
    req.namespace_ = operon_json_string_at(parent, "metadata.namespace", "");
    req.uid = operon_json_string_at(parent, "metadata.uid", "");
    req.kind = operon_json_string_at(parent, "kind", "");
    req.creation_timestamp = operon_json_string_at(parent, "metadata.creationTimestamp", "");
    operon_json_int(operon_json_at(parent, "metadata.generation"), &req.generation);
    req.finalizing = raw->finalizing;
    req.attempt = raw->attempt;
    req.now = raw->now.len ? arena_strndup(raw->now.ptr, raw->now.len) : "1970-01-01T00:00:00.000Z";
    if (!operon_time_parse(req.now, &req.now_unix_ms)) {
        fail_raw(out, true, operon_sprintf("the request's now %s is not an RFC 3339 time", req.now));
        goto done;
    }

    operon_children_t *children = arena_calloc(raw->children_len ? raw->children_len : 1, sizeof *children);
    for (size_t i = 0; i < raw->children_len; i++) {
        const operon_raw_children_t *group = &raw->children[i];
        const operon_json_t **objects = arena_calloc(group->len ? group->len : 1, sizeof *objects);
        operon_readiness_t *readiness = arena_calloc(group->len ? group->len : 1, sizeof *readiness);
        for (size_t j = 0; j < group->len; j++) {
            objects[j] = parse_wire(group->objects[j], &error);
            if (!objects[j]) {
                fail_raw(out, true, operon_sprintf("a child %s is invalid: %s", nz(group->kind.kind), error));
                goto done;
            }
            readiness[j].status = group->readiness ? group->readiness[j].status : OPERON_READINESS_UNKNOWN;
            readiness[j].message =
                group->readiness ? arena_strndup(group->readiness[j].message.ptr, group->readiness[j].message.len) : "";
        }
        children[i] = (operon_children_t){group->kind, objects, group->len, readiness};
    }
    req.children = children;
    req.children_len = raw->children_len;
    const operon_json_t **related = arena_calloc(raw->related_len ? raw->related_len : 1, sizeof *related);
    for (size_t i = 0; i < raw->related_len; i++) {
        related[i] = parse_wire(raw->related[i], &error);
        if (!related[i]) {
            fail_raw(out, true, operon_sprintf("a related object is invalid: %s", error));
            goto done;
        }
    }
    req.related = related;
    req.related_len = raw->related_len;

    operon_outcome_t outcome = {0};
    outcome.desired_tail = &outcome.desired;
    outcome.events_tail = &outcome.events;
    operon_result_t result = operon_reconcile(&req, &outcome);
    if (result != OPERON_OK || outcome.failed) {
        if (outcome.failure_status && outcome.failure_status->type != OPERON_OBJECT) {
            fail_raw(out, true, "the failure's status must be a JSON object");
            goto done;
        }
        fail_raw(out, outcome.failed ? outcome.terminal : false,
                 outcome.failed ? outcome.failure : "operon_reconcile failed without operon_terminal or operon_transient");
        if (outcome.failed && outcome.failure_status) out->failure_status = write_malloc(outcome.failure_status, NULL);
        goto done;
    }
    const operon_json_t *metadata[] = {outcome.labels, outcome.annotations};
    for (size_t m = 0; m < 2; m++) {
        const operon_json_t *map = metadata[m];
        bool strings = map == NULL || map->type == OPERON_OBJECT;
        for (size_t i = 0; strings && i < operon_json_len(map); i++)
            strings = operon_json_type(map->u.c.items[i]) == OPERON_STRING;
        if (!strings) {
            fail_raw(out, true,
                     operon_sprintf("the parent's %s must be a JSON object of strings", m ? "annotations" : "labels"));
            goto done;
        }
    }

    size_t n = 0;
    for (desired_t *d = outcome.desired; d; d = d->next) n++;
    for (desired_t *d = outcome.desired; d; d = d->next) {
        const char *missing = !operon_json_string(operon_json_get(d->object, "apiVersion")) ? "apiVersion"
                              : !operon_json_string(operon_json_get(d->object, "kind"))     ? "kind"
                                                                                            : NULL;
        if (operon_json_type(d->object) != OPERON_OBJECT || missing) {
            fail_raw(out, true,
                     operon_sprintf("desired object %s has no %s",
                                    operon_json_string_at(d->object, "metadata.name", "<unnamed>"),
                                    missing ? missing : "apiVersion"));
            goto done;
        }
    }
    if (outcome.status && outcome.status->type != OPERON_OBJECT) {
        fail_raw(out, true, "the status must be a JSON object");
        goto done;
    }
    out->desired = calloc(n ? n : 1, sizeof *out->desired);
    if (!out->desired) oom();
    for (desired_t *d = outcome.desired; d; d = d->next) out->desired[out->desired_len++] = write_malloc(d->object, NULL);
    if (outcome.status) out->status = write_malloc(outcome.status, NULL);
    n = 0;
    for (event_t *e = outcome.events; e; e = e->next) n++;
    out->events = calloc(n ? n : 1, sizeof *out->events);
    if (!out->events) oom();
    for (event_t *e = outcome.events; e; e = e->next) {
        out->events[out->events_len++] = (operon_raw_event_t){e->warning, xstrdup(e->reason), xstrdup(e->message)};
    }
    out->has_requeue = outcome.has_requeue;
    out->requeue_after_ms = outcome.requeue_after_ms;
    if (outcome.requeue_at) out->requeue_at = xstrdup(outcome.requeue_at);
    out->finalized = outcome.finalized;
    /* 0.2 adds the finalizer only where an outcome asks for it: asking by
     * default keeps 0.1's behaviour for code that never says. */
    const operon_manifest_t *manifest = operon_manifest();
    out->needs_finalizer = outcome.needs_finalizer_set ? outcome.needs_finalizer
                                                       : manifest && manifest->finalizer && !req.finalizing;
    if (outcome.has_parent_metadata) {
        out->has_parent_metadata = true;
        operon_raw_pair_t **pairs[] = {&out->labels, &out->annotations};
        size_t *lens[] = {&out->labels_len, &out->annotations_len};
        for (size_t m = 0; m < 2; m++) {
            size_t len = operon_json_len(metadata[m]);
            *pairs[m] = calloc(len ? len : 1, sizeof **pairs[m]);
            if (!*pairs[m]) oom();
            for (size_t i = 0; i < len; i++) {
                const operon_json_t *v = metadata[m]->u.c.items[i];
                (*pairs[m])[i] = (operon_raw_pair_t){xstrdup(metadata[m]->u.c.keys[i]), xstrndup(v->u.s.ptr, v->u.s.len)};
            }
            *lens[m] = len;
        }
    }

done:
    current_host = previous_host;
    operon_arena_release(mark);
}

void operon_raw_outcome_free(operon_raw_outcome_t *out) {
    free(out->failure);
    free(out->failure_status);
    free(out->requeue_at);
    for (size_t i = 0; i < out->labels_len; i++) free(out->labels[i].key), free(out->labels[i].value);
    for (size_t i = 0; i < out->annotations_len; i++) free(out->annotations[i].key), free(out->annotations[i].value);
    free(out->labels);
    free(out->annotations);
    for (size_t i = 0; i < out->desired_len; i++) free(out->desired[i]);
    free(out->desired);
    free(out->status);
    for (size_t i = 0; i < out->events_len; i++) {
        free(out->events[i].reason);
        free(out->events[i].message);
    }
    free(out->events);
    memset(out, 0, sizeof *out);
}

/* ----------------------------------------------------------- admission */

typedef struct warning {
    const char *text;
    struct warning *next;
} warning_t;

struct operon_admission {
    bool denied;
    const char *message;
    uint16_t code;
    warning_t *warnings, **warnings_tail;
    operon_json_t *patched;
};

operon_result_t operon_deny(operon_admission_t *answer, uint16_t code, const char *format, ...) {
    if (!answer->denied) {
        va_list args;
        va_start(args, format);
        answer->message = arena_vsprintf(format, args);
        va_end(args);
        answer->denied = true;
        answer->code = code;
    }
    return OPERON_FAILED;
}

void operon_admission_warn(operon_admission_t *answer, const char *format, ...) {
    warning_t *w = arena_calloc(1, sizeof *w);
    va_list args;
    va_start(args, format);
    w->text = arena_vsprintf(format, args);
    va_end(args);
    *answer->warnings_tail = w;
    answer->warnings_tail = &w->next;
}

void operon_admission_patch(operon_admission_t *answer, operon_json_t *object) { answer->patched = object; }

static const char *opt_str(const operon_str_t *s) { return s ? arena_strndup(s->ptr, s->len) : NULL; }

void operon_run_admission(const operon_host_t *host, operon_admission_fn fn, const operon_raw_review_t *raw,
                          operon_raw_admission_t *out) {
    memset(out, 0, sizeof *out);
    if (!fn) return;
    void *mark = operon_arena_mark();
    const operon_host_t *previous_host = current_host;
    current_host = host;
    operon_review_t review = {
        .uid = arena_strndup(raw->uid.ptr, raw->uid.len),
        .operation = raw->operation,
        .kind = raw->kind,
        .sub_resource = opt_str(raw->sub_resource),
        .namespace_ = opt_str(raw->namespace_),
        .name = arena_strndup(raw->name.ptr, raw->name.len),
        .object = raw->object ? parse_wire(*raw->object, NULL) : NULL,
        .old_object = raw->old_object ? parse_wire(*raw->old_object, NULL) : NULL,
        .username = arena_strndup(raw->username.ptr, raw->username.len),
        .dry_run = raw->dry_run,
    };
    operon_admission_t answer = {0};
    answer.warnings_tail = &answer.warnings;
    operon_result_t result = fn(&review, &answer);
    if (answer.denied || result != OPERON_OK) {
        out->denied = true;
        out->message = xstrdup(answer.denied ? answer.message : "denied without a message (use operon_deny)");
        out->code = answer.code;
    } else {
        size_t n = 0;
        for (warning_t *w = answer.warnings; w; w = w->next) n++;
        out->warnings = calloc(n ? n : 1, sizeof *out->warnings);
        if (!out->warnings) oom();
        for (warning_t *w = answer.warnings; w; w = w->next) out->warnings[out->warnings_len++] = xstrdup(w->text);
        if (answer.patched) out->patched = write_malloc(answer.patched, NULL);
    }
    current_host = previous_host;
    operon_arena_release(mark);
}

void operon_raw_admission_free(operon_raw_admission_t *out) {
    free(out->message);
    for (size_t i = 0; i < out->warnings_len; i++) free(out->warnings[i]);
    free(out->warnings);
    free(out->patched);
    memset(out, 0, sizeof *out);
}

/* ---------------------------------------------------------- conversion */

typedef struct converted {
    operon_json_t *object;
    struct converted *next;
} converted_t;

struct operon_conversion {
    converted_t *objects, **tail;
    bool failed;
    const char *error;
};

void operon_converted(operon_conversion_t *answer, operon_json_t *object) {
    converted_t *c = arena_calloc(1, sizeof *c);
    c->object = object;
    *answer->tail = c;
    answer->tail = &c->next;
}

operon_result_t operon_conversion_error(operon_conversion_t *answer, const char *format, ...) {
    if (!answer->failed) {
        va_list args;
        va_start(args, format);
        answer->error = arena_vsprintf(format, args);
        va_end(args);
        answer->failed = true;
    }
    return OPERON_FAILED;
}

void operon_run_convert(const operon_host_t *host, operon_convert_fn fn, const operon_str_t *objects, size_t len,
                        operon_str_t desired_api_version, operon_raw_conversion_t *out) {
    memset(out, 0, sizeof *out);
    void *mark = operon_arena_mark();
    const operon_host_t *previous_host = current_host;
    current_host = host;
    const operon_json_t **parsed = arena_calloc(len ? len : 1, sizeof *parsed);
    const char *error = NULL;
    for (size_t i = 0; i < len && !error; i++) {
        parsed[i] = parse_wire(objects[i], &error);
        if (!parsed[i]) error = operon_sprintf("object %zu is not JSON: %s", i, error);
    }
    operon_conversion_t answer = {0};
    answer.tail = &answer.objects;
    if (!error && !fn) error = "this module does not convert (no operon_convert)";
    if (!error) {
        operon_result_t result = fn(parsed, len, arena_strndup(desired_api_version.ptr, desired_api_version.len), &answer);
        if (answer.failed || result != OPERON_OK)
            error = answer.failed ? answer.error : "operon_convert failed without operon_conversion_error";
    }
    if (error) {
        out->failed = true;
        out->error = xstrdup(error);
    } else {
        size_t n = 0;
        for (converted_t *c = answer.objects; c; c = c->next) n++;
        out->objects = calloc(n ? n : 1, sizeof *out->objects);
        if (!out->objects) oom();
        for (converted_t *c = answer.objects; c; c = c->next) out->objects[out->len++] = write_malloc(c->object, NULL);
    }
    current_host = previous_host;
    operon_arena_release(mark);
}

void operon_raw_conversion_free(operon_raw_conversion_t *out) {
    free(out->error);
    for (size_t i = 0; i < out->len; i++) free(out->objects[i]);
    free(out->objects);
    memset(out, 0, sizeof *out);
}
