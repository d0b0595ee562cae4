/* The package's own classes and functions as its compiled modules read them.
 *
 * A class of __slots__ keeps each field at a fixed offset in its instances, which the field's
 * member descriptor holds. A module that reads or writes such a field finds that offset once,
 * when it is configured, and refuses a field that is anything but a plain object slot of the
 * class itself (a property, a field of a base class, a read-only member): its configure() raises
 * TypeError (refuse()), and the package then runs the Python code the module stands for.
 *
 * A compiled function that stands for Python functions holds them with pins, checked at every
 * call: where one was replaced (a test injecting a fault, a patch of the user's) the Python code
 * runs instead (in_python()), and meets it.
 */
#ifndef OTEL_AGENTGUARD_SLOTS_H
#define OTEL_AGENTGUARD_SLOTS_H

#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the kind of a slot */

/* configure()'s refusal: NULL, with a TypeError saying what it cannot read. */
static inline PyObject *
refuse(const char *what)
{
    PyErr_Format(PyExc_TypeError, "configure: %s", what);
    return NULL;
}

/* The entry `name` of a set-up dict (borrowed), or NULL with a TypeError naming it. */
static inline PyObject *
entry(PyObject *given, const char *name)
{
    PyObject *value = PyDict_GetItemString(given, name);
    if (value == NULL)
        PyErr_Format(PyExc_TypeError, "configure: %s is missing", name);
    return value;
}

/* The object in the slot at `offset` (a borrowed reference; NULL while the slot is unset). */
#define SLOT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* The offset of the slot `name` of `type`, checked to be a plain writable object slot of the
 * class itself; -1 if not. */
static inline Py_ssize_t
slot_offset(PyTypeObject *type, const char *name)
{
    PyObject *descriptor = PyObject_GetAttrString((PyObject *)type, name);
    if (descriptor == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t offset = -1;
    if (Py_IS_TYPE(descriptor, &PyMemberDescr_Type) && ((PyDescrObject *)descriptor)->d_type == type) {
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY))
            offset = member->offset;
    }
    Py_DECREF(descriptor); /* the class's dict holds it */
    return offset;
}

/* Whether `type` is a class of slots only whose instances object.__new__ makes: its fields are
 * where their descriptors say. */
static inline int
slots_only(PyObject *type)
{
    return PyType_Check(type) && PyType_HasFeature((PyTypeObject *)type, Py_TPFLAGS_HEAPTYPE) &&
           ((PyTypeObject *)type)->tp_dictoffset == 0 && ((PyTypeObject *)type)->tp_new == PyBaseObject_Type.tp_new;
}

/* The offsets of the slots `names` of `type` into `found`, for a class that may also keep a
 * __dict__ (a slot's descriptor comes before it): 0, or -1 if any of them is not a plain object
 * slot of its own. */
static inline int
find_fields(PyObject *type, const char *const *names, int count, Py_ssize_t *found)
{
    if (!PyType_Check(type) || !PyType_HasFeature((PyTypeObject *)type, Py_TPFLAGS_HEAPTYPE))
        return -1;
    for (int at = 0; at < count; at++)
        if ((found[at] = slot_offset((PyTypeObject *)type, names[at])) < 0)
            return -1;
    return 0;
}

/* The offsets of the slots `names` of `type` into `found`: 0, or -1 if the class is not one of
 * slots only or any of them is not a plain object slot of its own. */
static inline int
find_slots(PyObject *type, const char *const *names, int count, Py_ssize_t *found)
{
    return slots_only(type) ? find_fields(type, names, count, found) : -1;
}

/* Pins of the slots `names` of `type` (its own member descriptors), appended to `list`: a slot
 * loaded at its offset stands for getattr only while the class holds that descriptor (a property
 * or a value set on the class in its place is what getattr would read). Names with no offset in
 * `found` (-1: read by name) are skipped. 0, or -1 with an error. */
static inline int
add_slot_pins(PyObject *list, PyObject *type, const char *const *names, const Py_ssize_t *found, int count)
{
    for (int at = 0; at < count; at++) {
        if (found[at] < 0)
            continue;
        PyObject *name = PyUnicode_InternFromString(names[at]);
        PyObject *descriptor = name == NULL ? NULL : PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, name);
        PyObject *pin = descriptor == NULL ? NULL : PyTuple_Pack(3, type, name, descriptor);
        Py_XDECREF(name);
        int added = pin == NULL ? -1 : PyList_Append(list, pin);
        Py_XDECREF(pin);
        if (added < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "configure: no slot %s", names[at]);
            return -1;
        }
    }
    return 0;
}

/* getattr(object, name), for an object of the class whose slot `name` is at `offset` (-1: it
 * has none, read by name): the slot's value (a new reference), or, where it is unset, what getattr
 * finds (its AttributeError). */
static inline PyObject *
slot_or_getattr(PyObject *object, Py_ssize_t offset, PyObject *name)
{
    PyObject *value = offset >= 0 ? SLOT(object, offset) : NULL;
    return value != NULL ? Py_NewRef(value) : PyObject_GetAttr(object, name);
}

/* Whether `given` is a tuple of pins: (a dict or a class of Python's, a str, its value). */
static inline int
pins(PyObject *given)
{
    if (!PyTuple_CheckExact(given))
        return 0;
    for (Py_ssize_t pin = 0; pin < PyTuple_GET_SIZE(given); pin++) {
        PyObject *item = PyTuple_GET_ITEM(given, pin);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(item, 1)) ||
            !(PyDict_CheckExact(PyTuple_GET_ITEM(item, 0)) ||
              (PyType_Check(PyTuple_GET_ITEM(item, 0)) &&
               PyType_HasFeature((PyTypeObject *)PyTuple_GET_ITEM(item, 0), Py_TPFLAGS_HEAPTYPE))))
            return 0;
    }
    return 1;
}

/* Pins are checked at every call, most of them for every span: where CPython gives each dict a
 * version that any change to it renews (3.10 to 3.13), a tuple of pins found unchanged is
 * remembered with the versions of its namespaces' dicts, and while those stay the same it holds
 * without a lookup. (3.14 dropped the versions: each pin is looked up, as on any other Python.) */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define PINS_BY_VERSION 1
#define MAX_PIN_SETS 16
#define MAX_PIN_DICTS 16

typedef struct {
    PyObject *pins;                  /* a strong reference: its address names no other tuple */
    int count;                       /* dicts remembered; 0 while none are */
    PyObject *dicts[MAX_PIN_DICTS];  /* borrowed: the pins hold their namespaces */
    uint64_t versions[MAX_PIN_DICTS];
} PinSet;

static inline uint64_t
dict_version(PyObject *dict)
{
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)dict)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

/* The remembered state of `pins` in this module (made on first use), or NULL when too many
 * tuples are remembered already. */
static inline PinSet *
pin_set(PyObject *pins)
{
    static PinSet sets[MAX_PIN_SETS];
    for (int at = 0; at < MAX_PIN_SETS; at++) {
        if (sets[at].pins == pins)
            return &sets[at];
        if (sets[at].pins == NULL) {
            sets[at].pins = Py_NewRef(pins);
            return &sets[at];
        }
    }
    return NULL;
}
#endif

/* The dict a pin's namespace keeps its names in: the dict itself, or the class's. */
static inline PyObject *
pin_dict(PyObject *pin)
{
    PyObject *where = PyTuple_GET_ITEM(pin, 0);
    return PyType_Check(where) ? ((PyTypeObject *)where)->tp_dict : where;
}

/* Whether every function pinned is still the one configured (a test or a user may have replaced
 * one): 1, 0, or -1 with an error. */
static inline int
unchanged(PyObject *pins)
{
#ifdef PINS_BY_VERSION
    PinSet *set = pin_set(pins);
    if (set != NULL && set->count > 0) {
        int at = 0;
        while (at < set->count && dict_version(set->dicts[at]) == set->versions[at])
            at++;
        if (at == set->count)
            return 1;
    }
    /* The versions as they are before the lookups: a change made meanwhile is seen next time. */
    PyObject *dicts[MAX_PIN_DICTS];
    uint64_t versions[MAX_PIN_DICTS];
    int count = 0;
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(pins) && count >= 0; at++) {
        PyObject *dict = pin_dict(PyTuple_GET_ITEM(pins, at));
        int seen = 0;
        while (seen < count && dicts[seen] != dict)
            seen++;
        if (dict == NULL || !PyDict_Check(dict) || (seen == count && count == MAX_PIN_DICTS))
            count = -1; /* not remembered: looked up at every call */
        else if (seen == count) {
            dicts[count] = dict;
            versions[count++] = dict_version(dict);
        }
    }
#endif
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(pins); at++) {
        PyObject *pin = PyTuple_GET_ITEM(pins, at);
        PyObject *names = pin_dict(pin);
        PyObject *now = names == NULL ? NULL : PyDict_GetItemWithError(names, PyTuple_GET_ITEM(pin, 1));
        if (now != PyTuple_GET_ITEM(pin, 2))
            return now == NULL && PyErr_Occurred() ? -1 : 0;
    }
#ifdef PINS_BY_VERSION
    if (set != NULL && count > 0) {
        memcpy(set->dicts, dicts, (size_t)count * sizeof dicts[0]);
        memcpy(set->versions, versions, (size_t)count * sizeof versions[0]);
        set->count = count;
    }
#endif
    return 1;
}

/* The Python method `function`, called with `self` and the arguments as given. */
static inline PyObject *
in_python(PyObject *function, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[8], **stack = total < 8 ? small : PyMem_New(PyObject *, total + 1);
    if (stack == NULL)
        return PyErr_NoMemory();
    stack[0] = self;
    for (Py_ssize_t at = 0; at < total; at++)
        stack[at + 1] = args[at];
    PyObject *result = PyObject_Vectorcall(function, stack, nargs + 1, kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

#endif
