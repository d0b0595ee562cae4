/* The step reader of otel_agentguard.steps, compiled (optional).
 *
 * steps._tool_step and steps._model_step turn a span's attributes into a Step, for every step
 * the live guard judges and every step a replay reads. tool_step() and model_step() do the same
 * for the attributes spans usually hold: exact str, int, bool and tuples of str, where the
 * Python functions' conversions change nothing. They first read every attribute the Python
 * function may read and decide: for a value of any other type, a case that needs what only
 * Python does here (parsing output messages, the answer's text), or an error met while reading
 * (a key whose comparison raised), they return None, and the caller runs the Python function, the
 * reference, on the same attributes. Only then do they call back into Python, as the Python
 * function does and with the same arguments (the policy's fingerprinter and tool effects, the
 * payload fingerprints, the tool name from a span name, reading a repetition summary), so an
 * exception raised there is the one Python would raise. (The attributes are read once, before
 * those calls: a call back that changed them, which none of the package's does, is not seen.)
 *
 * The Step is made as its dataclass __init__ makes it: every field set, those not read here to
 * their defaults, each written into its slot by the offset its descriptor holds.
 *
 * Tests compare both readers on generated attributes (tests/test_step_reader.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* Step's fields, in the dataclass's order (configure() checks it is still that order). */
enum {
    SESSION_ID, SEQUENCE, KIND, NAME, START_NS, END_NS, ARGS_FP, RESULT_FP, FAILED, EMPTY, EFFECT,
    INPUT_TOKENS, OUTPUT_TOKENS, MODEL, FINISH_REASONS, TOOL_CALLS, FINAL, CLAIMS, CLAIM_RULE, CLAIM_CLAUSE,
    COST_USD, LABEL, OUTPUT_REPETITION, FIELDS
};
static const char *const field_names[FIELDS] = {
    "session_id", "sequence", "kind", "name", "start_ns", "end_ns", "args_fingerprint", "result_fingerprint",
    "failed", "empty", "effect", "input_tokens", "output_tokens", "model", "finish_reasons", "tool_calls", "final",
    "claims", "claim_rule", "claim_clause", "cost_usd", "label", "output_repetition",
};

/* The attributes read, by the names steps.compiled_keys() gives them. A group's keys are read in
 * their order, as the Python function reads them. */
enum {
    TOOL_NAME, TOOL_ARGS_FP, TOOL_RESULT_FP, TOOL_RESULT_EMPTY, ERROR_TYPE, TOOL_EFFECT,
    FINAL_CLAIMS, RESPONSE_TOOL_CALLS, OUTPUT_MESSAGES, AI_TOOL_CALLS, OUTPUT_REPETITION_KEY, FINAL_CLAIM_RULE,
    FINAL_CLAIM_CLAUSE, INPUT_TOKENS_KEY, OUTPUT_TOKENS_KEY,
    /* groups */
    RAW_ARGS, RAW_RESULT, MODEL_NAMES, FINISH_KEYS, ANSWER_TEXT, LEGACY_INPUT, LEGACY_OUTPUT, REPLY_KEYS,
    KEYS
};
static const char *const key_names[KEYS] = {
    "tool_name", "tool_args_fingerprint", "tool_result_fingerprint", "tool_result_empty", "error_type", "tool_effect",
    "final_claims", "response_tool_calls", "output_messages", "ai_tool_calls", "output_repetition",
    "final_claim_rule", "final_claim_clause", "input_tokens", "output_tokens",
    "raw_arguments", "raw_result", "model_names", "finish_reasons", "answer_text", "legacy_input_tokens",
    "legacy_output_tokens", "reply_keys",
};
#define FIRST_GROUP RAW_ARGS

/* Set once by configure() and never changed: a callback cannot pull the ground from under a call. */
static PyTypeObject *step_type;
static Py_ssize_t offsets[FIELDS];
static PyObject *defaults[FIELDS];          /* (None for the four fields without one: always set) */
static PyObject *keys[KEYS];                /* str, or a tuple of str for a group */
static PyObject *tool_kind, *model_kind;    /* steps.TOOL, steps.MODEL */
static PyObject *final_reasons, *tool_reasons; /* frozensets of lower-case finish reasons */
static PyObject *read_word, *write_word;    /* the effects a span may state */
static long long max_count;
static PyObject *tool_name_of;              /* steps.tool_name(attrs, span_name) */
static PyObject *summary_of;                /* RepetitionSummary.from_attribute(raw) */
static PyObject *s_fingerprinter, *s_arguments, *s_result, *s_effect, *s_lower, *s_fingerprinters, *s_tools;
static PyTypeObject *policy_type; /* set once by policy_reads(): the policy class whose caches it reads */
static PyObject *policy_pins;     /* (and its two methods those reads stand for) */

/* attrs.get(key) (borrowed); NULL for an absent key or a None value, with no error set, or NULL
 * with the error of a key whose hash or comparison raised. */
static PyObject *
get(PyObject *attrs, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(attrs, key);
    return value == Py_None ? NULL : value;
}

/* The first value of a group of keys that is not None (borrowed), as steps._first. */
static PyObject *
first(PyObject *attrs, PyObject *group)
{
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(group); at++) {
        PyObject *value = get(attrs, PyTuple_GET_ITEM(group, at));
        if (value != NULL || PyErr_Occurred())
            return value;
    }
    return NULL;
}

static int
is_exact_text(PyObject *value)
{
    return value == NULL || PyUnicode_CheckExact(value);
}

/* Whether every item of a tuple or list is an exact string (as an SDK span and a replay hold a
 * list of strings). */
static int
all_text(PyObject *sequence)
{
    for (Py_ssize_t at = 0; at < PySequence_Fast_GET_SIZE(sequence); at++)
        if (!PyUnicode_CheckExact(PySequence_Fast_GET_ITEM(sequence, at)))
            return 0;
    return 1;
}

/* A count as steps._tokens reads it: an exact int in range, else 0 when neither it nor a legacy
 * key holds anything; -1 leaves the attributes to Python (an error set, perhaps). */
static long long
count(PyObject *attrs, PyObject *key, PyObject *legacy)
{
    PyObject *value = get(attrs, key);
    if (value == NULL) {
        if (PyErr_Occurred())
            return -1;
        return first(attrs, legacy) != NULL || PyErr_Occurred() ? -1 : 0;
    }
    if (!PyLong_CheckExact(value))
        return -1;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    return overflow || number < 0 || number > max_count ? -1 : number;
}

/* Leave the attributes to the Python function: an error met while reading them (a key whose
 * comparison raised, say) is one the Python function meets in its own order, and words. An
 * interruption (not an Exception) is not swallowed. */
static PyObject *
leave_to_python(void)
{
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

/* Read one attribute, or leave them all to Python at an error. */
#define READ(target, lookup)                                       \
    do {                                                           \
        if (((target) = (lookup)) == NULL && PyErr_Occurred())     \
            return leave_to_python();                              \
    } while (0)
#define CONTAINS(target, key)                                      \
    do {                                                           \
        if (((target) = PyDict_Contains(attrs, (key))) < 0)        \
            return leave_to_python();                              \
    } while (0)

/* Whether any key of a group is in the attributes, whatever its value: 1, 0, or -1 for an error. */
static int
contains_any(PyObject *attrs, PyObject *group)
{
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(group); at++) {
        int found = PyDict_Contains(attrs, PyTuple_GET_ITEM(group, at));
        if (found != 0)
            return found;
    }
    return 0;
}

/* A Step of the given field values (stolen references, NULL for a default). */
static PyObject *
make_step(PyObject *values[FIELDS])
{
    PyObject *step = step_type->tp_alloc(step_type, 0);
    for (int field = 0; field < FIELDS; field++) {
        PyObject *value = values[field] != NULL ? values[field] : Py_NewRef(defaults[field]);
        values[field] = NULL;
        if (step == NULL)
            Py_DECREF(value);
        else
            SLOT(step, offsets[field]) = value;
    }
    return step;
}

static void
release(PyObject *values[FIELDS])
{
    for (int field = 0; field < FIELDS; field++)
        Py_CLEAR(values[field]);
}

static int
arguments(const char *call, Py_ssize_t nargs, Py_ssize_t expected, PyObject *attrs)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", call, expected, nargs);
        return -1;
    }
    if (step_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the step reader is not configured");
        return -1;
    }
    if (!PyDict_CheckExact(attrs)) {
        PyErr_SetString(PyExc_TypeError, "attrs must be a dict");
        return -1;
    }
    return 0;
}

/* ``a, b = value``, as Python unpacks it: at most three items taken, its words for a wrong count.
 * The two items (new references) in `pair`; -1 for an error. */
static int
unpack_pair(PyObject *value, PyObject *pair[2])
{
    PyObject *items = PyObject_GetIter(value);
    if (items == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) && Py_TYPE(value)->tp_iter == NULL && !PySequence_Check(value)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object", Py_TYPE(value)->tp_name);
        }
        return -1;
    }
    pair[0] = pair[1] = NULL;
    int taken = 0;
    while (taken < 2 && (pair[taken] = PyIter_Next(items)) != NULL)
        taken++;
    PyObject *more = taken == 2 ? PyIter_Next(items) : NULL;
    Py_DECREF(items);
    if (taken == 2 && more == NULL && !PyErr_Occurred())
        return 0;
    if (more != NULL) {
        Py_DECREF(more);
        PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 2)");
    }
    else if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected 2, got %d)", taken);
    Py_CLEAR(pair[0]);
    Py_CLEAR(pair[1]);
    return -1;
}

/* The entry `name` of the dict the package's own policy keeps as `attribute` (a new reference; NULL
 * where it has none), read as its method reads it: 1; or 0, where the method is to answer (another
 * class of policy, a method replaced on the class or on the object, a name of another type, an
 * unusual field, a failed lookup). */
static int
policy_entry(PyObject *policy, PyObject *attribute, PyObject *name, PyObject **found)
{
    *found = NULL;
    if (policy_type == NULL || !Py_IS_TYPE(policy, policy_type) || !PyUnicode_CheckExact(name) ||
        PyUnicode_GET_LENGTH(name) == 0 || unchanged(policy_pins) != 1) {
        PyErr_Clear(); /* (a failed look at the pins: the method runs, and meets what failed) */
        return 0;
    }
    PyObject *own = PyObject_GenericGetDict(policy, NULL); /* its fields, and any method set on it */
    int read = own != NULL && PyDict_CheckExact(own) && !PyDict_GetItemWithError(own, s_fingerprinter) &&
               !PyErr_Occurred() && !PyDict_GetItemWithError(own, s_effect) && !PyErr_Occurred();
    PyObject *dict = read ? PyDict_GetItemWithError(own, attribute) : NULL; /* (borrowed, while `own` lives) */
    read = dict != NULL && PyDict_CheckExact(dict);
    if (read) { /* an exact str key: no Python code runs, unless a key of a str subclass compares */
        Py_INCREF(dict);
        *found = Py_XNewRef(PyDict_GetItemWithError(dict, name));
        read = *found != NULL || !PyErr_Occurred();
        Py_DECREF(dict);
    }
    Py_XDECREF(own);
    PyErr_Clear();
    return read;
}

/* policy.fingerprinter(name): the one its cache holds, else the method's (a new reference). */
static PyObject *
fingerprinter_of(PyObject *policy, PyObject *name)
{
    PyObject *found;
    if (policy_entry(policy, s_fingerprinters, name, &found) && found != NULL) {
        if (found != Py_None)
            return found;
        Py_DECREF(found);
    }
    return PyObject_CallMethodOneArg(policy, s_fingerprinter, name);
}

/* policy.effect(name, fallback): the fallback where the policy has no contract for the tool, else
 * the method's (a new reference). */
static PyObject *
effect_of(PyObject *policy, PyObject *name, PyObject *fallback)
{
    PyObject *contract;
    if (policy_entry(policy, s_tools, name, &contract) && contract == NULL)
        return Py_NewRef(fallback);
    Py_XDECREF(contract);
    return PyObject_CallMethodObjArgs(policy, s_effect, name, fallback, NULL);
}

/* The fingerprint `method` of the payloads makes of a raw value with `fingerprinter`, made first
 * when there is none or it is false: ``fingerprinter or policy.fingerprinter(name)``. */
static PyObject *
payload_fingerprint(PyObject *policy, PyObject *payloads, PyObject *method, PyObject *fingerprinter,
                    PyObject *name, PyObject *raw)
{
    int usable = fingerprinter == NULL ? 0 : PyObject_IsTrue(fingerprinter);
    if (usable < 0)
        return NULL;
    PyObject *made = usable ? Py_NewRef(fingerprinter) : fingerprinter_of(policy, name);
    if (made == NULL)
        return NULL;
    PyObject *fingerprint = PyObject_CallMethodObjArgs(payloads, method, made, raw, NULL);
    Py_DECREF(made);
    return fingerprint;
}

/* tool_step(attrs, session_id, sequence, policy, span_name, start_ns, end_ns, status_error, payloads):
 * steps._tool_step's Step, or None to run it. */
static PyObject *
tool_step(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (arguments("tool_step()", nargs, 9, nargs > 0 ? args[0] : NULL) < 0)
        return NULL;
    PyObject *attrs = args[0], *policy = args[3], *span_name = args[4], *status_error = args[7];
    PyObject *payloads = args[8];

    /* Everything is read and checked before the first call back. */
    PyObject *name, *args_fp, *result_fp, *empty, *error, *stated_effect, *raw_args = NULL, *raw_result = NULL;
    READ(name, get(attrs, keys[TOOL_NAME]));
    READ(args_fp, get(attrs, keys[TOOL_ARGS_FP]));
    READ(result_fp, get(attrs, keys[TOOL_RESULT_FP]));
    READ(empty, get(attrs, keys[TOOL_RESULT_EMPTY]));
    READ(error, get(attrs, keys[ERROR_TYPE]));
    READ(stated_effect, get(attrs, keys[TOOL_EFFECT]));
    if (args_fp == NULL)
        READ(raw_args, first(attrs, keys[RAW_ARGS]));
    if (result_fp == NULL || empty == NULL)
        READ(raw_result, first(attrs, keys[RAW_RESULT]));
    if (!PyBool_Check(status_error) || !is_exact_text(args_fp) || !is_exact_text(result_fp) ||
        !is_exact_text(stated_effect) || (empty != NULL && !PyBool_Check(empty)) ||
        (error != NULL && !PyUnicode_CheckExact(error) && !PyBool_Check(error)))
        Py_RETURN_NONE;
    int failed = status_error == Py_True ||
                 (error != NULL && (PyBool_Check(error) ? error == Py_True : PyUnicode_GET_LENGTH(error) > 0));
    PyObject *effect = stated_effect != NULL && (PyUnicode_Compare(stated_effect, read_word) == 0 ||
                                                 PyUnicode_Compare(stated_effect, write_word) == 0)
                       ? stated_effect : Py_None;

    /* Held from here: a call back may change the attributes. */
    PyObject *values[FIELDS] = {NULL};
    values[SESSION_ID] = Py_NewRef(args[1]);
    values[SEQUENCE] = Py_NewRef(args[2]);
    values[KIND] = Py_NewRef(tool_kind);
    values[START_NS] = Py_NewRef(args[5]);
    values[END_NS] = Py_NewRef(args[6]);
    values[FAILED] = PyBool_FromLong(failed);
    values[ARGS_FP] = Py_XNewRef(args_fp);
    values[RESULT_FP] = Py_XNewRef(result_fp);
    values[EMPTY] = Py_XNewRef(empty);
    values[EFFECT] = Py_NewRef(effect); /* what the span states, until the policy has its say */
    Py_XINCREF(raw_args);
    Py_XINCREF(raw_result);
    PyObject *fingerprinter = NULL;

    if (name != NULL && PyUnicode_CheckExact(name) && PyUnicode_GET_LENGTH(name) > 0)
        values[NAME] = Py_NewRef(name);
    else if ((values[NAME] = PyObject_CallFunctionObjArgs(tool_name_of, attrs, span_name, NULL)) == NULL)
        goto error;
    name = values[NAME];
    if (raw_args != NULL) { /* the fingerprinter made here is the one the result takes */
        if ((fingerprinter = fingerprinter_of(policy, name)) == NULL)
            goto error;
        Py_XSETREF(values[ARGS_FP], PyObject_CallMethodObjArgs(payloads, s_arguments, fingerprinter, raw_args, NULL));
        if (values[ARGS_FP] == NULL)
            goto error;
    }
    if (raw_result != NULL) {
        PyObject *pair[2];
        PyObject *result = payload_fingerprint(policy, payloads, s_result, fingerprinter, name, raw_result);
        int unpacked = result == NULL ? -1 : unpack_pair(result, pair);
        Py_XDECREF(result);
        if (unpacked < 0)
            goto error;
        for (int at = 0; at < 2; at++) { /* what the span did not say */
            int field = at == 0 ? RESULT_FP : EMPTY;
            if (values[field] == NULL)
                values[field] = Py_NewRef(pair[at]);
            Py_DECREF(pair[at]);
        }
    }
    for (int field = ARGS_FP; field <= RESULT_FP; field++) { /* str(value) unless None, as the Python function */
        if (values[field] == Py_None)
            Py_CLEAR(values[field]);
        else if (values[field] != NULL && !PyUnicode_CheckExact(values[field])) {
            PyObject *text = PyObject_Str(values[field]);
            if (text == NULL)
                goto error;
            Py_SETREF(values[field], text);
        }
    }
    if (values[EMPTY] == Py_None)
        Py_CLEAR(values[EMPTY]);
    if (values[EMPTY] != NULL && !PyBool_Check(values[EMPTY])) {
        int truth = PyObject_IsTrue(values[EMPTY]);
        if (truth < 0)
            goto error;
        Py_SETREF(values[EMPTY], PyBool_FromLong(truth));
    }
    PyObject *decided = effect_of(policy, name, values[EFFECT]);
    if (decided == NULL)
        goto error;
    Py_SETREF(values[EFFECT], decided);
    Py_XDECREF(fingerprinter);
    Py_XDECREF(raw_args);
    Py_XDECREF(raw_result);
    return make_step(values);

error:
    Py_XDECREF(fingerprinter);
    Py_XDECREF(raw_args);
    Py_XDECREF(raw_result);
    release(values);
    return NULL;
}

/* Whether finish reasons make an answer final, as steps._model_step decides it: one of them a
 * final reason, none a tool call's, lower-cased. 1, 0, or -1 for an error. */
static int
answers(PyObject *finish)
{
    int final = 0;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(finish); at++) {
        PyObject *lower = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(finish, at), s_lower);
        if (lower == NULL)
            return -1;
        int is_final = PySet_Contains(final_reasons, lower), is_tool = PySet_Contains(tool_reasons, lower);
        Py_DECREF(lower);
        if (is_final < 0 || is_tool < 0)
            return -1;
        if (is_tool)
            return 0;
        final |= is_final;
    }
    return final;
}

/* The stated claims as the Python function keeps them: sorted, in a tuple (new reference). The
 * caller has checked they are a string, or a tuple or list of strings. */
static PyObject *
sorted_claims(PyObject *stated)
{
    if (PyUnicode_CheckExact(stated))
        return PyTuple_Pack(1, stated);
    PyObject *claims = PySequence_List(stated);
    if (claims == NULL)
        return NULL;
    if (PyList_Sort(claims) < 0) {
        Py_DECREF(claims);
        return NULL;
    }
    Py_SETREF(claims, PyList_AsTuple(claims));
    return claims;
}

/* model_step(attrs, session_id, sequence, start_ns, end_ns): steps._model_step's Step, or None
 * to run it. */
static PyObject *
model_step(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (arguments("model_step()", nargs, 5, nargs > 0 ? args[0] : NULL) < 0)
        return NULL;
    PyObject *attrs = args[0];
    PyObject *model = NULL, *value;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(keys[MODEL_NAMES]); at++) { /* the first that is true */
        READ(value, get(attrs, PyTuple_GET_ITEM(keys[MODEL_NAMES], at)));
        if (value != NULL && !PyUnicode_CheckExact(value))
            Py_RETURN_NONE;
        if (value != NULL && PyUnicode_GET_LENGTH(value) > 0) {
            model = value;
            break;
        }
    }
    PyObject *finish, *tool_calls, *recorded, *stated, *rule, *clause, *text;
    int has_claims, has_calls, has_messages, foreign_calls, records_reply;
    READ(finish, first(attrs, keys[FINISH_KEYS]));
    CONTAINS(has_claims, keys[FINAL_CLAIMS]);
    CONTAINS(has_calls, keys[RESPONSE_TOOL_CALLS]);
    READ(tool_calls, get(attrs, keys[RESPONSE_TOOL_CALLS]));
    READ(recorded, get(attrs, keys[OUTPUT_REPETITION_KEY]));
    READ(stated, get(attrs, keys[FINAL_CLAIMS]));
    READ(rule, get(attrs, keys[FINAL_CLAIM_RULE]));
    READ(clause, get(attrs, keys[FINAL_CLAIM_CLAUSE]));
    /* Output messages and answer text need Python's parsing; so do the foreign ways of saying
     * how many tool calls a response asked for. */
    CONTAINS(has_messages, keys[OUTPUT_MESSAGES]);
    READ(text, first(attrs, keys[ANSWER_TEXT]));
    CONTAINS(foreign_calls, keys[AI_TOOL_CALLS]);
    if ((records_reply = contains_any(attrs, keys[REPLY_KEYS])) < 0)
        return leave_to_python();
    if (tool_calls != NULL && PyBool_Check(tool_calls))
        tool_calls = NULL; /* _int_or_none: a bool is no count */
    if (has_messages || text != NULL ||
        (tool_calls == NULL && (foreign_calls || ((!has_claims || !has_calls) && records_reply))) ||
        (tool_calls != NULL && !PyLong_CheckExact(tool_calls)) ||
        (finish != NULL && (!PyTuple_CheckExact(finish) || !all_text(finish))) ||
        (stated != NULL && !PyUnicode_CheckExact(stated) &&
         (!(PyTuple_CheckExact(stated) || PyList_CheckExact(stated)) || !all_text(stated))) ||
        (rule != NULL && !PyUnicode_CheckExact(rule)) ||
        (clause != NULL && !PyLong_CheckExact(clause) && !PyBool_Check(clause)))
        Py_RETURN_NONE;
    long long input_tokens = count(attrs, keys[INPUT_TOKENS_KEY], keys[LEGACY_INPUT]);
    long long output_tokens = input_tokens < 0 ? -1 : count(attrs, keys[OUTPUT_TOKENS_KEY], keys[LEGACY_OUTPUT]);
    if (output_tokens < 0)
        return leave_to_python();
    int final = 0;
    if (finish != NULL && (tool_calls == NULL || PyObject_IsTrue(tool_calls) == 0) && (final = answers(finish)) < 0)
        return NULL;
    PyObject *claims = final && stated != NULL ? sorted_claims(stated) : NULL;
    if (claims == NULL && PyErr_Occurred())
        return NULL;

    PyObject *values[FIELDS] = {NULL};
    values[CLAIMS] = claims;
    if (claims != NULL && PyTuple_GET_SIZE(claims) > 0) {
        values[CLAIM_RULE] = Py_XNewRef(rule);
        if (clause != NULL && !PyBool_Check(clause))
            values[CLAIM_CLAUSE] = Py_NewRef(clause);
    }
    values[SESSION_ID] = Py_NewRef(args[1]);
    values[SEQUENCE] = Py_NewRef(args[2]);
    values[KIND] = Py_NewRef(model_kind);
    values[NAME] = model != NULL ? Py_NewRef(model) : PyUnicode_FromStringAndSize(NULL, 0);
    values[START_NS] = Py_NewRef(args[3]);
    values[END_NS] = Py_NewRef(args[4]);
    values[INPUT_TOKENS] = PyLong_FromLongLong(input_tokens);
    values[OUTPUT_TOKENS] = PyLong_FromLongLong(output_tokens);
    values[MODEL] = Py_XNewRef(model);
    values[FINISH_REASONS] = finish != NULL ? Py_NewRef(finish) : PyTuple_New(0);
    values[TOOL_CALLS] = Py_XNewRef(tool_calls);
    values[FINAL] = PyBool_FromLong(final);
    if (values[NAME] == NULL || values[INPUT_TOKENS] == NULL || values[OUTPUT_TOKENS] == NULL ||
        values[FINISH_REASONS] == NULL)
        goto error; /* out of memory */
    /* The one call back, last: everything it could change is held. */
    if (recorded != NULL) {
        Py_INCREF(recorded);
        values[OUTPUT_REPETITION] = PyObject_CallOneArg(summary_of, recorded);
        Py_DECREF(recorded);
        if (values[OUTPUT_REPETITION] == NULL)
            goto error;
    }
    return make_step(values);

error:
    release(values);
    return NULL;
}

/* --- configure -------------------------------------------------------------------------------- */

/* configure(step_type, field_names, defaults, keys, tool, model, final_reasons, tool_reasons,
 *           read, write, max_count, tool_name, summary_of): what the Python functions read from
 * their modules, checked, and set once. */
static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "configure() takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *type = args[0], *names = args[1], *given_defaults = args[2], *given_keys = args[3];
    if (!slots_only(type))
        return refuse("step_type must be a class of slots only, made by object.__new__");
    if (!PyTuple_CheckExact(names) || PyTuple_GET_SIZE(names) != FIELDS || !PyTuple_CheckExact(given_defaults) ||
        PyTuple_GET_SIZE(given_defaults) != FIELDS)
        return refuse("field_names and defaults must be tuples of every Step field");
    Py_ssize_t found_offsets[FIELDS];
    for (int field = 0; field < FIELDS; field++) {
        PyObject *name = PyTuple_GET_ITEM(names, field);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, field_names[field]) != 0)
            return refuse("Step's fields are not those the reader writes, in its order");
        if ((found_offsets[field] = slot_offset((PyTypeObject *)type, field_names[field])) < 0)
            return refuse("a Step field is no plain slot");
    }
    if (!PyDict_CheckExact(given_keys))
        return refuse("keys must be a dict");
    PyObject *found_keys[KEYS];
    for (int key = 0; key < KEYS; key++) {
        PyObject *value = PyDict_GetItemString(given_keys, key_names[key]); /* borrowed */
        int group = key >= FIRST_GROUP;
        if (value == NULL || (group ? !PyTuple_CheckExact(value) || !all_text(value) : !PyUnicode_CheckExact(value)))
            return refuse("keys must name each attribute read (a str), or each group (a tuple of str)");
        found_keys[key] = value;
    }
    PyObject *tool = args[4], *model = args[5], *finals = args[6], *tools = args[7], *read = args[8];
    PyObject *write = args[9];
    if (!PyUnicode_CheckExact(tool) || !PyUnicode_CheckExact(model) || !PyFrozenSet_CheckExact(finals) ||
        !PyFrozenSet_CheckExact(tools) || !PyUnicode_CheckExact(read) || !PyUnicode_CheckExact(write))
        return refuse("the kinds and effects must be str, the finish reasons frozensets");
    int overflow;
    long long limit = PyLong_Check(args[10]) ? PyLong_AsLongLongAndOverflow(args[10], &overflow) : -1;
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (!PyLong_Check(args[10]) || overflow || limit < 0)
        return refuse("max_count must be an int within 64 bits");
    if (!PyCallable_Check(args[11]) || !PyCallable_Check(args[12]))
        return refuse("tool_name and summary_of must be callable");
    if (step_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure: the step reader is configured once");
        return NULL;
    }
    step_type = (PyTypeObject *)Py_NewRef(type);
    for (int field = 0; field < FIELDS; field++) {
        offsets[field] = found_offsets[field];
        defaults[field] = Py_NewRef(PyTuple_GET_ITEM(given_defaults, field));
    }
    for (int key = 0; key < KEYS; key++)
        keys[key] = Py_NewRef(found_keys[key]);
    tool_kind = Py_NewRef(tool);
    model_kind = Py_NewRef(model);
    final_reasons = Py_NewRef(finals);
    tool_reasons = Py_NewRef(tools);
    read_word = Py_NewRef(read);
    write_word = Py_NewRef(write);
    max_count = limit;
    tool_name_of = Py_NewRef(args[11]);
    summary_of = Py_NewRef(args[12]);
    Py_RETURN_NONE;
}

/* policy_reads(policy_type, pins): the policy class whose fingerprinter cache and tool contracts
 * tool_step() reads itself, and the pins of the two methods those reads stand for; once. */
static PyObject *
policy_reads(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "policy_reads() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_HasFeature((PyTypeObject *)args[0], Py_TPFLAGS_HEAPTYPE) || !pins(args[1]))
        return refuse("policy_reads: a class of Python's and a tuple of pins");
    if (policy_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "policy_reads: set once");
        return NULL;
    }
    policy_type = (PyTypeObject *)Py_NewRef(args[0]);
    policy_pins = Py_NewRef(args[1]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "Set what the readers read from their modules; once."},
    {"policy_reads", (PyCFunction)(void (*)(void))policy_reads, METH_FASTCALL,
     "Set the policy class whose caches tool_step reads itself; once."},
    {"tool_step", (PyCFunction)(void (*)(void))tool_step, METH_FASTCALL,
     "steps._tool_step's Step, or None to run it."},
    {"model_step", (PyCFunction)(void (*)(void))model_step, METH_FASTCALL,
     "steps._model_step's Step, or None to run it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._step_reader",
    "The step reader of otel_agentguard.steps, compiled (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__step_reader(void)
{
#ifdef Py_GIL_DISABLED
    /* Its state is set once and read without locks, which the GIL makes safe: the free-threaded
     * build runs the Python functions. */
    PyErr_SetString(PyExc_ImportError, "the step reader is built for a Python with a GIL");
    return NULL;
#endif
    if ((s_fingerprinter = PyUnicode_InternFromString("fingerprinter")) == NULL ||
        (s_arguments = PyUnicode_InternFromString("arguments")) == NULL ||
        (s_result = PyUnicode_InternFromString("result")) == NULL ||
        (s_effect = PyUnicode_InternFromString("effect")) == NULL ||
        (s_lower = PyUnicode_InternFromString("lower")) == NULL ||
        (s_fingerprinters = PyUnicode_InternFromString("_fingerprinters")) == NULL ||
        (s_tools = PyUnicode_InternFromString("tools")) == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
