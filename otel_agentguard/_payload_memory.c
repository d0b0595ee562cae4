/* PayloadFingerprints.arguments and .result (otel_agentguard.payload_fingerprints), compiled
 * (optional).
 *
 * Another instrumentation's tool span carries its call's arguments and result as JSON text,
 * which the guard fingerprints once per fingerprinter and text, then remembers. For the usual
 * case these methods do what the Python methods do, with no Python frame: the package's own
 * classes, a text no longer than the memory keeps that opens a JSON object or array, hash seeds
 * built for the current key, and a memory filled under that key with room left. They look the
 * text up and, on a miss, fingerprint it with _json_text_form.fingerprint_of_small_text (one C
 * call: decode, check, write, hash) and remember what it gives.
 *
 * Anything else goes to the Python methods, the reference, with the same arguments: another
 * class or value, a text that call refuses, a key changed since the memory was filled (Python
 * forgets it), a full memory (Python forgets its older half), a function replaced (the pins).
 * Tests run the payload fingerprints with these methods and with the Python ones against the
 * reference walker (tests/test_payload_fingerprints.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"

/* Set once by methods() and never changed: a callback cannot pull the ground from under a call. */
static PyTypeObject *payloads_type, *fingerprinter_type, *canonicalizer_type;
enum { REMEMBERED, EPOCH, MAX, PAYLOADS_SLOTS };
static const char *const payloads_slot_names[PAYLOADS_SLOTS] = {"_remembered", "_epoch", "_max"};
static Py_ssize_t payloads_slots[PAYLOADS_SLOTS];
enum { CANONICAL, KEY, STATES, FINGERPRINTER_SLOTS };
static const char *const fingerprinter_slot_names[FINGERPRINTER_SLOTS] = {"_canonical", "_key", "_states"};
static Py_ssize_t fingerprinter_slots[FINGERPRINTER_SLOTS];
static Py_ssize_t special_slot;           /* _Canonicalizer._special */
static PyObject *fingerprint_globals;     /* the fingerprint module's: its key, read afresh */
static PyObject *small_text;              /* _json_text_form.fingerprint_of_small_text */
static Py_ssize_t max_chars;              /* the longest text remembered */
static PyObject *python_arguments, *python_result, *method_pins;
static PyObject *s_key_epoch, *s_keyed_state;

/* Fingerprinter.hash_seed(arguments=...) where its states were built for the current key
 * (borrowed); NULL, with no error set, where the Python method would build them first. */
static PyObject *
hash_seed(PyObject *fingerprinter, int arguments)
{
    PyObject *states = SLOT(fingerprinter, fingerprinter_slots[STATES]);
    PyObject *own_key = SLOT(fingerprinter, fingerprinter_slots[KEY]);
    if (states == NULL || !PyTuple_CheckExact(states) || PyTuple_GET_SIZE(states) != 5 || own_key == NULL)
        return NULL;
    /* the process key's state, or none for a fingerprinter of a key of its own */
    PyObject *base = own_key == Py_None ? PyDict_GetItemWithError(fingerprint_globals, s_keyed_state) : Py_None;
    return base != NULL && PyTuple_GET_ITEM(states, 0) == base ? PyTuple_GET_ITEM(states, arguments ? 4 : 3) : NULL;
}

/* Fingerprinter.special_keys (borrowed), where it is the frozenset the one-call fingerprint takes. */
static PyObject *
special_keys(PyObject *fingerprinter)
{
    PyObject *canonical = SLOT(fingerprinter, fingerprinter_slots[CANONICAL]);
    if (canonical == NULL || !Py_IS_TYPE(canonical, canonicalizer_type))
        return NULL;
    PyObject *special = SLOT(canonical, special_slot);
    return special != NULL && PyFrozenSet_CheckExact(special) ? special : NULL;
}

/* The memory's room (its bound less what it holds) where it was filled under the current key and
 * is the memory the Python method keeps; -1 where the Python method is to look (no error set). */
static Py_ssize_t
room(PyObject *self, PyObject **memory)
{
    *memory = SLOT(self, payloads_slots[REMEMBERED]);
    PyObject *epoch = SLOT(self, payloads_slots[EPOCH]), *bound = SLOT(self, payloads_slots[MAX]);
    PyObject *now = PyDict_GetItemWithError(fingerprint_globals, s_key_epoch);
    if (*memory == NULL || !PyDict_CheckExact(*memory) || epoch == NULL || !PyLong_CheckExact(epoch) ||
        bound == NULL || !PyLong_CheckExact(bound) || now == NULL || !PyLong_CheckExact(now))
        return -1;
    int overflow;
    long long limit = PyLong_AsLongLongAndOverflow(bound, &overflow);
    /* (exact ints compare without Python code) */
    if (overflow || limit <= 0 || PyObject_RichCompareBool(epoch, now, Py_EQ) != 1)
        return -1;
    return limit > PyDict_GET_SIZE(*memory) ? (Py_ssize_t)(limit - PyDict_GET_SIZE(*memory)) : 0;
}

/* `raw`'s (fingerprint, empty) by the one-call fingerprint (a new reference); NULL with no error
 * set where that call does not take the text (not small and plain) or the fingerprinter is not
 * ready for it, or NULL with the call's error. */
static PyObject *
fingerprinted(PyObject *fingerprinter, PyObject *raw, int arguments)
{
    PyObject *state = hash_seed(fingerprinter, arguments), *special = special_keys(fingerprinter);
    if (state == NULL || special == NULL)
        return NULL;
    PyObject *given[4] = {raw, special, state, arguments ? Py_False : Py_True};
    Py_INCREF(state);
    Py_INCREF(special);
    PyObject *made = PyObject_Vectorcall(small_text, given, 4, NULL);
    Py_DECREF(state);
    Py_DECREF(special);
    if (made != NULL && !(PyTuple_CheckExact(made) && PyTuple_GET_SIZE(made) == 2))
        Py_CLEAR(made); /* None */
    return made;
}

/* The (fingerprint, empty) remembered for `raw`, fingerprinted and remembered now if it was not
 * (a new reference); NULL with no error set where the Python method is to do it, or with the
 * error fingerprinting raised (which the Python method would meet too). */
static PyObject *
remembered(PyObject *self, PyObject *fingerprinter, PyObject *raw, int arguments)
{
    if (!Py_IS_TYPE(self, payloads_type) || !Py_IS_TYPE(fingerprinter, fingerprinter_type) ||
        !PyUnicode_CheckExact(raw))
        return NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(raw) < 0)
        return NULL;
#endif
    Py_ssize_t length = PyUnicode_GET_LENGTH(raw);
    if (length == 0 || length > max_chars)
        return NULL;
    Py_UCS4 first = PyUnicode_READ_CHAR(raw, 0);
    PyObject *memory;
    if ((first != '{' && first != '[') || unchanged(method_pins) != 1 || room(self, &memory) < 0) {
        PyErr_Clear(); /* (a failed look at the pins or the key: the Python method looks again) */
        return NULL;
    }
    PyObject *key = PyTuple_Pack(3, fingerprinter, raw, arguments ? Py_True : Py_False);
    if (key == NULL)
        return NULL;
    Py_INCREF(memory);
    PyObject *made = NULL, *found = PyDict_GetItemWithError(memory, key);
    if (found != NULL) {
        if (PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) == 2)
            made = Py_NewRef(found);
    }
    else if (!PyErr_Occurred() && (made = fingerprinted(fingerprinter, raw, arguments)) != NULL) {
        PyObject *now; /* stored as the Python method stores it: into the memory as it is now */
        if (room(self, &now) <= 0) {
            /* Full, or the key changed meanwhile: the Python method forgets the older half (or
             * all) of the memory, and fingerprints the text again. */
            PyErr_Clear();
            Py_CLEAR(made);
        }
        else {
            Py_INCREF(now); /* (storing may compare keys: Python code that could replace the memory) */
            if (PyDict_SetItem(now, key, made) < 0)
                Py_CLEAR(made);
            Py_DECREF(now);
        }
    }
    Py_DECREF(memory);
    Py_DECREF(key);
    return made;
}

/* arguments(self, fingerprinter, raw) */
static PyObject *
arguments_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *found = nargs == 2 && kwnames == NULL ? remembered(self, args[0], args[1], 1) : NULL;
    if (found == NULL)
        return PyErr_Occurred() ? NULL : in_python(python_arguments, self, args, nargs, kwnames);
    PyObject *fingerprint = Py_NewRef(PyTuple_GET_ITEM(found, 0));
    Py_DECREF(found);
    return fingerprint;
}

/* result(self, fingerprinter, raw) */
static PyObject *
result_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *found = nargs == 2 && kwnames == NULL ? remembered(self, args[0], args[1], 0) : NULL;
    if (found == NULL && !PyErr_Occurred())
        return in_python(python_result, self, args, nargs, kwnames);
    return found;
}

static PyMethodDef arguments_def = {
    "arguments", (PyCFunction)(void (*)(void))arguments_method, METH_FASTCALL | METH_KEYWORDS,
    "arguments($self, fingerprinter, raw, /)\n--\n\nThe fingerprint of a call's arguments as a span recorded them."};
static PyMethodDef result_def = {
    "result", (PyCFunction)(void (*)(void))result_method, METH_FASTCALL | METH_KEYWORDS,
    "result($self, fingerprinter, raw, /)\n--\n\nThe fingerprint of a call's result as a span recorded it, and "
    "whether it is empty."};

/* --- set up ----------------------------------------------------------------------------------- */

/* methods(given): arguments and result as method descriptors of the payload memory's class, set
 * up once from `given` (see payload_fingerprints._compiled_methods). */
static PyObject *
methods(PyObject *module, PyObject *given)
{
    if (payloads_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "methods: made once");
        return NULL;
    }
    if (!PyDict_CheckExact(given))
        return refuse("expected a dict");
    const char *names[] = {"payloads", "fingerprinter", "canonicalizer", "fingerprint_globals", "small_text",
                           "max_chars", "arguments", "result", "pins"};
    enum { NAMES = sizeof names / sizeof names[0] };
    PyObject *found[NAMES];
    for (int at = 0; at < NAMES; at++)
        if ((found[at] = entry(given, names[at])) == NULL)
            return NULL;
    Py_ssize_t payloads_found[PAYLOADS_SLOTS], fingerprinter_found[FINGERPRINTER_SLOTS], special_found;
    const char *special_name[] = {"_special"};
    if (find_slots(found[0], payloads_slot_names, PAYLOADS_SLOTS, payloads_found) < 0 ||
        find_slots(found[1], fingerprinter_slot_names, FINGERPRINTER_SLOTS, fingerprinter_found) < 0 ||
        find_slots(found[2], special_name, 1, &special_found) < 0)
        return refuse("the payload memory, the fingerprinter and its canonicalizer must keep their fields in slots");
    Py_ssize_t chars = PyLong_CheckExact(found[5]) ? PyLong_AsSsize_t(found[5]) : -1;
    if (chars == -1 && PyErr_Occurred())
        return NULL;
    if (!PyDict_CheckExact(found[3]) || !PyCallable_Check(found[4]) || chars <= 0 || !PyCallable_Check(found[6]) ||
        !PyCallable_Check(found[7]) || !pins(found[8]))
        return refuse("fingerprint_globals must be a dict, small_text, arguments and result callable, max_chars "
                      "a positive int and pins a tuple of (namespace, name, value)");
    PyObject *both = NULL, *arguments = PyDescr_NewMethod((PyTypeObject *)found[0], &arguments_def);
    PyObject *result = arguments == NULL ? NULL : PyDescr_NewMethod((PyTypeObject *)found[0], &result_def);
    if (result != NULL)
        both = PyTuple_Pack(2, arguments, result);
    Py_XDECREF(arguments);
    Py_XDECREF(result);
    if (both == NULL)
        return NULL;
    payloads_type = (PyTypeObject *)Py_NewRef(found[0]);
    fingerprinter_type = (PyTypeObject *)Py_NewRef(found[1]);
    canonicalizer_type = (PyTypeObject *)Py_NewRef(found[2]);
    memcpy(payloads_slots, payloads_found, sizeof payloads_slots);
    memcpy(fingerprinter_slots, fingerprinter_found, sizeof fingerprinter_slots);
    special_slot = special_found;
    fingerprint_globals = Py_NewRef(found[3]);
    small_text = Py_NewRef(found[4]);
    max_chars = chars;
    python_arguments = Py_NewRef(found[6]);
    python_result = Py_NewRef(found[7]);
    method_pins = Py_NewRef(found[8]);
    return both;
}

static PyMethodDef module_methods[] = {
    {"methods", (PyCFunction)methods, METH_O,
     "arguments and result, compiled, as method descriptors of the payload memory's class; made once."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._payload_memory",
    "The payload memory's arguments and result, compiled (optional).", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__payload_memory(void)
{
#ifdef Py_GIL_DISABLED
    /* Its state is set once and read without locks, and it reads the memory through borrowed
     * references, which only the GIL keeps valid: the free-threaded build runs the Python methods. */
    PyErr_SetString(PyExc_ImportError, "otel_agentguard._payload_memory needs the GIL");
    return NULL;
#else
    if ((s_key_epoch = PyUnicode_InternFromString("_key_epoch")) == NULL ||
        (s_keyed_state = PyUnicode_InternFromString("_keyed_state")) == NULL)
        return NULL;
    return PyModule_Create(&module_def);
#endif
}
