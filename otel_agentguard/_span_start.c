/* The processor's start of a step span in a live session, compiled (optional).
 *
 * AgentGuardSpanProcessor.on_start hands a span whose attributes may make it a step, name a
 * session or mark a duplicate to _start_marked. start_marked() here does the same for the usual
 * such span: an SDK span in observe mode, whose operation name is a str, whose session is named
 * by its attributes or found in the context (an enclosing session, baggage, the session stamped
 * on its parent) and is live already. It reads what the Python method reads, in its order, and
 * returns False before changing anything when a value is of another type or the span needs
 * anything else: a session to open, a lone call, a session span to attach, a duplicate to
 * remember. The caller then runs the Python method, the reference. Otherwise it does what that
 * method does: counts the session as used (under the store's lock), numbers the step (under the
 * lock of every counter) and writes the stamps into the SDK's attribute dict, or through
 * set_attributes where the span's attributes have limits or hold a stamp already.
 *
 * Tests drive the same spans through both (tests/test_span_start.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* Set once by configure() and never changed. */
static PyTypeObject *processor_type, *sessions_type, *store_type, *session_type, *counter_type, *context_type,
    *session_context_type, *attributes_type, *non_recording_type;
static Py_ssize_t session_sequence_slot, session_implicit_slot, session_running_slot, counter_last_slot,
    session_context_id_slot;
static PyObject *a_verdict, *a_operation, *a_session_id, *a_nested_step, *a_sequence, *op_invoke_agent;
static PyObject *session_attributes, *session_baggage; /* tuples of str, most specific first */
static PyObject *kind_of_operation;                    /* operation name -> step kind */
static PyObject *k_session, *k_baggage, *k_span;       /* the context's keys */
static PyObject *current_context, *enclosing_step, *reads_as_the_sdk;
static PyObject *numbering_globals, *numbering_name;   /* the counters' lock: renewed in a forked child */
static PyObject *span_types;                           /* span class -> whether reads_as_the_sdk */
static PyObject *s_enforcement, *s_sessions, *s_store, *s_entries, *s_seen, *s_lock, *s_clock, *s_attributes,
    *s_dict, *s_parent, *s_max_value_len, *s_immutable, *s_maxlen, *s_acquire, *s_release, *s_move_to_end,
    *s_set_attributes;

#define MAX_SPAN_TYPES 64

/* What a lookup found. */
enum { ERROR = -1, LEFT_TO_PYTHON = -2, NOTHING = 0, FOUND = 1 };

static int
is_text(PyObject *value)
{
    return value != NULL && PyUnicode_CheckExact(value);
}

/* Whether the span's class keeps its attributes and parent where the SDK's does (asked of Python
 * once per class): 1, 0, or -1 with an error set. */
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
    if (answer == NULL)
        return -1;
    int yes = answer == Py_True;
    Py_DECREF(answer);
    if (PyDict_GET_SIZE(span_types) < MAX_SPAN_TYPES && PyDict_SetItem(span_types, kind, yes ? Py_True : Py_False) < 0)
        return -1;
    return yes;
}

/* An SDK span's attribute dict (a new reference), as span_attributes reads it; NULL, with no
 * error set, for any other span. */
static PyObject *
attribute_dict(PyObject *span)
{
    PyObject *store = PyObject_GetAttr(span, s_attributes);
    if (store == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *found = PyObject_GetAttr(store, s_dict);
    Py_DECREF(store);
    if (found == NULL)
        PyErr_Clear();
    else if (!PyDict_CheckExact(found))
        Py_CLEAR(found);
    return found;
}

/* The value under `key`: a borrowed reference, or NULL (absent, or an error set). */
static PyObject *
lookup(PyObject *dict, PyObject *key)
{
    return PyDict_GetItemWithError(dict, key);
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
        return LEFT_TO_PYTHON;
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

/* Whether a step span of `kind` starting under `context` duplicates its parent, as the processor
 * asks: NOTHING, FOUND (Python remembers the duplicate), or ERROR. The usual parent (an agent
 * span, or a step of the other kind) is told here; any other goes to enclosing_step(). */
static int
duplicates_parent(PyObject *span, PyObject *kind, PyObject *attrs, PyObject *context)
{
    PyObject *own_parent = PyObject_GetAttr(span, s_parent);
    if (own_parent == NULL)
        return ERROR;
    int root = own_parent == Py_None;
    Py_DECREF(own_parent);
    if (root)
        return NOTHING;
    PyObject *parent = lookup(context, k_span);
    if (parent == NULL)
        return PyErr_Occurred() ? ERROR : NOTHING;
    if (Py_IS_TYPE(parent, non_recording_type))
        return NOTHING; /* no attributes: no step */
    PyObject *attributes = attribute_dict(parent);
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

/* An attribute of the package's or the SDK's own objects; NULL, with no error set, if missing. */
static PyObject *
field(PyObject *object, PyObject *name)
{
    PyObject *found = PyObject_GetAttr(object, name);
    if (found == NULL)
        PyErr_Clear();
    return found;
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

/* The live session `session_id` (*found, a new reference), counted as used as SessionStore.get
 * counts it: FOUND, LEFT_TO_PYTHON (not live: Python opens it; or anything unusual) or ERROR. */
static int
live_session(PyObject *processor, PyObject *session_id, PyObject **found)
{
    int outcome = LEFT_TO_PYTHON;
    PyObject *sessions = NULL, *store = NULL, *entries = NULL, *seen = NULL, *lock = NULL, *clock = NULL;
    if ((sessions = field(processor, s_sessions)) == NULL || !Py_IS_TYPE(sessions, sessions_type) ||
        (store = field(sessions, s_store)) == NULL || !Py_IS_TYPE(store, store_type) ||
        (entries = field(store, s_entries)) == NULL || !PyDict_Check(entries) ||
        (seen = field(store, s_seen)) == NULL || !PyDict_CheckExact(seen) ||
        (lock = field(store, s_lock)) == NULL || (clock = field(store, s_clock)) == NULL)
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
    else if (Py_IS_TYPE(session, session_type)) {
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
    PyObject *counter = SLOT(session, session_sequence_slot), *implicit = SLOT(session, session_implicit_slot);
    PyObject *running = SLOT(session, session_running_slot);
    PyObject *last = counter != NULL && Py_IS_TYPE(counter, counter_type) ? SLOT(counter, counter_last_slot) : NULL;
    if (last != NULL && PyLong_CheckExact(last) && (implicit == Py_False ||
                                                    (implicit == Py_True && running != NULL && PyLong_CheckExact(running)))) {
        outcome = ERROR;
        PyObject *one = PyLong_FromLong(1);
        PyObject *more = one != NULL && implicit == Py_True ? PyNumber_Add(running, one) : NULL;
        if (one != NULL && (implicit == Py_False || more != NULL)) {
            PyObject *next = PyNumber_Add(last, one);
            if (next != NULL) {
                if (more != NULL)
                    Py_SETREF(SLOT(session, session_running_slot), Py_NewRef(more));
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
    PyObject *store = field(span, s_attributes);
    if (store == NULL || !Py_IS_TYPE(store, attributes_type)) {
        Py_XDECREF(store);
        return 0;
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

/* span_stamp.stamp_starting(span, stamps): the session id (where given) and the sequence number
 * (where given), in that order. */
static int
stamp(PyObject *span, PyObject *session_id, PyObject *sequence)
{
    PyObject *keys[2], *values[2];
    Py_ssize_t count = 0;
    if (session_id != NULL) {
        keys[count] = a_session_id;
        values[count++] = session_id;
    }
    if (sequence != NULL) {
        keys[count] = a_sequence;
        values[count++] = sequence;
    }
    if (count == 0)
        return 0;
    PyObject *dict = NULL;
    int direct = writable(span, count, keys, &dict);
    if (direct < 0)
        return -1;
    if (!direct && (dict = PyDict_New()) == NULL)
        return -1;
    int failed = 0;
    for (Py_ssize_t at = 0; at < count && !failed; at++)
        failed = PyDict_SetItem(dict, keys[at], values[at]) < 0;
    if (!direct && !failed) {
        PyObject *written = PyObject_CallMethodOneArg(span, s_set_attributes, dict);
        failed = written == NULL;
        Py_XDECREF(written);
    }
    Py_DECREF(dict);
    return failed ? -1 : 0;
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
    PyObject *processor = args[0], *span = args[1], *attrs = args[2], *context = args[3];
    if (processor_type == NULL || !Py_IS_TYPE(processor, processor_type) || !PyDict_CheckExact(attrs))
        Py_RETURN_FALSE;
    PyObject *enforcement = field(processor, s_enforcement);
    int observing = enforcement == Py_None;
    Py_XDECREF(enforcement);
    if (!observing)
        Py_RETURN_FALSE; /* enforce mode tracks every span's scope */
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
    PyObject *named = NULL, *session_id = NULL, *session = NULL, *sequence = NULL;
    int found = named_in(attrs, session_attributes, &named);
    if (found < NOTHING)
        return found == ERROR ? NULL : Py_NewRef(Py_False);
    if (named != NULL) {
        int invoke_agent = PyUnicode_Compare(operation, op_invoke_agent);
        if (invoke_agent == -1 && PyErr_Occurred())
            return NULL;
        if (invoke_agent == 0)
            Py_RETURN_FALSE; /* a session span, which its session attaches */
    }
    if (context == Py_None)
        context = PyObject_CallNoArgs(current_context);
    else
        Py_INCREF(context);
    if (context == NULL)
        return NULL;
    PyObject *result = Py_False;
    int held = 0;
    if (!Py_IS_TYPE(context, context_type))
        goto done;
    if (named != NULL)
        session_id = named;
    else if ((found = session_in_context(context, &session_id)) < NOTHING) {
        result = found == ERROR ? NULL : Py_False;
        goto done;
    }
    if (session_id == NULL) {
        if (kind == NULL)
            result = Py_True; /* in no session, and no step */
        goto done;            /* else a step in no session: its trace stands in, which Python decides */
    }
    Py_INCREF(session_id); /* held while callbacks run */
    held = 1;
    PyObject *stamped = lookup(attrs, a_session_id);
    int stamp_id;
    if (stamped == NULL) {
        if (PyErr_Occurred()) {
            result = NULL;
            goto done;
        }
        stamp_id = 1;
    }
    else if (!is_text(stamped))
        goto done;
    else if ((stamp_id = PyUnicode_Compare(stamped, session_id)) == -1 && PyErr_Occurred()) {
        result = NULL;
        goto done;
    }
    PyObject *nested = lookup(attrs, a_nested_step);
    if (nested == NULL && PyErr_Occurred()) {
        result = NULL;
        goto done;
    }
    if (nested != NULL && nested != Py_None && nested != Py_False && nested != Py_True)
        goto done;
    if (kind == NULL || nested == Py_True) {
        /* Inside the session only; or a duplicate another instrumentation marked itself. */
        result = stamp(span, stamp_id ? session_id : NULL, NULL) < 0 ? NULL : Py_True;
        goto done;
    }
    found = duplicates_parent(span, kind, attrs, context);
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
    Py_XDECREF(sequence);
    Py_XDECREF(session);
    if (held)
        Py_DECREF(session_id);
    Py_DECREF(context);
    return Py_XNewRef(result);
}

/* --- configure ------------------------------------------------------------------------------ */

static PyObject *
refuse(const char *what)
{
    PyErr_Format(PyExc_TypeError, "configure: %s", what);
    return NULL;
}

static int
texts(PyObject *tuple)
{
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) == 0)
        return 0;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(tuple); at++)
        if (!is_text(PyTuple_GET_ITEM(tuple, at)))
            return 0;
    return 1;
}

/* configure(processor_type, sessions_type, store_type, session_type, counter_type, context_type,
 *           session_context_type, attributes_type, non_recording_type, names, session_attributes,
 *           session_baggage, kind_of_operation, context_keys, current_context, enclosing_step,
 *           reads_as_the_sdk, numbering_globals, numbering_name): what the processor's Python start
 *           reads from its modules, checked, and set once. `names`: the attributes verdict,
 *           operation name, session id, nested step, sequence, and the operation invoke_agent;
 *           `context_keys`: the session's, the baggage's and the span's. */
static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_Format(PyExc_TypeError, "configure() takes 19 arguments (%zd given)", nargs);
        return NULL;
    }
    for (int at = 0; at < 9; at++)
        if (!PyType_Check(args[at]))
            return refuse("the first nine arguments must be classes");
    PyTypeObject *session = (PyTypeObject *)args[3], *counter = (PyTypeObject *)args[4],
                 *session_context = (PyTypeObject *)args[6];
    if (!slots_only(args[3]) || !slots_only(args[4]) || !slots_only(args[6]))
        return refuse("the live session, its counter and the session context must be classes of slots only");
    Py_ssize_t sequence = slot_offset(session, "sequence"), implicit = slot_offset(session, "implicit"),
               running = slot_offset(session, "running"), last = slot_offset(counter, "last"),
               session_id = slot_offset(session_context, "session_id");
    if (sequence < 0 || implicit < 0 || running < 0 || last < 0 || session_id < 0)
        return refuse("the slots read must be plain object slots of their classes");
    PyObject *names = args[9];
    if (!texts(names) || PyTuple_GET_SIZE(names) != 6 || !texts(args[10]) || !texts(args[11]) ||
        !texts(args[13]) || PyTuple_GET_SIZE(args[13]) != 3)
        return refuse("names (6), session_attributes, session_baggage and context_keys (3) must be tuples of str");
    if (!PyDict_CheckExact(args[12]) || !PyDict_CheckExact(args[17]) || !is_text(args[18]))
        return refuse("kind_of_operation and numbering_globals must be dicts, numbering_name a str");
    for (int at = 14; at < 17; at++)
        if (!PyCallable_Check(args[at]))
            return refuse("current_context, enclosing_step and reads_as_the_sdk must be callable");
    if (processor_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure: the span start is configured once");
        return NULL;
    }
    if ((span_types = PyDict_New()) == NULL)
        return NULL;
    PyTypeObject **types[9] = {&processor_type, &sessions_type, &store_type, &session_type, &counter_type,
                               &context_type, &session_context_type, &attributes_type, &non_recording_type};
    for (int at = 0; at < 9; at++)
        *types[at] = (PyTypeObject *)Py_NewRef(args[at]);
    session_sequence_slot = sequence;
    session_implicit_slot = implicit;
    session_running_slot = running;
    counter_last_slot = last;
    session_context_id_slot = session_id;
    PyObject **name_fields[6] = {&a_verdict, &a_operation, &a_session_id, &a_nested_step, &a_sequence,
                                 &op_invoke_agent};
    for (int at = 0; at < 6; at++)
        *name_fields[at] = Py_NewRef(PyTuple_GET_ITEM(names, at));
    session_attributes = Py_NewRef(args[10]);
    session_baggage = Py_NewRef(args[11]);
    kind_of_operation = Py_NewRef(args[12]);
    k_session = Py_NewRef(PyTuple_GET_ITEM(args[13], 0));
    k_baggage = Py_NewRef(PyTuple_GET_ITEM(args[13], 1));
    k_span = Py_NewRef(PyTuple_GET_ITEM(args[13], 2));
    current_context = Py_NewRef(args[14]);
    enclosing_step = Py_NewRef(args[15]);
    reads_as_the_sdk = Py_NewRef(args[16]);
    numbering_globals = Py_NewRef(args[17]);
    numbering_name = Py_NewRef(args[18]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "Set what the span start reads from the processor's modules; once."},
    {"start_marked", (PyCFunction)(void (*)(void))start_marked, METH_FASTCALL,
     "True when the span's start is done; False, with nothing changed, for Python to do it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._span_start",
    "The processor's start of a step span in a live session, compiled (optional).", -1, methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC
PyInit__span_start(void)
{
#ifdef Py_GIL_DISABLED
    /* Its state is set once and read without locks, and the slots it writes are guarded by locks
     * taken in Python's own order under the GIL: the free-threaded build runs the Python method. */
    PyErr_SetString(PyExc_ImportError, "the span start is built for a Python with a GIL");
    return NULL;
#endif
    static const char *const interned[] = {
        "_enforcement", "_sessions", "store", "_entries", "_seen", "_lock", "_clock", "_attributes", "_dict",
        "_parent", "max_value_len", "_immutable", "maxlen", "acquire", "release", "move_to_end", "set_attributes",
    };
    PyObject **fields[] = {
        &s_enforcement, &s_sessions, &s_store, &s_entries, &s_seen, &s_lock, &s_clock, &s_attributes, &s_dict,
        &s_parent, &s_max_value_len, &s_immutable, &s_maxlen, &s_acquire, &s_release, &s_move_to_end,
        &s_set_attributes,
    };
    for (size_t at = 0; at < sizeof fields / sizeof fields[0]; at++)
        if ((*fields[at] = PyUnicode_InternFromString(interned[at])) == NULL)
            return NULL;
    return PyModule_Create(&module_def);
}
