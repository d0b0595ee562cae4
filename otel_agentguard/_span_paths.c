/* The processor's start and end of a step span in a live session, compiled (optional).
 *
 * AgentGuardSpanProcessor.on_start hands a span whose attributes may make it a step, name a
 * session or mark a duplicate to _start_marked. start_marked() here does the same for the usual
 * such span: an SDK span in observe mode, whose operation name is a str, whose session is named
 * by its attributes or found in the context (an enclosing session, baggage, the session stamped
 * on its parent) and is live already; and a session span (invoke_agent naming its session),
 * whose session it opens with LiveSessions.open and attaches it to. It reads what the Python method
 * reads, in its order, and returns False before changing anything when a value is of another type
 * or the span needs anything else: a step's session to open, a duplicate to remember (a lone call
 * has start_lone_call). The caller then runs the Python method, the reference.
 * Otherwise it does what that method does: counts the session as used (under the store's lock),
 * numbers the step (under the lock of every counter) and writes the stamps into the SDK's attribute
 * dict, or through set_attributes where the span's attributes have limits or hold a stamp already.
 *
 * on_end hands a span of a session to _session_span_ended. end_in_session() here does the same
 * for a step (or a numbered span) of a live session in observe mode: it reads the step with the
 * compiled step reader, releases it in sequence order and judges it with the compiled judge's
 * pass, under the session's lock, as LiveSessions.step_ended does for a tool step or a model step
 * naming no call; anything the Python code does besides (a skipped number, a model step naming
 * calls, a derived call waiting, the end of a trace, alerts to count) goes through the Python
 * methods themselves. A lone call's usual end (its one step read here, judged alone by
 * LiveSessions.end_lone_call) is done the same way. It returns False, having changed nothing,
 * for the session's own span, a lone call that opens a session, a duplicate, a step numbered only
 * at its end, and values of other types.
 *
 * Both step aside while any Python function they stand for or call round is not the one they were
 * configured with (the pins): a test injecting a fault, or a patch of the user's, is then met.
 * Tests drive the same generated span trees through a provider with both and one without
 * (tests/test_span_paths.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* The slots read and written, by class. configure() finds their offsets. */
enum {
    LS_SEQUENCE, LS_IMPLICIT, LS_RUNNING, LS_FIRST_SEQUENCE, LS_SESSION_SPAN, LS_SESSION_SPAN_ID, LS_LOCK, LS_BUFFER,
    LS_JUDGE, LS_ENDED, LS_ENFORCER, LS_DERIVED, LS_LAST_CONTEXT, LS_LAST_RESPONSE_ID, SESSION_SLOTS
};
static const char *const session_slot_names[SESSION_SLOTS] = {
    "sequence", "implicit", "running", "first_sequence", "session_span", "session_span_id", "lock", "buffer",
    "judge", "ended", "enforcer", "derived", "last_context", "last_response_id",
};
enum { B_NEXT, B_PENDING, B_SKIPPED, BUFFER_SLOTS };
static const char *const buffer_slot_names[BUFFER_SLOTS] = {"_next", "_pending", "_skipped"};
enum { ST_SEQUENCE, ST_FINAL, STEP_SLOTS };
static const char *const step_slot_names[STEP_SLOTS] = {"sequence", "final"};
/* Fields of the processor, its live sessions and their store that every span reads: slots, so that
 * a read is a load rather than an attribute lookup (these classes keep a __dict__ for the rest). */
enum { P_SESSIONS, P_ENFORCEMENT, P_POLICY, PROCESSOR_SLOTS };
static const char *const processor_slot_names[PROCESSOR_SLOTS] = {"_sessions", "_enforcement", "policy"};
enum { SS_STORE, SS_LONE, SS_PAYLOADS, SESSIONS_SLOTS };
static const char *const sessions_slot_names[SESSIONS_SLOTS] = {"store", "lone", "payloads"};
enum { SO_ENTRIES, SO_SEEN, SO_LOCK, SO_CLOCK, STORE_SLOTS };
static const char *const store_slot_names[STORE_SLOTS] = {"_entries", "_seen", "_lock", "_clock"};

/* Set once by configure() and never changed. */
static PyTypeObject *processor_type, *sessions_type, *store_type, *session_type, *counter_type, *buffer_type,
    *step_type, *context_type, *session_context_type, *attributes_type, *non_recording_type, *readable_type,
    *span_context_type, *status_type;
static Py_ssize_t session_slots[SESSION_SLOTS], buffer_slots[BUFFER_SLOTS], step_slots[STEP_SLOTS],
    counter_last_slot, session_context_id_slot, processor_slots[PROCESSOR_SLOTS], sessions_slots[SESSIONS_SLOTS],
    store_slots[STORE_SLOTS];
static PyObject *a_verdict, *a_operation, *a_session_id, *a_nested_step, *a_sequence, *op_invoke_agent, *tool_kind,
    *status_error, *a_response_id;
static PyObject *requested_call_attributes;             /* a model span with any of them names its calls */
static PyObject *start_pins, *end_pins; /* (namespace, name, function) the paths stand for or call round */
static PyObject *field_pins; /* the slots loaded at their offsets: (class, name, member descriptor) */
static PyObject *session_attributes, *session_baggage; /* tuples of str, most specific first */
static PyObject *kind_of_operation;                    /* operation name -> step kind */
static PyObject *k_session, *k_baggage, *k_span;       /* the context's keys */
static PyObject *current_context, *enclosing_step, *reads_as_the_sdk, *report, *write_alerts, *judge_observe,
    *tool_step, *model_step;
static PyObject *numbering_globals, *numbering_name;   /* the counters' lock: renewed in a forked child */
static PyObject *span_types;                           /* span class -> whether reads_as_the_sdk */
static PyObject *step_failed;                          /* the kind of failure reported for a lost step */
static PyObject *s_enforcement, *s_sessions, *s_store, *s_entries, *s_seen, *s_lock, *s_clock, *s_attributes,
    *s_dict, *s_parent, *s_max_value_len, *s_immutable, *s_maxlen, *s_acquire, *s_release, *s_move_to_end,
    *s_set_attributes, *s_lone, *s_context, *s_span_id, *s_name, *s_start_time, *s_end_time, *s_status,
    *s_status_code, *s_own_status_code, *s_policy, *s_payloads, *s_step, *s_skip, *s_step_ended, *s_judged,
    *s_trace_over, *s_push, *s_observe, *s_final, *s_trace_id, *s_start_lone_call, *s_open, *s_start_step,
    *s_session_span, *s_attach_span, *trace_id_format, *s_end_lone_call, *s_ended_in;

#define MAX_SPAN_TYPES 64

/* What a lookup found. */
enum { ERROR = -1, LEFT_TO_PYTHON = -2, NOTHING = 0, FOUND = 1 };

static int
is_text(PyObject *value)
{
    return value != NULL && PyUnicode_CheckExact(value);
}

/* Whether the span's class keeps its attributes and parent where the SDK's does (asked of Python
 * once per class; a class whose asking fails is not): 1, 0, or -1 with an error set. */
static int
sdk_span(PyObject *span)
{
    PyObject *kind = (PyObject *)Py_TYPE(span);
    PyObject *known = PyDict_GetItemWithError(span_types, kind); /* borrowed */
    if (known != NULL)
        return known == Py_True;
    if (PyErr_Occurred())
        return -1;
    PyObject *answer = PyObject_CallOneArg(reads_as_the_sdk, kind);
    if (answer == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear(); /* a class that cannot be asked (each time): read through the Python code */
        return 0;
    }
    int yes = answer == Py_True;
    Py_DECREF(answer);
    if (PyDict_GET_SIZE(span_types) < MAX_SPAN_TYPES && PyDict_SetItem(span_types, kind, yes ? Py_True : Py_False) < 0)
        return -1;
    return yes;
}

/* An attribute; NULL with no error set where it is missing (an AttributeError, which the Python
 * code reads as "not the SDK's" or lets reach the same error itself), NULL with any other error. */
static PyObject *
field(PyObject *object, PyObject *name)
{
    PyObject *found = PyObject_GetAttr(object, name);
    if (found == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    return found;
}

/* field(), for an object of the class whose slot `offset` is: its slot, or where that is unset
 * what field() finds (the AttributeError). */
static PyObject *
field_at(PyObject *object, Py_ssize_t offset, PyObject *name)
{
    PyObject *value = SLOT(object, offset);
    return value != NULL ? Py_NewRef(value) : field(object, name);
}

/* An SDK span's attribute dict (a new reference), as span_attributes reads it; NULL, with no
 * error set, for any other span; NULL with an error that is no AttributeError. */
static PyObject *
attribute_dict(PyObject *span)
{
    PyObject *store = field(span, s_attributes);
    if (store == NULL)
        return NULL;
    PyObject *found = field(store, s_dict);
    Py_DECREF(store);
    if (found != NULL && !PyDict_CheckExact(found))
        Py_CLEAR(found);
    return found;
}

/* The value under `key`: a borrowed reference, or NULL (absent, or an error set). */
static PyObject *
lookup(PyObject *dict, PyObject *key)
{
    return PyDict_GetItemWithError(dict, key);
}

/* The context a span starts in (a new reference in *context, replacing None): read only where the
 * Python method reads it. 1, 0 (not the API's own Context: Python reads it) or -1. */
static int
resolved(PyObject **context)
{
    if (*context == Py_None) {
        PyObject *current = PyObject_CallNoArgs(current_context);
        if (current == NULL)
            return -1;
        Py_SETREF(*context, current);
    }
    return Py_IS_TYPE(*context, context_type);
}

/* named_session(): the first of `keys` whose value is a non-empty str (*found, borrowed). */
static int
named_in(PyObject *entries, PyObject *keys, PyObject **found)
{
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(keys); at++) {
        PyObject *value = lookup(entries, PyTuple_GET_ITEM(keys, at));
        if (value == NULL) {
            if (PyErr_Occurred())
                return ERROR;
            continue;
        }
        if (value == Py_None)
            continue;
        if (!is_text(value))
            return LEFT_TO_PYTHON; /* str() of another value, or a falsy one skipped */
        if (PyUnicode_GET_LENGTH(value)) {
            *found = value;
            return FOUND;
        }
    }
    return NOTHING;
}

/* session_in_context(): the session the context carries (*found, borrowed). */
static int
session_in_context(PyObject *context, PyObject **found)
{
    PyObject *enclosing = lookup(context, k_session);
    if (enclosing != NULL) {
        if (!Py_IS_TYPE(enclosing, session_context_type))
            return LEFT_TO_PYTHON;
        PyObject *session_id = SLOT(enclosing, session_context_id_slot);
        if (!is_text(session_id))
            return LEFT_TO_PYTHON;
        *found = session_id;
        return FOUND;
    }
    if (PyErr_Occurred())
        return ERROR;
    PyObject *carried = lookup(context, k_baggage);
    if (carried != NULL) {
        if (!PyDict_CheckExact(carried))
            return LEFT_TO_PYTHON;
        int named = named_in(carried, session_baggage, found);
        if (named != NOTHING)
            return named;
    }
    else if (PyErr_Occurred())
        return ERROR;
    PyObject *parent = lookup(context, k_span);
    if (parent == NULL)
        return PyErr_Occurred() ? ERROR : NOTHING;
    if (Py_IS_TYPE(parent, non_recording_type))
        return NOTHING; /* a remote parent, or none valid: no attributes, so no stamp */
    PyObject *attributes = attribute_dict(parent);
    if (attributes == NULL)
        return PyErr_Occurred() ? ERROR : LEFT_TO_PYTHON;
    PyObject *stamped = lookup(attributes, a_session_id);
    int outcome = NOTHING;
    if (stamped != NULL && stamped != Py_None) {
        if (!is_text(stamped))
            outcome = LEFT_TO_PYTHON;
        else if (PyUnicode_GET_LENGTH(stamped)) {
            *found = stamped; /* borrowed from the parent's dict, which the context holds */
            outcome = FOUND;
        }
    }
    else if (stamped == NULL && PyErr_Occurred())
        outcome = ERROR;
    Py_DECREF(attributes);
    return outcome;
}

/* Whether a step span of `kind` starting in the context (*resolving, read only if the span has a
 * parent) duplicates its parent, as the processor asks: NOTHING, FOUND (Python remembers the
 * duplicate, or reads a context of another kind), or ERROR. The usual parent (an agent
 * span, or a step of the other kind) is told here; any other goes to enclosing_step(). */
static int
duplicates_parent(PyObject *span, PyObject *kind, PyObject *attrs, PyObject **resolving)
{
    PyObject *own_parent = PyObject_GetAttr(span, s_parent);
    if (own_parent == NULL)
        return ERROR;
    int root = own_parent == Py_None;
    Py_DECREF(own_parent);
    if (root)
        return NOTHING;
    int readable = resolved(resolving);
    if (readable <= 0)
        return readable < 0 ? ERROR : FOUND; /* a context of another kind: Python reads it */
    PyObject *context = *resolving;
    PyObject *parent = lookup(context, k_span);
    if (parent == NULL)
        return PyErr_Occurred() ? ERROR : NOTHING;
    if (Py_IS_TYPE(parent, non_recording_type))
        return NOTHING; /* no attributes: no step */
    PyObject *attributes = attribute_dict(parent);
    if (attributes == NULL && PyErr_Occurred())
        return ERROR;
    if (attributes != NULL) {
        PyObject *operation = PyDict_GET_SIZE(attributes) ? lookup(attributes, a_operation) : NULL;
        int decided = -1;
        if (PyDict_GET_SIZE(attributes) == 0)
            decided = NOTHING;
        else if (operation == NULL && PyErr_Occurred())
            decided = ERROR;
        else if (is_text(operation)) {
            PyObject *parent_kind = lookup(kind_of_operation, operation);
            if (parent_kind == NULL && PyErr_Occurred())
                decided = ERROR;
            else if (parent_kind != kind) /* the dict's own values: the same object when equal */
                decided = NOTHING;
        }
        Py_DECREF(attributes);
        if (decided != -1)
            return decided;
    }
    PyObject *step = PyObject_CallFunctionObjArgs(enclosing_step, kind, attrs, context, NULL);
    if (step == NULL)
        return ERROR;
    int duplicate = step != Py_None;
    Py_DECREF(step);
    return duplicate ? FOUND : NOTHING;
}

static int
call_method(PyObject *object, PyObject *name)
{
    PyObject *result = PyObject_CallMethodNoArgs(object, name);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* Whether the processor is the package's own, in observe mode (enforce mode tracks every span's
 * scope, which only the Python methods do): 1, 0, or -1 with an error. */
static int
observing(PyObject *processor)
{
    if (processor_type == NULL || field_pins == NULL || !Py_IS_TYPE(processor, processor_type))
        return 0;
    int same = unchanged(field_pins); /* (every path asks this first) */
    if (same <= 0)
        return same;
    PyObject *enforcement = field_at(processor, processor_slots[P_ENFORCEMENT], s_enforcement);
    int none = enforcement == Py_None;
    Py_XDECREF(enforcement);
    return none ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* The processor's live sessions, their store and its entries (new references in *sessions,
 * *store, *entries): 1; or 0, any of them unusual or an error set, with whatever was read left
 * for the caller to release. */
static int
live_store(PyObject *processor, PyObject **sessions, PyObject **store, PyObject **entries)
{
    return Py_IS_TYPE(processor, processor_type) &&
           (*sessions = field_at(processor, processor_slots[P_SESSIONS], s_sessions)) != NULL &&
           Py_IS_TYPE(*sessions, sessions_type) &&
           (*store = field_at(*sessions, sessions_slots[SS_STORE], s_store)) != NULL && Py_IS_TYPE(*store, store_type) &&
           (*entries = field_at(*store, store_slots[SO_ENTRIES], s_entries)) != NULL && PyDict_Check(*entries);
}

/* Release `lock`, keeping the error set before (unless releasing fails too). */
static int
release(PyObject *lock)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (call_method(lock, s_release) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    PyErr_Restore(type, value, traceback);
    return 0;
}

/* Whether start_step may number a step of the session: its counter and counts are of the usual types. */
static int
numbers(PyObject *session)
{
    PyObject *counter = SLOT(session, session_slots[LS_SEQUENCE]), *implicit = SLOT(session, session_slots[LS_IMPLICIT]);
    PyObject *running = SLOT(session, session_slots[LS_RUNNING]);
    PyObject *last = counter != NULL && Py_IS_TYPE(counter, counter_type) ? SLOT(counter, counter_last_slot) : NULL;
    return last != NULL && PyLong_CheckExact(last) &&
           (implicit == Py_False || (implicit == Py_True && running != NULL && PyLong_CheckExact(running)));
}

/* The live session `session_id` (*found, a new reference), counted as used as SessionStore.get
 * counts it: FOUND, LEFT_TO_PYTHON (not live: Python opens it; or anything unusual) or ERROR. */
static int
live_session(PyObject *processor, PyObject *session_id, PyObject **found)
{
    int outcome = LEFT_TO_PYTHON;
    PyObject *sessions = NULL, *store = NULL, *entries = NULL, *seen = NULL, *lock = NULL, *clock = NULL;
    if (!live_store(processor, &sessions, &store, &entries) ||
        (seen = field_at(store, store_slots[SO_SEEN], s_seen)) == NULL || !PyDict_CheckExact(seen) ||
        (lock = field_at(store, store_slots[SO_LOCK], s_lock)) == NULL ||
        (clock = field_at(store, store_slots[SO_CLOCK], s_clock)) == NULL)
        goto done;
    int live = PyDict_Contains(entries, session_id); /* a miss takes no lock (SessionStore.get's test) */
    if (live <= 0) {
        outcome = live < 0 ? ERROR : LEFT_TO_PYTHON;
        goto done;
    }
    if (call_method(lock, s_acquire) < 0) {
        outcome = ERROR;
        goto done;
    }
    PyObject *session = lookup(entries, session_id);
    if (session == NULL)
        outcome = PyErr_Occurred() ? ERROR : LEFT_TO_PYTHON; /* evicted meanwhile */
    else if (Py_IS_TYPE(session, session_type) && numbers(session)) { /* (else Python, before the touch) */
        Py_INCREF(session);
        PyObject *now = PyObject_CallNoArgs(clock);
        PyObject *moved = now == NULL || PyDict_SetItem(seen, session_id, now) < 0
                              ? NULL
                              : PyObject_CallMethodOneArg(entries, s_move_to_end, session_id);
        Py_XDECREF(now);
        if (moved == NULL) {
            Py_DECREF(session);
            outcome = ERROR;
        }
        else {
            Py_DECREF(moved);
            *found = session;
            outcome = FOUND;
        }
    }
    if (release(lock) < 0) {
        if (outcome == FOUND)
            Py_CLEAR(*found);
        outcome = ERROR;
    }
done:
    if (outcome == LEFT_TO_PYTHON && PyErr_Occurred())
        outcome = ERROR;
    Py_XDECREF(sessions);
    Py_XDECREF(store);
    Py_XDECREF(entries);
    Py_XDECREF(seen);
    Py_XDECREF(lock);
    Py_XDECREF(clock);
    return outcome;
}

/* LiveSession.start_step(): the step's sequence number (*number, a new reference), FOUND; or
 * LEFT_TO_PYTHON, having changed nothing, when a field read is of another type; or ERROR. */
static int
start_step(PyObject *session, PyObject **number)
{
    PyObject *lock = PyDict_GetItemWithError(numbering_globals, numbering_name); /* read afresh: see _fork */
    if (lock == NULL)
        return PyErr_Occurred() ? ERROR : LEFT_TO_PYTHON;
    Py_INCREF(lock);
    if (call_method(lock, s_acquire) < 0) {
        Py_DECREF(lock);
        return ERROR;
    }
    int outcome = LEFT_TO_PYTHON;
    if (numbers(session)) { /* checked again under the lock: another thread may have written meanwhile */
        PyObject *counter = SLOT(session, session_slots[LS_SEQUENCE]), *implicit = SLOT(session, session_slots[LS_IMPLICIT]);
        PyObject *running = SLOT(session, session_slots[LS_RUNNING]), *last = SLOT(counter, counter_last_slot);
        outcome = ERROR;
        PyObject *one = PyLong_FromLong(1);
        PyObject *more = one != NULL && implicit == Py_True ? PyNumber_Add(running, one) : NULL;
        if (one != NULL && (implicit == Py_False || more != NULL)) {
            PyObject *next = PyNumber_Add(last, one);
            if (next != NULL) {
                if (more != NULL)
                    Py_SETREF(SLOT(session, session_slots[LS_RUNNING]), Py_NewRef(more));
                Py_SETREF(SLOT(counter, counter_last_slot), Py_NewRef(next));
                *number = next;
                outcome = FOUND;
            }
        }
        Py_XDECREF(more);
        Py_XDECREF(one);
    }
    if (release(lock) < 0) {
        if (outcome == FOUND)
            Py_CLEAR(*number);
        outcome = ERROR;
    }
    Py_DECREF(lock);
    return outcome;
}

/* Whether stamp_starting writes the stamps straight into the span's attribute dict (*dict, a new
 * reference): the SDK's attributes with no limit to apply and none of the stamps yet. */
static int
writable(PyObject *span, Py_ssize_t count, PyObject *const *keys, PyObject **dict)
{
    PyObject *store = field(span, s_attributes); /* getattr(span, "_attributes", None) */
    if (store == NULL || !Py_IS_TYPE(store, attributes_type)) {
        Py_XDECREF(store);
        return PyErr_Occurred() ? -1 : 0;
    }
    int yes = -1;
    PyObject *max_value_len = PyObject_GetAttr(store, s_max_value_len);
    PyObject *immutable = max_value_len == NULL ? NULL : PyObject_GetAttr(store, s_immutable);
    PyObject *maxlen = immutable == NULL ? NULL : PyObject_GetAttr(store, s_maxlen);
    PyObject *inner = maxlen == NULL ? NULL : PyObject_GetAttr(store, s_dict);
    Py_DECREF(store);
    if (inner == NULL)
        goto done;
    yes = 0;
    if (max_value_len != Py_None || !PyDict_CheckExact(inner))
        goto done;
    int frozen = PyObject_IsTrue(immutable);
    if (frozen) {
        yes = frozen < 0 ? -1 : 0;
        goto done;
    }
    if (maxlen != Py_None) {
        PyObject *needed = PyLong_FromSsize_t(PyDict_GET_SIZE(inner) + count);
        int fits = needed == NULL ? -1 : PyObject_RichCompareBool(needed, maxlen, Py_LE);
        Py_XDECREF(needed);
        if (fits <= 0) {
            yes = fits;
            goto done;
        }
    }
    for (Py_ssize_t at = 0; at < count; at++) {
        int there = PyDict_Contains(inner, keys[at]);
        if (there) {
            yes = there < 0 ? -1 : 0;
            goto done;
        }
    }
    yes = 1;
    *dict = Py_NewRef(inner);
done:
    Py_XDECREF(max_value_len);
    Py_XDECREF(immutable);
    Py_XDECREF(maxlen);
    Py_XDECREF(inner);
    return yes;
}

/* Whether the SDK stores each of the dict's values unchanged (span_stamp._stored_as_is): an exact
 * str, int, float or bool, or an exact tuple of exact str. */
static int
stored_as_is(PyObject *attributes)
{
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(attributes, &position, &key, &value)) {
        if (PyUnicode_CheckExact(value) || PyLong_CheckExact(value) || PyFloat_CheckExact(value) || PyBool_Check(value))
            continue;
        if (!PyTuple_CheckExact(value))
            return 0;
        for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(value); at++)
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(value, at)))
                return 0;
    }
    return 1;
}

#define MAX_STAMPS 16

/* span_stamp.stamp(span, attributes) (shared: a span any thread may hold, its lock taken and its
 * end checked) or span_stamp.stamp_starting(span, attributes) (a span in on_start), on a span
 * sdk_span() has vouched for: the guard's attributes written straight into the SDK's dict where
 * the SDK would store them so, else through set_attributes. 1 when written; 0, with nothing
 * done, for the Python function (a value the SDK would convert, a long dict); -1 with an error. */
static int
write_stamps(PyObject *span, PyObject *attributes, int shared)
{
    Py_ssize_t count = PyDict_GET_SIZE(attributes);
    if (count > MAX_STAMPS || (shared && !stored_as_is(attributes)))
        return 0;
    PyObject *lock = NULL, *dict = NULL;
    if (shared) {
        if ((lock = field(span, s_lock)) == NULL || lock == Py_None) {
            Py_XDECREF(lock);
            return PyErr_Occurred() ? -1 : 0;
        }
        if (call_method(lock, s_acquire) < 0) {
            Py_DECREF(lock);
            return -1;
        }
    }
    PyObject *keys[MAX_STAMPS] = {NULL}, *key, *value;
    Py_ssize_t position = 0, at = 0;
    while (at < count && PyDict_Next(attributes, &position, &key, &value))
        keys[at++] = Py_NewRef(key); /* held: the reads below may run code */
    int direct = 1;
    if (shared) {
        PyObject *end = field(span, s_end_time);
        direct = end == Py_None ? 1 : PyErr_Occurred() ? -1 : 0;
        Py_XDECREF(end);
    }
    if (direct > 0)
        direct = writable(span, at, keys, &dict);
    if (direct > 0) {
        direct = PyDict_Update(dict, attributes) < 0 ? -1 : 1;
        Py_DECREF(dict);
    }
    while (at > 0)
        Py_DECREF(keys[--at]);
    if (lock != NULL) {
        if (release(lock) < 0)
            direct = -1;
        Py_DECREF(lock);
    }
    if (direct == 0) {
        PyObject *written = PyObject_CallMethodOneArg(span, s_set_attributes, attributes);
        direct = written == NULL ? -1 : 1;
        Py_XDECREF(written);
    }
    return direct;
}

static PyObject *
stamp_entry(PyObject *const *args, Py_ssize_t nargs, int shared, const char *name)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "%s() takes 2 arguments (%zd given)", name, nargs);
    if (processor_type == NULL || !PyDict_CheckExact(args[1]))
        Py_RETURN_FALSE;
    int done = sdk_span(args[0]); /* another class of span: the Python function's */
    if (done > 0)
        done = write_stamps(args[0], args[1], shared);
    return done < 0 ? NULL : Py_NewRef(done ? Py_True : Py_False);
}

/* stamp(span, attributes), stamp_starting(span, attributes): True when written; False, with
 * nothing done, for span_stamp's Python function to write them. */
static PyObject *
stamp_shared(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return stamp_entry(args, nargs, 1, "stamp");
}

static PyObject *
stamp_starting(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return stamp_entry(args, nargs, 0, "stamp_starting");
}

/* span_stamp.stamp_starting(span, stamps) of the session id (where given) and the sequence number
 * (where given), in that order, on a span sdk_span() has vouched for. */
static int
stamp(PyObject *span, PyObject *session_id, PyObject *sequence)
{
    if (session_id == NULL && sequence == NULL)
        return 0;
    PyObject *stamps = PyDict_New();
    int failed = stamps == NULL || (session_id != NULL && PyDict_SetItem(stamps, a_session_id, session_id) < 0) ||
                 (sequence != NULL && PyDict_SetItem(stamps, a_sequence, sequence) < 0) ||
                 write_stamps(span, stamps, 0) < 0;
    Py_XDECREF(stamps);
    return failed ? -1 : 0;
}

/* A step starting as its trace's root in no session: a lone call, named by its trace id and
 * numbered by LiveSessions.start_lone_call, or a session opened for it where that declines, as
 * the Python method does. True when started; False, with nothing changed, for Python to start it
 * (a parent, a duplicate's mark, an unusual start time or stamp): borrowed; NULL with an error. */
static PyObject *
start_lone_call(PyObject *processor, PyObject *span, PyObject *attrs, PyObject *given_context)
{
    PyObject *parent = NULL, *start = NULL, *context = NULL, *trace_id = NULL, *session_id = NULL;
    PyObject *sessions = NULL, *sequence = NULL, *session = NULL, *result = Py_False;
    PyObject *nested = lookup(attrs, a_nested_step);
    if ((nested != NULL && nested != Py_None && nested != Py_False) || PyErr_Occurred() ||
        (parent = field(span, s_parent)) == NULL || parent != Py_None ||
        (start = field(span, s_start_time)) == NULL || !PyLong_CheckExact(start) || !PyObject_IsTrue(start) ||
        (context = field(span, s_context)) == NULL || (trace_id = PyObject_GetAttr(context, s_trace_id)) == NULL ||
        (session_id = PyObject_Format(trace_id, trace_id_format)) == NULL || !is_text(session_id))
        goto done;
    if (!Py_IS_TYPE(processor, processor_type) ||
        (sessions = field_at(processor, processor_slots[P_SESSIONS], s_sessions)) == NULL ||
        !Py_IS_TYPE(sessions, sessions_type))
        goto done;
    /* Decided: from here on, the Python method's calls. */
    result = NULL;
    sequence = PyObject_CallMethodObjArgs(sessions, s_start_lone_call, session_id, attrs, start, NULL);
    if (sequence == Py_None) { /* declined: a session opened as for any step */
        Py_CLEAR(sequence);
        session = PyObject_CallMethodObjArgs(sessions, s_open, session_id, attrs, given_context, start, Py_True, NULL);
        if (session != NULL)
            sequence = PyObject_CallMethodNoArgs(session, s_start_step);
    }
    if (sequence != NULL) /* (its own session id, if any, is None or empty: a str would have named it) */
        result = stamp(span, session_id, sequence) < 0 ? NULL : Py_True;
done:
    if (result == Py_False && PyErr_Occurred())
        result = NULL;
    Py_XDECREF(parent);
    Py_XDECREF(start);
    Py_XDECREF(context);
    Py_XDECREF(trace_id);
    Py_XDECREF(session_id);
    Py_XDECREF(sessions);
    Py_XDECREF(sequence);
    Py_XDECREF(session);
    return result; /* Py_True or Py_False, borrowed (they never go), or NULL */
}

/* A session span (invoke_agent naming its session) starting, no step itself: its session opened by
 * LiveSessions.open, the span attached to it unless it has one already, the session id stamped, as
 * the Python method does. True when started; False, with nothing changed, for Python to start it (a
 * duplicate's mark, an unusual start time or stamp): borrowed; NULL with an error. */
static PyObject *
start_session_span(PyObject *processor, PyObject *span, PyObject *attrs, PyObject *session_id,
                   PyObject *given_context)
{
    PyObject *nested = lookup(attrs, a_nested_step), *stamped = nested == NULL ? lookup(attrs, a_session_id) : NULL;
    int stamp_id = 1;
    if (nested != NULL || PyErr_Occurred() || (stamped != NULL && !is_text(stamped)))
        return PyErr_Occurred() ? NULL : Py_False; /* (a False mark too: Python reads it as it does) */
    if (stamped != NULL && (stamp_id = PyUnicode_Compare(stamped, session_id)) == -1 && PyErr_Occurred())
        return NULL;
    /* Held from here: the session id is the attribute dict's, and opening the session may run any code. */
    Py_INCREF(session_id);
    PyObject *start = NULL, *context = NULL, *sessions = NULL, *session = NULL, *attached = NULL;
    PyObject *result = Py_False;
    if ((start = field(span, s_start_time)) == NULL || !PyLong_CheckExact(start) || !PyObject_IsTrue(start) ||
        (context = field(span, s_context)) == NULL || !Py_IS_TYPE(context, span_context_type) ||
        PyTuple_GET_SIZE(context) < 2 || !Py_IS_TYPE(processor, processor_type) ||
        (sessions = field_at(processor, processor_slots[P_SESSIONS], s_sessions)) == NULL ||
        !Py_IS_TYPE(sessions, sessions_type))
        goto done;
    /* Decided: from here on, the Python method's calls. */
    result = NULL;
    session = PyObject_CallMethodObjArgs(sessions, s_open, session_id, attrs, given_context, start, Py_False, NULL);
    if (session == NULL)
        goto done;
    if (Py_IS_TYPE(session, session_type) && SLOT(session, session_slots[LS_SESSION_SPAN]) != NULL &&
        SLOT(session, session_slots[LS_SESSION_SPAN_ID]) != NULL) { /* LiveSession.attach_span, pinned */
        if (SLOT(session, session_slots[LS_SESSION_SPAN]) == Py_None) {
            Py_SETREF(SLOT(session, session_slots[LS_SESSION_SPAN]), Py_NewRef(span));
            Py_SETREF(SLOT(session, session_slots[LS_SESSION_SPAN_ID]), Py_NewRef(PyTuple_GET_ITEM(context, 1)));
        }
    }
    else { /* a session of another class: its own fields and method */
        attached = PyObject_GetAttr(session, s_session_span);
        if (attached == NULL)
            goto done;
        if (attached == Py_None) {
            Py_SETREF(attached, PyObject_CallMethodOneArg(session, s_attach_span, span));
            if (attached == NULL)
                goto done;
        }
    }
    result = stamp(span, stamp_id ? session_id : NULL, NULL) < 0 ? NULL : Py_True;
done:
    if (result == Py_False && PyErr_Occurred())
        result = NULL;
    Py_XDECREF(start);
    Py_XDECREF(context);
    Py_XDECREF(sessions);
    Py_XDECREF(session);
    Py_XDECREF(attached);
    Py_DECREF(session_id);
    return result; /* Py_True or Py_False, borrowed (they never go), or NULL */
}

/* start_marked(processor, span, attrs, parent_context): True when the span's start is done; False,
 * with nothing changed, for the Python method to do it. */
static PyObject *
start_marked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "start_marked() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *processor = args[0], *span = args[1], *attrs = args[2];
    if (processor_type == NULL || !PyDict_CheckExact(attrs))
        Py_RETURN_FALSE;
    int same = unchanged(start_pins);
    if (same > 0)
        same = observing(processor);
    if (same <= 0)
        return same < 0 ? NULL : Py_NewRef(Py_False);
    int plain = sdk_span(span);
    if (plain <= 0)
        return plain < 0 ? NULL : Py_NewRef(Py_False);

    int verdict = PyDict_Contains(attrs, a_verdict);
    if (verdict)
        return verdict < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *operation = lookup(attrs, a_operation);
    if (!is_text(operation))
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    PyObject *kind = lookup(kind_of_operation, operation); /* NULL: no step */
    if (kind == NULL && PyErr_Occurred())
        return NULL;
    PyObject *named = NULL;
    int found = named_in(attrs, session_attributes, &named);
    if (found < NOTHING)
        return found == ERROR ? NULL : Py_NewRef(Py_False);
    if (named != NULL) {
        int invoke_agent = PyUnicode_Compare(operation, op_invoke_agent);
        if (invoke_agent == -1 && PyErr_Occurred())
            return NULL;
        if (invoke_agent == 0) /* a session span, which its session attaches */
            return Py_XNewRef(kind == NULL ? start_session_span(processor, span, attrs, named, args[3]) : Py_False);
    }
    /* Held from here: the calls below may run any code. */
    PyObject *context = Py_NewRef(args[3]), *session_id = Py_XNewRef(named), *session = NULL, *sequence = NULL;
    PyObject *result = Py_False;
    Py_XINCREF(kind);
    if (session_id == NULL) {
        PyObject *carried = NULL;
        if ((found = resolved(&context)) <= 0 || (found = session_in_context(context, &carried)) < NOTHING) {
            result = found == ERROR ? NULL : Py_False;
            goto done;
        }
        session_id = Py_XNewRef(carried);
    }
    if (session_id == NULL) {
        /* In no session: no step is left alone; a step's trace stands in for its session. */
        result = kind == NULL ? Py_True : start_lone_call(processor, span, attrs, args[3]);
        goto done;
    }
    PyObject *stamped = lookup(attrs, a_session_id);
    int stamp_id = 1;
    if (stamped != NULL && (!is_text(stamped) ||
                            ((stamp_id = PyUnicode_Compare(stamped, session_id)) == -1 && PyErr_Occurred())))
        goto done;
    PyObject *nested = lookup(attrs, a_nested_step);
    if (nested != NULL && nested != Py_None && nested != Py_False && nested != Py_True)
        goto done;
    if (PyErr_Occurred())
        goto done;
    if (kind == NULL || nested == Py_True) {
        /* Inside the session only; or a duplicate another instrumentation marked itself. */
        result = stamp(span, stamp_id ? session_id : NULL, NULL) < 0 ? NULL : Py_True;
        goto done;
    }
    found = duplicates_parent(span, kind, attrs, &context);
    if (found != NOTHING) {
        result = found == ERROR ? NULL : Py_False; /* a duplicate: Python remembers it */
        goto done;
    }
    /* Decided, up to the session: from here on, the Python method's order. */
    if ((found = live_session(processor, session_id, &session)) != FOUND) {
        result = found == ERROR ? NULL : Py_False;
        goto done;
    }
    if ((found = start_step(session, &sequence)) != FOUND) {
        result = found == ERROR ? NULL : Py_False; /* (counted as used already, as Python counts it) */
        goto done;
    }
    result = stamp(span, stamp_id ? session_id : NULL, sequence) < 0 ? NULL : Py_True;
done:
    if (result == Py_False && PyErr_Occurred())
        result = NULL;
    Py_XDECREF(sequence);
    Py_XDECREF(session);
    Py_XDECREF(session_id);
    Py_XDECREF(kind);
    Py_DECREF(context);
    return Py_XNewRef(result);
}

/* --- the end of a step span ---------------------------------------------------------------- */

/* A Python method's result dropped: 0, or -1 with its error. */
static int
done_with(PyObject *result)
{
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* LiveSession.step_span_ended(): a session no id names counts its running steps. */
static int
step_span_ended(PyObject *session)
{
    PyObject *lock = PyDict_GetItemWithError(numbering_globals, numbering_name);
    if (lock == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the counters' lock is gone");
        return -1;
    }
    Py_INCREF(lock);
    int failed = call_method(lock, s_acquire) < 0;
    if (!failed) {
        PyObject *one = PyLong_FromLong(1);
        PyObject *fewer = one == NULL ? NULL : PyNumber_Subtract(SLOT(session, session_slots[LS_RUNNING]), one);
        Py_XDECREF(one);
        if (fewer == NULL)
            failed = 1;
        else
            Py_SETREF(SLOT(session, session_slots[LS_RUNNING]), fewer);
        failed = release(lock) < 0 || failed;
    }
    Py_DECREF(lock);
    return failed ? -1 : 0;
}

/* `x or 0` of a span's start or end time (a new reference). */
static PyObject *
time_or_zero(PyObject *span, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(span, name);
    if (value == NULL)
        return NULL;
    int set = PyObject_IsTrue(value);
    if (set > 0)
        return value;
    Py_DECREF(value);
    return set < 0 ? NULL : PyLong_FromLong(0);
}

/* The step a span's attributes describe: the compiled step reader's, else (for values it does not
 * read) the processor's _step, which runs the Python readers. */
static PyObject *
read_step(PyObject *processor, PyObject *sessions, PyObject *span, PyObject *attrs, PyObject *kind,
          PyObject *session_id, PyObject *sequence)
{
    PyObject *reader = kind == tool_kind ? tool_step : model_step;
    if (reader != Py_None) {
        PyObject *name = NULL, *start = NULL, *end = NULL, *status = NULL, *code = NULL, *policy = NULL,
                 *payloads = NULL, *step = NULL;
        if ((start = time_or_zero(span, s_start_time)) != NULL && (end = time_or_zero(span, s_end_time)) != NULL) {
            if (kind == tool_kind) {
                if ((name = PyObject_GetAttr(span, s_name)) != NULL &&
                    (status = PyObject_GetAttr(span, s_status)) != NULL &&
                    /* (the SDK's Status.status_code property reads _status_code: pinned) */
                    (code = PyObject_GetAttr(status, Py_IS_TYPE(status, status_type) ? s_own_status_code
                                                                                   : s_status_code)) != NULL &&
                    (policy = slot_or_getattr(processor, processor_slots[P_POLICY], s_policy)) != NULL &&
                    (payloads = slot_or_getattr(sessions, sessions_slots[SS_PAYLOADS], s_payloads)) != NULL) {
                    PyObject *call[9] = {attrs, session_id, sequence, policy, name, start, end,
                                         code == status_error ? Py_True : Py_False, payloads};
                    step = PyObject_Vectorcall(reader, call, 9, NULL);
                }
            }
            else {
                PyObject *call[5] = {attrs, session_id, sequence, start, end};
                step = PyObject_Vectorcall(reader, call, 5, NULL);
            }
        }
        Py_XDECREF(name);
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(status);
        Py_XDECREF(code);
        Py_XDECREF(policy);
        Py_XDECREF(payloads);
        if (step != Py_None)
            return step; /* the step, or NULL with the reader's error */
        Py_DECREF(step);
    }
    return PyObject_CallMethodObjArgs(processor, s_step, span, attrs, kind, session_id, sequence, NULL);
}

/* SequenceBuffer.push(step): the steps released (a new list). */
static PyObject *
push(PyObject *buffer, PyObject *step)
{
    if (Py_IS_TYPE(buffer, buffer_type)) {
        PyObject *next = SLOT(buffer, buffer_slots[B_NEXT]), *pending = SLOT(buffer, buffer_slots[B_PENDING]),
                 *skipped = SLOT(buffer, buffer_slots[B_SKIPPED]), *sequence = SLOT(step, step_slots[ST_SEQUENCE]);
        if (next != NULL && PyLong_CheckExact(next) && sequence != NULL && PyLong_CheckExact(sequence) &&
            (pending == Py_None || (pending != NULL && PyList_CheckExact(pending) && !PyList_GET_SIZE(pending))) &&
            (skipped == Py_None || (skipped != NULL && PySet_CheckExact(skipped) && !PySet_GET_SIZE(skipped)))) {
            int late = PyObject_RichCompareBool(sequence, next, Py_LT);
            int awaited = late ? 0 : PyObject_RichCompareBool(sequence, next, Py_EQ);
            if (late < 0 || awaited < 0)
                return NULL;
            if (awaited) { /* the usual case: the step it waits for, nothing held back */
                PyObject *one = PyLong_FromLong(1);
                PyObject *after = one == NULL ? NULL : PyNumber_Add(sequence, one);
                Py_XDECREF(one);
                if (after == NULL)
                    return NULL;
                Py_SETREF(SLOT(buffer, buffer_slots[B_NEXT]), after);
            }
            if (late || awaited) {
                PyObject *released = PyList_New(1);
                if (released != NULL)
                    PyList_SET_ITEM(released, 0, Py_NewRef(step));
                return released;
            }
        }
    }
    return PyObject_CallMethodOneArg(buffer, s_push, step);
}

/* LiveSessions._observe(session, steps), under the session's lock: the alerts raised (a new list)
 * and whether a step was final; NULL with an error. */
static PyObject *
observe(PyObject *session, PyObject *steps, int *final)
{
    PyObject *raised = PyList_New(0);
    if (raised == NULL)
        return NULL;
    *final = 0;
    int ended = PyObject_IsTrue(SLOT(session, session_slots[LS_ENDED]));
    if (ended)
        return ended < 0 ? (Py_DECREF(raised), NULL) : raised;
    PyObject *judge = SLOT(session, session_slots[LS_JUDGE]);
    Py_INCREF(judge);
    for (Py_ssize_t at = 0; at < PyList_GET_SIZE(steps); at++) {
        PyObject *step = PyList_GET_ITEM(steps, at);
        PyObject *found = judge_observe == Py_None ? Py_NewRef(Py_None)
                                                   : PyObject_CallFunctionObjArgs(judge_observe, judge, step, NULL);
        if (found == Py_None) {
            Py_DECREF(found);
            found = PyObject_CallMethodOneArg(judge, s_observe, step);
        }
        int failed = found == NULL;
        if (!failed) {
            int any = PyObject_IsTrue(found);
            failed = any < 0;
            if (any > 0) {
                Py_ssize_t end = PyList_GET_SIZE(raised);
                failed = PyList_SetSlice(raised, end, end, found) < 0;
            }
            Py_DECREF(found);
        }
        if (!failed && !*final) { /* `final or step.final` */
            PyObject *is_final = Py_IS_TYPE(step, step_type) ? Py_XNewRef(SLOT(step, step_slots[ST_FINAL]))
                                                             : PyObject_GetAttr(step, s_final);
            int yes = is_final == NULL ? -1 : PyObject_IsTrue(is_final);
            if (is_final == NULL && !PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "final");
            Py_XDECREF(is_final);
            failed = yes < 0;
            *final = yes > 0;
        }
        if (failed) {
            Py_DECREF(judge);
            Py_DECREF(raised);
            return NULL;
        }
    }
    Py_DECREF(judge);
    if (PyList_GET_SIZE(raised) && done_with(PyObject_CallFunctionObjArgs(write_alerts, session, raised, NULL)) < 0)
        Py_CLEAR(raised);
    return raised;
}

/* The model call's response id, as duplicate_spans.response_id reads it (borrowed), or NULL. */
static PyObject *
response_id(PyObject *attrs)
{
    PyObject *value = lookup(attrs, a_response_id);
    return is_text(value) && PyUnicode_GET_LENGTH(value) ? value : NULL;
}

/* LiveSessions.step_ended(session, kind, step, attrs, span) for the usual step: a tool step, or a
 * model step naming no call a later span may answer, no derived call waiting in the session. Any
 * other goes to the Python method (which takes the lock itself). */
static int
step_ended(PyObject *sessions, PyObject *session, PyObject *kind, PyObject *step, PyObject *attrs, PyObject *span)
{
    if (!Py_IS_TYPE(step, step_type)) /* a step made otherwise (a subclass of the processor's) */
        return done_with(PyObject_CallMethodObjArgs(sessions, s_step_ended, session, kind, step, attrs, span, NULL));
    int model = kind != tool_kind;
    for (Py_ssize_t at = 0; model && at < PyTuple_GET_SIZE(requested_call_attributes); at++) {
        int names_calls = PyDict_Contains(attrs, PyTuple_GET_ITEM(requested_call_attributes, at));
        if (names_calls < 0)
            return -1;
        if (names_calls) /* derived tool steps to read from it: Python's part */
            return done_with(PyObject_CallMethodObjArgs(sessions, s_step_ended, session, kind, step, attrs, span,
                                                        NULL));
    }
    PyObject *current = model ? Py_XNewRef(response_id(attrs)) : NULL; /* held: the lock may switch threads */
    if (model && current == NULL && PyErr_Occurred())
        return -1;
    PyObject *lock = Py_NewRef(SLOT(session, session_slots[LS_LOCK]));
    if (call_method(lock, s_acquire) < 0) {
        Py_DECREF(lock);
        Py_XDECREF(current);
        return -1;
    }
    if (SLOT(session, session_slots[LS_DERIVED]) != Py_None) { /* a derived step may wait: Python's part */
        int released = release(lock);
        Py_DECREF(lock);
        Py_XDECREF(current);
        return released < 0 ? -1 : done_with(PyObject_CallMethodObjArgs(sessions, s_step_ended, session, kind,
                                                                          step, attrs, span, NULL));
    }
    PyObject *raised = NULL, *steps = NULL;
    int final = 0, repeated = 0;
    if (model) { /* duplicate_spans.same_response: the same model call seen a second time is no step */
        PyObject *previous = SLOT(session, session_slots[LS_LAST_RESPONSE_ID]);
        repeated = current == NULL ? 0 : PyObject_RichCompareBool(current, previous, Py_EQ);
        if (repeated >= 0)
            Py_SETREF(SLOT(session, session_slots[LS_LAST_RESPONSE_ID]), current != NULL ? current : Py_NewRef(Py_None));
        else
            Py_XDECREF(current);
        current = NULL;
    }
    PyObject *buffer = Py_NewRef(SLOT(session, session_slots[LS_BUFFER]));
    PyObject *sequence = SLOT(step, step_slots[ST_SEQUENCE]);
    if (repeated > 0 && sequence == NULL)
        PyErr_SetString(PyExc_AttributeError, "sequence");
    else if (repeated > 0)
        steps = PyObject_CallMethodOneArg(buffer, s_skip, sequence);
    else if (repeated == 0) {
        PyObject *context = PyObject_GetAttr(span, s_context);
        if (context != NULL) {
            Py_SETREF(SLOT(session, session_slots[LS_LAST_CONTEXT]), context);
            steps = push(buffer, step);
        }
    }
    Py_DECREF(buffer);
    if (steps != NULL && !PyList_CheckExact(steps)) {
        PyErr_SetString(PyExc_TypeError, "the sequence buffer released no list");
        Py_CLEAR(steps);
    }
    if (steps != NULL)
        raised = observe(session, steps, &final);
    int failed = raised == NULL;
    failed = release(lock) < 0 || failed;
    Py_DECREF(lock);
    Py_XDECREF(steps);
    if (!failed && (PyList_GET_SIZE(raised) || final))
        failed = done_with(PyObject_CallMethodObjArgs(sessions, s_judged, session, raised,
                                                      final ? Py_True : Py_False, NULL)) < 0;
    Py_XDECREF(raised);
    return failed ? -1 : 0;
}

/* A step lost to its reader's failure (an Exception, reported as the processor reports it): its
 * place in the sequence is filled. */
static int
step_lost(PyObject *sessions, PyObject *session, PyObject *sequence)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *reported = PyObject_CallFunctionObjArgs(report, step_failed, value, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (done_with(reported) < 0)
        return -1;
    return done_with(PyObject_CallMethodObjArgs(sessions, s_skip, session, sequence, NULL));
}

/* Whether the span is the session's own span (_ended_in closes the session then): 1, 0 or -1. */
static int
is_session_span(PyObject *session, PyObject *span)
{
    if (SLOT(session, session_slots[LS_SESSION_SPAN]) == Py_None)
        return 0;
    PyObject *context = PyObject_GetAttr(span, s_context);
    if (context == NULL)
        return -1;
    int same = 0;
    if (context != Py_None) {
        /* The SDK's SpanContext is a tuple whose span_id property reads item 1 (pinned): read it here,
         * without the property's Python frame. */
        PyObject *span_id = Py_IS_TYPE(context, span_context_type) && PyTuple_GET_SIZE(context) > 1
                                ? Py_NewRef(PyTuple_GET_ITEM(context, 1))
                                : PyObject_GetAttr(context, s_span_id);
        same = span_id == NULL ? -1
                               : PyObject_RichCompareBool(span_id, SLOT(session, session_slots[LS_SESSION_SPAN_ID]),
                                                          Py_EQ);
        Py_XDECREF(span_id);
    }
    Py_DECREF(context);
    return same;
}

/* A lone call's end (its span its trace's root, its id in LiveSessions.lone), as _session_span_ended
 * and _lone_call_ended do it for the usual one: no session stored under its id, no duplicate's
 * mark, a step of a known kind numbered 1 that names no call a later span may answer. Its step is
 * read and handed to LiveSessions.end_lone_call, which judges it alone, or to _ended_in for the
 * session a step inside the call claimed meanwhile. False, having changed nothing, for anything
 * else, and where the step cannot be read (the Python method reads it again, fails the same way,
 * and keeps the lone call's session). The caller has checked the pins. Borrowed: Py_True or
 * Py_False; NULL with an error. */
static PyObject *
end_lone_call(PyObject *processor, PyObject *sessions, PyObject *entries, PyObject *span, PyObject *attrs,
              PyObject *session_id)
{
    PyObject *stored = lookup(entries, session_id), *nested = stored == NULL ? lookup(attrs, a_nested_step) : NULL;
    if (stored != NULL || nested != NULL || PyErr_Occurred())
        return PyErr_Occurred() ? NULL : Py_False; /* (a False or None mark too: Python reads it as it does) */
    PyObject *operation = lookup(attrs, a_operation);
    PyObject *kind = is_text(operation) ? lookup(kind_of_operation, operation) : NULL;
    PyObject *sequence = kind != NULL ? lookup(attrs, a_sequence) : NULL;
    if (sequence == NULL || !PyLong_CheckExact(sequence))
        return PyErr_Occurred() ? NULL : Py_False;
    int overflow;
    if (PyLong_AsLongAndOverflow(sequence, &overflow) != 1 || overflow)
        return PyErr_Occurred() ? NULL : Py_False; /* numbered otherwise: Python opens its session */
    for (Py_ssize_t at = 0; kind != tool_kind && at < PyTuple_GET_SIZE(requested_call_attributes); at++) {
        int names_calls = PyDict_Contains(attrs, PyTuple_GET_ITEM(requested_call_attributes, at));
        if (names_calls)
            return names_calls < 0 ? NULL : Py_False; /* calls to derive: judged in its session, by Python */
    }
    /* Held while Python code runs: the kind is the operation dict's, the sequence the attributes'. */
    Py_INCREF(kind);
    Py_INCREF(sequence);
    PyObject *result = NULL, *found = NULL;
    PyObject *step = read_step(processor, sessions, span, attrs, kind, session_id, sequence);
    if (step == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
            result = Py_False;
        }
        goto done;
    }
    /* The session to judge the step in (a step inside the call claimed it meanwhile), else None. */
    found = PyObject_CallMethodObjArgs(sessions, s_end_lone_call, session_id, Py_None, step, span, NULL);
    if (found != NULL)
        result = found == Py_None || done_with(PyObject_CallMethodObjArgs(processor, s_ended_in, found, span, attrs,
                                                                           session_id, NULL)) == 0
                     ? Py_True
                     : NULL;
done:
    Py_DECREF(kind);
    Py_DECREF(sequence);
    Py_XDECREF(step);
    Py_XDECREF(found);
    return result;
}

/* end_in_session(processor, span, attrs, session_id): True when the span's end is done; False,
 * with nothing changed, for the Python method (_session_span_ended) to do it. */
static PyObject *
end_in_session(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "end_in_session() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *processor = args[0], *span = args[1], *attrs = args[2], *session_id = args[3];
    if (processor_type == NULL || !Py_IS_TYPE(span, readable_type) || !PyDict_CheckExact(attrs) ||
        !is_text(session_id))
        Py_RETURN_FALSE;
    int mine = observing(processor);
    if (mine <= 0)
        return mine < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *result = Py_False, *sessions = NULL, *store = NULL, *entries = NULL, *lone = NULL, *parent = NULL,
             *session = NULL;
    if (!live_store(processor, &sessions, &store, &entries) || (lone = field_at(sessions, sessions_slots[SS_LONE], s_lone)) == NULL ||
        !PyDict_CheckExact(lone))
        goto done;
    if ((parent = PyObject_GetAttr(span, s_parent)) == NULL)
        goto failed;
    int same = unchanged(end_pins); /* (what is read from here on calls no function of Python's) */
    if (same <= 0) {
        result = same < 0 ? NULL : Py_False;
        goto done;
    }
    if (parent == Py_None) {
        int lone_call = PyDict_Contains(lone, session_id);
        if (lone_call < 0)
            goto failed;
        if (lone_call) {
            result = end_lone_call(processor, sessions, entries, span, attrs, session_id);
            goto done;
        }
    }
    session = lookup(entries, session_id);
    if (session == NULL) {
        result = PyErr_Occurred() ? NULL : Py_True; /* ended (or never judged): a late span changes nothing */
        goto done;
    }
    Py_INCREF(session);
    if (!Py_IS_TYPE(session, session_type))
        goto done;
    for (int at = 0; at < SESSION_SLOTS; at++)
        if (SLOT(session, session_slots[at]) == NULL)
            goto done; /* a field deleted: Python meets the AttributeError */
    int own = is_session_span(session, span);
    if (own)
        goto failed_or_python; /* the session's own span: its end ends the session, in Python */
    PyObject *sequence = lookup(attrs, a_sequence);
    if (sequence != NULL && !PyLong_CheckExact(sequence))
        sequence = NULL; /* only ours count */
    PyObject *nested = sequence == NULL && PyErr_Occurred() ? NULL : lookup(attrs, a_nested_step);
    if (nested == NULL && PyErr_Occurred())
        goto failed;
    if (nested != NULL && nested != Py_None && nested != Py_False)
        goto done; /* a duplicate: Python carries what it recorded to its step */
    PyObject *operation = lookup(attrs, a_operation);
    if (!is_text(operation)) {
        if (PyErr_Occurred())
            goto failed;
        goto done;
    }
    PyObject *kind = lookup(kind_of_operation, operation);
    if (kind == NULL && PyErr_Occurred())
        goto failed;
    if (kind == NULL && sequence == NULL) {
        result = Py_True; /* neither a step nor numbered */
        goto done;
    }
    PyObject *first = SLOT(session, session_slots[LS_FIRST_SEQUENCE]), *implicit = SLOT(session, session_slots[LS_IMPLICIT]);
    if (sequence == NULL || first == NULL || !PyLong_CheckExact(first) || (implicit != Py_True && implicit != Py_False) ||
        (implicit == Py_True && !PyLong_CheckExact(SLOT(session, session_slots[LS_RUNNING]))) ||
        SLOT(session, session_slots[LS_ENFORCER]) != Py_None)
        goto done; /* a step numbered only now, or fields of other types: Python */
    int straggler = PyObject_RichCompareBool(sequence, first, Py_LT);
    if (straggler) {
        result = straggler < 0 ? NULL : Py_True; /* a straggler of an earlier run of this session id */
        goto done;
    }
    /* Decided: from here on, the Python method's order. */
    Py_INCREF(sequence); /* held while callbacks run, as the kind (the operation dict's) */
    Py_XINCREF(kind);
    int failed = implicit == Py_True && step_span_ended(session) < 0;
    if (!failed && kind == NULL)
        failed = done_with(PyObject_CallMethodObjArgs(sessions, s_skip, session, sequence, NULL)) < 0;
    else if (!failed) {
        PyObject *step = read_step(processor, sessions, span, attrs, kind, session_id, sequence);
        if (step == NULL)
            failed = !PyErr_ExceptionMatches(PyExc_Exception) || step_lost(sessions, session, sequence) < 0;
        else {
            failed = step_ended(sessions, session, kind, step, attrs, span) < 0;
            Py_DECREF(step);
        }
    }
    if (!failed && implicit == Py_True && parent == Py_None) /* its trace's root step: the trace is over */
        failed = done_with(PyObject_CallMethodOneArg(sessions, s_trace_over, session)) < 0;
    Py_DECREF(sequence);
    Py_XDECREF(kind);
    result = failed ? NULL : Py_True;
    goto done;
failed_or_python:
    if (!PyErr_Occurred())
        goto done;
failed:
    result = NULL;
done:
    if (result == Py_False && PyErr_Occurred())
        result = NULL;
    Py_XDECREF(sessions);
    Py_XDECREF(store);
    Py_XDECREF(entries);
    Py_XDECREF(lone);
    Py_XDECREF(parent);
    Py_XDECREF(session);
    return Py_XNewRef(result);
}

/* --- configure ------------------------------------------------------------------------------ */

static int
texts(PyObject *tuple, Py_ssize_t size)
{
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) == 0 || (size && PyTuple_GET_SIZE(tuple) != size))
        return 0;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(tuple); at++)
        if (!is_text(PyTuple_GET_ITEM(tuple, at)))
            return 0;
    return 1;
}

static const char *const type_names[] = {
    "processor", "sessions", "store", "session", "counter", "buffer", "step", "context", "session_context",
    "attributes", "non_recording_span", "readable_span", "span_context", "status",
};
static PyTypeObject **const type_fields[] = {
    &processor_type, &sessions_type, &store_type, &session_type, &counter_type, &buffer_type, &step_type,
    &context_type, &session_context_type, &attributes_type, &non_recording_type, &readable_type, &span_context_type,
    &status_type,
};
#define TYPES ((int)(sizeof type_fields / sizeof type_fields[0]))
static const char *const object_names[] = {
    "session_attributes", "session_baggage", "kind_of_operation", "tool", "status_error", "current_context",
    "enclosing_step", "reads_as_the_sdk", "report", "write_alerts", "judge_observe", "tool_step", "model_step",
    "numbering_globals", "numbering_name", "step_failed", "response_id", "requested_call_attributes", "start_pins",
    "end_pins",
};
static PyObject **const object_fields[] = {
    &session_attributes, &session_baggage, &kind_of_operation, &tool_kind, &status_error, &current_context,
    &enclosing_step, &reads_as_the_sdk, &report, &write_alerts, &judge_observe, &tool_step, &model_step,
    &numbering_globals, &numbering_name, &step_failed, &a_response_id, &requested_call_attributes, &start_pins,
    &end_pins,
};
#define OBJECTS ((int)(sizeof object_fields / sizeof object_fields[0]))

/* configure(given): what the processor's Python start and end read from their modules, by name
 * (see processor.compiled_span_paths_configuration), checked, and set once. */
static PyObject *
configure(PyObject *module, PyObject *given)
{
    if (!PyDict_CheckExact(given))
        return refuse("expected a dict");
    PyObject *types[TYPES], *objects[OBJECTS];
    for (int at = 0; at < TYPES; at++) {
        if ((types[at] = entry(given, type_names[at])) == NULL)
            return NULL;
        if (!PyType_Check(types[at]))
            return PyErr_Format(PyExc_TypeError, "configure: %s must be a class", type_names[at]);
    }
    for (int at = 0; at < OBJECTS; at++)
        if ((objects[at] = entry(given, object_names[at])) == NULL)
            return NULL;
    Py_ssize_t found_session[SESSION_SLOTS], found_buffer[BUFFER_SLOTS], found_step[STEP_SLOTS], last, session_id;
    if (find_slots(types[3], session_slot_names, SESSION_SLOTS, found_session) < 0 ||
        find_slots(types[5], buffer_slot_names, BUFFER_SLOTS, found_buffer) < 0 ||
        find_slots(types[6], step_slot_names, STEP_SLOTS, found_step) < 0 || !slots_only(types[4]) ||
        (last = slot_offset((PyTypeObject *)types[4], "last")) < 0 || !slots_only(types[8]) ||
        (session_id = slot_offset((PyTypeObject *)types[8], "session_id")) < 0)
        return refuse("the session, its counter and buffer, the step and the session context must be classes of "
                      "slots only, with the slots read");
    Py_ssize_t found_processor[PROCESSOR_SLOTS], found_sessions[SESSIONS_SLOTS], found_store[STORE_SLOTS];
    if (find_fields(types[0], processor_slot_names, PROCESSOR_SLOTS, found_processor) < 0 ||
        find_fields(types[1], sessions_slot_names, SESSIONS_SLOTS, found_sessions) < 0 ||
        find_fields(types[2], store_slot_names, STORE_SLOTS, found_store) < 0)
        return refuse("the processor, its live sessions and their store must keep the fields read in slots");
    PyObject *names = entry(given, "names"), *context_keys = entry(given, "context_keys");
    if (names == NULL || context_keys == NULL)
        return NULL;
    if (!texts(names, 6) || !texts(context_keys, 3) || !texts(objects[0], 0) || !texts(objects[1], 0) ||
        !is_text(objects[3]) || !is_text(objects[14]) || !is_text(objects[15]) || !is_text(objects[16]) ||
        !texts(objects[17], 0))
        return refuse("names (6), context_keys (3), the session attributes and baggage and the requested call "
                      "attributes must be tuples of str; tool, numbering_name, step_failed and response_id str");
    if (!PyDict_CheckExact(objects[2]) || !PyDict_CheckExact(objects[13]))
        return refuse("kind_of_operation and numbering_globals must be dicts");
    PyObject *key, *value, *other_kind = NULL;
    Py_ssize_t position = 0;
    while (PyDict_Next(objects[2], &position, &key, &value)) { /* kinds are compared by identity */
        if (!is_text(key) || !is_text(value))
            return refuse("kind_of_operation must map str to str");
        if (value == objects[3])
            continue;
        if (other_kind == NULL)
            other_kind = value;
        if (PyUnicode_Compare(value, objects[3]) == 0 || value != other_kind)
            return refuse("kind_of_operation must map to two kinds, the tool kind itself and one other");
    }
    if (!pins(objects[18]) || !pins(objects[19]))
        return refuse("start_pins and end_pins must be tuples of (a dict or a class, a str, its value)");
    for (int at = 5; at < 13; at++)
        if (!PyCallable_Check(objects[at]) && !(at >= 10 && objects[at] == Py_None))
            return PyErr_Format(PyExc_TypeError, "configure: %s must be callable", object_names[at]);
    if (processor_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure: the span paths are configured once");
        return NULL;
    }
    PyObject *fields = PyList_New(0);
    if (fields == NULL || add_slot_pins(fields, types[0], processor_slot_names, found_processor, PROCESSOR_SLOTS) < 0 ||
        add_slot_pins(fields, types[1], sessions_slot_names, found_sessions, SESSIONS_SLOTS) < 0 ||
        add_slot_pins(fields, types[2], store_slot_names, found_store, STORE_SLOTS) < 0) {
        Py_XDECREF(fields);
        return NULL;
    }
    PyObject *fields_pinned = PyList_AsTuple(fields);
    Py_DECREF(fields);
    if (fields_pinned == NULL)
        return NULL;
    if ((span_types = PyDict_New()) == NULL) {
        Py_DECREF(fields_pinned);
        return NULL;
    }
    for (int at = 0; at < TYPES; at++)
        *type_fields[at] = (PyTypeObject *)Py_NewRef(types[at]);
    for (int at = 0; at < OBJECTS; at++)
        *object_fields[at] = Py_NewRef(objects[at]);
    memcpy(session_slots, found_session, sizeof session_slots);
    memcpy(buffer_slots, found_buffer, sizeof buffer_slots);
    memcpy(step_slots, found_step, sizeof step_slots);
    memcpy(processor_slots, found_processor, sizeof processor_slots);
    memcpy(sessions_slots, found_sessions, sizeof sessions_slots);
    memcpy(store_slots, found_store, sizeof store_slots);
    field_pins = fields_pinned;
    counter_last_slot = last;
    session_context_id_slot = session_id;
    PyObject **name_fields[6] = {&a_verdict, &a_operation, &a_session_id, &a_nested_step, &a_sequence,
                                 &op_invoke_agent};
    for (int at = 0; at < 6; at++)
        *name_fields[at] = Py_NewRef(PyTuple_GET_ITEM(names, at));
    k_session = Py_NewRef(PyTuple_GET_ITEM(context_keys, 0));
    k_baggage = Py_NewRef(PyTuple_GET_ITEM(context_keys, 1));
    k_span = Py_NewRef(PyTuple_GET_ITEM(context_keys, 2));
    Py_RETURN_NONE;
}

/* --- on_start and on_end, in the processor's class --------------------------------------------
 *
 * The SDK calls both for every span of the service, most of them no agent's. hooks() returns
 * them as method descriptors, which the processor module puts in place of the Python methods:
 * they do what those do for the processor's own class in observe mode, and hand anything else
 * (a subclass, enforce mode, another SDK's span, unusual arguments, a replaced function) to the
 * Python methods, the reference, with the same arguments. */

static PyObject *python_on_start, *python_on_end;      /* the Python methods */
static PyObject *markers;                              /* tuple of str: attributes that may make a step */
static PyObject *marker_set;                           /* the same, a frozenset */
static PyObject *session_in_context_function;          /* session_resolution.session_in_context */
static PyObject *start_hook_pins, *end_hook_pins;      /* what each stands for or calls round */
static PyObject *s_parent_context, *s_start_marked, *s_session_span_ended, *on_start_failed, *on_end_failed;

/* The methods' `except Exception: report(kind, exc)`: None, with the failure reported; NULL for
 * any other exception (KeyboardInterrupt, say), or where reporting fails. */
static PyObject *
contained(PyObject *kind)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *reported = PyObject_CallFunctionObjArgs(report, kind, value == NULL ? Py_None : value, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (reported == NULL)
        return NULL;
    Py_DECREF(reported);
    Py_RETURN_NONE;
}

/* Whether the span's attributes hold any of the markers: 1, 0, or -1 with an error. The smaller side
 * is read (as frozenset.isdisjoint reads a dict's keys): most spans have fewer attributes at their
 * start than there are markers, and a step's marker (its operation's name) comes first. */
static int
marked(PyObject *attrs)
{
    if (PyDict_GET_SIZE(attrs) < PyTuple_GET_SIZE(markers)) {
        Py_ssize_t position = 0;
        PyObject *key, *value;
        while (PyDict_Next(attrs, &position, &key, &value)) {
            Py_INCREF(key); /* (a key of a str subclass may run code as it is compared) */
            int found = PySet_Contains(marker_set, key);
            Py_DECREF(key);
            if (found)
                return found;
        }
        return 0;
    }
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(markers); at++) {
        int found = PyDict_Contains(attrs, PyTuple_GET_ITEM(markers, at));
        if (found)
            return found;
    }
    return 0;
}

/* on_start's work for an SDK span of the processor's class in observe mode: 0, or -1 with an error. */
static int
start_span(PyObject *processor, PyObject *span, PyObject *attrs, PyObject *parent_context)
{
    int step = marked(attrs);
    if (step < 0)
        return -1;
    if (step) { /* a step in a live session, started by start_marked where it can */
        PyObject *given[4] = {processor, span, attrs, parent_context};
        PyObject *done = start_marked(NULL, given, 4);
        if (done == NULL)
            return -1;
        int finished = done == Py_True;
        Py_DECREF(done);
        return finished ? 0 : done_with(PyObject_CallMethodObjArgs(processor, s_start_marked, span, attrs,
                                                                   parent_context, NULL));
    }
    /* Neither a step nor naming a session: it joins the context's session, if any. */
    PyObject *context = parent_context == Py_None ? PyObject_CallNoArgs(current_context) : Py_NewRef(parent_context);
    if (context == NULL)
        return -1;
    int outcome = PyObject_IsTrue(context); /* else an empty context: a trace's root span without baggage */
    PyObject *found = NULL, *session_id = NULL;
    if (outcome > 0) {
        outcome = Py_IS_TYPE(context, context_type) ? session_in_context(context, &found) : LEFT_TO_PYTHON;
        if (outcome == FOUND)
            session_id = Py_NewRef(found);
        else if (outcome == LEFT_TO_PYTHON) {
            session_id = PyObject_CallOneArg(session_in_context_function, context);
            outcome = session_id == NULL ? ERROR : NOTHING;
            if (session_id == Py_None)
                Py_CLEAR(session_id);
        }
        if (session_id != NULL && stamp(span, session_id, NULL) < 0)
            outcome = ERROR;
    }
    Py_XDECREF(session_id);
    Py_DECREF(context);
    return outcome < 0 ? -1 : 0;
}

/* The span's attribute dict (a new reference) where a hook does the method's work: none of `pins`
 * replaced, the processor's own class in observe mode, and (`sdk_only`) the SDK's span class.
 * NULL, with no error set, where the Python method does it (a check of the hook's own that fails,
 * a span class that cannot be asked, say, included); NULL with an error the method would meet. */
static PyObject *
attributes_if_usual(PyObject *self, PyObject *span, PyObject *pins, int sdk_only)
{
    int usual = unchanged(pins);
    if (usual > 0)
        usual = observing(self);
    if (usual > 0 && sdk_only)
        usual = sdk_span(span);
    if (usual < 0 && PyErr_ExceptionMatches(PyExc_Exception))
        PyErr_Clear();
    return usual > 0 ? attribute_dict(span) : NULL;
}

/* on_start(self, span, parent_context=None) */
static PyObject *
on_start_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *span = nargs >= 1 ? args[0] : NULL, *parent_context = nargs == 2 ? args[1] : Py_None;
    Py_ssize_t named = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (named == 1 && nargs == 1 && PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
        PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), s_parent_context) == 0)
        parent_context = args[1];
    else if (named != 0 || nargs < 1 || nargs > 2)
        span = NULL; /* unusual arguments: Python says what they mean */
    PyObject *attrs = span == NULL ? NULL : attributes_if_usual(self, span, start_hook_pins, 1);
    if (attrs == NULL)
        return PyErr_Occurred() ? contained(on_start_failed) : in_python(python_on_start, self, args, nargs, kwnames);
    int failed = start_span(self, span, attrs, parent_context) < 0;
    Py_DECREF(attrs);
    return failed ? contained(on_start_failed) : Py_NewRef(Py_None);
}

/* on_end(self, span) */
static PyObject *
on_end_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *attrs = nargs != 1 || kwnames != NULL ? NULL : attributes_if_usual(self, args[0], end_hook_pins, 0);
    if (attrs == NULL)
        return PyErr_Occurred() ? contained(on_end_failed) : in_python(python_on_end, self, args, nargs, kwnames);
    PyObject *session_id = Py_XNewRef(lookup(attrs, a_session_id)), *verdict = NULL;
    int failed = session_id == NULL && PyErr_Occurred();
    if (session_id != NULL && session_id != Py_None) { /* else no span of a session */
        verdict = Py_XNewRef(lookup(attrs, a_verdict));
        int judged = verdict == NULL ? (PyErr_Occurred() ? -1 : 0) : PyObject_IsTrue(verdict);
        failed = judged < 0;
        if (judged == 0) { /* a step of a live session, ended by end_in_session where it can */
            PyObject *given[4] = {self, args[0], attrs, session_id};
            PyObject *done = end_in_session(NULL, given, 4);
            failed = done == NULL;
            if (done == Py_False)
                failed = done_with(PyObject_CallMethodObjArgs(self, s_session_span_ended, args[0], attrs, session_id,
                                                              NULL)) < 0;
            Py_XDECREF(done);
        }
    }
    Py_XDECREF(verdict);
    Py_XDECREF(session_id);
    Py_DECREF(attrs);
    return failed ? contained(on_end_failed) : Py_NewRef(Py_None);
}

static PyMethodDef on_start_def = {
    "on_start", (PyCFunction)(void (*)(void))on_start_hook, METH_FASTCALL | METH_KEYWORDS,
    "on_start($self, span, parent_context=None)\n--\n\nThe processor's on_start, compiled."};
static PyMethodDef on_end_def = {
    "on_end", (PyCFunction)(void (*)(void))on_end_hook, METH_FASTCALL | METH_KEYWORDS,
    "on_end($self, span)\n--\n\nThe processor's on_end, compiled."};

/* hooks(given): on_start and on_end as method descriptors of the configured processor class, set
 * up once from `given` (see processor._compiled_hooks). */
static PyObject *
hooks(PyObject *module, PyObject *given)
{
    if (processor_type == NULL)
        return refuse("the span paths must be configured first");
    if (python_on_start != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "hooks: made once");
        return NULL;
    }
    if (!PyDict_CheckExact(given))
        return refuse("expected a dict");
    const char *names[] = {"on_start", "on_end", "markers", "session_in_context", "start_pins", "end_pins"};
    PyObject *found[6];
    for (int at = 0; at < 6; at++)
        if ((found[at] = entry(given, names[at])) == NULL)
            return NULL;
    if (!PyCallable_Check(found[0]) || !PyCallable_Check(found[1]) || !PyCallable_Check(found[3]) ||
        !texts(found[2], 0) || !pins(found[4]) || !pins(found[5]))
        return refuse("on_start, on_end and session_in_context must be callable, markers a tuple of str and the "
                      "pins tuples of (namespace, name, value)");
    PyObject *start = PyDescr_NewMethod(processor_type, &on_start_def);
    PyObject *end = start == NULL ? NULL : PyDescr_NewMethod(processor_type, &on_end_def);
    PyObject *both = end == NULL ? NULL : PyTuple_Pack(2, start, end);
    Py_XDECREF(start);
    Py_XDECREF(end);
    if (both == NULL)
        return NULL;
    PyObject **fields[] = {&python_on_start, &python_on_end, &markers, &session_in_context_function,
                           &start_hook_pins, &end_hook_pins};
    if ((marker_set = PyFrozenSet_New(found[2])) == NULL) {
        Py_DECREF(both);
        return NULL;
    }
    for (int at = 0; at < 6; at++)
        *fields[at] = Py_NewRef(found[at]);
    return both;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)configure, METH_O,
     "Set what the span paths read from the processor's modules, by name; once."},
    {"start_marked", (PyCFunction)(void (*)(void))start_marked, METH_FASTCALL,
     "True when the span's start is done; False, with nothing changed, for Python to do it."},
    {"end_in_session", (PyCFunction)(void (*)(void))end_in_session, METH_FASTCALL,
     "True when the span's end is done; False, with nothing changed, for Python to do it."},
    {"hooks", (PyCFunction)hooks, METH_O,
     "on_start and on_end, compiled, as method descriptors of the processor's class; made once."},
    {"stamp", (PyCFunction)(void (*)(void))stamp_shared, METH_FASTCALL,
     "span_stamp.stamp: True when written; False, with nothing done, for Python to write them."},
    {"stamp_starting", (PyCFunction)(void (*)(void))stamp_starting, METH_FASTCALL,
     "span_stamp.stamp_starting: True when written; False, with nothing done, for Python to write them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._span_paths",
    "The processor's start and end of a step span in a live session, compiled (optional).", -1, methods, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__span_paths(void)
{
#ifdef Py_GIL_DISABLED
    /* Its state is set once and read without locks, and the slots it writes are guarded by locks
     * taken in Python's own order under the GIL: the free-threaded build runs the Python methods. */
    PyErr_SetString(PyExc_ImportError, "the span paths are built for a Python with a GIL");
    return NULL;
#endif
    static const char *const interned[] = {
        "_enforcement", "_sessions", "store", "_entries", "_seen", "_lock", "_clock", "_attributes", "_dict",
        "_parent", "max_value_len", "_immutable", "maxlen", "acquire", "release", "move_to_end", "set_attributes",
        "lone", "_context", "span_id", "_name", "_start_time", "_end_time", "_status", "status_code", "_status_code",
        "policy", "payloads", "_step", "skip", "step_ended", "_judged", "trace_over", "push", "observe", "final",
        "trace_id", "start_lone_call", "open", "start_step", "session_span", "attach_span", "032x", "parent_context",
        "_start_marked",
        "_session_span_ended", "processor.on_start", "processor.on_end", "end_lone_call", "_ended_in",
    };
    PyObject **fields[] = {
        &s_enforcement, &s_sessions, &s_store, &s_entries, &s_seen, &s_lock, &s_clock, &s_attributes, &s_dict,
        &s_parent, &s_max_value_len, &s_immutable, &s_maxlen, &s_acquire, &s_release, &s_move_to_end,
        &s_set_attributes, &s_lone, &s_context, &s_span_id, &s_name, &s_start_time, &s_end_time, &s_status,
        &s_status_code, &s_own_status_code, &s_policy, &s_payloads, &s_step, &s_skip, &s_step_ended, &s_judged,
        &s_trace_over, &s_push, &s_observe, &s_final, &s_trace_id, &s_start_lone_call, &s_open, &s_start_step,
        &s_session_span, &s_attach_span, &trace_id_format,
        &s_parent_context, &s_start_marked, &s_session_span_ended, &on_start_failed, &on_end_failed,
        &s_end_lone_call, &s_ended_in,
    };
    for (size_t at = 0; at < sizeof fields / sizeof fields[0]; at++)
        if ((*fields[at] = PyUnicode_InternFromString(interned[at])) == NULL)
            return NULL;
    return PyModule_Create(&module_def);
}
