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
 * and, for world = "reconciler-with-admission" in operon.toml, either or
 * both of operon_validate and operon_mutate (see the end of this file).
 *
 * Memory: every value the SDK hands you or builds for you (parsed JSON,
 * built JSON, formatted strings) lives in an arena that is freed when the
 * call returns. Never free() it and never keep it across calls: an author
 * writes no free() at all. Allocation failure aborts (a clean trap).
 *
 * The contract: reconciliation is level-based (the host may call any number
 * of times for the same object), so derive the answer from the request
 * alone, keep no state between calls, read no clock. The outcome lists
 * every child that should exist; children left out are deleted.
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
 * speaks, operon:reconciler@0.1. pkg-config reports the same
 * (`pkg-config --modversion operon-sdk`). */
#define OPERON_SDK_VERSION "0.1.0"

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

/* ----------------------------------------------------------- manifest */

typedef enum operon_mapping {
    OPERON_MAP_LABEL,           /* the label `name` holds the parent's name */
    OPERON_MAP_ANNOTATION,      /* the annotation `name` holds [namespace/]name */
    OPERON_MAP_ALL_IN_NAMESPACE /* every parent in the watched object's namespace */
} operon_mapping_t;

typedef struct operon_watch {
    operon_gvk_t kind;
    operon_mapping_t mapping;
    const char *name; /* the label or annotation; NULL for all-in-namespace */
} operon_watch_t;

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
 * longer desired. reads: kinds operon_get/operon_list may read. finalizer:
 * NULL for none; with one, a deleted parent is reconciled with
 * req->finalizing until the outcome says operon_finalized. */
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
} operon_manifest_t;

/* ------------------------------------------------------------ request */

typedef struct operon_children {
    operon_gvk_t kind;
    const operon_json_t *const *objects;
    size_t len;
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
    /* The parent is being deleted and still carries the finalizer: clean
     * up, then answer operon_finalized(out). */
    bool finalizing;
    uint32_t attempt; /* failures in a row before this call */
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
/* Clean-up is complete: the host may remove the finalizer. */
void operon_finalized(operon_outcome_t *out);
/* Fail the reconcile and return OPERON_FAILED:
 *     return operon_terminal(out, "spec.message must not be empty");
 * terminal: retrying cannot help, wait until the object changes;
 * transient: retried with exponential backoff. Nothing is written. */
operon_result_t operon_terminal(operon_outcome_t *out, const char *format, ...) OPERON_PRINTF(2, 3);
operon_result_t operon_transient(operon_outcome_t *out, const char *format, ...) OPERON_PRINTF(2, 3);

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

/* ------------------------------------------- what the author implements */

const operon_manifest_t *operon_manifest(void);
operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out);
/* Optional, for world = "reconciler-with-admission": a missing validate
 * allows everything, a missing mutate changes nothing. */
operon_result_t operon_validate(const operon_review_t *review, operon_admission_t *answer);
operon_result_t operon_mutate(const operon_review_t *review, operon_admission_t *answer);

/* ------------------------------------------- the wire, for glue and tests */

/* A string that may not be NUL-terminated. */
typedef struct operon_str {
    const char *ptr;
    size_t len;
} operon_str_t;

/* The host interface. get returns 1 (found; *object is malloc'd JSON),
 * 0 (not found) or -1 (*error is a malloc'd message); list returns 0 with a
 * malloc'd array of malloc'd strings, or -1. */
typedef struct operon_host {
    void *self;
    void (*log)(void *self, operon_level_t level, const char *message, size_t nfields, const char *const *fields);
    int (*get)(void *self, operon_gvk_t kind, const char *namespace_, const char *name, char **object, char **error);
    int (*list)(void *self, operon_gvk_t kind, const char *namespace_, const char *label_selector, char ***objects,
                size_t *len, char **error);
} operon_host_t;

typedef struct operon_raw_children {
    operon_gvk_t kind;
    const operon_str_t *objects;
    size_t len;
} operon_raw_children_t;

typedef struct operon_raw_request {
    operon_str_t object;
    const operon_raw_children_t *children;
    size_t children_len;
    const operon_str_t *related;
    size_t related_len;
    bool finalizing;
    uint32_t attempt;
} operon_raw_request_t;

typedef struct operon_raw_event {
    bool warning;
    char *reason;
    char *message;
} operon_raw_event_t;

/* Every pointer is malloc'd (free with operon_raw_outcome_free). */
typedef struct operon_raw_outcome {
    bool failed;
    bool terminal;
    char *failure; /* when failed */
    char **desired;
    size_t desired_len;
    char *status; /* NULL: untouched */
    operon_raw_event_t *events;
    size_t events_len;
    bool has_requeue;
    uint64_t requeue_after_ms;
    bool finalized;
    bool refused; /* operon_test_reconcile only: the host would refuse the outcome (failure says why) */
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

/* The call's arena, for native tests that build values outside a call:
 * operon_arena_mark() before, operon_arena_release(mark) after frees
 * everything allocated in between. */
void *operon_arena_mark(void);
void operon_arena_release(void *mark);

#ifdef __cplusplus
}
#endif
#endif /* OPERON_H */
