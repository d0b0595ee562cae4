/* The judge's pass over one step, compiled (optional).
 *
 * judge.SessionJudge.observe accounts for a step in the session's totals, then hands it to each
 * probe that reads its kind of step. observe() here does the same for the usual judge: the
 * built-in probes, shared and none of them disabled in this session, the package's own policy and
 * price table (so no code of the user's runs while the totals are half-updated), and steps of the
 * types the step readers make. It first checks every value the accounting reads and returns None,
 * before changing anything, when one is of another type or past 2**62: the caller then runs the
 * Python method, the reference.
 *
 * The accounting is the Python method's, statement for statement, with the price table called
 * back where the Python method calls it. A probe's pass is done here where it raises nothing,
 * which is nearly always: the same tests on the same state, and the same updates of what the probe
 * remembers of the session. Where a probe may raise its alert, or reads a value of another type,
 * the probe's own observe() runs, through the judge's _observe_one (which disables a probe that
 * fails, as the Python method does), with the state it would have met. So every alert, its
 * evidence and its text are made by Python.
 *
 * Tests compare both passes on generated sessions (tests/test_judge_pass.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* The slots read and written, by class. configure() finds their offsets. */
enum {
    J_TOTALS, J_POLICY, J_ALERTS, J_LAST, J_BY_KIND, J_OWN, J_KEEP_CALLS, J_LABELS, J_LAST_END_NS,
    J_LAST_SEQUENCE, JUDGE_SLOTS
};
static const char *const judge_slot_names[JUDGE_SLOTS] = {
    "totals", "policy", "_alerts", "_last", "_by_kind", "_own", "_keep_calls", "_labels", "_last_end_ns",
    "_last_sequence",
};
enum {
    TOT_START_NS, TOT_STEPS, TOT_TOKENS, TOT_COST_USD, TOT_MODEL_CALLS, TOT_WROTE, TOT_FINISHED, TOT_FINAL,
    TOT_OPEN_CALLS, TOT_PARTIAL, TOT_FIRED, TOT_DIGESTS, TOT_SEQUENCES, TOT_NAMES, TOT_STATES_SEEN,
    TOT_NO_PROGRESS_RUN, TOT_ERROR_RUN, TOT_ERROR_FAILURES, TOTALS_SLOTS
};
static const char *const totals_slot_names[TOTALS_SLOTS] = {
    "start_ns", "steps", "tokens", "cost_usd", "model_calls", "wrote", "finished_explicitly", "final",
    "open_tool_calls", "partial_result", "fired", "call_digests", "call_sequences", "call_names", "states_seen",
    "no_progress_run", "error_run", "error_failures",
};
enum {
    S_SEQUENCE, S_KIND, S_NAME, S_START_NS, S_END_NS, S_ARGS_FP, S_RESULT_FP, S_FAILED, S_EMPTY, S_EFFECT,
    S_INPUT_TOKENS, S_OUTPUT_TOKENS, S_MODEL, S_TOOL_CALLS, S_FINAL, S_COST_USD, S_LABEL, S_OUTPUT_REPETITION,
    STEP_SLOTS
};
static const char *const step_slot_names[STEP_SLOTS] = {
    "sequence", "kind", "name", "start_ns", "end_ns", "args_fingerprint", "result_fingerprint", "failed", "empty",
    "effect", "input_tokens", "output_tokens", "model", "tool_calls", "final", "cost_usd", "label",
    "output_repetition",
};

/* The built-in probes, in the order probes.all_probes() gives them. */
enum { FAKE_COMPLETION, OUTPUT_REPETITION, TOOL_LOOP, CYCLE, NO_PROGRESS, ERROR_STREAK, BUDGET, PROBES };

/* Set once by configure() and never changed. */
static PyTypeObject *judge_type, *totals_type, *step_type, *array_type, *policy_type, *price_table_type;
static Py_ssize_t judge_slots[JUDGE_SLOTS], totals_slots[TOTALS_SLOTS], step_slots[STEP_SLOTS];
static PyObject *tool_kind, *model_kind, *write_effect;
static PyObject *no_words;            /* probes._NO_WORDS: a session's first tool step replaces it */
static PyObject *probe_types[PROBES];
static Py_ssize_t setting_slots[PROBES]; /* the slot of the setting each quiet pass reads; -1: by name */
static PyObject *budget_totals[TOTALS_SLOTS]; /* the names of the totals a budget reads by slot; else NULL */
static Py_ssize_t policy_prices_slot, policy_finish_tool_slot; /* the policy's slots of them; -1: by name */
static PyObject *field_pins; /* the policy's and the probes' slots loaded at their offsets, as pins */
static long long fired_bits[BUDGET];   /* probes.*_FIRED of each probe but the budgets (theirs are in _limits) */
static Py_ssize_t last_actions;        /* the judge's _last holds this many items at most */
static Py_ssize_t longest_cycle, max_states, no_call;
static PyObject *s_observe_one, *s_probe_failed, *s_append, *s_cost, *s_prices, *s_finish_tool, *s_threshold,
    *s_repeats, *s_limits, *s_q;

#define LIMIT (1LL << 62) /* values past it are left to Python: sums of two stay within 64 bits */

/* Set once by price_reads(): the price class, the price table's cache, the pins of its methods. */
static PyTypeObject *price_type;
static Py_ssize_t price_cache_slot;
static PyObject *price_pins;

/* An exact int within LIMIT, read into *out; 0 for anything else. */
static int
small_int(PyObject *value, long long *out)
{
    if (value == NULL || !PyLong_CheckExact(value))
        return 0;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || number >= LIMIT || number <= -LIMIT)
        return 0;
    *out = number;
    return 1;
}

static int
is_bool(PyObject *value)
{
    return value == Py_True || value == Py_False;
}

static int
none_or_text(PyObject *value)
{
    return value == Py_None || (value != NULL && PyUnicode_CheckExact(value));
}

/* Set a slot to a new reference (NULL: an error already set, the slot left as it is). */
static int
set_slot(PyObject *object, Py_ssize_t offset, PyObject *value)
{
    if (value == NULL)
        return -1;
    Py_XSETREF(SLOT(object, offset), value);
    return 0;
}

static int
set_int(PyObject *object, Py_ssize_t offset, long long value)
{
    return set_slot(object, offset, PyLong_FromLongLong(value));
}

/* An array('q') of the session's, as its words; NULL if it is anything else. */
static const long long *
words(PyObject *array, Py_ssize_t *length, Py_buffer *view)
{
    if (array == NULL || !Py_IS_TYPE(array, array_type) || PyObject_GetBuffer(array, view, PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return NULL;
    }
    if (view->itemsize != sizeof(long long) || view->format == NULL || strcmp(view->format, "q") != 0) {
        PyBuffer_Release(view);
        return NULL;
    }
    *length = view->len / view->itemsize;
    return (const long long *)view->buf;
}

static int
append(PyObject *container, PyObject *item)
{
    if (item == NULL)
        return -1;
    PyObject *done = PyObject_CallMethodOneArg(container, s_append, item);
    Py_DECREF(item);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

static PyObject *
new_words(void)
{
    return PyObject_CallOneArg((PyObject *)array_type, s_q);
}

/* --- the accounting ------------------------------------------------------------------------- */

/* What the accounting reads, checked before anything is changed. */
typedef struct {
    PyObject *prices, *finish_tool; /* the policy's (new references, released by observe) */
    long long sequence, start_ns, end_ns, input_tokens, output_tokens, tool_calls;
    long long totals_start_ns, steps, tokens, model_calls, open_calls, last_end_ns, last_sequence, keep;
    int tool, failed, final, has_cost;
    double cost;
} Reading;

/* 1 for a tool step's kind, 0 for a model step's (the constants, or equal strings: a trajectory
 * file's), -1 for anything else. */
static int
tool_or_model(PyObject *kind)
{
    if (kind == NULL || !PyUnicode_CheckExact(kind))
        return -1;
    if (kind == tool_kind || PyUnicode_Compare(kind, tool_kind) == 0)
        return 1;
    if (kind == model_kind || PyUnicode_Compare(kind, model_kind) == 0)
        return 0;
    return -1;
}

static int
readable(PyObject *judge, PyObject *totals, PyObject *step, Reading *r)
{
    if ((r->tool = tool_or_model(SLOT(step, step_slots[S_KIND]))) < 0)
        return 0;
    PyObject *failed = SLOT(step, step_slots[S_FAILED]), *final = SLOT(step, step_slots[S_FINAL]);
    PyObject *empty = SLOT(step, step_slots[S_EMPTY]), *cost = SLOT(step, step_slots[S_COST_USD]);
    PyObject *tool_calls = SLOT(step, step_slots[S_TOOL_CALLS]);
    if (!is_bool(failed) || !is_bool(final) || (empty != Py_None && !is_bool(empty)))
        return 0;
    r->failed = failed == Py_True;
    r->final = final == Py_True;
    if (!small_int(SLOT(step, step_slots[S_SEQUENCE]), &r->sequence) ||
        !small_int(SLOT(step, step_slots[S_START_NS]), &r->start_ns) ||
        !small_int(SLOT(step, step_slots[S_END_NS]), &r->end_ns) ||
        !small_int(SLOT(step, step_slots[S_INPUT_TOKENS]), &r->input_tokens) ||
        !small_int(SLOT(step, step_slots[S_OUTPUT_TOKENS]), &r->output_tokens))
        return 0;
    r->tool_calls = 0;
    if (tool_calls == NULL || (tool_calls != Py_None && !small_int(tool_calls, &r->tool_calls)))
        return 0;
    if (cost == NULL || (cost != Py_None && !PyFloat_CheckExact(cost)))
        return 0;
    r->has_cost = cost != Py_None;
    r->cost = r->has_cost ? PyFloat_AS_DOUBLE(cost) : 0.0;
    if (!none_or_text(SLOT(step, step_slots[S_ARGS_FP])) || !none_or_text(SLOT(step, step_slots[S_RESULT_FP])) ||
        !none_or_text(SLOT(step, step_slots[S_EFFECT])) || SLOT(step, step_slots[S_NAME]) == NULL ||
        !PyUnicode_CheckExact(SLOT(step, step_slots[S_NAME])) || SLOT(step, step_slots[S_LABEL]) == NULL)
        return 0;

    if (!small_int(SLOT(totals, totals_slots[TOT_START_NS]), &r->totals_start_ns) ||
        !small_int(SLOT(totals, totals_slots[TOT_STEPS]), &r->steps) ||
        !small_int(SLOT(totals, totals_slots[TOT_TOKENS]), &r->tokens) ||
        !small_int(SLOT(totals, totals_slots[TOT_MODEL_CALLS]), &r->model_calls) ||
        !small_int(SLOT(totals, totals_slots[TOT_OPEN_CALLS]), &r->open_calls) ||
        !small_int(SLOT(judge, judge_slots[J_LAST_END_NS]), &r->last_end_ns) ||
        !small_int(SLOT(judge, judge_slots[J_LAST_SEQUENCE]), &r->last_sequence) ||
        !small_int(SLOT(judge, judge_slots[J_KEEP_CALLS]), &r->keep))
        return 0;
    long long tokens;
    if (__builtin_add_overflow(r->tokens, r->input_tokens, &tokens) ||
        __builtin_add_overflow(tokens, r->output_tokens, &tokens) || tokens >= LIMIT || tokens <= -LIMIT)
        return 0;
    PyObject *cost_total = SLOT(totals, totals_slots[TOT_COST_USD]);
    if (cost_total == NULL || !PyFloat_CheckExact(cost_total))
        return 0;
    PyObject *last = SLOT(judge, judge_slots[J_LAST]), *labels = SLOT(judge, judge_slots[J_LABELS]);
    if (last == NULL || (last != Py_None && !PyTuple_CheckExact(last)) || labels == NULL ||
        (labels != Py_None && !PyDict_CheckExact(labels)))
        return 0;
    /* The policy's own price table and a plain finish tool: no code of the user's runs while the
     * judge is half-updated. */
    PyObject *policy = SLOT(judge, judge_slots[J_POLICY]), *model = SLOT(step, step_slots[S_MODEL]);
    if (policy == NULL || !Py_IS_TYPE(policy, policy_type) || model == NULL || !none_or_text(model))
        return 0;
    r->prices = slot_or_getattr(policy, policy_prices_slot, s_prices);
    r->finish_tool = r->prices == NULL ? NULL : slot_or_getattr(policy, policy_finish_tool_slot, s_finish_tool);
    if (r->prices == NULL || r->finish_tool == NULL || !Py_IS_TYPE(r->prices, price_table_type) ||
        !none_or_text(r->finish_tool)) {
        PyErr_Clear();
        return 0;
    }
    if (r->tool) { /* remember_call's containers: the stand-ins, or what it made */
        PyObject *digests = SLOT(totals, totals_slots[TOT_DIGESTS]);
        PyObject *sequences = SLOT(totals, totals_slots[TOT_SEQUENCES]);
        PyObject *names = SLOT(totals, totals_slots[TOT_NAMES]);
        if (digests == NULL || sequences == NULL || names == NULL)
            return 0;
        if (digests != no_words &&
            (!Py_IS_TYPE(digests, array_type) || !Py_IS_TYPE(sequences, array_type) || !PyList_CheckExact(names)))
            return 0;
    }
    return 1;
}

/* SessionTotals.remember_call. */
static int
remember_call(PyObject *totals, PyObject *step, const Reading *r)
{
    PyObject *digests = SLOT(totals, totals_slots[TOT_DIGESTS]);
    if (digests == no_words) {
        if (set_slot(totals, totals_slots[TOT_DIGESTS], new_words()) < 0 ||
            set_slot(totals, totals_slots[TOT_SEQUENCES], new_words()) < 0 ||
            set_slot(totals, totals_slots[TOT_NAMES], PyList_New(0)) < 0)
            return -1;
    }
    /* (Exact arrays and a list, a tuple of exact str, None and bool hashed: no code of anyone's
     * runs below, so the slots stay what they are.) */
    digests = SLOT(totals, totals_slots[TOT_DIGESTS]);
    PyObject *sequences = SLOT(totals, totals_slots[TOT_SEQUENCES]), *names = SLOT(totals, totals_slots[TOT_NAMES]);
    Py_hash_t digest = no_call;
    PyObject *args_fp = SLOT(step, step_slots[S_ARGS_FP]);
    if (args_fp != Py_None) { /* probes.call_digest */
        PyObject *call = PyTuple_Pack(3, args_fp, SLOT(step, step_slots[S_RESULT_FP]), SLOT(step, step_slots[S_FAILED]));
        if (call == NULL)
            return -1;
        digest = PyObject_Hash(call);
        Py_DECREF(call);
        if (digest == -1)
            return -1;
    }
    if (append(digests, PyLong_FromSsize_t(digest)) < 0 || append(sequences, PyLong_FromLongLong(r->sequence)) < 0 ||
        append(names, Py_NewRef(SLOT(step, step_slots[S_NAME]))) < 0)
        return -1;
    if (Py_SIZE(digests) > r->keep && (PySequence_DelItem(digests, 0) < 0 || PySequence_DelItem(sequences, 0) < 0))
        return -1;
    return PyList_GET_SIZE(names) > longest_cycle ? PySequence_DelItem(names, 0) : 0;
}

/* PriceTable.cost(model, input_tokens, output_tokens) for a model the table priced before, from
 * its cache (a new reference): the same float operations in the same order. NULL, with no error
 * set, where the method is to say (a model not priced yet, a price or count of another type, a
 * method replaced). */
static PyObject *
cached_cost(PyObject *prices, PyObject *model, PyObject *input_tokens, PyObject *output_tokens)
{
    if (price_type == NULL || unchanged(price_pins) != 1) {
        PyErr_Clear();
        return NULL;
    }
    if (model == Py_None || (PyUnicode_CheckExact(model) && PyUnicode_GET_LENGTH(model) == 0))
        return PyFloat_FromDouble(0.0); /* no model: no price */
    PyObject *cache = SLOT(prices, price_cache_slot);
    if (!PyUnicode_CheckExact(model) || cache == NULL || !PyDict_CheckExact(cache))
        return NULL;
    PyObject *price = PyDict_GetItemWithError(cache, model); /* an exact str key: no Python code runs */
    if (price == Py_None)
        return PyFloat_FromDouble(0.0); /* a model no price matches */
    if (price == NULL || !Py_IS_TYPE(price, price_type) || PyTuple_GET_SIZE(price) != 2 ||
        !PyFloat_CheckExact(PyTuple_GET_ITEM(price, 0)) || !PyFloat_CheckExact(PyTuple_GET_ITEM(price, 1)) ||
        !PyLong_CheckExact(input_tokens) || !PyLong_CheckExact(output_tokens)) {
        PyErr_Clear();
        return NULL;
    }
    double input = PyLong_AsDouble(input_tokens), output = PyLong_AsDouble(output_tokens);
    if (PyErr_Occurred()) { /* a count past a float: the method raises what Python raises */
        PyErr_Clear();
        return NULL;
    }
    /* Each product rounded on its own, as Python rounds it (volatile: never fused into one). */
    volatile double of_input = input * PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(price, 0));
    volatile double of_output = output * PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(price, 1));
    volatile double sum = of_input + of_output;
    return PyFloat_FromDouble(sum / 1e6);
}

/* SessionJudge._account, in the same order (the price table is called back where it is). */
static int
account(PyObject *judge, PyObject *totals, PyObject *step, const Reading *r)
{
    if (!r->totals_start_ns && r->start_ns && set_int(totals, totals_slots[TOT_START_NS], r->start_ns) < 0)
        return -1;
    if (r->end_ns > r->last_end_ns && set_int(judge, judge_slots[J_LAST_END_NS], r->end_ns) < 0)
        return -1;
    if (r->sequence > r->last_sequence && set_int(judge, judge_slots[J_LAST_SEQUENCE], r->sequence) < 0)
        return -1;
    if (set_int(totals, totals_slots[TOT_TOKENS], r->tokens + r->input_tokens + r->output_tokens) < 0)
        return -1;
    PyObject *cost_total = SLOT(totals, totals_slots[TOT_COST_USD]);
    if (r->has_cost) {
        if (set_slot(totals, totals_slots[TOT_COST_USD], PyFloat_FromDouble(PyFloat_AS_DOUBLE(cost_total) + r->cost)) < 0)
            return -1;
    }
    else if (!r->tool) {
        PyObject *args[] = {r->prices, SLOT(step, step_slots[S_MODEL]), SLOT(step, step_slots[S_INPUT_TOKENS]),
                            SLOT(step, step_slots[S_OUTPUT_TOKENS])};
        PyObject *priced = cached_cost(args[0], args[1], args[2], args[3]);
        if (priced == NULL && !PyErr_Occurred())
            priced = PyObject_VectorcallMethod(s_cost, args, 4, NULL);
        if (priced == NULL)
            return -1;
        if (set_slot(totals, totals_slots[TOT_COST_USD], PyNumber_InPlaceAdd(cost_total, priced)) < 0) {
            Py_DECREF(priced);
            return -1;
        }
        Py_DECREF(priced);
    }
    if (r->tool) {
        if (remember_call(totals, step, r) < 0 || set_int(totals, totals_slots[TOT_STEPS], r->steps + 1) < 0 ||
            set_int(totals, totals_slots[TOT_OPEN_CALLS], r->open_calls - 1 > 0 ? r->open_calls - 1 : 0) < 0)
            return -1;
        if (!r->failed && SLOT(step, step_slots[S_EMPTY]) == Py_False &&
            set_slot(totals, totals_slots[TOT_PARTIAL], Py_NewRef(Py_True)) < 0)
            return -1;
        if (!r->failed) {
            PyObject *effect = SLOT(step, step_slots[S_EFFECT]);
            if (effect != Py_None && PyUnicode_Compare(effect, write_effect) == 0 &&
                set_slot(totals, totals_slots[TOT_WROTE], Py_NewRef(Py_True)) < 0)
                return -1;
            int finished = PyObject_RichCompareBool(SLOT(step, step_slots[S_NAME]), r->finish_tool, Py_EQ);
            if (finished < 0 || (finished && set_slot(totals, totals_slots[TOT_FINISHED], Py_NewRef(Py_True)) < 0))
                return -1;
        }
    }
    else {
        if (set_int(totals, totals_slots[TOT_MODEL_CALLS], r->model_calls + 1) < 0 ||
            set_int(totals, totals_slots[TOT_OPEN_CALLS], r->tool_calls) < 0)
            return -1;
        if (r->final && (set_int(totals, totals_slots[TOT_STEPS], r->steps + 1) < 0 ||
                         set_slot(totals, totals_slots[TOT_FINAL], Py_NewRef(Py_True)) < 0))
            return -1;
    }
    PyObject *last = SLOT(judge, judge_slots[J_LAST]);
    if (last != Py_None) { /* the last actions: one exact-size tuple */
        Py_ssize_t size = PyTuple_GET_SIZE(last), dropped = size + 4 > last_actions ? 4 : 0;
        PyObject *longer = PyTuple_New(size + 4 - dropped);
        if (longer == NULL)
            return -1;
        for (Py_ssize_t at = dropped; at < size; at++)
            PyTuple_SET_ITEM(longer, at - dropped, Py_NewRef(PyTuple_GET_ITEM(last, at)));
        PyObject *action[] = {SLOT(step, step_slots[S_SEQUENCE]), SLOT(step, step_slots[S_KIND]),
                              SLOT(step, step_slots[S_NAME]), SLOT(step, step_slots[S_FAILED])};
        for (int item = 0; item < 4; item++)
            PyTuple_SET_ITEM(longer, size - dropped + item, Py_NewRef(action[item]));
        set_slot(judge, judge_slots[J_LAST], longer);
    }
    PyObject *label = SLOT(step, step_slots[S_LABEL]);
    if (label != Py_None) {
        PyObject *labels = SLOT(judge, judge_slots[J_LABELS]);
        if (labels == Py_None) {
            if (set_slot(judge, judge_slots[J_LABELS], PyDict_New()) < 0)
                return -1;
            labels = SLOT(judge, judge_slots[J_LABELS]);
        }
        if (PyDict_SetItem(labels, SLOT(step, step_slots[S_SEQUENCE]), label) < 0)
            return -1;
    }
    return 0;
}

/* --- the probes' quiet passes --------------------------------------------------------------- */

/* Each returns 1 when the probe raises nothing on this step (having updated what it remembers, as
 * its observe() would), 0 when its observe() must run, -1 on an error (where observe() would have
 * raised it, with the same updates made before it).
 *
 * A probe before may have run code that changed the step (a claim container's __contains__, say):
 * what a pass reads of it is read afresh, as the probe reads it, and anything odd is left to it. */
typedef struct {
    int tool, failed, final;
    long long sequence;
    PyObject *empty, *result_fp, *summary; /* borrowed from the step */
} Fresh;

static int
fresh(PyObject *step, Fresh *f)
{
    PyObject *failed = SLOT(step, step_slots[S_FAILED]), *final = SLOT(step, step_slots[S_FINAL]);
    f->empty = SLOT(step, step_slots[S_EMPTY]);
    f->result_fp = SLOT(step, step_slots[S_RESULT_FP]);
    f->summary = SLOT(step, step_slots[S_OUTPUT_REPETITION]);
    if ((f->tool = tool_or_model(SLOT(step, step_slots[S_KIND]))) < 0 || !is_bool(failed) || !is_bool(final) ||
        f->summary == NULL || f->empty == NULL || (f->empty != Py_None && !is_bool(f->empty)) ||
        !none_or_text(f->result_fp) || !small_int(SLOT(step, step_slots[S_SEQUENCE]), &f->sequence))
        return 0;
    f->failed = failed == Py_True;
    f->final = final == Py_True;
    return 1;
}

static long long
fired(PyObject *totals)
{
    long long bits;
    return small_int(SLOT(totals, totals_slots[TOT_FIRED]), &bits) ? bits : -1;
}

/* An int setting of a probe (a threshold, a window), or -1 when it is anything else. */
static long long
setting(int which, PyObject *probe, PyObject *name)
{
    PyObject *value = slot_or_getattr(probe, setting_slots[which], name);
    long long number;
    int found = small_int(value, &number);
    Py_XDECREF(value);
    PyErr_Clear();
    return found && number >= 0 ? number : -1;
}

static int
quiet_tool_loop(PyObject *probe, PyObject *totals)
{
    long long threshold = setting(TOOL_LOOP, probe, s_threshold);
    Py_buffer view;
    Py_ssize_t length;
    const long long *calls = words(SLOT(totals, totals_slots[TOT_DIGESTS]), &length, &view);
    if (calls == NULL)
        return 0;
    if (threshold < 0) {
        PyBuffer_Release(&view);
        return 0;
    }
    int quiet = 0;
    if (length > 0) {
        long long key = calls[length - 1];
        Py_ssize_t same = 0;
        for (Py_ssize_t at = 0; at < length; at++)
            same += calls[at] == key;
        quiet = key == no_call || same < threshold; /* fewer among all the calls kept than the window needs */
    }
    PyBuffer_Release(&view);
    return quiet;
}

/* cycle._primitive: whether the block is no shorter block repeated. */
static int
primitive(const long long *block, Py_ssize_t size)
{
    for (Py_ssize_t shorter = 1; shorter < size; shorter++) {
        if (size % shorter)
            continue;
        Py_ssize_t at = 0;
        while (at < size && block[at] == block[at % shorter])
            at++;
        if (at == size)
            return 0;
    }
    return 1;
}

static int
quiet_cycle(PyObject *probe, PyObject *totals)
{
    long long repeats = setting(CYCLE, probe, s_repeats);
    if (repeats <= 1 || repeats > LIMIT / longest_cycle)
        return 0;
    Py_buffer view;
    Py_ssize_t length;
    const long long *calls = words(SLOT(totals, totals_slots[TOT_DIGESTS]), &length, &view);
    if (calls == NULL)
        return 0;
    int quiet = 1;
    /* cycle._repeats_a_recent_call: the last call one period (2 to longest_cycle) back */
    int recent = 0;
    if (length > 2 && calls[length - 1] != no_call) {
        Py_ssize_t from = length - longest_cycle - 1 > 0 ? length - longest_cycle - 1 : 0;
        for (Py_ssize_t at = from; at < length - 2; at++)
            recent |= calls[at] == calls[length - 1];
    }
    /* Each period's run (cycle._run); one long enough, of a primitive block, raises the alert. */
    for (Py_ssize_t period = 2; recent && quiet && period <= longest_cycle; period++) {
        long long enough = period * (repeats - 1), run = 0;
        Py_ssize_t at = length - 1;
        while (run < enough && at - period >= 0 && calls[at] != no_call && calls[at] == calls[at - period]) {
            run++;
            at--;
        }
        if (run >= enough && primitive(calls + length - period, period))
            quiet = 0;
    }
    PyBuffer_Release(&view);
    return quiet;
}

/* The run's length (0 for None), or -1 when it is no array of ours. */
static Py_ssize_t
run_length(PyObject *run)
{
    if (run == Py_None)
        return 0;
    if (run == NULL || !Py_IS_TYPE(run, array_type))
        return -1;
    return Py_SIZE(run); /* an array's length */
}

/* Empty a run (`del run[:]`) when it holds anything. */
static int
clear_run(PyObject *run)
{
    if (run == Py_None)
        return 0;
    Py_ssize_t length = PyObject_Length(run);
    return length <= 0 ? (int)length : PySequence_DelSlice(run, 0, length);
}

/* Add the step to a run (made if None) that stays below the threshold. */
static int
extend_run(PyObject *totals, Py_ssize_t slot, const Fresh *f)
{
    if (SLOT(totals, slot) == Py_None && set_slot(totals, slot, new_words()) < 0)
        return -1;
    return append(SLOT(totals, slot), PyLong_FromLongLong(f->sequence));
}

static int
quiet_no_progress(PyObject *probe, PyObject *totals, const Fresh *f)
{
    PyObject *state = f->result_fp;
    if (state == Py_None && !f->failed)
        return 1; /* the result is unknown: no verdict either way */
    long long threshold = setting(NO_PROGRESS, probe, s_threshold);
    PyObject *seen = SLOT(totals, totals_slots[TOT_STATES_SEEN]);
    Py_ssize_t run = run_length(SLOT(totals, totals_slots[TOT_NO_PROGRESS_RUN]));
    if (threshold < 0 || run < 0 || seen == NULL || (seen != Py_None && !PyByteArray_CheckExact(seen)))
        return 0;
    if (!f->failed) { /* a known state: new, or seen before */
        Py_hash_t digest = PyObject_Hash(state);
        if (digest == -1)
            return -1;
        long long word = digest;
        int held = 0;
        if (seen != Py_None) {
            const char *bytes = PyByteArray_AS_STRING(seen);
            Py_ssize_t count = PyByteArray_GET_SIZE(seen) / (Py_ssize_t)sizeof word;
            for (Py_ssize_t at = 0; at < count && !held; at++)
                held = memcmp(bytes + at * sizeof word, &word, sizeof word) == 0;
        }
        if (!held) {
            if (seen == Py_None) {
                if (set_slot(totals, totals_slots[TOT_STATES_SEEN], PyByteArray_FromStringAndSize(NULL, 0)) < 0)
                    return -1;
                seen = SLOT(totals, totals_slots[TOT_STATES_SEEN]);
            }
            Py_ssize_t size = PyByteArray_GET_SIZE(seen);
            if (PyByteArray_Resize(seen, size + (Py_ssize_t)sizeof word) < 0)
                return -1;
            memcpy(PyByteArray_AS_STRING(seen) + size, &word, sizeof word);
            if (size + (Py_ssize_t)sizeof word > max_states * (Py_ssize_t)sizeof word &&
                PySequence_DelSlice(seen, 0, sizeof word) < 0)
                return -1;
            return clear_run(SLOT(totals, totals_slots[TOT_NO_PROGRESS_RUN])) < 0 ? -1 : 1;
        }
    }
    if (run + 1 >= threshold)
        return 0; /* the run reaches the threshold: the probe raises its alert */
    return extend_run(totals, totals_slots[TOT_NO_PROGRESS_RUN], f) < 0 ? -1 : 1;
}

static int
quiet_error_streak(PyObject *probe, PyObject *totals, const Fresh *f)
{
    PyObject *empty = f->empty;
    if (!f->failed && empty == Py_None)
        return 1;
    long long threshold = setting(ERROR_STREAK, probe, s_threshold), failures;
    Py_ssize_t streak = run_length(SLOT(totals, totals_slots[TOT_ERROR_RUN]));
    if (threshold < 0 || streak < 0 || !small_int(SLOT(totals, totals_slots[TOT_ERROR_FAILURES]), &failures))
        return 0;
    if (!f->failed && empty == Py_False) { /* a useful result ends the streak */
        if (clear_run(SLOT(totals, totals_slots[TOT_ERROR_RUN])) < 0)
            return -1;
        return set_int(totals, totals_slots[TOT_ERROR_FAILURES], 0) < 0 ? -1 : 1;
    }
    if (streak + 1 >= threshold)
        return 0;
    if (extend_run(totals, totals_slots[TOT_ERROR_RUN], f) < 0)
        return -1;
    return set_int(totals, totals_slots[TOT_ERROR_FAILURES], failures + (f->failed ? 1 : 0)) < 0 ? -1 : 1;
}

/* getattr(totals, name) for a budget: a total in a slot is loaded (where set), any other by name. */
static PyObject *
total_of(PyObject *totals, PyObject *name)
{
    int at = 0;
    while (at < TOTALS_SLOTS && budget_totals[at] != name)
        at++;
    return slot_or_getattr(totals, at < TOTALS_SLOTS ? totals_slots[at] : -1, name);
}

static int
quiet_budget(PyObject *probe, PyObject *totals, PyObject *step)
{
    PyObject *limits = slot_or_getattr(probe, setting_slots[BUDGET], s_limits);
    if (limits == NULL || !PyTuple_CheckExact(limits)) {
        Py_XDECREF(limits);
        PyErr_Clear();
        return 0;
    }
    int quiet = 1;
    long long bits = fired(totals);
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(limits) && quiet == 1; at++) {
        PyObject *limit = PyTuple_GET_ITEM(limits, at);
        long long bit;
        if (!PyTuple_CheckExact(limit) || PyTuple_GET_SIZE(limit) != 4 || bits < 0 ||
            !small_int(PyTuple_GET_ITEM(limit, 3), &bit)) {
            quiet = 0;
            break;
        }
        if (bits & bit)
            continue;
        PyObject *total = PyTuple_GET_ITEM(limit, 1), *used;
        if (total == Py_None) { /* the wall time, from the span timestamps */
            long long start, end;
            if (!small_int(SLOT(totals, totals_slots[TOT_START_NS]), &start) ||
                !small_int(SLOT(step, step_slots[S_END_NS]), &end)) {
                quiet = 0;
                break;
            }
            long long spent = end - start;
            used = PyFloat_FromDouble(start ? (double)(spent > 0 ? spent : 0) / 1e9 : 0.0);
        }
        else
            used = total_of(totals, total);
        int over = used == NULL ? -1 : PyObject_RichCompareBool(used, PyTuple_GET_ITEM(limit, 2), Py_GT);
        Py_XDECREF(used);
        if (over != 0) {
            PyErr_Clear(); /* (an error: the probe's observe meets it again, and is disabled) */
            quiet = 0;
        }
    }
    Py_DECREF(limits);
    return quiet;
}

/* The probe's quiet pass: 1, 0 or -1 as above. */
static int
quiet(int which, PyObject *probe, PyObject *totals, PyObject *step)
{
    if (which == BUDGET)
        return quiet_budget(probe, totals, step);
    Fresh f;
    long long bits = fired(totals);
    if (bits < 0 || !fresh(step, &f))
        return 0;
    if (bits & fired_bits[which])
        return 1; /* raised once already */
    switch (which) {
    case FAKE_COMPLETION:
        return !f.final;
    case OUTPUT_REPETITION:
        return f.tool || f.summary == Py_None;
    case TOOL_LOOP:
        return !f.tool || quiet_tool_loop(probe, totals);
    case CYCLE:
        return !f.tool || quiet_cycle(probe, totals);
    case NO_PROGRESS:
        return f.tool ? quiet_no_progress(probe, totals, &f) : 1;
    default: /* ERROR_STREAK */
        return f.tool ? quiet_error_streak(probe, totals, &f) : 1;
    }
}

/* A probe's pass raised an Exception: as SessionJudge.observe's except clause, the probe is
 * disabled for the session and reported (judge._probe_failed); 0, or -1 for anything else. */
static int
probe_failed(PyObject *judge, PyObject *probe)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1; /* an interruption: it goes on up */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *raised = PyErr_GetRaisedException();
#else
    PyObject *type, *raised, *traceback;
    PyErr_Fetch(&type, &raised, &traceback);
    PyErr_NormalizeException(&type, &raised, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(raised, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
#endif
    PyObject *done = PyObject_CallMethodObjArgs(judge, s_probe_failed, probe, raised, NULL);
    Py_XDECREF(raised);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* --- observe -------------------------------------------------------------------------------- */

static int
add_alerts(PyObject *raised, PyObject *found)
{
    Py_ssize_t end = PyList_GET_SIZE(raised);
    return PyList_SetSlice(raised, end, end, found);
}

/* observe(judge, step): SessionJudge.observe's alerts, or None to run it. */
static PyObject *
observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "observe() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *judge = args[0], *step = args[1];
    if (judge_type == NULL || field_pins == NULL || !Py_IS_TYPE(judge, judge_type) || !Py_IS_TYPE(step, step_type))
        Py_RETURN_NONE;
    int same = unchanged(field_pins); /* (a setting or policy field replaced on its class: Python reads it) */
    if (same <= 0)
        return same < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *totals = SLOT(judge, judge_slots[J_TOTALS]), *by_kind = SLOT(judge, judge_slots[J_BY_KIND]);
    if (totals == NULL || !Py_IS_TYPE(totals, totals_type) || SLOT(judge, judge_slots[J_OWN]) != Py_None ||
        by_kind == NULL || !PyDict_CheckExact(by_kind))
        Py_RETURN_NONE;
    Reading reading = {.prices = NULL, .finish_tool = NULL};
    PyObject *raised = NULL, *probes = NULL;
    if (!readable(judge, totals, step, &reading))
        goto left_to_python;
    probes = PyDict_GetItemWithError(by_kind, SLOT(step, step_slots[S_KIND])); /* borrowed */
    if (probes == NULL || !PyTuple_CheckExact(probes)) {
        probes = NULL;
        if (PyErr_Occurred())
            goto done;
        goto left_to_python;
    }
    int which[64];
    Py_ssize_t count = PyTuple_GET_SIZE(probes);
    if (count > 64)
        goto left_to_python;
    for (Py_ssize_t at = 0; at < count; at++) {
        PyObject *kind = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(probes, at));
        which[at] = 0;
        while (which[at] < PROBES && probe_types[which[at]] != kind)
            which[at]++;
        if (which[at] == PROBES)
            goto left_to_python; /* a probe of the user's: Python hands it the step */
    }

    /* Decided: from here on, the Python method's order. */
    Py_INCREF(probes); /* held while callbacks run, as the totals */
    Py_INCREF(totals);
    if (account(judge, totals, step, &reading) < 0 || (raised = PyList_New(0)) == NULL)
        goto failed;
    /* A failing probe's observe() makes the judge's own list without it; this loop, as the Python
     * method's, goes on with the probes it started with. */
    for (Py_ssize_t at = 0; at < count; at++) {
        PyObject *probe = PyTuple_GET_ITEM(probes, at);
        int quietly = quiet(which[at], probe, totals, step);
        if (quietly < 0 && probe_failed(judge, probe) < 0)
            goto failed;
        if (quietly)
            continue;
        PyObject *found = PyObject_CallMethodObjArgs(judge, s_observe_one, probe, step, NULL);
        if (found == NULL)
            goto failed;
        int any = PyObject_IsTrue(found);
        if (any < 0 || (any && add_alerts(raised, found) < 0)) {
            Py_DECREF(found);
            goto failed;
        }
        Py_DECREF(found);
    }
    if (PyList_GET_SIZE(raised)) { /* the judge's alerts, made at the first */
        PyObject *alerts = SLOT(judge, judge_slots[J_ALERTS]);
        if (alerts == NULL || alerts == Py_None) {
            if (set_slot(judge, judge_slots[J_ALERTS], PyList_New(0)) < 0)
                goto failed;
            alerts = SLOT(judge, judge_slots[J_ALERTS]);
        }
        PyObject *extended = PyList_CheckExact(alerts) ? (add_alerts(alerts, raised) < 0 ? NULL : Py_NewRef(Py_None))
                                                       : PyObject_CallMethod(alerts, "extend", "O", raised);
        if (extended == NULL)
            goto failed;
        Py_DECREF(extended);
    }
    goto judged;
failed:
    Py_CLEAR(raised);
judged:
    Py_DECREF(totals);
    Py_DECREF(probes);
    goto done;
left_to_python:
    raised = Py_NewRef(Py_None);
done:
    Py_XDECREF(reading.prices);
    Py_XDECREF(reading.finish_tool);
    return raised;
}

/* --- configure ------------------------------------------------------------------------------ */

/* configure(judge_type, totals_type, step_type, tool, model, write, array_type, no_words,
 *           probe_types, fired_bits, last_actions, longest_cycle, max_states, no_call, policy_type,
 *           price_table_type): what the Python judge and probes read from their modules, checked,
 *           and set once. */
static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 16) {
        PyErr_Format(PyExc_TypeError, "configure() takes 16 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t found_judge[JUDGE_SLOTS], found_totals[TOTALS_SLOTS], found_step[STEP_SLOTS];
    if (find_slots(args[0], judge_slot_names, JUDGE_SLOTS, found_judge) < 0 ||
        find_slots(args[1], totals_slot_names, TOTALS_SLOTS, found_totals) < 0 ||
        find_slots(args[2], step_slot_names, STEP_SLOTS, found_step) < 0)
        return refuse("the judge, its totals and the step must be classes of slots only, with the slots read");
    for (int at = 3; at < 6; at++)
        if (!PyUnicode_CheckExact(args[at]))
            return refuse("the step kinds and the write effect must be str");
    if (!PyType_Check(args[6]))
        return refuse("array_type must be a class");
    PyObject *types = args[8], *bits = args[9];
    if (!PyTuple_CheckExact(types) || PyTuple_GET_SIZE(types) != PROBES || !PyTuple_CheckExact(bits) ||
        PyTuple_GET_SIZE(bits) != BUDGET)
        return refuse("probe_types must name the seven built-in probes, fired_bits the bits of the first six");
    long long found_bits[BUDGET], numbers[4];
    for (int at = 0; at < PROBES; at++)
        if (!PyType_Check(PyTuple_GET_ITEM(types, at)))
            return refuse("probe_types must be classes");
    for (int at = 0; at < BUDGET; at++)
        if (!small_int(PyTuple_GET_ITEM(bits, at), &found_bits[at]) || found_bits[at] <= 0)
            return refuse("fired_bits must be positive ints");
    for (int at = 0; at < 4; at++)
        if (!small_int(args[10 + at], &numbers[at]) || (at < 3 && numbers[at] <= 0))
            return refuse("last_actions, longest_cycle and max_states must be positive ints, no_call an int");
    if (!PyType_Check(args[14]) || !PyType_Check(args[15]))
        return refuse("policy_type and price_table_type must be classes");
    if (!Py_IS_TYPE(args[7], (PyTypeObject *)args[6]))
        return refuse("no_words must be an array_type");
    if (judge_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure: the judge pass is configured once");
        return NULL;
    }
    judge_type = (PyTypeObject *)Py_NewRef(args[0]);
    totals_type = (PyTypeObject *)Py_NewRef(args[1]);
    step_type = (PyTypeObject *)Py_NewRef(args[2]);
    memcpy(judge_slots, found_judge, sizeof judge_slots);
    memcpy(totals_slots, found_totals, sizeof totals_slots);
    memcpy(step_slots, found_step, sizeof step_slots);
    tool_kind = Py_NewRef(args[3]);
    model_kind = Py_NewRef(args[4]);
    write_effect = Py_NewRef(args[5]);
    array_type = (PyTypeObject *)Py_NewRef(args[6]);
    no_words = Py_NewRef(args[7]);
    for (int at = 0; at < PROBES; at++)
        probe_types[at] = Py_NewRef(PyTuple_GET_ITEM(types, at));
    /* Each setting is loaded from its slot where the probe's class keeps it in one of its own. */
    const char *setting_names[PROBES] = {NULL, NULL, "_threshold", "_repeats", "_threshold", "_threshold", "_limits"};
    PyObject *fields = PyList_New(0);
    if (fields == NULL)
        return NULL;
    for (int at = 0; at < PROBES; at++) {
        setting_slots[at] = setting_names[at] == NULL ? -1 : slot_offset((PyTypeObject *)probe_types[at], setting_names[at]);
        if (add_slot_pins(fields, probe_types[at], &setting_names[at], &setting_slots[at], 1) < 0) {
            Py_DECREF(fields);
            return NULL;
        }
    }
    const int budget_slots[] = {TOT_STEPS, TOT_TOKENS, TOT_COST_USD, TOT_MODEL_CALLS};
    for (size_t at = 0; at < sizeof budget_slots / sizeof budget_slots[0]; at++)
        if ((budget_totals[budget_slots[at]] = PyUnicode_InternFromString(totals_slot_names[budget_slots[at]])) == NULL)
            return NULL;
    memcpy(fired_bits, found_bits, sizeof fired_bits);
    last_actions = (Py_ssize_t)numbers[0];
    longest_cycle = (Py_ssize_t)numbers[1];
    max_states = (Py_ssize_t)numbers[2];
    no_call = (Py_ssize_t)numbers[3];
    policy_type = (PyTypeObject *)Py_NewRef(args[14]);
    policy_prices_slot = slot_offset(policy_type, "prices");
    policy_finish_tool_slot = slot_offset(policy_type, "finish_tool");
    const char *policy_names[2] = {"prices", "finish_tool"};
    const Py_ssize_t policy_found[2] = {policy_prices_slot, policy_finish_tool_slot};
    int pinned = add_slot_pins(fields, (PyObject *)policy_type, policy_names, policy_found, 2) < 0 ? -1 : 0;
    if (pinned == 0 && (field_pins = PyList_AsTuple(fields)) == NULL)
        pinned = -1;
    Py_DECREF(fields);
    if (pinned < 0)
        return NULL;
    price_table_type = (PyTypeObject *)Py_NewRef(args[15]);
    Py_RETURN_NONE;
}

/* price_reads(price_type, pins): the price class whose cached instances the pass reads to cost a
 * model step itself, and the pins of the price table's methods that reading stands for; once,
 * after configure(). */
static PyObject *
price_reads(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "price_reads() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (price_table_type == NULL)
        return refuse("price_reads: the pass must be configured first");
    Py_ssize_t cache = slot_offset(price_table_type, "_cache");
    if (cache < 0 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type) ||
        !pins(args[1]))
        return refuse("price_reads: a price table of slots with a _cache, a tuple class of prices and pins");
    if (price_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "price_reads: set once");
        return NULL;
    }
    price_type = (PyTypeObject *)Py_NewRef(args[0]);
    price_cache_slot = cache;
    price_pins = Py_NewRef(args[1]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "Set what the pass reads from the judge's modules; once."},
    {"price_reads", (PyCFunction)(void (*)(void))price_reads, METH_FASTCALL,
     "Set the price class whose cached prices the pass reads itself; once."},
    {"observe", (PyCFunction)(void (*)(void))observe, METH_FASTCALL,
     "SessionJudge.observe's alerts, or None to run it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._judge_pass",
    "The judge's pass over one step, compiled (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__judge_pass(void)
{
#ifdef Py_GIL_DISABLED
    /* The judge's callers serialise a session's steps; its state is set once and read without
     * locks, which the GIL makes safe: the free-threaded build runs the Python method. */
    PyErr_SetString(PyExc_ImportError, "the judge pass is built for a Python with a GIL");
    return NULL;
#endif
    if ((s_observe_one = PyUnicode_InternFromString("_observe_one")) == NULL ||
        (s_probe_failed = PyUnicode_InternFromString("_probe_failed")) == NULL ||
        (s_append = PyUnicode_InternFromString("append")) == NULL ||
        (s_cost = PyUnicode_InternFromString("cost")) == NULL ||
        (s_prices = PyUnicode_InternFromString("prices")) == NULL ||
        (s_finish_tool = PyUnicode_InternFromString("finish_tool")) == NULL ||
        (s_threshold = PyUnicode_InternFromString("_threshold")) == NULL ||
        (s_repeats = PyUnicode_InternFromString("_repeats")) == NULL ||
        (s_limits = PyUnicode_InternFromString("_limits")) == NULL ||
        (s_q = PyUnicode_InternFromString("q")) == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
