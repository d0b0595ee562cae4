/* The attribute decoding of otel_agentguard.replay._typed_otlp, compiled (optional).
 *
 * _typed_otlp._attributes turns the attributes msgspec decoded for one span (a list of
 * _KeyValue records, each holding an _AnyValue record) into the dict the reference reader
 * makes. read() does the same in one C loop: a replay runs it for every span of files of
 * millions, and in Python it costs as much as decoding the JSON. It follows the Python
 * function step by step (the same members in the same order, the same conversions through
 * the same C-API calls the builtins make), and hands what that function hands to helpers
 * (arrays, key-value lists, bytes; keys outside the read set met for the first time) to
 * the very same helpers. Tests compare both on the same records.
 *
 * Whatever raises here raises in the Python function too: the caller then leaves the line
 * to the reference reader, which words the error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, the kind of a record's fields */

/* Set once by configure(): what the Python function reads from its modules. */
static PyObject *shared_keys;   /* dict: each read key -> the one string kept for it */
static PyObject *repeated_keys; /* frozenset: keys whose string values a line keeps once */
static PyObject *is_read_key;   /* otlp.is_read_key */
static PyObject *decode_array;  /* otlp.decode_array */
static PyObject *decode_value;  /* otlp.decode_value */
static PyObject *unset;         /* msgspec.UNSET */

/* The records msgspec decodes into, and where each of their fields sits in the object (a
 * record's fields are slots: reading one by its offset is what its descriptor does). */
static PyTypeObject *key_value_type, *any_value_type;
enum { KEY, VALUE, STRING, INT, BOOL, DOUBLE, ARRAY, KVLIST, BYTES, FIELDS };
static const char *const field_names[FIELDS] = {
    "key", "value", "stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue",
};
static Py_ssize_t offsets[FIELDS];
static PyObject *s_values, *s_string; /* "values", "stringValue": the members of an array of strings */

/* A record's field (new reference); an unset slot raises, as reading the attribute would. */
static PyObject *
field(PyObject *record, int which)
{
    PyObject *value = *(PyObject **)((char *)record + offsets[which]);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s is not set", field_names[which]);
        return NULL;
    }
    return Py_NewRef(value);
}

/* An OTLP intValue, as otlp.int64 reads it: an int, or its decimal string, within int64. */
static PyObject *
int64(PyObject *value)
{
    PyObject *number;
    if (PyUnicode_CheckExact(value)) {
        number = PyLong_FromUnicodeObject(value, 10); /* what int(text) calls */
        if (number == NULL) {
            return NULL;
        }
    }
    else if (PyLong_CheckExact(value)) {
        number = Py_NewRef(value);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "intValue must be an integer or its decimal string");
        return NULL;
    }
    int overflow;
    PyLong_AsLongLongAndOverflow(number, &overflow);
    if (overflow) {
        Py_DECREF(number);
        PyErr_SetString(PyExc_ValueError, "intValue out of range");
        return NULL;
    }
    return number;
}

/* An arrayValue of strings only (a model's finish reasons, the keys of a tool's arguments) as the
 * tuple otlp.decode_array makes of it: ``{"values": [{"stringValue": ...}, ...]}``. NULL without an
 * error for any other array (decode_array reads it), with one when memory runs out. */
static PyObject *
strings(PyObject *array)
{
    if (!PyDict_CheckExact(array) || PyDict_GET_SIZE(array) != 1) {
        return NULL;
    }
    PyObject *values = PyDict_GetItemWithError(array, s_values);
    if (values == NULL || !PyList_CheckExact(values)) {
        return NULL;
    }
    Py_INCREF(values);
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *decoded = PyTuple_New(n);
    /* Making the tuple may collect garbage, and a finaliser run Python code: the list is held,
     * and read only if it kept its length. No Python code runs in the loop below. */
    if (decoded == NULL || PyList_GET_SIZE(values) != n) {
        Py_XDECREF(decoded);
        Py_DECREF(values);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *member = PyList_GET_ITEM(values, i), *text;
        if (!PyDict_CheckExact(member) || PyDict_GET_SIZE(member) != 1
            || (text = PyDict_GetItemWithError(member, s_string)) == NULL) {
            Py_DECREF(decoded);
            Py_DECREF(values);
            return NULL;
        }
        PyTuple_SET_ITEM(decoded, i, Py_NewRef(text));
    }
    Py_DECREF(values);
    return decoded;
}

/* A member's value as the Python function converts it (new reference). */
static PyObject *
converted(int member, PyObject *inner)
{
    switch (member) {
    case INT:
        return int64(inner);
    case BOOL: {
        int truth = PyObject_IsTrue(inner);
        return truth < 0 ? NULL : Py_NewRef(truth ? Py_True : Py_False);
    }
    case DOUBLE:
        return PyNumber_Float(inner); /* what float(x) calls */
    case ARRAY: {
        PyObject *decoded = strings(inner);
        return decoded != NULL || PyErr_Occurred() ? decoded : PyObject_CallOneArg(decode_array, inner);
    }
    default: { /* decode_value({member: inner}), as the Python function calls it */
        PyObject *wrapped = PyDict_New();
        if (wrapped == NULL || PyDict_SetItemString(wrapped, field_names[member], inner) < 0) {
            Py_XDECREF(wrapped);
            return NULL;
        }
        PyObject *decoded = PyObject_CallOneArg(decode_value, wrapped);
        Py_DECREF(wrapped);
        return decoded;
    }
    }
}

/* The value of the first member set after stringValue, in the reference reader's precedence
 * (new reference); None when none is set (an empty value). */
static PyObject *
other_member(PyObject *value)
{
    static const int precedence[] = {INT, BOOL, DOUBLE, ARRAY, KVLIST, BYTES};
    for (size_t i = 0; i < sizeof(precedence) / sizeof(precedence[0]); i++) {
        PyObject *inner = field(value, precedence[i]);
        if (inner == NULL) {
            return NULL;
        }
        if (inner != unset) {
            PyObject *decoded = converted(precedence[i], inner);
            Py_DECREF(inner);
            return decoded;
        }
        Py_DECREF(inner);
    }
    return Py_NewRef(Py_None);
}

/* Whether an attribute is kept, and the key to keep it under (a new reference in *kept_key:
 * helpers called later run Python code, which could configure this module anew). -1 on error. */
static int
wanted_key(PyObject *key, PyObject *kept, PyObject **kept_key)
{
    PyObject *shared = PyDict_GetItemWithError(shared_keys, key);
    if (shared != NULL) {
        *kept_key = Py_NewRef(shared);
        return 1;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    *kept_key = Py_NewRef(key);
    if (PyUnicode_CheckExact(key)) { /* is_read_key keeps any other key, whatever it equals */
        PyObject *known = PyDict_GetItemWithError(kept, key); /* otlp._KEPT, which is_read_key fills */
        if (known == Py_True || known == Py_False) {
            return known == Py_True;
        }
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    PyObject *answer = PyObject_CallOneArg(is_read_key, key);
    if (answer == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return truth;
}

/* One attribute into decoded; 0, or -1 on error. */
static int
read_one(PyObject *item, PyObject *decoded, PyObject *shared, PyObject *kept)
{
    if (Py_TYPE(item) != key_value_type) {
        PyErr_SetString(PyExc_TypeError, "not a _KeyValue record");
        return -1;
    }
    PyObject *key = field(item, KEY);
    if (key == NULL) {
        return -1;
    }
    PyObject *kept_key = NULL;
    int wanted = wanted_key(key, kept, &kept_key);
    int result = -1;
    PyObject *value = NULL, *inner = NULL;
    if (wanted < 0) {
        goto done;
    }
    value = field(item, VALUE);
    if (value == NULL) {
        goto done;
    }
    if (value == Py_None) {
        result = wanted ? PyDict_SetItem(decoded, kept_key, Py_None) : 0;
        goto done;
    }
    if (Py_TYPE(value) != any_value_type) {
        PyErr_SetString(PyExc_TypeError, "not an _AnyValue record");
        goto done;
    }
    inner = field(value, STRING);
    if (inner == NULL) {
        goto done;
    }
    if (inner != unset) {
        if (!wanted) {
            result = 0;
            goto done;
        }
        if (PyUnicode_CheckExact(inner)) {
            int repeated = PySet_Contains(repeated_keys, kept_key);
            if (repeated < 0) {
                goto done;
            }
            if (repeated) {
                PyObject *once = PyDict_SetDefault(shared, inner, inner); /* borrowed */
                if (once == NULL) {
                    goto done;
                }
                Py_SETREF(inner, Py_NewRef(once));
            }
        }
        result = PyDict_SetItem(decoded, kept_key, inner);
        goto done;
    }
    Py_SETREF(inner, other_member(value));
    if (inner == NULL) {
        goto done;
    }
    result = wanted ? PyDict_SetItem(decoded, kept_key, inner) : 0;
done:
    Py_XDECREF(inner);
    Py_XDECREF(value);
    Py_XDECREF(kept_key);
    Py_DECREF(key);
    return result;
}

static PyObject *
read_attributes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read(items, shared, kept) takes three arguments");
        return NULL;
    }
    PyObject *items = args[0], *shared = args[1], *kept = args[2];
    if (shared_keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    if (!PyDict_CheckExact(shared) || !PyDict_CheckExact(kept)) {
        PyErr_SetString(PyExc_TypeError, "shared and kept must be dicts");
        return NULL;
    }
    PyObject *decoded = PyDict_New();
    if (decoded == NULL || items == Py_None) {
        return decoded;
    }
    if (!PyList_CheckExact(items)) {
        Py_DECREF(decoded);
        PyErr_SetString(PyExc_TypeError, "items must be a list");
        return NULL;
    }
    /* Indexed on each turn: a helper called back runs Python code, which could change the list. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(items, i));
        int failed = read_one(item, decoded, shared, kept) < 0;
        Py_DECREF(item);
        if (failed) {
            Py_DECREF(decoded);
            return NULL;
        }
    }
    return decoded;
}

/* Where a record type keeps a field: its slot's offset, into *offset. */
static int
field_offset(PyTypeObject *type, int which, Py_ssize_t *offset)
{
    PyObject *descriptor = PyObject_GetAttrString((PyObject *)type, field_names[which]);
    if (descriptor == NULL) {
        return -1;
    }
    int slot = Py_IS_TYPE(descriptor, &PyMemberDescr_Type);
    PyMemberDef *member = slot ? ((PyMemberDescrObject *)descriptor)->d_member : NULL;
    if (member == NULL || (member->type != T_OBJECT_EX && member->type != T_OBJECT)) {
        Py_DECREF(descriptor);
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, field_names[which]);
        return -1;
    }
    *offset = member->offset;
    Py_DECREF(descriptor);
    return 0;
}

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "configure(key_value_type, any_value_type, shared_keys, repeated_keys, "
                                         "is_read_key, decode_array, decode_value, unset)");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyDict_CheckExact(args[2])
        || !PyFrozenSet_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "expected two types, a dict and a frozenset");
        return NULL;
    }
    /* All found before any is kept: a refused type leaves the configuration as it was. */
    Py_ssize_t found[FIELDS];
    for (int which = 0; which < FIELDS; which++) {
        if (field_offset((PyTypeObject *)args[which <= VALUE ? 0 : 1], which, &found[which]) < 0) {
            return NULL;
        }
    }
    memcpy(offsets, found, sizeof(offsets));
    PyObject **slots[8] = {(PyObject **)&key_value_type, (PyObject **)&any_value_type, &shared_keys, &repeated_keys,
                           &is_read_key, &decode_array, &decode_value, &unset};
    for (int i = 0; i < 8; i++) {
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"read", (PyCFunction)(void (*)(void))read_attributes, METH_FASTCALL,
     "read(items, shared, kept): the attributes of one span, as _typed_otlp._attributes reads them."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(key_value_type, any_value_type, shared_keys, repeated_keys, is_read_key, decode_array, "
     "decode_value, unset): what read() uses."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_agentguard.replay._typed_attributes",
    "The attribute decoding of otel_agentguard.replay._typed_otlp, compiled (optional).", -1, methods,
};

PyMODINIT_FUNC
PyInit__typed_attributes(void)
{
#ifdef Py_GIL_DISABLED
    /* The module's configuration is shared state the GIL guards: on a free-threaded build the
     * package decodes in Python instead. */
    PyErr_SetString(PyExc_ImportError, "otel_agentguard.replay._typed_attributes needs the GIL");
    return NULL;
#endif
    if ((s_values == NULL && (s_values = PyUnicode_InternFromString("values")) == NULL)
        || (s_string == NULL && (s_string = PyUnicode_InternFromString("stringValue")) == NULL)) {
        return NULL;
    }
    return PyModule_Create(&module);
}
