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

/* The offsets of the slots `names` of `type` into `found`: 0, or -1 if the class is not one of
 * slots only or any of them is not a plain object slot of its own. */
static inline int
find_slots(PyObject *type, const char *const *names, int count, Py_ssize_t *found)
{
    if (!slots_only(type))
        return -1;
    for (int at = 0; at < count; at++)
        if ((found[at] = slot_offset((PyTypeObject *)type, names[at])) < 0)
            return -1;
    return 0;
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

/* Whether every function pinned is still the one configured (a test or a user may have replaced
 * one): 1, 0, or -1 with an error. */
static inline int
unchanged(PyObject *pins)
{
    for (Py_ssize_t at = 0; at < PyTuple_GET_SIZE(pins); at++) {
        PyObject *pin = PyTuple_GET_ITEM(pins, at);
        PyObject *where = PyTuple_GET_ITEM(pin, 0);
        PyObject *names = PyType_Check(where) ? ((PyTypeObject *)where)->tp_dict : where;
        PyObject *now = names == NULL ? NULL : PyDict_GetItemWithError(names, PyTuple_GET_ITEM(pin, 1));
        if (now != PyTuple_GET_ITEM(pin, 2))
            return now == NULL && PyErr_Occurred() ? -1 : 0;
    }
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
