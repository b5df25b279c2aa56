/* operon_testing.c — the fake cluster and helpers of operon_testing.h.
 * Native only (POSIX: popen runs `operon readiness`). */
#define _POSIX_C_SOURCE 200809L
#include "operon_testing.h"

#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int operon_test_passed, operon_test_failed, operon_test_current_failed;

int operon_test_summary(void) {
    printf("%d passed, %d failed\n", operon_test_passed, operon_test_failed);
    return operon_test_failed ? 1 : 0;
}

/* One recorded HTTP exchange (malloc'd). */
typedef struct fake_exchange {
    char *method, *url, *credential; /* credential NULL: none */
    char *body;                      /* NULL: none */
    size_t body_len;
    bool has_response;
    uint16_t status;
    operon_http_header_t *headers; /* malloc'd names and values */
    size_t headers_len;
    char *response_body;
    size_t response_body_len;
    bool has_error;
    operon_http_error_kind_t error_kind;
    char *error_message;
    bool used;
} fake_exchange_t;

struct operon_fake_cluster {
    char **objects;
    size_t len;
    char **logs;
    size_t logs_len;
    const char *namespace_; /* the parent's, during a reconcile */
    fake_exchange_t *exchanges;
    size_t exchanges_len;
    char **missed; /* the calls of the last run no exchange answered, described */
    size_t missed_len;
    bool no_egress; /* admission and conversion: every call is denied */
};

static char *copy_text(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (!out) abort();
    memcpy(out, s, n + 1);
    return out;
}

operon_fake_cluster_t *operon_fake_cluster_new(void) {
    operon_fake_cluster_t *c = calloc(1, sizeof *c);
    if (!c) abort();
    return c;
}

void operon_fake_cluster_add(operon_fake_cluster_t *c, const char *json) {
    char **objects = realloc(c->objects, (c->len + 1) * sizeof *objects);
    if (!objects) abort();
    c->objects = objects;
    c->objects[c->len++] = copy_text(json);
}

static void clear_missed(operon_fake_cluster_t *c) {
    for (size_t i = 0; i < c->missed_len; i++) free(c->missed[i]);
    free(c->missed);
    c->missed = NULL;
    c->missed_len = 0;
}

void operon_fake_cluster_free(operon_fake_cluster_t *c) {
    if (!c) return;
    for (size_t i = 0; i < c->len; i++) free(c->objects[i]);
    for (size_t i = 0; i < c->logs_len; i++) free(c->logs[i]);
    for (size_t i = 0; i < c->exchanges_len; i++) {
        fake_exchange_t *e = &c->exchanges[i];
        free(e->method);
        free(e->url);
        free(e->credential);
        free(e->body);
        for (size_t h = 0; h < e->headers_len; h++) {
            free((char *)e->headers[h].name);
            free((char *)e->headers[h].value);
        }
        free(e->headers);
        free(e->response_body);
        free(e->error_message);
    }
    free(c->exchanges);
    clear_missed(c);
    free(c->objects);
    free(c->logs);
    free(c);
}

size_t operon_fake_cluster_logs(const operon_fake_cluster_t *c) { return c->logs_len; }

const char *operon_fake_cluster_log(const operon_fake_cluster_t *c, size_t i) {
    return i < c->logs_len ? c->logs[i] : NULL;
}

static void fake_log(void *self, operon_level_t level, const char *message, size_t nfields, const char *const *fields) {
    operon_fake_cluster_t *c = self;
    (void)level;
    const char *line = message;
    for (size_t i = 0; i < nfields; i++) line = operon_sprintf("%s %s=%s", line, fields[2 * i], fields[2 * i + 1]);
    char **logs = realloc(c->logs, (c->logs_len + 1) * sizeof *logs);
    if (!logs) abort();
    c->logs = logs;
    c->logs[c->logs_len++] = copy_text(line);
}

/* Whether object i is of kind and in namespace_ ("" means the parent's). */
static const operon_json_t *in_scope(operon_fake_cluster_t *c, size_t i, operon_gvk_t kind, const char *namespace_) {
    const operon_json_t *o = operon_json_parse(c->objects[i], strlen(c->objects[i]), NULL);
    if (!o || !operon_is_kind(o, kind)) return NULL;
    const char *want = *namespace_ ? namespace_ : (c->namespace_ ? c->namespace_ : "");
    const char *ns = operon_json_string_at(o, "metadata.namespace", NULL);
    return !ns || !*want || strcmp(ns, want) == 0 ? o : NULL;
}

static int fake_get(void *self, operon_gvk_t kind, const char *namespace_, const char *name, char **object,
                    char **error) {
    operon_fake_cluster_t *c = self;
    (void)error;
    for (size_t i = 0; i < c->len; i++) {
        const operon_json_t *o = in_scope(c, i, kind, namespace_);
        if (o && strcmp(operon_json_string_at(o, "metadata.name", ""), name) == 0) {
            *object = copy_text(c->objects[i]);
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ selectors */

typedef enum { REQ_EXISTS, REQ_NOT_EXISTS, REQ_IN, REQ_NOT_IN } req_op_t;

typedef struct {
    const char *key;
    req_op_t op;
    const char **values;
    size_t len;
} requirement_t;

struct operon_selector {
    requirement_t *requirements;
    size_t len;
};

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static bool is_symbol(char c) { return c && strchr("!=(),<>", c) != NULL; }
static bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* Up to 63 of [A-Za-z0-9-_.], alphanumeric at both ends. */
static bool is_name(const char *s, size_t n) {
    if (n == 0 || n > 63 || !is_alnum(s[0]) || !is_alnum(s[n - 1])) return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
    return true;
}

/* A DNS label: up to 63 of [a-z0-9-], alphanumeric at both ends. */
static bool is_dns_label(const char *s, size_t n) {
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-')) return false;
    return true;
}

/* The parser's state: tokens (words and the symbols ! != = == ( ) ,), the
 * next one, and the first error. */
typedef struct {
    const char **tokens;
    size_t len, at;
    const char *error;
} selector_parser_t;

static const char *peek(selector_parser_t *p) { return p->at < p->len ? p->tokens[p->at] : NULL; }
static const char *next(selector_parser_t *p) {
    const char *t = peek(p);
    p->at++;
    return t;
}
static bool is_word(const char *t) { return t && !is_symbol(t[0]); }
static bool is_token(const char *t, const char *want) { return t && strcmp(t, want) == 0; }
static const char *shown(const char *t) { return t ? operon_sprintf("'%s'", t) : "the end"; }
static bool fail(selector_parser_t *p, const char *error) {
    if (!p->error) p->error = error;
    return false;
}

static bool tokenize(selector_parser_t *p, const char *text) {
    p->tokens = operon_alloc((strlen(text) + 1) * sizeof *p->tokens);
    for (const char *at = text; *at;) {
        size_t n = 1;
        if (is_space(*at)) {
            at++;
            continue;
        }
        if (*at == '<' || *at == '>')
            return fail(p, operon_sprintf("the %c operator is not supported (use in, notin, = or !=)", *at));
        if ((at[0] == '!' || at[0] == '=') && at[1] == '=')
            n = 2;
        else if (!is_symbol(*at))
            while (at[n] && !is_space(at[n]) && !is_symbol(at[n])) n++;
        p->tokens[p->len++] = operon_sprintf("%.*s", (int)n, at);
        at += n;
    }
    return true;
}

static bool check_key(selector_parser_t *p, const char *key) {
    const char *slash = strrchr(key, '/'), *name = slash ? slash + 1 : key;
    if (slash) {
        bool ok = slash - key <= 253;
        for (const char *l = key; ok && l <= slash;) {
            const char *end = l;
            while (end < slash && *end != '.') end++;
            ok = is_dns_label(l, (size_t)(end - l));
            l = end + 1;
        }
        if (!ok)
            return fail(p, operon_sprintf("invalid label key \"%s\": the prefix must be a lowercase DNS subdomain", key));
    }
    if (!is_name(name, strlen(name)))
        return fail(p, operon_sprintf("invalid label key \"%s\": the name must be 1-63 characters of [A-Za-z0-9-_.], "
                                      "starting and ending with a letter or digit",
                                      key));
    return true;
}

static bool check_value(selector_parser_t *p, const char *value) {
    if (!*value || is_name(value, strlen(value))) return true;
    return fail(p, operon_sprintf("invalid label value \"%s\": at most 63 characters of [A-Za-z0-9-_.], starting and "
                                  "ending with a letter or digit",
                                  value));
}

static const char *read_key(selector_parser_t *p) {
    const char *t = next(p);
    if (!is_word(t)) {
        fail(p, operon_sprintf("expected a label key, found %s", shown(t)));
        return NULL;
    }
    return check_key(p, t) ? t : NULL;
}

/* The value after = or !=: empty when nothing follows. */
static bool read_value(selector_parser_t *p, requirement_t *r) {
    const char *t = peek(p);
    r->values = operon_alloc(sizeof *r->values);
    r->len = 1;
    r->values[0] = "";
    if (!t || is_token(t, ",")) return true;
    if (!is_word(t)) return fail(p, operon_sprintf("expected a label value, found %s", shown(t)));
    p->at++;
    r->values[0] = t;
    return check_value(p, t);
}

/* (a,b); an empty place in the list is the empty value. */
static bool read_set(selector_parser_t *p, requirement_t *r) {
    if (!is_token(next(p), "(")) return fail(p, "expected '(' after in or notin");
    r->values = operon_alloc((p->len + 1) * sizeof *r->values);
    const char *current = NULL;
    for (;;) {
        const char *t = next(p);
        if (is_word(t) && !current) {
            if (!check_value(p, t)) return false;
            current = t;
        } else if (is_token(t, ",")) {
            r->values[r->len++] = current ? current : "";
            current = NULL;
        } else if (is_token(t, ")")) {
            r->values[r->len++] = current ? current : "";
            return true;
        } else if (!t) {
            return fail(p, "unclosed parenthesis");
        } else {
            return fail(p, operon_sprintf("expected a value, ',' or ')' in a set, found %s", shown(t)));
        }
    }
}

static bool read_requirement(selector_parser_t *p, requirement_t *r) {
    if (is_token(peek(p), "!")) {
        p->at++;
        r->op = REQ_NOT_EXISTS;
        return (r->key = read_key(p)) != NULL;
    }
    if (!(r->key = read_key(p))) return false;
    const char *t = peek(p);
    r->op = REQ_EXISTS;
    if (!t || is_token(t, ",")) return true;
    p->at++;
    if (is_token(t, "=") || is_token(t, "==") || is_token(t, "!=")) {
        r->op = t[0] == '!' ? REQ_NOT_IN : REQ_IN;
        return read_value(p, r);
    }
    if (is_token(t, "in") || is_token(t, "notin")) {
        r->op = t[0] == 'n' ? REQ_NOT_IN : REQ_IN;
        return read_set(p, r);
    }
    return fail(p, operon_sprintf("expected an operator (=, ==, !=, in, notin) after \"%s\", found %s", r->key,
                                  shown(t)));
}

const operon_selector_t *operon_selector_parse(const char *text, const char **error) {
    selector_parser_t p = {0};
    operon_selector_t *s = operon_alloc(sizeof *s);
    text = text ? text : "";
    bool ok = tokenize(&p, text);
    s->requirements = operon_alloc((p.len + 1) * sizeof *s->requirements);
    s->len = 0;
    while (ok && p.len) {
        requirement_t *r = &s->requirements[s->len++];
        memset(r, 0, sizeof *r);
        if (!(ok = read_requirement(&p, r))) break;
        const char *t = next(&p);
        if (!t) break;
        if (!is_token(t, ","))
            ok = fail(&p, operon_sprintf("expected ',' or the end after a requirement, found %s", shown(t)));
        else if (!is_word(peek(&p)) && !is_token(peek(&p), "!"))
            ok = fail(&p, "expected a requirement after ','");
    }
    if (ok) return s;
    if (error) *error = operon_sprintf("invalid label selector \"%s\": %s", text, p.error);
    return NULL;
}

bool operon_selector_matches(const operon_selector_t *selector, const operon_json_t *labels) {
    for (size_t i = 0; i < selector->len; i++) {
        const requirement_t *r = &selector->requirements[i];
        const operon_json_t *label = operon_json_get(labels, r->key);
        const char *value = operon_json_string(label);
        bool in = false;
        for (size_t j = 0; j < r->len && value; j++) in = in || strcmp(value, r->values[j]) == 0;
        bool holds = r->op == REQ_EXISTS ? label != NULL : r->op == REQ_NOT_EXISTS ? label == NULL : r->op == REQ_IN ? in : !in;
        if (!holds) return false;
    }
    return true;
}

static int fake_list(void *self, operon_gvk_t kind, const char *namespace_, const char *selector_text, char ***objects,
                     size_t *len, char **error) {
    operon_fake_cluster_t *c = self;
    const char *why = NULL;
    const operon_selector_t *selector = operon_selector_parse(selector_text, &why);
    if (!selector) {
        *error = copy_text(why);
        return -1;
    }
    *objects = calloc(c->len ? c->len : 1, sizeof **objects);
    if (!*objects) abort();
    *len = 0;
    for (size_t i = 0; i < c->len; i++) {
        const operon_json_t *o = in_scope(c, i, kind, namespace_);
        if (o && operon_selector_matches(selector, operon_json_at(o, "metadata.labels")))
            (*objects)[(*len)++] = copy_text(c->objects[i]);
    }
    return 0;
}

/* ---------------------------------------------------------------- egress */

static char *copy_bytes(const char *p, size_t n) {
    char *out = malloc(n + 1);
    if (!out) abort();
    if (n) memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* Decodes standard base64 (padding optional) into the arena; NULL when malformed. */
static char *base64_decode(const char *text, size_t len, size_t *out_len) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = operon_alloc(len / 4 * 3 + 4);
    size_t n = 0;
    uint32_t bits = 0;
    int count = 0;
    size_t i = 0;
    for (; i < len && text[i] != '='; i++) {
        const char *at = memchr(alphabet, text[i], 64);
        if (!at || !text[i]) return NULL;
        bits = bits << 6 | (uint32_t)(at - alphabet);
        if (++count == 4) {
            out[n++] = (char)(bits >> 16);
            out[n++] = (char)(bits >> 8);
            out[n++] = (char)bits;
            bits = 0;
            count = 0;
        }
    }
    for (; i < len; i++)
        if (text[i] != '=') return NULL;
    if (count == 1) return NULL;
    if (count == 2) out[n++] = (char)(bits >> 4);
    if (count == 3) {
        out[n++] = (char)(bits >> 10);
        out[n++] = (char)(bits >> 2);
    }
    *out_len = n;
    return out;
}

/* A body of the fixture format: text, or {"base64": ...}; NULL with *why when malformed. */
static char *body_of(const operon_json_t *v, size_t *len, const char **why) {
    if (operon_json_type(v) == OPERON_STRING) {
        *len = operon_json_string_len(v);
        return copy_bytes(operon_json_string(v), *len);
    }
    const operon_json_t *b64 = operon_json_get(v, "base64");
    if (operon_json_type(v) != OPERON_OBJECT || operon_json_len(v) != 1 || operon_json_type(b64) != OPERON_STRING) {
        *why = "a body is text or {\"base64\": ...}";
        return NULL;
    }
    char *bytes = base64_decode(operon_json_string(b64), operon_json_string_len(b64), len);
    if (!bytes) {
        *why = "body.base64 is not base64";
        return NULL;
    }
    return copy_bytes(bytes, *len);
}

/* Headers of the fixture format: a map of strings, kept in its order. */
static const char *headers_of(const operon_json_t *map, operon_http_header_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!map) return NULL;
    if (operon_json_type(map) != OPERON_OBJECT) return "headers are a map of names to values";
    *out = calloc(operon_json_len(map) + 1, sizeof **out);
    if (!*out) abort();
    for (size_t i = 0; i < operon_json_len(map); i++) {
        const operon_json_t *value = operon_json_value(map, i);
        if (operon_json_type(value) != OPERON_STRING) return "a header's value is text";
        (*out)[i].name = copy_text(operon_json_key(map, i));
        (*out)[i].value = copy_text(operon_json_string(value));
        (*len)++;
    }
    return NULL;
}

/* Whether every key of object is one of the NULL-terminated keys. */
static const char *unknown_key(const operon_json_t *object, const char *const *keys) {
    for (size_t i = 0; i < operon_json_len(object); i++) {
        bool known = false;
        for (const char *const *k = keys; *k; k++) known = known || strcmp(operon_json_key(object, i), *k) == 0;
        if (!known) return operon_json_key(object, i);
    }
    return NULL;
}

/* Reads one exchange into e (zeroed); NULL, or why it is malformed. */
static const char *read_exchange(const operon_json_t *v, fake_exchange_t *e) {
    static const char *const exchange_keys[] = {"request", "response", "error", NULL};
    static const char *const request_keys[] = {"method", "url", "headers", "body", "credential", "timeoutMs", NULL};
    static const char *const response_keys[] = {"status", "headers", "body", NULL};
    const char *unknown, *why = NULL;
    if (operon_json_type(v) != OPERON_OBJECT) return "an exchange is {request, response} or {request, error}";
    if ((unknown = unknown_key(v, exchange_keys))) return operon_sprintf("unknown key %s", unknown);
    const operon_json_t *request = operon_json_get(v, "request");
    if (operon_json_type(request) != OPERON_OBJECT) return "no request";
    if ((unknown = unknown_key(request, request_keys))) return operon_sprintf("request: unknown key %s", unknown);
    const char *method = operon_json_string_at(request, "method", NULL), *url = operon_json_string_at(request, "url", NULL);
    if (!method || !url) return "request: method and url are text";
    e->method = copy_text(method);
    e->url = copy_text(url);
    const operon_json_t *credential = operon_json_get(request, "credential");
    if (credential && operon_json_type(credential) != OPERON_NULL) {
        if (!operon_json_string(credential)) return "request.credential is text";
        e->credential = copy_text(operon_json_string(credential));
    }
    const operon_json_t *body = operon_json_get(request, "body");
    if (body && operon_json_type(body) != OPERON_NULL && !(e->body = body_of(body, &e->body_len, &why)))
        return operon_sprintf("request: %s", why);
    operon_http_header_t *ignored = NULL;
    size_t ignored_len = 0;
    why = headers_of(operon_json_get(request, "headers"), &ignored, &ignored_len); /* read, not compared */
    for (size_t i = 0; i < ignored_len; i++) {
        free((char *)ignored[i].name);
        free((char *)ignored[i].value);
    }
    free(ignored);
    if (why) return operon_sprintf("request: %s", why);
    const operon_json_t *response = operon_json_get(v, "response");
    if (response) {
        int64_t status = 0;
        if (operon_json_type(response) != OPERON_OBJECT) return "response is {status, headers, body}";
        if ((unknown = unknown_key(response, response_keys))) return operon_sprintf("response: unknown key %s", unknown);
        if (!operon_json_int(operon_json_get(response, "status"), &status) || status < 0 || status > 65535)
            return "response.status is a number";
        e->has_response = true;
        e->status = (uint16_t)status;
        if ((why = headers_of(operon_json_get(response, "headers"), &e->headers, &e->headers_len)))
            return operon_sprintf("response: %s", why);
        const operon_json_t *rbody = operon_json_get(response, "body");
        if (rbody && operon_json_type(rbody) != OPERON_NULL) {
            if (!(e->response_body = body_of(rbody, &e->response_body_len, &why))) return operon_sprintf("response: %s", why);
        }
    }
    const operon_json_t *error = operon_json_get(v, "error");
    if (error) {
        if (operon_json_type(error) != OPERON_OBJECT || operon_json_len(error) != 1 ||
            !operon_json_string(operon_json_value(error, 0)))
            return "error is {kind: message}";
        bool known = false;
        for (int k = OPERON_HTTP_DENIED; k <= OPERON_HTTP_NOT_RECORDED && !known; k++) {
            if (strcmp(operon_json_key(error, 0), operon_http_error_name((operon_http_error_kind_t)k)) == 0) {
                known = true;
                e->error_kind = (operon_http_error_kind_t)k;
            }
        }
        if (!known)
            return operon_sprintf("error: unknown kind %s (denied, invalid, timeout, unreachable, tooLarge, budget, "
                                  "notRecorded)",
                                  operon_json_key(error, 0));
        e->has_error = true;
        e->error_message = copy_text(operon_json_string(operon_json_value(error, 0)));
    }
    return NULL;
}

void operon_fake_cluster_egress(operon_fake_cluster_t *c, const char *egress) {
    void *mark = operon_arena_mark();
    const char *parse_error = NULL;
    const operon_json_t *v = operon_json_parse(egress, strlen(egress), &parse_error);
    const char *why = v ? NULL : parse_error;
    size_t n = operon_json_type(v) == OPERON_ARRAY ? operon_json_len(v) : 1;
    for (size_t i = 0; !why && i < n; i++) {
        fake_exchange_t *all = realloc(c->exchanges, (c->exchanges_len + 1) * sizeof *all);
        if (!all) abort();
        c->exchanges = all;
        fake_exchange_t *e = &c->exchanges[c->exchanges_len++];
        memset(e, 0, sizeof *e);
        why = read_exchange(operon_json_type(v) == OPERON_ARRAY ? operon_json_item(v, i) : v, e);
        if (why) why = operon_sprintf("egress[%zu]: %s", i, why);
    }
    if (why) {
        fprintf(stderr, "operon_fake_cluster_egress: %s in %s\n", why, egress);
        abort(); /* a broken test */
    }
    operon_arena_release(mark);
}

size_t operon_fake_cluster_missed(const operon_fake_cluster_t *c) { return c->missed_len; }

const char *operon_fake_cluster_missed_call(const operon_fake_cluster_t *c, size_t i) {
    return i < c->missed_len ? c->missed[i] : NULL;
}

static const char *arena_bytes(const char *p, size_t n) {
    char *out = operon_alloc(n + 1);
    if (n) memcpy(out, p, n);
    return out;
}

static bool same_call(const fake_exchange_t *e, const operon_http_request_t *r) {
    size_t len = r->body ? r->body_len : 0;
    return strcasecmp(e->method, r->method) == 0 && strcmp(e->url, r->url) == 0 && e->body_len == len &&
           (len == 0 || memcmp(e->body, r->body, len) == 0) &&
           (e->credential ? r->credential && strcmp(e->credential, r->credential) == 0 : !r->credential);
}

static operon_http_request_t request_of(const fake_exchange_t *e) {
    return (operon_http_request_t){.method = e->method, .url = e->url, .body = e->body, .body_len = e->body_len,
                                   .credential = e->credential};
}

static bool fake_fetch(void *self, const operon_http_request_t *r, operon_http_response_t *res, operon_http_error_t *err) {
    operon_fake_cluster_t *c = self;
    if (c->no_egress) {
        *err = (operon_http_error_t){OPERON_HTTP_DENIED, "only reconcile may call out (admission and conversion may not)"};
        return false;
    }
    for (size_t i = 0; i < c->exchanges_len; i++) {
        fake_exchange_t *e = &c->exchanges[i];
        if (e->used || !same_call(e, r)) continue;
        e->used = true;
        if (e->has_error) {
            *err = (operon_http_error_t){e->error_kind, arena_bytes(e->error_message, strlen(e->error_message))};
            return false;
        }
        if (!e->has_response) {
            *err = (operon_http_error_t){OPERON_HTTP_NOT_RECORDED, "the recorded exchange has neither response nor error"};
            return false;
        }
        res->status = e->status;
        operon_http_header_t *headers = operon_alloc((e->headers_len + 1) * sizeof *headers);
        for (size_t h = 0; h < e->headers_len; h++) {
            headers[h].name = arena_bytes(e->headers[h].name, strlen(e->headers[h].name));
            headers[h].value = arena_bytes(e->headers[h].value, strlen(e->headers[h].value));
        }
        res->headers = headers;
        res->headers_len = e->headers_len;
        res->body = arena_bytes(e->response_body ? e->response_body : "", e->response_body_len);
        res->body_len = e->response_body_len;
        return true;
    }
    const char *call = operon_http_describe(r);
    char **missed = realloc(c->missed, (c->missed_len + 1) * sizeof *missed);
    if (!missed) abort();
    c->missed = missed;
    c->missed[c->missed_len++] = copy_text(call);
    const char *holds = " (it holds no calls)";
    for (size_t i = 0; i < c->exchanges_len; i++) {
        operon_http_request_t recorded = request_of(&c->exchanges[i]);
        holds = operon_sprintf("%s%s", i ? holds : " (it holds: ", operon_http_describe(&recorded));
        holds = operon_sprintf("%s%s", holds, i + 1 < c->exchanges_len ? "; " : ")");
    }
    *err = (operon_http_error_t){OPERON_HTTP_NOT_RECORDED, operon_sprintf("%s is not in the recording%s", call, holds)};
    return false;
}

static operon_host_t host_of(operon_fake_cluster_t *c) {
    return (operon_host_t){c, fake_log, fake_get, fake_list, fake_fetch};
}

/* ------------------------------------------------------------ readiness */

/* The operon binary: $OPERON (a path, or a name looked up on PATH), else
 * operon on PATH; NULL when there is none. */
static const char *find_operon(void) {
    const char *named = getenv("OPERON");
    const char *name = named && *named ? named : "operon";
    struct stat st;
    if (strchr(name, '/')) return access(name, X_OK) == 0 && stat(name, &st) == 0 && S_ISREG(st.st_mode) ? name : NULL;
    for (const char *p = getenv("PATH"); p && *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        const char *candidate = operon_sprintf("%.*s/%s", (int)n, n ? p : ".", name);
        if (access(candidate, X_OK) == 0 && stat(candidate, &st) == 0 && S_ISREG(st.st_mode)) return candidate;
        if (!colon) break;
        p = colon + 1;
    }
    return NULL;
}

/* s quoted for sh. */
static const char *shell_quote(const char *s) {
    const char *out = "'";
    for (const char *q; (q = strchr(s, '\''));) {
        out = operon_sprintf("%s%.*s'\\''", out, (int)(q - s), s);
        s = q + 1;
    }
    return operon_sprintf("%s%s'", out, s);
}

static bool status_named(const char *name, operon_readiness_status_t *out) {
    /* kstatus's spelling, as `operon readiness` prints it. */
    static const char *const names[] = {"Current", "InProgress", "Failed", "Terminating", "Unknown"};
    for (size_t i = 0; name && i < OPERON_LEN(names); i++)
        if (strcmp(name, names[i]) == 0) return *out = (operon_readiness_status_t)i, true;
    return false;
}

const char *operon_test_rate(const char *const *objects, size_t len, operon_readiness_t *readiness) {
    if (len == 0) return NULL;
    const char *operon = find_operon();
    if (!operon) {
        for (size_t i = 0; i < len; i++) readiness[i] = (operon_readiness_t){OPERON_READINESS_UNKNOWN, OPERON_TEST_NOT_RATED};
        return NULL;
    }
    const char *dir = getenv("TMPDIR");
    char *path = (char *)operon_sprintf("%s/operon-readiness-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return operon_sprintf("cannot write a file for operon readiness in %s", dir && *dir ? dir : "/tmp");
    FILE *file = fdopen(fd, "w");
    if (!file) {
        close(fd);
        unlink(path);
        return "cannot write a file for operon readiness";
    }
    fputc('[', file);
    for (size_t i = 0; i < len; i++) fprintf(file, "%s%s", i ? "," : "", objects[i]);
    fputc(']', file);
    fclose(file);
    const char *command = operon_sprintf("%s readiness %s", shell_quote(operon), shell_quote(path));
    FILE *pipe = popen(command, "r");
    const char *error = NULL;
    char *text = NULL;
    size_t text_len = 0;
    if (!pipe) {
        error = operon_sprintf("cannot run %s", command);
    } else {
        char chunk[4096];
        for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) {
            char *more = operon_alloc(text_len + n + 1);
            if (text_len) memcpy(more, text, text_len);
            memcpy(more + text_len, chunk, n);
            text = more;
            text_len += n;
        }
        int status = pclose(pipe);
        if (status != 0) error = operon_sprintf("%s failed (wait status %d)", command, status);
    }
    unlink(path);
    if (error) return error;
    const char *parse_error = NULL;
    const operon_json_t *list = operon_json_parse(text ? text : "", text_len, &parse_error);
    if (operon_json_len(list) != len || operon_json_type(list) != OPERON_ARRAY)
        return operon_sprintf("%s did not print one readiness per object: %.*s", command, (int)text_len, text ? text : "");
    for (size_t i = 0; i < len; i++) {
        const operon_json_t *r = operon_json_item(list, i);
        readiness[i].message = operon_json_string_at(r, "message", "");
        if (!status_named(operon_json_string_at(r, "status", NULL), &readiness[i].status))
            return operon_sprintf("%s printed an unknown status: %s", command, operon_json_text(r, NULL));
    }
    return NULL;
}

/* -------------------------------------------------------------- requests */

void operon_test_run(operon_fake_cluster_t *cluster, const operon_test_request_t *test, operon_raw_outcome_t *out) {
    operon_fake_cluster_t *own = cluster ? NULL : operon_fake_cluster_new();
    operon_fake_cluster_t *c = cluster ? cluster : own;
    void *mark = operon_arena_mark();
    memset(out, 0, sizeof *out);
    const operon_manifest_t *m = operon_manifest();
    const char *parent = test->object ? test->object : "";
    size_t n_children = test->children_len;
    const char **texts = operon_alloc((n_children + 1) * sizeof *texts);
    for (size_t i = 0; i < n_children; i++) texts[i] = test->children[i].object;
    const operon_json_t *parsed_parent = operon_json_parse(parent, strlen(parent), NULL);
    c->namespace_ = operon_json_string_at(parsed_parent, "metadata.namespace", "");
    for (size_t i = 0; i < n_children; i++) {
        const operon_json_t *child = operon_json_parse(texts[i], strlen(texts[i]), NULL);
        bool owned = false;
        for (size_t k = 0; k < m->owns_len; k++) owned = owned || operon_is_kind(child, m->owns[k]);
        if (!owned) {
            out->failed = out->terminal = true;
            out->failure = copy_text("operon_test_reconcile: a child is of a kind the manifest does not own");
            goto done;
        }
    }
    /* Readiness: the test's, else the host's rules through the binary, in one run. */
    operon_readiness_t *readiness = operon_alloc((n_children + 1) * sizeof *readiness);
    const char **unrated = operon_alloc((n_children + 1) * sizeof *unrated);
    size_t n_unrated = 0;
    for (size_t i = 0; i < n_children; i++) {
        if (test->children[i].readiness) readiness[i] = *test->children[i].readiness;
        else unrated[n_unrated++] = texts[i];
    }
    operon_readiness_t *rated = operon_alloc((n_unrated + 1) * sizeof *rated);
    const char *rate_error = operon_test_rate(unrated, n_unrated, rated);
    if (rate_error) {
        out->failed = out->terminal = true;
        out->failure = copy_text(operon_sprintf("operon_test_run: rating the children: %s", rate_error));
        goto done;
    }
    for (size_t i = 0, r = 0; i < n_children; i++)
        if (!test->children[i].readiness) readiness[i] = rated[r++];
    operon_raw_children_t *groups = operon_alloc((m->owns_len + 1) * sizeof *groups);
    for (size_t k = 0; k < m->owns_len; k++) {
        operon_str_t *objects = operon_alloc((n_children + 1) * sizeof *objects);
        operon_raw_readiness_t *ready = operon_alloc((n_children + 1) * sizeof *ready);
        size_t n = 0;
        for (size_t i = 0; i < n_children; i++) {
            const operon_json_t *child = operon_json_parse(texts[i], strlen(texts[i]), NULL);
            if (!operon_is_kind(child, m->owns[k])) continue;
            const char *message = readiness[i].message ? readiness[i].message : "";
            ready[n] = (operon_raw_readiness_t){readiness[i].status, {message, strlen(message)}};
            objects[n++] = (operon_str_t){texts[i], strlen(texts[i])};
        }
        groups[k] = (operon_raw_children_t){m->owns[k], objects, n, ready};
    }
    operon_str_t *related = operon_alloc((test->related_len + 1) * sizeof *related);
    for (size_t i = 0; i < test->related_len; i++) related[i] = (operon_str_t){test->related[i], strlen(test->related[i])};
    const char *now = test->now ? test->now : "1970-01-01T00:00:00.000Z";
    operon_raw_request_t req = {
        .object = {parent, strlen(parent)},
        .children = groups,
        .children_len = m->owns_len,
        .related = related,
        .related_len = test->related_len,
        .finalizing = test->finalizing,
        .attempt = test->attempt,
        .now = {now, strlen(now)},
    };
    operon_host_t host = host_of(c);
    clear_missed(c);
    operon_run_reconcile(&host, &req, out);
    if (c->missed_len) {
        /* A call the recording does not hold fails the run, whatever the
         * reconciler made of its not-recorded error. */
        const char *verdict = "the guest made calls the fixture's `egress` does not hold: ";
        for (size_t i = 0; i < c->missed_len; i++) verdict = operon_sprintf("%s%s%s", verdict, i ? "; " : "", c->missed[i]);
        operon_raw_outcome_free(out);
        memset(out, 0, sizeof *out);
        out->failed = out->terminal = out->unrecorded = true;
        out->failure = copy_text(verdict);
        goto done;
    }
    if (!out->failed) {
        const char *refused = operon_check_outcome(m, parent, texts, n_children, c, out);
        if (refused) {
            operon_raw_outcome_free(out);
            memset(out, 0, sizeof *out);
            out->failed = out->terminal = out->refused = true;
            out->failure = copy_text(operon_sprintf("outcome refused, nothing written: %s (the host checks this before writing)",
                                              refused));
        }
    }
done:
    c->namespace_ = NULL;
    operon_arena_release(mark);
    operon_fake_cluster_free(own);
}

void operon_test_reconcile(operon_fake_cluster_t *cluster, const char *parent, const char *const *children,
                           size_t children_len, bool finalizing, operon_raw_outcome_t *out) {
    void *mark = operon_arena_mark();
    operon_test_child_t *list = operon_alloc((children_len + 1) * sizeof *list);
    for (size_t i = 0; i < children_len; i++) list[i].object = children[i];
    operon_test_request_t req = {.object = parent, .children = list, .children_len = children_len, .finalizing = finalizing};
    operon_test_run(cluster, &req, out);
    operon_arena_release(mark);
}

void operon_test_convert(operon_convert_fn fn, const char *const *objects, size_t len, const char *desired_api_version,
                         operon_raw_conversion_t *out) {
    operon_fake_cluster_t *c = operon_fake_cluster_new();
    c->no_egress = true;
    operon_host_t host = host_of(c);
    operon_str_t *in = calloc(len ? len : 1, sizeof *in);
    if (!in) abort();
    for (size_t i = 0; i < len; i++) in[i] = (operon_str_t){objects[i], strlen(objects[i])};
    operon_run_convert(&host, fn, in, len, (operon_str_t){desired_api_version, strlen(desired_api_version)}, out);
    free(in);
    operon_fake_cluster_free(c);
}

void operon_test_admission(operon_admission_fn fn, operon_operation_t op, const char *object,
                           operon_raw_admission_t *out) {
    operon_fake_cluster_t *c = operon_fake_cluster_new();
    c->no_egress = true;
    operon_host_t host = host_of(c);
    operon_str_t text = {object, object ? strlen(object) : 0};
    operon_raw_review_t review = {
        .uid = {"operon-test", 11},
        .operation = op,
        .kind = {"", "", ""},
        .name = {"", 0},
        .object = object ? &text : NULL,
        .username = {"", 0},
    };
    operon_run_admission(&host, fn, &review, out);
    operon_fake_cluster_free(c);
}

/* ------------------------------------------------------------ the host's rules */

#include "operon_rules.h"

static const operon_json_t *rules(void) {
    return operon_json_parse(OPERON_RULES_JSON, sizeof OPERON_RULES_JSON - 1, NULL);
}

static int64_t rule_int(const char *key) {
    int64_t n = 0;
    operon_json_int(operon_json_get(rules(), key), &n);
    return n;
}

/* The kind of a rule in rules.json matches (a group, or one kind of it). */
static bool rule_matches(const operon_json_t *rule, operon_gvk_t kind) {
    const char *kind_ = operon_json_string_at(rule, "kind", NULL);
    return strcmp(operon_json_string_at(rule, "group", ""), kind.group) == 0 && (!kind_ || strcmp(kind_, kind.kind) == 0);
}

static const operon_json_t *find_rule(const char *list, operon_gvk_t kind) {
    const operon_json_t *rules_ = operon_json_get(rules(), list);
    for (size_t i = 0; i < operon_json_len(rules_); i++)
        if (rule_matches(operon_json_item(rules_, i), kind)) return operon_json_item(rules_, i);
    return NULL;
}

static const char *kind_text(operon_gvk_t k) {
    return *k.group ? operon_sprintf("%s/%s %s", k.group, k.version, k.kind) : operon_sprintf("%s %s", k.version, k.kind);
}

static bool kind_of(const operon_json_t *o, operon_gvk_t *out) {
    const char *api = operon_json_string_at(o, "apiVersion", NULL), *kind = operon_json_string_at(o, "kind", NULL);
    if (!api || !kind) return false;
    const char *slash = strrchr(api, '/');
    out->group = slash ? operon_sprintf("%.*s", (int)(slash - api), api) : "";
    out->version = slash ? slash + 1 : api;
    out->kind = kind;
    return true;
}

static bool same_kind(operon_gvk_t a, operon_gvk_t b) {
    return strcmp(a.group, b.group) == 0 && strcmp(a.version, b.version) == 0 && strcmp(a.kind, b.kind) == 0;
}

static bool valid_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || (int64_t)n > rule_int("maxNameBytes")) return false;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-' || name[i] == '.'))
            return false;
    bool first = (name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9');
    bool last = (name[n - 1] >= 'a' && name[n - 1] <= 'z') || (name[n - 1] >= '0' && name[n - 1] <= '9');
    return first && last;
}

/* Whether o is of kind, called name, in ns (an object without a namespace matches any). */
static bool is_object(const operon_json_t *o, operon_gvk_t kind, const char *ns, const char *name) {
    operon_gvk_t k;
    const char *o_ns = operon_json_string_at(o, "metadata.namespace", NULL);
    return kind_of(o, &k) && same_kind(k, kind) && strcmp(operon_json_string_at(o, "metadata.name", ""), name) == 0 &&
           (!o_ns || (ns && strcmp(o_ns, ns) == 0));
}

const char *operon_check_outcome(const operon_manifest_t *m, const char *parent_json, const char *const *children,
                                 size_t children_len, const operon_fake_cluster_t *cluster,
                                 const operon_raw_outcome_t *out) {
    int64_t max_desired = rule_int("maxDesired"), max_events = rule_int("maxEvents");
    int64_t max_bytes = rule_int("maxObjectBytes"), max_reason = rule_int("maxReasonBytes");
    if ((int64_t)out->desired_len > max_desired)
        return operon_sprintf("%zu desired objects exceed the limit of %lld per outcome (the host's "
                              "--max-children-per-outcome)",
                              out->desired_len, (long long)max_desired);
    if ((int64_t)out->events_len > max_events)
        return operon_sprintf("%zu events exceed the limit of %lld per outcome (the host's --max-events-per-outcome)",
                              out->events_len, (long long)max_events);
    const char *owned = "";
    for (size_t k = 0; k < m->owns_len; k++)
        owned = operon_sprintf("%s%s%s", owned, k ? ", " : "", kind_text(m->owns[k]));
    if (!*owned) owned = "none";
    const operon_json_t *parent = operon_json_parse(parent_json, strlen(parent_json), NULL);
    const char *parent_ns = operon_json_string_at(parent, "metadata.namespace", NULL);
    const char *uid = operon_json_string_at(parent, "metadata.uid", NULL);
    operon_json_t *owner = operon_json_object();
    operon_json_set(owner, "apiVersion", operon_json_str(operon_json_string_at(parent, "apiVersion", "")));
    operon_json_set(owner, "kind", operon_json_str(operon_json_string_at(parent, "kind", "")));
    operon_json_set(owner, "name", operon_json_str(operon_json_string_at(parent, "metadata.name", "")));
    operon_json_set(owner, "uid", operon_json_str(uid));
    operon_json_set(owner, "controller", operon_json_boolean(true));
    operon_json_set(owner, "blockOwnerDeletion", operon_json_boolean(true));
    operon_gvk_t *kinds = operon_alloc((out->desired_len + 1) * sizeof *kinds);
    const char **namespaces = operon_alloc((out->desired_len + 1) * sizeof *namespaces);
    const char **names = operon_alloc((out->desired_len + 1) * sizeof *names);
    for (size_t i = 0; i < out->desired_len; i++) {
        operon_json_t *object = operon_json_copy(operon_json_parse(out->desired[i], strlen(out->desired[i]), NULL));
        operon_gvk_t kind;
        if (!object || !kind_of(object, &kind)) return operon_sprintf("desired[%zu] lacks apiVersion or kind", i);
        const char *name = operon_json_string_at(object, "metadata.name", "");
        const char *what = operon_sprintf("desired[%zu] (%s %s)", i, kind_text(kind), name);
        const operon_json_t *reserved = find_rule("reserved", kind);
        if (reserved)
            return operon_sprintf("%s: %s may never be written by a plugin (%s)", what, kind_text(kind),
                                  operon_json_string_at(reserved, "why", ""));
        bool owns = false;
        for (size_t k = 0; k < m->owns_len; k++) owns = owns || same_kind(m->owns[k], kind);
        if (!owns)
            return operon_sprintf("%s: kind %s is not among the kinds %s may write (%s)", what, kind_text(kind), m->name,
                                  owned);
        if (!valid_name(name))
            return operon_sprintf(
                "%s: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)", what);
        bool cluster_scoped = find_rule("clusterScoped", kind) != NULL;
        const char *child_ns = operon_json_string_at(object, "metadata.namespace", NULL);
        const char *ns = NULL;
        if (!cluster_scoped && parent_ns) {
            if (child_ns && strcmp(child_ns, parent_ns) != 0)
                return operon_sprintf("%s: namespace \"%s\" differs from the parent's \"%s\"; children live in their "
                                      "parent's namespace",
                                      what, child_ns, parent_ns);
            ns = parent_ns;
        } else if (!cluster_scoped) {
            if (!child_ns)
                return operon_sprintf("%s: a namespaced child of a cluster-scoped parent needs metadata.namespace",
                                      what);
            ns = child_ns;
        } else if (parent_ns) {
            return operon_sprintf("%s: %s is cluster-scoped and cannot be owned by a namespaced parent", what,
                                  kind_text(kind));
        }
        for (size_t j = 0; j < i; j++)
            if (same_kind(kinds[j], kind) && strcmp(names[j], name) == 0 &&
                (namespaces[j] == ns || (namespaces[j] && ns && strcmp(namespaces[j], ns) == 0)))
                return operon_sprintf("%s: returned twice", what);
        kinds[i] = kind, namespaces[i] = ns, names[i] = name;
        if (!operon_json_get(object, "metadata")) operon_json_set(object, "metadata", operon_json_object());
        operon_json_t *meta = (operon_json_t *)operon_json_get(object, "metadata"); /* our own copy */
        const char *server_owned[] = {"resourceVersion", "uid", "creationTimestamp", "managedFields",
                                      "generation", "selfLink", "deletionTimestamp"};
        for (size_t f = 0; f < OPERON_LEN(server_owned); f++) operon_json_set(meta, server_owned[f], NULL);
        if (ns) operon_json_set(meta, "namespace", operon_json_str(ns));
        operon_json_set(meta, "ownerReferences", operon_json_push(operon_json_array(), owner));
        size_t size = 0;
        operon_json_text(object, &size);
        if ((int64_t)size > max_bytes)
            return operon_sprintf("%s: %zu bytes exceeds the %lld-byte object limit", what, size, (long long)max_bytes);
    }
    for (size_t i = 0; i < out->events_len; i++) {
        size_t n = out->events[i].reason ? strlen(out->events[i].reason) : 0;
        if (n == 0 || (int64_t)n > max_reason)
            return operon_sprintf("events[%zu]: reason must be 1-%lld characters", i, (long long)max_reason);
    }
    /* Contract 0.2: what the host checks of requeue-at and parent-metadata. */
    int64_t at;
    if (out->requeue_at && !operon_time_parse(out->requeue_at, &at))
        return operon_sprintf("requeue-at \"%s\" is not an RFC 3339 time such as 2026-01-01T00:00:00Z", out->requeue_at);
    for (size_t m_ = 0; m_ < 2; m_++) {
        const operon_raw_pair_t *pairs = m_ ? out->annotations : out->labels;
        size_t len = m_ ? out->annotations_len : out->labels_len;
        for (size_t i = 0; i < len; i++)
            if (strncmp(pairs[i].key, "operon.dev/", 11) == 0)
                return operon_sprintf("parent-metadata sets the %s \"%s\": operon.dev keys are the host's",
                                      m_ ? "annotation" : "label", pairs[i].key);
    }
    for (size_t i = 0; i < out->desired_len; i++) {
        bool mine = false;
        for (size_t c = 0; c < children_len && !mine; c++)
            mine = is_object(operon_json_parse(children[c], strlen(children[c]), NULL), kinds[i], namespaces[i], names[i]);
        for (size_t c = 0; cluster && !mine && c < cluster->len; c++) {
            const operon_json_t *o = operon_json_parse(cluster->objects[c], strlen(cluster->objects[c]), NULL);
            if (!is_object(o, kinds[i], namespaces[i], names[i])) continue;
            const char *at = namespaces[i] ? operon_sprintf("%s/%s", namespaces[i], names[i]) : names[i];
            const operon_json_t *owners = operon_json_at(o, "metadata.ownerReferences"), *controller = NULL;
            for (size_t r = 0; r < operon_json_len(owners) && !controller; r++) {
                bool yes = false;
                if (operon_json_bool(operon_json_get(operon_json_item(owners, r), "controller"), &yes) && yes)
                    controller = operon_json_item(owners, r);
            }
            if (!controller)
                return operon_sprintf("%s %s exists without a controller owner; adopting it needs spec.grants.adopt: "
                                      "true (or delete it, or rename the child)",
                                      kinds[i].kind, at);
            if (!uid || strcmp(operon_json_string_at(controller, "uid", ""), uid) != 0)
                return operon_sprintf("%s %s exists and is controlled by %s %s; it is never taken over (rename the "
                                      "child, or delete the other owner)",
                                      kinds[i].kind, at, operon_json_string_at(controller, "kind", ""),
                                      operon_json_string_at(controller, "name", ""));
            break;
        }
    }
    return NULL;
}
