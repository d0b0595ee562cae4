/* The plain-JSON check of otel_agentguard._plain_json, compiled (optional), and a writer of
 * the canonical form of the values it accepts (below the check).
 *
 * It answers what _plain_json.check() answers, in one C walk instead of a few
 * Python-level passes per nesting level: whether an encoder writes the canonical
 * form of a value, and what that value spends of the walk's budgets. It reads
 * exact builtins only (dict, list, tuple, str, int, float, bool, None) through
 * their C structures and runs no Python code while it reads (it allocates only
 * its result), so nothing can change a container under it; the depth bound
 * keeps the recursion short (cycles end there too), every entry read is counted
 * against the value budget, and a string is read at most up to NUMBER_TEXT
 * characters (longer ones only count against the text budget), so the work is
 * bounded by the budgets.
 *
 * Where it differs from the Python check it only accepts what that check turns
 * away to be safe (a string holding a NUL; a dict whose keys orjson would have
 * checked), never the reverse: tests compare the forms both paths lead to with
 * the reference walker's.
 *
 * A short JSON text's fingerprint (fingerprint_of_text, at the end) writes the form straight from
 * the text where it can (_json_text_form.h), and decodes it and uses the walk and writer otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define MAX_DEPTH 64
#define SHORT_TEXT 256
#define NUMBER_TEXT 400 /* longer strings are text, whatever they spell (the reference's rule) */
#define LEVEL_COST 64
#define ORJSON_LOW 1e-4
#define ORJSON_HIGH 1e16
#define EXACT_INTEGRAL 1e16 /* integral floats below this write() spells as integers itself */

typedef struct {
    Py_ssize_t entries;
    Py_ssize_t entries_left;
    Py_ssize_t text;
    Py_ssize_t text_left;
    PyObject *special; /* a frozenset of str, or NULL when empty */
    int orjson_ok;
    int numbers; /* 1: write() writes the value, numbers in their canonical spelling (below) */
} Walk;

static int is_digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }

/* Whether the text is spelled as a JSON number (the canonical form writes it as one). Read by
 * its storage kind, not by the ASCII flag: a string built by C code may store ASCII text in a
 * wider kind. */
static int
spelled_as_number(int kind, const void *data, Py_ssize_t n)
{
#define AT(i) PyUnicode_READ(kind, data, (i))
    Py_ssize_t i = 0;
    if (i < n && AT(i) == '-') {
        i++;
    }
    if (i >= n) {
        return 0;
    }
    if (AT(i) == '0') {
        i++;
    }
    else if (AT(i) >= '1' && AT(i) <= '9') {
        while (i < n && is_digit(AT(i))) {
            i++;
        }
    }
    else {
        return 0;
    }
    if (i < n && AT(i) == '.') {
        i++;
        if (i >= n || !is_digit(AT(i))) {
            return 0;
        }
        while (i < n && is_digit(AT(i))) {
            i++;
        }
    }
    if (i < n && (AT(i) == 'e' || AT(i) == 'E')) {
        i++;
        if (i < n && (AT(i) == '+' || AT(i) == '-')) {
            i++;
        }
        if (i >= n || !is_digit(AT(i))) {
            return 0;
        }
        while (i < n && is_digit(AT(i))) {
            i++;
        }
    }
    return i == n;
#undef AT
}

/* 0: the string's canonical form is its JSON quoting; 1: it is not (or the text budget is spent). */
static int
check_str(Walk *w, PyObject *s)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 1;
    }
#endif
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n > 0 && n <= NUMBER_TEXT) {
        int kind = PyUnicode_KIND(s);
        const void *data = PyUnicode_DATA(s);
        Py_UCS4 first = PyUnicode_READ(kind, data, 0); /* rules out most strings */
        if ((first == '-' || is_digit(first)) && spelled_as_number(kind, data, n)) {
            w->orjson_ok = 0; /* the encoders quote it; write() spells the number */
            return !w->numbers;
        }
    }
    if (n > SHORT_TEXT) { /* long strings count against the text budget */
        w->text += n;
        if (w->text > w->text_left) {
            return 1;
        }
    }
    return 0;
}

static int check_container(Walk *w, PyObject *c, long depth);

/* 0: plain, as the encoders write it; 1: not. */
static int
check_value(Walk *w, PyObject *v, long depth)
{
    if (PyUnicode_CheckExact(v)) {
        return check_str(w, v);
    }
    if (PyLong_CheckExact(v) || PyBool_Check(v) || v == Py_None) {
        return 0; /* (an int beyond 64 bits is left to the encoders, which say so) */
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        if (isfinite(d) && floor(d) == d) {
            /* integral: the canonical form writes an integer, which write() does (not the encoders) */
            w->orjson_ok = 0;
            return !(w->numbers && fabs(d) < EXACT_INTEGRAL);
        }
        double magnitude = fabs(d);
        if (!(isfinite(d) && magnitude >= ORJSON_LOW && magnitude < ORJSON_HIGH)) {
            w->orjson_ok = 0; /* orjson spells it otherwise than repr (or writes null) */
        }
        return 0;
    }
    if (PyDict_CheckExact(v) || PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        return check_container(w, v, depth);
    }
    return 1;
}

static int
check_container(Walk *w, PyObject *c, long depth)
{
    if (depth >= MAX_DEPTH) {
        return 1;
    }
    if (PyDict_CheckExact(c)) {
        w->entries += PyDict_GET_SIZE(c);
        if (w->entries > w->entries_left) {
            return 1;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(c, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) {
                return 1;
            }
            if (w->special != NULL) {
                /* An exact str key: hashing and comparing it runs no Python code. */
                int found = PySet_Contains(w->special, key);
                if (found != 0) {
                    if (found < 0) {
                        PyErr_Clear();
                    }
                    return 1;
                }
            }
            if (check_value(w, item, depth + 1)) {
                return 1;
            }
        }
        return 0;
    }
    int is_list = PyList_CheckExact(c);
    Py_ssize_t n = is_list ? PyList_GET_SIZE(c) : PyTuple_GET_SIZE(c);
    w->entries += n;
    if (w->entries > w->entries_left) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Read afresh each time: nothing here can resize the list, but this costs nothing. */
        if (is_list && i >= PyList_GET_SIZE(c)) {
            return 1;
        }
        PyObject *item = is_list ? PyList_GET_ITEM(c, i) : PyTuple_GET_ITEM(c, i);
        if (check_value(w, item, depth + 1)) {
            return 1;
        }
    }
    return 0;
}

/* Whether every member of the frozenset is an exact str (iterating it runs no Python code). */
static int
all_exact_str(PyObject *set)
{
    PyObject *iterator = PyObject_GetIter(set);
    if (iterator == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *member;
    int all = 1;
    while (all && (member = PyIter_Next(iterator)) != NULL) {
        all = PyUnicode_CheckExact(member);
        Py_DECREF(member);
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return all;
}

/* Sets of noise keys found to hold exact strs only (the package passes one per tool's
 * fingerprinter): their members are looked at once, not at every call. A frozenset cannot
 * change, and the references held here keep their addresses from being reused. */
#define VERIFIED_SLOTS 16
static PyObject *verified[VERIFIED_SLOTS];
static int next_slot = 0;

static int
is_verified(PyObject *set)
{
    for (int i = 0; i < VERIFIED_SLOTS; i++) {
        if (verified[i] == set) {
            return 1;
        }
    }
    return 0;
}

/* check()'s walk of `value` (the budgets in *w, `special` a frozenset): 0 when plain, 1 when not
 * (w->entries: what it read). It runs no Python code while it reads. */
static int
walk(Walk *w, PyObject *value, long depth, PyObject *special)
{
    if (depth >= MAX_DEPTH || !(PyDict_CheckExact(value) || PyList_CheckExact(value) || PyTuple_CheckExact(value))) {
        return 1;
    }
    /* A set the cache lets go of is released after the walk: freeing it may run a weakref's
     * callback, Python code. */
    PyObject *released = NULL;
    if (PySet_GET_SIZE(special) && !is_verified(special)) {
        if (!all_exact_str(special)) {
            /* Looking a key up among them could compare it through a subclass's __eq__, Python
             * code that might change what is being read: the Python check reads such values. */
            return 1;
        }
        Py_INCREF(special);
        released = verified[next_slot];
        verified[next_slot] = special;
        next_slot = (next_slot + 1) % VERIFIED_SLOTS;
    }
    w->special = PySet_GET_SIZE(special) ? special : NULL;
    int refused = check_container(w, value, depth);
    Py_XDECREF(released);
    return refused;
}

/* --- the writer ------------------------------------------------------------------------------
 *
 * write() writes what the standard library's encoder writes for the values check() accepts
 * (json.dumps with sort_keys, compact separators, ensure_ascii off and NaN allowed: the
 * canonical form of such a value), several times faster. It reads the same exact builtins
 * through borrowed references and runs no Python code (it allocates only its buffer and, at the
 * end, its result), and gives up (None) on anything else, deeper than the depth bound, or an int
 * beyond 64 bits: the caller then has the standard library write it. */

typedef struct {
    char *data;
    Py_ssize_t length;
    Py_ssize_t capacity;
    int numbers; /* 1: integral floats and strings spelled as numbers as the canonical form spells them */
} Buffer;

static int
reserve(Buffer *b, Py_ssize_t more)
{
    if (b->length + more <= b->capacity) {
        return 0;
    }
    Py_ssize_t capacity = b->capacity ? b->capacity : 256;
    while (capacity < b->length + more) {
        if (capacity > PY_SSIZE_T_MAX / 2) {
            return -1;
        }
        capacity *= 2;
    }
    char *data = PyMem_Realloc(b->data, (size_t)capacity);
    if (data == NULL) {
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static int
put(Buffer *b, const char *text, Py_ssize_t n)
{
    if (reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->length, text, (size_t)n);
    b->length += n;
    return 0;
}

/* One character as JSON quotes it (the escapes of json.encoder.encode_basestring), in UTF-8, at
 * `out` (room for 6 bytes): where the next one goes. */
static char *
put_escaped(char *out, Py_UCS4 c)
{
    if (c >= 0x20 && c < 0x80) {
        if (c == '"' || c == '\\') {
            *out++ = '\\';
        }
        *out++ = (char)c;
    }
    else if (c < 0x20) {
        *out++ = '\\';
        switch (c) {
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default:
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = "0123456789abcdef"[c >> 4];
            *out++ = "0123456789abcdef"[c & 0xf];
        }
    }
    else if (c < 0x800) {
        *out++ = (char)(0xc0 | (c >> 6));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    else if (c < 0x10000) {
        *out++ = (char)(0xe0 | (c >> 12));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    else {
        *out++ = (char)(0xf0 | (c >> 18));
        *out++ = (char)(0x80 | ((c >> 12) & 0x3f));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *out++ = (char)(0x80 | (c & 0x3f));
    }
    return out;
}

/* A string as JSON (the escapes of json.encoder.encode_basestring), in UTF-8; a lone surrogate
 * in the three bytes "surrogatepass" gives it, so that decoding the whole gives it back. */
static int
put_str(Buffer *b, PyObject *s)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        return -1;
    }
#endif
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_IS_ASCII(s)) { /* most strings: copied as they are unless one needs an escape */
        const Py_UCS1 *ascii = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t i = 0;
        while (i < n && ascii[i] >= 0x20 && ascii[i] != '"' && ascii[i] != '\\') {
            i++;
        }
        if (i == n) {
            if (reserve(b, n + 2) < 0) {
                return -1;
            }
            b->data[b->length] = '"';
            memcpy(b->data + b->length + 1, ascii, (size_t)n);
            b->data[b->length + n + 1] = '"';
            b->length += n + 2;
            return 0;
        }
    }
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t size = 2; /* what it takes, written below */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        size += c >= 0x20 ? (c < 0x80 ? 1 + (c == '"' || c == '\\') : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4)
            : (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') ? 2 : 6;
    }
    if (reserve(b, size) < 0) {
        return -1;
    }
    char *out = b->data + b->length;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        out = put_escaped(out, PyUnicode_READ(kind, data, i));
    }
    *out++ = '"';
    b->length = out - b->data;
    return 0;
}

/* -1: an error is set; 1: not the writer's to write (no error set); 0: written. */
static int write_value(Buffer *b, PyObject *v, long depth);

typedef struct {
    PyObject *key;
    PyObject *value;
} Item;

static int
by_key(const void *left, const void *right)
{
    /* Exact strs, each key once: the comparison cannot fail and is never 0. */
    return PyUnicode_Compare(((const Item *)left)->key, ((const Item *)right)->key);
}

static int
write_dict(Buffer *b, PyObject *d, long depth)
{
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n == 0) {
        return put(b, "{}", 2);
    }
    Item *items = PyMem_Malloc((size_t)n * sizeof(Item));
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (i < n && PyDict_Next(d, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            PyMem_Free(items);
            return 1;
        }
        items[i].key = key;
        items[i].value = value;
        i++;
    }
    qsort(items, (size_t)i, sizeof(Item), by_key);
    int status = put(b, "{", 1);
    for (Py_ssize_t k = 0; status == 0 && k < i; k++) {
        if (k) {
            status = put(b, ",", 1);
        }
        if (status == 0) {
            status = put_str(b, items[k].key);
        }
        if (status == 0) {
            status = put(b, ":", 1);
        }
        if (status == 0) {
            status = write_value(b, items[k].value, depth + 1);
        }
    }
    PyMem_Free(items);
    return status ? status : put(b, "}", 1);
}

static int
write_sequence(Buffer *b, PyObject *c, long depth)
{
    int is_list = PyList_CheckExact(c);
    int status = put(b, "[", 1);
    for (Py_ssize_t i = 0; status == 0 && i < (is_list ? PyList_GET_SIZE(c) : PyTuple_GET_SIZE(c)); i++) {
        if (i) {
            status = put(b, ",", 1);
        }
        if (status == 0) {
            status = write_value(b, is_list ? PyList_GET_ITEM(c, i) : PyTuple_GET_ITEM(c, i), depth + 1);
        }
    }
    return status ? status : put(b, "]", 1);
}

static int
write_int(Buffer *b, PyObject *v)
{
    int overflow = 0;
    long long small = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        /* Left to the standard library: converting a wider int checks for signals (a handler is
         * Python code, which could change the value read here through borrowed references), and
         * from Python 3.12 a very wide one is converted by Python code. */
        return 1;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%lld", small);
    return put(b, text, n);
}

/* A float as the standard library's encoder spells it (its repr), or, with b->numbers, as the
 * canonical form does: an integral one as an integer (exactly, below EXACT_INTEGRAL; a wider one
 * is left to the walker: 1). */
static int
write_float(Buffer *b, double d)
{
    if (isnan(d)) {
        return put(b, "NaN", 3);
    }
    if (isinf(d)) {
        return d > 0 ? put(b, "Infinity", 8) : put(b, "-Infinity", 9);
    }
    if (b->numbers && floor(d) == d) {
        if (fabs(d) >= EXACT_INTEGRAL) {
            return 1;
        }
        char integral[32];
        int n = snprintf(integral, sizeof integral, "%lld", (long long)d); /* -0.0 too: "0" */
        return put(b, integral, n);
    }
    char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* float's repr */
    if (text == NULL) {
        return -1;
    }
    int status = put(b, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return status;
}

/* A number's text (ASCII, n characters, NUL-terminated, spelled as a JSON number) as the canonical
 * form writes the number it spells (fingerprint.numeric_string_text, and the value json.loads reads
 * from a number token): an integer's spelling is kept ("-0" aside); a fraction or an exponent is read
 * as a float and written as write_float writes one. */
static int
put_number(Buffer *b, const char *text, Py_ssize_t n)
{
    int integer = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        integer &= text[i] != '.' && text[i] != 'e' && text[i] != 'E';
    }
    if (integer) {
        return n == 2 && text[0] == '-' && text[1] == '0' ? put(b, "0", 1) : put(b, text, n);
    }
    double d = PyOS_string_to_double(text, NULL, NULL); /* out of range: +-inf, as float() */
    if (d == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    return write_float(b, d);
}

/* A string spelled as a JSON number, as the canonical form writes it: the number it spells. */
static int
put_number_text(Buffer *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    char text[NUMBER_TEXT + 1];
    for (Py_ssize_t i = 0; i < n; i++) { /* ASCII: spelled_as_number read it */
        text[i] = (char)PyUnicode_READ(kind, data, i);
    }
    text[n] = '\0';
    return put_number(b, text, n);
}

static int
write_value(Buffer *b, PyObject *v, long depth)
{
    if (depth > MAX_DEPTH) {
        return 1;
    }
    if (PyUnicode_CheckExact(v)) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(v) < 0) {
            return -1;
        }
#endif
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        if (b->numbers && n > 0 && n <= NUMBER_TEXT) {
            int kind = PyUnicode_KIND(v);
            const void *data = PyUnicode_DATA(v);
            Py_UCS4 first = PyUnicode_READ(kind, data, 0);
            if ((first == '-' || is_digit(first)) && spelled_as_number(kind, data, n)) {
                return put_number_text(b, v);
            }
        }
        return put_str(b, v);
    }
    if (v == Py_None) {
        return put(b, "null", 4);
    }
    if (v == Py_True) {
        return put(b, "true", 4);
    }
    if (v == Py_False) {
        return put(b, "false", 5);
    }
    if (PyLong_CheckExact(v)) {
        return write_int(b, v);
    }
    if (PyFloat_CheckExact(v)) {
        return write_float(b, PyFloat_AS_DOUBLE(v));
    }
    if (PyDict_CheckExact(v)) {
        return write_dict(b, v, depth);
    }
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        return write_sequence(b, v, depth);
    }
    return 1;
}

PyDoc_STRVAR(write_doc,
"write(value, numbers=False, /)\n"
"--\n\n"
"What the standard library's encoder writes for a value check() accepted (sorted keys, compact,\n"
"no ASCII escapes, NaN allowed): its canonical form. With ``numbers``, what check() accepted in\n"
"that mode: integral floats and strings spelled as numbers written as numbers, as the form\n"
"writes them. None for a value of any other type, one nested deeper than the depth bound, or one\n"
"holding an int beyond 64 bits (the standard library writes those) or, with ``numbers``, an\n"
"integral float from 1e16 up.");

static PyObject *
write_form(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write() takes 1 or 2 arguments");
        return NULL;
    }
    int numbers = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (numbers < 0) {
        return NULL;
    }
    Buffer b = {NULL, 0, 0, numbers};
    int status = write_value(&b, args[0], 0);
    PyObject *result = NULL;
    if (status == 0) {
        result = PyUnicode_DecodeUTF8(b.data, b.length, "surrogatepass");
    }
    else if (status == 1) {
        result = Py_NewRef(Py_None);
    }
    else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    PyMem_Free(b.data);
    return result;
}

PyDoc_STRVAR(check_doc,
"check(value, depth, entries_left, text_left, special, orjson_ok, numbers=False, /)\n"
"--\n\n"
"(entries, text, orjson_ok) when an encoder writes the canonical form of the exact dict, list\n"
"or tuple ``value``; otherwise an int, what giving up cost in values. ``numbers``: write() is to\n"
"write it, which also spells integral floats and strings that spell numbers as the form does.");

static PyObject *
check(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "check() takes 6 or 7 arguments");
        return NULL;
    }
    PyObject *value = args[0], *special = args[4];
    long depth = PyLong_AsLong(args[1]);
    Py_ssize_t entries_left = PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[2]);
    Py_ssize_t text_left = PyErr_Occurred() ? -1 : PyLong_AsSsize_t(args[3]);
    int orjson_ok = PyErr_Occurred() ? -1 : PyObject_IsTrue(args[5]); /* (no __bool__ runs with an error set) */
    int numbers = orjson_ok < 0 ? -1 : nargs == 7 ? PyObject_IsTrue(args[6]) : 0;
    if (numbers < 0) {
        return NULL;
    }
    if (depth < 0) {
        PyErr_SetString(PyExc_ValueError, "check(): depth must not be negative");
        return NULL;
    }
    if (!PyFrozenSet_CheckExact(special)) {
        PyErr_SetString(PyExc_TypeError, "check(): special must be a frozenset");
        return NULL;
    }
    Walk w = {0, entries_left, 0, text_left, NULL, orjson_ok, numbers};
    return walk(&w, value, depth, special)
        ? PyLong_FromSsize_t(w.entries + LEVEL_COST)
        : Py_BuildValue("nnO", w.entries, w.text, w.orjson_ok ? Py_True : Py_False);
}

/* --- a short JSON text's fingerprint, in one call ----------------------------------------------- */

static PyObject *s_copy, *s_update, *s_hexdigest;

/* fingerprint.is_empty() of a value JSON decodes to (exact dict, list, str, int, float, bool or
 * None): None, blank text, an empty list, or a dict (of at most 64 entries, 8 levels down) whose
 * every value is empty. */
static int
json_empty(PyObject *v, int depth)
{
    if (v == Py_None) {
        return 1;
    }
    if (PyUnicode_CheckExact(v)) { /* str.strip() strips what Py_UNICODE_ISSPACE says */
        int kind = PyUnicode_KIND(v);
        const void *data = PyUnicode_DATA(v);
        for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(v); i++) {
            if (!Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) {
                return 0;
            }
        }
        return 1;
    }
    if (PyList_CheckExact(v)) {
        return PyList_GET_SIZE(v) == 0;
    }
    if (PyDict_CheckExact(v)) {
        if (depth > 8 || PyDict_GET_SIZE(v) > 64) {
            return 0;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(v, &pos, &key, &item)) {
            if (!json_empty(item, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    return 0; /* a number or a flag is something */
}

/* (hexdigest of a copy of `state` given the form, empty) */
static PyObject *
digest_of(PyObject *state, const Buffer *b, int empty)
{
    PyObject *form = PyBytes_FromStringAndSize(b->data, b->length);
    PyObject *digest = form == NULL ? NULL : PyObject_CallMethodNoArgs(state, s_copy);
    PyObject *updated = digest == NULL ? NULL : PyObject_CallMethodOneArg(digest, s_update, form);
    PyObject *hex = updated == NULL ? NULL : PyObject_CallMethodNoArgs(digest, s_hexdigest);
    PyObject *found = hex == NULL ? NULL : PyTuple_Pack(2, hex, empty ? Py_True : Py_False);
    Py_XDECREF(form);
    Py_XDECREF(digest);
    Py_XDECREF(updated);
    Py_XDECREF(hex);
    return found;
}

#include "_json_text_form.h"
#include "_keyed_hash.h"

PyDoc_STRVAR(keyed_digest_doc,
"keyed_digest(seed, message, /)\n"
"--\n\n"
"The hex keyed BLAKE2b-128 digest of the seed's prefix and ``message`` (bytes, not empty), keyed\n"
"with the seed's key: what hashlib.blake2b(prefix + message, key=key, digest_size=16) gives. The\n"
"seed is bytes: the key's length (one byte, at most 64), the key, the prefix.");

static PyObject *
keyed_digest(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "keyed_digest() takes two bytes objects");
        return NULL;
    }
    return keyed_hex_digest(args[0], PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]));
}

/* (the seed's hex digest of the form, empty), for a seed given as bytes (_keyed_hash.h); else a
 * hashlib state's (digest_of). */
static PyObject *
fingerprint_of_form(PyObject *state, const Buffer *b, int empty)
{
    if (!PyBytes_CheckExact(state))
        return digest_of(state, b, empty);
    PyObject *hex = keyed_hex_digest(state, b->data, b->length);
    if (hex == NULL)
        return NULL;
    PyObject *found = PyTuple_Pack(2, hex, empty ? Py_True : Py_False);
    Py_DECREF(hex);
    return found;
}

PyDoc_STRVAR(text_form_doc,
"text_form(text, special, entries_left, /)\n"
"--\n\n"
"(form, empty) of the JSON object or array ``text``, written from the text itself: its\n"
"canonical form (UTF-8) and whether it is an empty result; None where the text is not strict\n"
"JSON whose value the form writes as plain JSON (``special`` keys, more than ``entries_left``\n"
"values, anything _json_text_form.h refuses): the caller decodes it and writes the form.");

static PyObject *
text_form(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "text_form() takes 3 arguments");
        return NULL;
    }
    Py_ssize_t entries_left = PyLong_AsSsize_t(args[2]);
    if (entries_left == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyUnicode_Check(args[0]) || !PyFrozenSet_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "text_form() takes a str and a frozenset");
        return NULL;
    }
    Buffer b = {NULL, 0, 0, 1};
    int empty = 0;
    int status = form_of_text(args[0], args[1], entries_left, &b, &empty);
    PyObject *found = status == 0 ? Py_BuildValue("(y#O)", b.data, b.length, empty ? Py_True : Py_False)
                    : status == 1 ? Py_NewRef(Py_None) : NULL;
    if (status < 0 && !PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    PyMem_Free(b.data);
    return found;
}

PyDoc_STRVAR(fingerprint_doc,
"fingerprint_of_text(loads, entries_left, text, special, state, result, /)\n"
"--\n\n"
"(fingerprint, empty) of the JSON object or array ``text``: the hex digest, given the value's\n"
"canonical form, of a copy of the hashlib ``state`` or of the state a seed (bytes, see keyed_digest)\n"
"names, and, for a ``result``, whether the value is empty.\n"
"The form is written from the text itself (text_form) where it can be; else the text is decoded\n"
"by ``loads`` and the value written as check() and write() take it (``entries_left`` values at\n"
"most). None where ``loads`` refuses the text (ValueError) or the value is no small plain\n"
"container: the caller writes its form.");

static PyObject *
fingerprint_of_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "fingerprint_of_text() takes 6 arguments");
        return NULL;
    }
    Py_ssize_t entries_left = PyLong_AsSsize_t(args[1]);
    if (entries_left == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int result = PyObject_IsTrue(args[5]);
    if (result < 0) {
        return NULL;
    }
    PyObject *special = args[3];
    if (!PyFrozenSet_CheckExact(special)) {
        PyErr_SetString(PyExc_TypeError, "fingerprint_of_text(): special must be a frozenset");
        return NULL;
    }
    Buffer b = {NULL, 0, 0, 1};
    int empty = 0;
    int status = PyUnicode_Check(args[2]) ? form_of_text(args[2], special, entries_left, &b, &empty) : 1;
    if (status == 1) { /* refused: decoded, then written from the value */
        b.length = 0;
        PyObject *value = PyObject_CallOneArg(args[0], args[2]);
        if (value == NULL) {
            PyMem_Free(b.data);
            if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
                return NULL;
            }
            PyErr_Clear(); /* NaN, lone surrogates, huge numbers, no JSON: the caller's path reads it */
            Py_RETURN_NONE;
        }
        Walk w = {0, entries_left, 0, 0, NULL, 0, 1};
        status = walk(&w, value, 0, special); /* (refuses anything but a container) */
        if (status == 0) {
            status = write_value(&b, value, 0);
        }
        empty = status == 0 && result && json_empty(value, 0);
        Py_DECREF(value);
    }
    PyObject *found = NULL;
    if (status == 0) {
        found = fingerprint_of_form(args[4], &b, result && empty);
    }
    else if (status == 1) {
        found = Py_NewRef(Py_None);
    }
    else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    PyMem_Free(b.data);
    return found;
}

static PyMethodDef methods[] = {
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL, check_doc},
    {"write", (PyCFunction)(void (*)(void))write_form, METH_FASTCALL, write_doc},
    {"fingerprint_of_text", (PyCFunction)(void (*)(void))fingerprint_of_text, METH_FASTCALL, fingerprint_doc},
    {"text_form", (PyCFunction)(void (*)(void))text_form, METH_FASTCALL, text_form_doc},
    {"keyed_digest", (PyCFunction)(void (*)(void))keyed_digest, METH_FASTCALL, keyed_digest_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_agentguard._plain_check",
    "The plain-JSON check of otel_agentguard._plain_json, its writer and a short JSON text's fingerprint,"
    " compiled (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__plain_check(void)
{
#ifdef Py_GIL_DISABLED
    /* The walk reads containers through borrowed references, which only the GIL keeps valid:
     * on a free-threaded build the package checks in Python instead. */
    PyErr_SetString(PyExc_ImportError, "otel_agentguard._plain_check needs the GIL");
    return NULL;
#else
    if ((s_copy = PyUnicode_InternFromString("copy")) == NULL ||
        (s_update = PyUnicode_InternFromString("update")) == NULL ||
        (s_hexdigest = PyUnicode_InternFromString("hexdigest")) == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
#endif
}
