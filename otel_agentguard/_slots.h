/* Reading and writing the slots of the package's own classes from its compiled modules.
 *
 * A class of __slots__ keeps each field at a fixed offset in its instances, which the field's
 * member descriptor holds. A module that reads or writes such a field finds that offset once,
 * when it is configured, and refuses a field that is anything but a plain object slot of the
 * class itself (a property, a field of a base class, a read-only member): its configure() raises
 * TypeError (refuse()), and the package then runs the Python code the module stands for.
 */
#ifndef OTEL_AGENTGUARD_SLOTS_H
#define OTEL_AGENTGUARD_SLOTS_H

#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the kind of a slot */

/* configure()'s refusal: NULL, with a TypeError saying what it cannot read. */
static PyObject *
refuse(const char *what)
{
    PyErr_Format(PyExc_TypeError, "configure: %s", what);
    return NULL;
}

/* The object in the slot at `offset` (a borrowed reference; NULL while the slot is unset). */
#define SLOT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* The offset of the slot `name` of `type`, checked to be a plain writable object slot of the
 * class itself; -1 if not. */
static Py_ssize_t
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
static int
slots_only(PyObject *type)
{
    return PyType_Check(type) && PyType_HasFeature((PyTypeObject *)type, Py_TPFLAGS_HEAPTYPE) &&
           ((PyTypeObject *)type)->tp_dictoffset == 0 && ((PyTypeObject *)type)->tp_new == PyBaseObject_Type.tp_new;
}

/* The offsets of the slots `names` of `type` into `found`: 0, or -1 if the class is not one of
 * slots only or any of them is not a plain object slot of its own. */
static int
find_slots(PyObject *type, const char *const *names, int count, Py_ssize_t *found)
{
    if (!slots_only(type))
        return -1;
    for (int at = 0; at < count; at++)
        if ((found[at] = slot_offset((PyTypeObject *)type, names[at])) < 0)
            return -1;
    return 0;
}

#endif
