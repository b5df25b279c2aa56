/*
 * operon.h — write Operon reconcilers in C.
 *
 * A reconciler is a pure function compiled to a WebAssembly component: the
 * host hands it one object (the parent) with its children and related
 * objects, and it answers with the children that should exist, the
 * parent's status, events and when to run again. The host does all the
 * I/O (watches, server-side apply, pruning, status, events).
 *
 * Implement two functions and `operon build` does the rest (clang's
 * wasm32-wasi target, the WIT bindings, the component):
 *
 *     const operon_manifest_t *operon_manifest(void);
 *     operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out);
 *
 * and, for a world with admission in operon.toml ("reconciler-with-admission",
 * "reconciler-with-admission-and-conversion"), either or both of
 * operon_validate and operon_mutate; for a world with conversion
 * ("reconciler-with-conversion", "reconciler-with-admission-and-conversion"),
 * operon_convert (see the end of this file).
 *
 * Memory: every value the SDK hands you or builds for you (parsed JSON,
 * built JSON, formatted strings) lives in an arena that is freed when the
 * call returns. Never free() it and never keep it across calls: an author
 * writes no free() at all. Allocation failure aborts (a clean trap).
 *
 * The contract: reconciliation is level-based (the host may call any number
 * of times for the same object), so derive the answer from the request
 * alone, keep no state between calls, read no clock (req->now is the
 * time). The outcome lists every child that should exist; children left
 * out are deleted.
 *
 * JSON: a small, bounded parser and writer (operon.c). Hostile input gives
 * an error, never memory corruption: nesting is limited to
 * OPERON_JSON_MAX_DEPTH, integers that overflow int64 become doubles,
 * strings are length-counted (an embedded \u0000 is kept).
 */
#ifndef OPERON_H
#define OPERON_H

/* This SDK's release: one version for every Operon SDK and the host
 * (`cargo xtask version` sets it); its minor is that of the WIT contract it
 * speaks, operon:reconciler@0.2. pkg-config reports the same
 * (`pkg-config --modversion operon-sdk`). */
#define OPERON_SDK_VERSION "0.2.0"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define OPERON_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OPERON_PRINTF(f, a)
#endif

/* The number of elements of a static array. */
#define OPERON_LEN(array) (sizeof(array) / sizeof((array)[0]))

/* Nesting limit of parsed JSON (Kubernetes objects nest about 20 deep). */
#define OPERON_JSON_MAX_DEPTH 128

/* ---------------------------------------------------------------- JSON */

typedef enum operon_type {
    OPERON_MISSING = 0, /* a NULL value: a field that is not there */
    OPERON_NULL,
    OPERON_BOOL,
    OPERON_INT,   /* an integer literal that fits int64 */
    OPERON_FLOAT, /* any other number */
    OPERON_STRING,
    OPERON_ARRAY,
    OPERON_OBJECT,
} operon_type_t;

/* One JSON value. Objects keep their members in insertion order. */
typedef struct operon_json operon_json_t;

/* Parses `len` bytes of JSON text. NULL on error, with a message in *error
 * (when error is not NULL) such as "expected ':' at byte 12". */
operon_json_t *operon_json_parse(const char *text, size_t len, const char **error);
/* The compact JSON text of v (NUL-terminated; its length in *len if not NULL). */
const char *operon_json_text(const operon_json_t *v, size_t *len);

operon_type_t operon_json_type(const operon_json_t *v);
/* The member `key` of an object; NULL when v is not an object or has no such key. */
const operon_json_t *operon_json_get(const operon_json_t *v, const char *key);
/* The value at a dot-separated path of object keys ("spec.ingress.host").
 * Keys containing dots (labels) need operon_json_get. */
const operon_json_t *operon_json_at(const operon_json_t *v, const char *path);
/* The string (NUL-terminated), or NULL when v is not a string. */
const char *operon_json_string(const operon_json_t *v);
/* The string at path, or `fallback` when it is missing or not a string. */
const char *operon_json_string_at(const operon_json_t *v, const char *path, const char *fallback);
/* The byte length of a string (which may hold \0), 0 otherwise. */
size_t operon_json_string_len(const operon_json_t *v);
/* Stores the integer in *out and returns true when v is an OPERON_INT. */
bool operon_json_int(const operon_json_t *v, int64_t *out);
/* The number as a double (ints converted); false when v is not a number. */
bool operon_json_number(const operon_json_t *v, double *out);
/* Stores the boolean in *out and returns true when v is a boolean. */
bool operon_json_bool(const operon_json_t *v, bool *out);
/* Items of an array or members of an object; 0 for anything else. */
size_t operon_json_len(const operon_json_t *v);
/* Item i of an array (NULL when out of range or not an array). */
const operon_json_t *operon_json_item(const operon_json_t *array, size_t i);
/* Key and value of member i of an object (NULL when out of range). */
const char *operon_json_key(const operon_json_t *object, size_t i);
const operon_json_t *operon_json_value(const operon_json_t *object, size_t i);
/* Deep equality (numbers by value: 2 equals 2.0). */
bool operon_json_equal(const operon_json_t *a, const operon_json_t *b);

/* Builders: new values in the call's arena. */
operon_json_t *operon_json_object(void);
operon_json_t *operon_json_array(void);
operon_json_t *operon_json_str(const char *s); /* copies s; NULL gives JSON null */
operon_json_t *operon_json_strf(const char *format, ...) OPERON_PRINTF(1, 2);
operon_json_t *operon_json_integer(int64_t n);
operon_json_t *operon_json_double(double d);
operon_json_t *operon_json_boolean(bool b);
operon_json_t *operon_json_null(void);
/* A deep, mutable copy (NULL stays NULL). */
operon_json_t *operon_json_copy(const operon_json_t *v);
/* Sets member key of object to value (replacing an existing one; a NULL
 * value removes the key) and returns object, so calls nest. */
operon_json_t *operon_json_set(operon_json_t *object, const char *key, operon_json_t *value);
/* Appends value to array and returns array. */
operon_json_t *operon_json_push(operon_json_t *array, operon_json_t *value);

/* size zeroed bytes in the call's arena (aligned for any type). */
void *operon_alloc(size_t size);
/* A formatted string in the call's arena. */
const char *operon_sprintf(const char *format, ...) OPERON_PRINTF(1, 2);

/* ------------------------------------------------------------- kinds */

/* A Kubernetes kind; group "" is the core group. */
typedef struct operon_gvk {
    const char *group;
    const char *version;
    const char *kind;
} operon_gvk_t;

extern const operon_gvk_t OPERON_CONFIGMAP, OPERON_SECRET, OPERON_SERVICE, OPERON_DEPLOYMENT, OPERON_INGRESS;

/* "apps/v1", or "v1" for the core group (in the arena). */
const char *operon_api_version(operon_gvk_t kind);
bool operon_gvk_equal(operon_gvk_t a, operon_gvk_t b);
/* Whether object's apiVersion and kind are `kind`. */
bool operon_is_kind(const operon_json_t *object, operon_gvk_t kind);
/* A new object of kind with apiVersion, kind and metadata.name set. */
operon_json_t *operon_new_object(operon_gvk_t kind, const char *name);

/* -------------------------------------------------------------- time */

/* Parses an RFC 3339 time ("2026-11-26T04:05:06.789Z", "...T05:05:06+01:00")
 * into milliseconds since the Unix epoch; false when it does not parse. */
bool operon_time_parse(const char *text, int64_t *unix_ms);
/* unix_ms as the contract writes times: RFC 3339 in UTC with milliseconds,
 * "2026-11-26T04:05:06.789Z" (in the arena). */
const char *operon_time_format(int64_t unix_ms);

/* ----------------------------------------------------------- manifest */

typedef enum operon_mapping {
    OPERON_MAP_LABEL,            /* the label `name` holds the parent's name */
    OPERON_MAP_ANNOTATION,       /* the annotation `name` holds [namespace/]name */
    OPERON_MAP_ALL_IN_NAMESPACE, /* every parent in the watched object's namespace */
    /* The parent's field at the dotted path `name` ("spec.configRef")
     * names the watched object ([namespace/]name): an event on it
     * reconciles exactly the parents naming it, and req->related holds it. */
    OPERON_MAP_REFERENCE,
    /* The parent's field at the dotted path `name` ("spec.selector") is a
     * label selector (a LabelSelector or a plain label map) over the
     * watched kind in its namespace; req->related holds what it matches. */
    OPERON_MAP_SELECTOR,
} operon_mapping_t;

typedef struct operon_watch {
    operon_gvk_t kind;
    operon_mapping_t mapping;
    const char *name; /* the label, annotation or path; NULL for all-in-namespace */
} operon_watch_t;

/* How the host changes an existing child whose desired form changed. */
typedef enum operon_update_strategy {
    OPERON_UPDATE_IN_PLACE, /* server-side apply over it (the default) */
    /* Server-side apply; when a field is immutable (a Job's template), the
     * child is deleted and created anew (a ChildRecreated event). */
    OPERON_UPDATE_RECREATE,
    OPERON_UPDATE_ON_DELETE, /* left as it is; only missing children are created */
} operon_update_strategy_t;

/* The update strategy of one owned kind. */
typedef struct operon_owned_update {
    operon_gvk_t kind;
    operon_update_strategy_t strategy;
} operon_owned_update_t;

/* What a reconciler is. Write it as a static constant:
 *
 *     static const operon_gvk_t OWNS[] = {{"", "v1", "ConfigMap"}};
 *     static const operon_manifest_t MANIFEST = {
 *         .name = "greeter",
 *         .for_kind = {"demo.operon.dev", "v1alpha1", "Greeting"},
 *         .owns = OWNS, .owns_len = OPERON_LEN(OWNS),
 *     };
 *     const operon_manifest_t *operon_manifest(void) { return &MANIFEST; }
 *
 * name: lowercase [a-z0-9-]; it names the field manager operon/<name>.
 * owns: kinds of children, handed back in this order and pruned when no
 * longer desired. reads: kinds operon_get/operon_list may read. updates:
 * strategies of owned kinds (others are updated in place). finalizer: NULL
 * for none; with one, the host keeps it on the parents whose outcome says
 * operon_needs_finalizer (by default every outcome does, but the answer to
 * a finalizing request), and a parent that carries it and is deleted or
 * leaves the Reconciler's selector is reconciled with req->finalizing until
 * the outcome says operon_finalized. */
typedef struct operon_manifest {
    const char *name;
    operon_gvk_t for_kind;
    const operon_gvk_t *owns;
    size_t owns_len;
    const operon_watch_t *watches;
    size_t watches_len;
    const operon_gvk_t *reads;
    size_t reads_len;
    const char *finalizer;
    const operon_owned_update_t *updates;
    size_t updates_len;
} operon_manifest_t;

/* ------------------------------------------------------------ request */

/* kstatus's verdict on a child, computed by the host (one set of rules). */
typedef enum operon_readiness_status {
    OPERON_READINESS_CURRENT,     /* the child is what its spec asks */
    OPERON_READINESS_IN_PROGRESS, /* on its way (rolling out, scheduling) */
    OPERON_READINESS_FAILED,      /* will not get there without a change */
    OPERON_READINESS_TERMINATING, /* being deleted */
    OPERON_READINESS_UNKNOWN,     /* the host cannot tell */
} operon_readiness_status_t;

typedef struct operon_readiness {
    operon_readiness_status_t status;
    const char *message; /* why, for people: "Available: 1/3" */
} operon_readiness_t;

/* "current", "in-progress", "failed", "terminating" or "unknown" (the WIT's names). */
const char *operon_readiness_name(operon_readiness_status_t status);

typedef struct operon_children {
    operon_gvk_t kind;
    const operon_json_t *const *objects;
    size_t len;
    const operon_readiness_t *readiness; /* readiness[i] is objects[i]'s */
} operon_children_t;

/* One call of operon_reconcile. Strings are never NULL ("" when absent). */
typedef struct operon_request {
    const operon_json_t *object; /* the parent, including its status */
    const char *name;
    const char *namespace_; /* "" for a cluster-scoped parent */
    const char *uid;
    const char *kind;        /* the parent's kind, e.g. "WebApp" */
    const char *creation_timestamp;
    int64_t generation; /* 0 when the parent has none */
    /* The parent still carries the finalizer and is being deleted or no
     * longer matches the Reconciler's selector: clean up, then answer
     * operon_finalized(out). */
    bool finalizing;
    uint32_t attempt; /* failures in a row before this call */
    /* The host's clock when the reconcile began, RFC 3339 in UTC with
     * milliseconds ("2026-11-26T04:05:06.789Z"), one value for the whole
     * call; and the same as milliseconds since the Unix epoch. */
    const char *now;
    int64_t now_unix_ms;
    /* Existing children, one entry per owned kind, in manifest order. */
    const operon_children_t *children;
    size_t children_len;
    /* Related objects (of watched kinds). */
    const operon_json_t *const *related;
    size_t related_len;
} operon_request_t;

/* "WebApp default/shop": the parent, for messages. */
const char *operon_describe(const operon_request_t *req);
/* The existing children of kind (sorted by namespace then name); *len gets their count. */
const operon_json_t *const *operon_children_of(const operon_request_t *req, operon_gvk_t kind, size_t *len);
/* The existing child of kind called name, or NULL. */
const operon_json_t *operon_child(const operon_request_t *req, operon_gvk_t kind, const char *name);
/* The readiness of the existing child of kind called name, or NULL when
 * there is no such child. */
const operon_readiness_t *operon_child_readiness(const operon_request_t *req, operon_gvk_t kind, const char *name);
/* Whether every existing child is current (true when there is none). */
bool operon_children_current(const operon_request_t *req);

/* ------------------------------------------------------------ outcome */

typedef enum operon_result { OPERON_OK = 0, OPERON_FAILED = 1 } operon_result_t;

/* What the reconcile wants; built with the functions below. */
typedef struct operon_outcome operon_outcome_t;

/* Wants object to exist (a full object: apiVersion, kind, metadata.name).
 * The host sets its namespace when missing, adds the controller
 * ownerReference and server-side applies it; its kind must be owned. */
void operon_apply(operon_outcome_t *out, operon_json_t *object);
/* The parent's new status (a JSON object); without it the status is left
 * untouched. Keep it deterministic: no clock readings. */
void operon_set_status(operon_outcome_t *out, operon_json_t *status);
/* Records a Normal (operon_event) or Warning event; reason is UpperCamelCase. */
void operon_event(operon_outcome_t *out, const char *reason, const char *format, ...) OPERON_PRINTF(3, 4);
void operon_warning(operon_outcome_t *out, const char *reason, const char *format, ...) OPERON_PRINTF(3, 4);
/* Reconcile again after ms milliseconds even if nothing changes. */
void operon_requeue_after_ms(operon_outcome_t *out, uint64_t ms);
/* Reconcile again at this time (RFC 3339, copied), measured from req->now;
 * a time already past means at once. With operon_requeue_after_ms too, the
 * earlier wins. One that does not parse refuses the outcome:
 *     operon_requeue_at(out, operon_time_format(req->now_unix_ms + 3600 * 1000)); */
void operon_requeue_at(operon_outcome_t *out, const char *rfc3339);
/* Clean-up is complete: the host may remove the finalizer. */
void operon_finalized(operon_outcome_t *out);
/* Whether the parent needs the manifest's finalizer: the host adds it
 * while outcomes say true and removes it when one says false. Without a
 * call it is true when the manifest has a finalizer, except in the answer
 * to a finalizing request. */
void operon_needs_finalizer(operon_outcome_t *out, bool needs);
/* The labels and annotations this reconciler keeps on its parent (JSON
 * objects of strings; NULL for none): written with server-side apply, so a
 * key no longer given is removed and others' keys stay. Keys under
 * operon.dev/ refuse the outcome. Without a call the metadata is left alone. */
void operon_parent_metadata(operon_outcome_t *out, operon_json_t *labels, operon_json_t *annotations);
/* Fail the reconcile and return OPERON_FAILED:
 *     return operon_terminal(out, "spec.message must not be empty");
 * terminal: retrying cannot help, wait until the object changes;
 * transient: retried with exponential backoff. Nothing of the outcome is
 * written. */
operon_result_t operon_terminal(operon_outcome_t *out, const char *format, ...) OPERON_PRINTF(2, 3);
operon_result_t operon_transient(operon_outcome_t *out, const char *format, ...) OPERON_PRINTF(2, 3);
/* The same, with the parent's status to write before the host backs off
 * (a JSON object, e.g. a Ready condition False with a reason), so the
 * parent says why while the host waits. */
operon_result_t operon_terminal_with_status(operon_outcome_t *out, operon_json_t *status, const char *format, ...)
    OPERON_PRINTF(3, 4);
operon_result_t operon_transient_with_status(operon_outcome_t *out, operon_json_t *status, const char *format, ...)
    OPERON_PRINTF(3, 4);

/* ------------------------------------------------- conditions, status */

/* The condition of type in a `conditions` array, or NULL. */
const operon_json_t *operon_find_condition(const operon_json_t *conditions, const char *type);
/* A metav1.Condition object. Its lastTransitionTime is the previous one
 * (from previous_conditions, may be NULL) while the status is unchanged,
 * else `transition_time`: a time the request shows, never the clock. */
operon_json_t *operon_condition(const operon_json_t *previous_conditions, const char *type, const char *status,
                                int64_t observed_generation, const char *transition_time, const char *reason,
                                const char *message);

/* ------------------------------------------------------ host: reads, log */

/* Reads the host's cache (never the API server). kind must be declared in
 * manifest.reads (or be the parent's or an owned kind). namespace_ NULL or
 * "" means the parent's. On success returns OPERON_OK with *object NULL
 * when it does not exist; when the host refuses, records a transient
 * failure in out and returns OPERON_FAILED, so:
 *     if (operon_get(out, OPERON_SECRET, NULL, "token", &secret)) return OPERON_FAILED; */
operon_result_t operon_get(operon_outcome_t *out, operon_gvk_t kind, const char *namespace_, const char *name,
                           const operon_json_t **object);
/* Lists objects of kind matching label_selector (Kubernetes syntax; NULL or "" for all). */
operon_result_t operon_list(operon_outcome_t *out, operon_gvk_t kind, const char *namespace_,
                            const char *label_selector, const operon_json_t *const **objects, size_t *len);

typedef enum operon_level {
    OPERON_TRACE,
    OPERON_DEBUG,
    OPERON_INFO,
    OPERON_WARN,
    OPERON_ERROR
} operon_level_t;

/* A log line through the host's logger (tagged with controller and parent). */
void operon_log(operon_level_t level, const char *format, ...) OPERON_PRINTF(2, 3);
/* With structured fields: `fields` holds nfields key/value pairs, k0, v0, k1, v1, ... */
void operon_log_fields(operon_level_t level, const char *message, size_t nfields, const char *const *fields);

/* ------------------------------------------ host: outbound HTTP (egress) */

/* A reconciler that manages something outside the cluster (DNS records,
 * buckets, users of an identity provider) calls it through the host
 * (contract 0.2's `egress`); the host makes the call, and only what the
 * Reconciler grants (spec.grants.egress; nothing by default), adding a
 * credential the request names (spec.credentials) without its value ever
 * entering the component. Only operon_reconcile may call out: in the
 * manifest, admission and conversion every call is denied.
 *
 *     static const operon_http_header_t JSON[] = {{"content-type", "application/json"}};
 *     operon_http_request_t call = {
 *         .method = "PATCH",
 *         .url = operon_sprintf("https://dns.example/api/zones/%s.", zone),
 *         .headers = JSON, .headers_len = OPERON_LEN(JSON),
 *         .body = operon_json_text(rrsets, NULL),
 *         .credential = "pdns",
 *     };
 *     operon_http_response_t res;
 *     operon_http_error_t err;
 *     if (!operon_http(&call, &res, &err))
 *         return operon_transient(out, "PowerDNS: %s: %s", operon_http_error_name(err.kind), err.message);
 *     if (!operon_http_ok(&res)) ...
 */

typedef struct operon_http_header {
    const char *name;
    const char *value;
} operon_http_header_t;

typedef struct operon_http_request {
    const char *method; /* "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"; NULL: "GET" */
    const char *url;    /* absolute: https:// (or http:// when the grant says so) */
    /* Headers to send; host, content-length, hop-by-hop headers and the
     * header a credential sets are the host's. */
    const operon_http_header_t *headers;
    size_t headers_len;
    const char *body; /* NULL: none */
    size_t body_len;  /* 0 with a body: strlen(body) */
    /* The name of one of the Reconciler's spec.credentials; NULL: none. */
    const char *credential;
    uint32_t timeout_ms; /* 0: the host's default (10 s); never past the reconcile's deadline */
} operon_http_request_t;

/* An answer, whatever its status (a 404 or a 500 is an answer, not an error). */
typedef struct operon_http_response {
    uint16_t status;
    const operon_http_header_t *headers;
    size_t headers_len;
    const char *body; /* body_len bytes, then a NUL (not counted) */
    size_t body_len;
} operon_http_response_t;

/* Why no answer came (the WIT http-error, in its order). */
typedef enum operon_http_error_kind {
    OPERON_HTTP_DENIED,       /* not allowed by the grants or the host's rules: nothing was sent */
    OPERON_HTTP_INVALID,      /* a malformed request (URL, method, header) */
    OPERON_HTTP_TIMEOUT,      /* no answer in time (the call's deadline or the reconcile's) */
    OPERON_HTTP_UNREACHABLE,  /* no connection, or it broke (name, refused, TLS) */
    OPERON_HTTP_TOO_LARGE,    /* the answer is larger than the host takes (1 MiB by default) */
    OPERON_HTTP_BUDGET,       /* this reconcile made as many calls as the host allows (16 by default) */
    OPERON_HTTP_NOT_RECORDED, /* replaying a recording (operon test, operon_testing.h): no such call */
} operon_http_error_kind_t;

typedef struct operon_http_error {
    operon_http_error_kind_t kind;
    const char *message; /* for people */
} operon_http_error_t;

/* Makes one HTTP request through the host: true with the answer in *res,
 * false with why none came in *err. Everything it hands back lives in the
 * call's arena (nothing to free). */
bool operon_http(const operon_http_request_t *req, operon_http_response_t *res, operon_http_error_t *err);
/* "denied", "invalid", "timeout", "unreachable", "tooLarge", "budget" or
 * "notRecorded": the kind as fixtures name it. */
const char *operon_http_error_name(operon_http_error_kind_t kind);
/* Whether the status is a success (2xx). */
bool operon_http_ok(const operon_http_response_t *res);
/* The value of the first header called name (compared without case), or NULL. */
const char *operon_http_header(const operon_http_response_t *res, const char *name);
/* The body parsed as JSON; NULL with a message in *error (when not NULL) if it is not JSON. */
const operon_json_t *operon_http_json(const operon_http_response_t *res, const char **error);
/* The call in one line, as runners name it (in the arena):
 * `POST https://a.example/x (7 bytes of body) with credential "api"`. */
const char *operon_http_describe(const operon_http_request_t *req);

/* ---------------------------------------------------------- admission */

typedef enum operon_operation { OPERON_CREATE, OPERON_UPDATE, OPERON_DELETE, OPERON_CONNECT } operon_operation_t;

/* One admission request. NULL means absent. */
typedef struct operon_review {
    const char *uid;
    operon_operation_t operation;
    operon_gvk_t kind;
    const char *sub_resource;
    const char *namespace_;
    const char *name;
    const operon_json_t *object;     /* NULL for delete, or when it is not valid JSON */
    const operon_json_t *old_object; /* for update and delete */
    const char *username;
    bool dry_run;
} operon_review_t;

/* The answer to a review. */
typedef struct operon_admission operon_admission_t;

/* Refuses the request (code 0 means 403) and returns OPERON_FAILED. */
operon_result_t operon_deny(operon_admission_t *answer, uint16_t code, const char *format, ...) OPERON_PRINTF(3, 4);
/* A warning kubectl prints (validate only). */
void operon_admission_warn(operon_admission_t *answer, const char *format, ...) OPERON_PRINTF(2, 3);
/* mutate: the whole object as it should be stored. Not calling it leaves
 * the object as it is. */
void operon_admission_patch(operon_admission_t *answer, operon_json_t *object);

/* --------------------------------------------------------- conversion */

/* The answer to a conversion request. */
typedef struct operon_conversion operon_conversion_t;

/* Appends the next converted object (one per object, in order). */
void operon_converted(operon_conversion_t *answer, operon_json_t *object);
/* Refuses the whole request (the API server shows the message) and
 * returns OPERON_FAILED. */
operon_result_t operon_conversion_error(operon_conversion_t *answer, const char *format, ...) OPERON_PRINTF(2, 3);

/* ------------------------------------------- what the author implements */

const operon_manifest_t *operon_manifest(void);
operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out);
/* Optional, for a world with admission: a missing validate allows
 * everything, a missing mutate changes nothing. */
operon_result_t operon_validate(const operon_review_t *review, operon_admission_t *answer);
operon_result_t operon_mutate(const operon_review_t *review, operon_admission_t *answer);
/* Required by a world with conversion: converts every object to
 * desired_api_version ("group/version") with operon_converted, in order,
 * keeping kind, name, namespace and uid; an object already there goes back
 * as it is. Reads nothing (operon_get sees nothing). */
operon_result_t operon_convert(const operon_json_t *const *objects, size_t len, const char *desired_api_version,
                               operon_conversion_t *answer);

/* ------------------------------------------- the wire, for glue and tests */

/* A string that may not be NUL-terminated. */
typedef struct operon_str {
    const char *ptr;
    size_t len;
} operon_str_t;

/* The host interface. get returns 1 (found; *object is malloc'd JSON),
 * 0 (not found) or -1 (*error is a malloc'd message); list returns 0 with a
 * malloc'd array of malloc'd strings, or -1. fetch (the egress import)
 * gets a request whose method and body_len are set, and returns true with
 * *response or false with *error, both in the call's arena; NULL denies
 * every call. */
typedef struct operon_host {
    void *self;
    void (*log)(void *self, operon_level_t level, const char *message, size_t nfields, const char *const *fields);
    int (*get)(void *self, operon_gvk_t kind, const char *namespace_, const char *name, char **object, char **error);
    int (*list)(void *self, operon_gvk_t kind, const char *namespace_, const char *label_selector, char ***objects,
                size_t *len, char **error);
    bool (*fetch)(void *self, const operon_http_request_t *request, operon_http_response_t *response,
                  operon_http_error_t *error);
} operon_host_t;

typedef struct operon_raw_readiness {
    operon_readiness_status_t status;
    operon_str_t message;
} operon_raw_readiness_t;

typedef struct operon_raw_children {
    operon_gvk_t kind;
    const operon_str_t *objects;
    size_t len;
    const operon_raw_readiness_t *readiness; /* one per object; NULL: unknown */
} operon_raw_children_t;

typedef struct operon_raw_request {
    operon_str_t object;
    const operon_raw_children_t *children;
    size_t children_len;
    const operon_str_t *related;
    size_t related_len;
    bool finalizing;
    uint32_t attempt;
    operon_str_t now; /* empty: the Unix epoch */
} operon_raw_request_t;

typedef struct operon_raw_event {
    bool warning;
    char *reason;
    char *message;
} operon_raw_event_t;

typedef struct operon_raw_pair {
    char *key;
    char *value;
} operon_raw_pair_t;

/* Every pointer is malloc'd (free with operon_raw_outcome_free). */
typedef struct operon_raw_outcome {
    bool failed;
    bool terminal;
    char *failure;        /* when failed */
    char *failure_status; /* when failed: the status to write, or NULL */
    char **desired;
    size_t desired_len;
    char *status; /* NULL: untouched */
    operon_raw_event_t *events;
    size_t events_len;
    bool has_requeue;
    uint64_t requeue_after_ms;
    char *requeue_at; /* NULL: none */
    bool finalized;
    bool needs_finalizer;
    bool has_parent_metadata; /* false: the parent's metadata is left alone */
    operon_raw_pair_t *labels;
    size_t labels_len;
    operon_raw_pair_t *annotations;
    size_t annotations_len;
    bool refused; /* operon_test_reconcile only: the host would refuse the outcome (failure says why) */
    /* operon_test_run only: the reconciler made HTTP calls the cluster's
     * exchanges do not hold (failure names them), whatever it did then. */
    bool unrecorded;
} operon_raw_outcome_t;

/* The one code path from a wire request to a wire outcome: parses, calls
 * operon_reconcile with host for reads and logs, serializes, frees the
 * call's arena. The component's export and native tests both use it. */
void operon_run_reconcile(const operon_host_t *host, const operon_raw_request_t *req, operon_raw_outcome_t *out);
void operon_raw_outcome_free(operon_raw_outcome_t *out);

typedef struct operon_raw_review {
    operon_str_t uid;
    operon_operation_t operation;
    operon_gvk_t kind;
    const operon_str_t *sub_resource, *namespace_; /* NULL: none */
    operon_str_t name;
    const operon_str_t *object, *old_object; /* NULL: none */
    operon_str_t username;
    bool dry_run;
} operon_raw_review_t;

/* Every pointer is malloc'd (free with operon_raw_admission_free). */
typedef struct operon_raw_admission {
    bool denied;
    char *message;
    uint16_t code; /* 0: none */
    char **warnings;
    size_t warnings_len;
    char *patched; /* mutate: NULL leaves the object as it is */
} operon_raw_admission_t;

typedef operon_result_t (*operon_admission_fn)(const operon_review_t *, operon_admission_t *);
/* The code path of validate and mutate (fn NULL: allow, unchanged). */
void operon_run_admission(const operon_host_t *host, operon_admission_fn fn, const operon_raw_review_t *review,
                          operon_raw_admission_t *out);
void operon_raw_admission_free(operon_raw_admission_t *out);

/* Every pointer is malloc'd (free with operon_raw_conversion_free). */
typedef struct operon_raw_conversion {
    bool failed;
    char *error; /* when failed */
    char **objects;
    size_t len;
} operon_raw_conversion_t;

typedef operon_result_t (*operon_convert_fn)(const operon_json_t *const *, size_t, const char *, operon_conversion_t *);
/* The code path of convert. */
void operon_run_convert(const operon_host_t *host, operon_convert_fn fn, const operon_str_t *objects, size_t len,
                        operon_str_t desired_api_version, operon_raw_conversion_t *out);
void operon_raw_conversion_free(operon_raw_conversion_t *out);

/* The call's arena, for native tests that build values outside a call:
 * operon_arena_mark() before, operon_arena_release(mark) after frees
 * everything allocated in between. */
void *operon_arena_mark(void);
void operon_arena_release(void *mark);

#ifdef __cplusplus
}
#endif
#endif /* OPERON_H */
