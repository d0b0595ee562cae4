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
 * parse() (further below) makes the same dict from the attributes' JSON text, for the shapes
 * exporters write, without the records.
 *
 * Whatever raises here raises in the Python function too: the caller then leaves the line
 * to the reference reader, which words the error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, the kind of a record's fields */
#include <stdint.h>

/* Set once by configure(): what the Python function reads from its modules. */
static PyObject *shared_keys;   /* dict: each read key -> the one string kept for it */
static PyObject *repeated_keys; /* frozenset: keys whose string values a line keeps once */
static PyObject *is_read_key;   /* otlp.is_read_key */
static PyObject *decode_array;  /* otlp.decode_array */
static PyObject *decode_value;  /* otlp.decode_value */
static PyObject *unset;         /* msgspec.UNSET */

/* The records msgspec decodes into, and where each of their fields sits in the object (a
 * record's fields are slots: reading one by its offset is what its descriptor does). */
static PyObject *key_value_type, *any_value_type;
enum { KEY, VALUE, STRING, INT, BOOL, DOUBLE, ARRAY, KVLIST, BYTES, FIELDS };
static const char *const field_names[FIELDS] = {
    "key", "value", "stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue",
};
static Py_ssize_t offsets[FIELDS];
static PyObject *s_values, *s_string; /* "values", "stringValue": the members of an array of strings */

/* The records' layout as read() found it when called, held for the call: a helper it calls back
 * may configure the module anew, and a record is read with the layout its type was checked by. */
typedef struct {
    PyObject *key_value_type, *any_value_type, *unset; /* strong references */
    Py_ssize_t offsets[FIELDS];
} Layout;

/* The slot at `offset` of a record (new reference); an unset slot raises, as reading the
 * attribute `name` would. */
static PyObject *
slot_value(PyObject *record, Py_ssize_t offset, const char *name)
{
    PyObject *value = *(PyObject **)((char *)record + offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s is not set", name);
        return NULL;
    }
    return Py_NewRef(value);
}

/* ``shared.setdefault(text, text)`` (new reference): a line's repeated strings kept once. */
static PyObject *
kept_once(PyObject *shared, PyObject *text)
{
    PyObject *once = PyDict_SetDefault(shared, text, text); /* borrowed */
    return once == NULL ? NULL : Py_NewRef(once);
}

/* A record's field (new reference). */
static PyObject *
field(PyObject *record, const Layout *layout, int which)
{
    return slot_value(record, layout->offsets[which], field_names[which]);
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
other_member(PyObject *value, const Layout *layout)
{
    static const int precedence[] = {INT, BOOL, DOUBLE, ARRAY, KVLIST, BYTES};
    for (size_t i = 0; i < sizeof(precedence) / sizeof(precedence[0]); i++) {
        PyObject *inner = field(value, layout, precedence[i]);
        if (inner == NULL) {
            return NULL;
        }
        if (inner != layout->unset) {
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
read_one(PyObject *item, const Layout *layout, PyObject *decoded, PyObject *shared, PyObject *kept)
{
    if ((PyObject *)Py_TYPE(item) != layout->key_value_type) {
        PyErr_SetString(PyExc_TypeError, "not a _KeyValue record");
        return -1;
    }
    PyObject *key = field(item, layout, KEY);
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
    value = field(item, layout, VALUE);
    if (value == NULL) {
        goto done;
    }
    if (value == Py_None) {
        result = wanted ? PyDict_SetItem(decoded, kept_key, Py_None) : 0;
        goto done;
    }
    if ((PyObject *)Py_TYPE(value) != layout->any_value_type) {
        PyErr_SetString(PyExc_TypeError, "not an _AnyValue record");
        goto done;
    }
    inner = field(value, layout, STRING);
    if (inner == NULL) {
        goto done;
    }
    if (inner != layout->unset) {
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
                Py_SETREF(inner, kept_once(shared, inner));
                if (inner == NULL) {
                    goto done;
                }
            }
        }
        result = PyDict_SetItem(decoded, kept_key, inner);
        goto done;
    }
    Py_SETREF(inner, other_member(value, layout));
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

/* Whether read() or parse() (`call`) was configured and given (something, shared, kept); else 0
 * with the error set. */
static int
reader_arguments(PyObject *const *args, Py_ssize_t nargs, const char *call)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes three arguments", call);
        return 0;
    }
    if (shared_keys == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return 0;
    }
    if (!PyDict_CheckExact(args[1]) || !PyDict_CheckExact(args[2])) {
        PyErr_Format(PyExc_TypeError, "%s: shared and kept must be dicts", call);
        return 0;
    }
    return 1;
}

static PyObject *
read_attributes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!reader_arguments(args, nargs, "read(items, shared, kept)")) {
        return NULL;
    }
    PyObject *items = args[0], *shared = args[1], *kept = args[2];
    PyObject *decoded = PyDict_New();
    if (decoded == NULL || items == Py_None) {
        return decoded;
    }
    if (!PyList_CheckExact(items)) {
        Py_DECREF(decoded);
        PyErr_SetString(PyExc_TypeError, "items must be a list");
        return NULL;
    }
    Layout layout = {Py_NewRef(key_value_type), Py_NewRef(any_value_type), Py_NewRef(unset), {0}};
    memcpy(layout.offsets, offsets, sizeof(offsets));
    /* Indexed on each turn: a helper called back runs Python code, which could change the list. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(items, i));
        int failed = read_one(item, &layout, decoded, shared, kept) < 0;
        Py_DECREF(item);
        if (failed) {
            Py_CLEAR(decoded);
            break;
        }
    }
    Py_DECREF(layout.key_value_type);
    Py_DECREF(layout.any_value_type);
    Py_DECREF(layout.unset);
    return decoded;
}

/* --- The same attributes parsed from their JSON text --------------------------------------
 *
 * parse() reads the attributes array as msgspec leaves it undecoded (msgspec.Raw), in the shapes
 * exporters write: [{"key": "...", "value": {"<one member>": ...}}, ...] with a string, an
 * integer (or its decimal string), true or false, a JSON number, or an array of strings. It
 * makes the dict read() makes of the records msgspec would decode from the same text, without
 * making the records. Anything else (other members or more than one, members out of order, a
 * lone surrogate, bytes that are not UTF-8, a number the grammar below does not take, a value
 * the records would not convert either) raises the configured Unparsed exception: the caller
 * then decodes the line into records and reads them with read(). Tests compare both on the
 * same text.
 *
 * A replay meets the same few dozen keys millions of times: each plain key's text is looked up
 * in a small table (its str, whether it is kept, whether its values are kept once), so the
 * usual attribute makes no str of its key and no dict lookup to decide what to do with it. */

static PyObject *unparsed; /* the exception for text outside the shapes parsed here */

typedef struct {
    const char *p, *end;
} Cursor;

static void *
outside(void)
{
    PyErr_SetNone(unparsed);
    return NULL;
}

static void
skip_space(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) {
        c->p++;
    }
}

/* The next character after any space, taken when it is `ch`. */
static int
take(Cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int
take_word(Cursor *c, const char *word, Py_ssize_t n)
{
    skip_space(c);
    if (c->end - c->p >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* A member name followed by its colon: 1 when it is `name` (of n characters), else 0 with the
 * cursor where it was. */
static int
take_name_n(Cursor *c, const char *name, Py_ssize_t n)
{
    skip_space(c);
    const char *at = c->p;
    if (c->end - at < n + 2 || at[0] != '"' || memcmp(at + 1, name, n) != 0 || at[n + 1] != '"') {
        return 0;
    }
    c->p = at + n + 2;
    if (!take(c, ':')) {
        c->p = at;
        return 0;
    }
    return 1;
}
#define take_name(c, name) take_name_n((c), (name), (Py_ssize_t)sizeof(name) - 1)

/* Whether any of 8 bytes is a quote, a backslash, a control character or not ASCII. */
static inline int
special_in(uint64_t word)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = word ^ (0x22 * ones), backslash = word ^ (0x5C * ones);
    uint64_t zero_byte = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash);
    uint64_t control = (word - 0x20 * ones) & ~word; /* exact where no byte has its high bit */
    return ((zero_byte | control) & highs) != 0 || (word & highs) != 0;
}

/* The text of a JSON string at the cursor: where it starts, how long it is, and whether it is
 * plain (ASCII with no escape). -1 (Unparsed) when there is no string. */
static int
scan_string(Cursor *c, const char **start, Py_ssize_t *n, int *plain)
{
    skip_space(c);
    if (c->p >= c->end || *c->p != '"') return outside(), -1;
    const char *p = ++c->p, *end = c->end;
    *plain = 1;
    while (end - p >= 8) { /* eight plain bytes at a time */
        uint64_t word;
        memcpy(&word, p, 8);
        if (special_in(word)) break;
        p += 8;
    }
    for (; p < end && *p != '"'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20) return outside(), -1; /* a raw control character: not JSON */
        if (ch >= 0x80) {
            *plain = 0;
        }
        else if (ch == '\\') {
            *plain = 0;
            if (++p >= end) return outside(), -1;
        }
    }
    if (p >= end) return outside(), -1;
    *start = c->p;
    *n = p - c->p;
    c->p = p + 1; /* past the closing quote */
    return 0;
}

static int
hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string's escapes written out as UTF-8 into out (at least as long as the text): its length,
 * or -1 for an escape left to msgspec (a surrogate, which may be half of a pair or alone). */
static Py_ssize_t
unescape(const char *text, Py_ssize_t n, char *out)
{
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char ch = text[i];
        if (ch != '\\') {
            out[written++] = ch;
            continue;
        }
        if (++i >= n) return -1;
        switch (text[i]) {
        case '"': out[written++] = '"'; break;
        case '\\': out[written++] = '\\'; break;
        case '/': out[written++] = '/'; break;
        case 'b': out[written++] = '\b'; break;
        case 'f': out[written++] = '\f'; break;
        case 'n': out[written++] = '\n'; break;
        case 'r': out[written++] = '\r'; break;
        case 't': out[written++] = '\t'; break;
        case 'u': {
            if (i + 4 >= n) return -1;
            int code = 0;
            for (int k = 1; k <= 4; k++) {
                int digit = hex_digit(text[i + k]);
                if (digit < 0) return -1;
                code = code * 16 + digit;
            }
            i += 4;
            if (code >= 0xD800 && code <= 0xDFFF) return -1;
            if (code < 0x80) {
                out[written++] = (char)code;
            }
            else if (code < 0x800) {
                out[written++] = (char)(0xC0 | (code >> 6));
                out[written++] = (char)(0x80 | (code & 0x3F));
            }
            else {
                out[written++] = (char)(0xE0 | (code >> 12));
                out[written++] = (char)(0x80 | ((code >> 6) & 0x3F));
                out[written++] = (char)(0x80 | (code & 0x3F));
            }
            break;
        }
        default: return -1;
        }
    }
    return written;
}

/* The str of a scanned string (new reference): Unparsed for text that is not UTF-8 or holds an
 * escape left to msgspec. */
static PyObject *
make_string(const char *start, Py_ssize_t n, int plain)
{
    if (plain) {
        return PyUnicode_FromStringAndSize(start, n);
    }
    char *buffer = PyMem_Malloc(n > 0 ? n : 1); /* written out, escapes never grow */
    if (buffer == NULL) return PyErr_NoMemory();
    Py_ssize_t length = unescape(start, n, buffer);
    PyObject *text = length < 0 ? NULL : PyUnicode_DecodeUTF8(buffer, length, "strict");
    PyMem_Free(buffer);
    if (text == NULL) {
        PyErr_Clear(); /* not UTF-8, or an escape left to msgspec */
        return outside();
    }
    return text;
}

/* A JSON string at the cursor as a str (new reference); with `make` 0 only checked, and Py_None
 * returned for it. */
static PyObject *
string(Cursor *c, int make)
{
    const char *start;
    Py_ssize_t n;
    int plain;
    if (scan_string(c, &start, &n, &plain) < 0) return NULL;
    if (!make && plain) return Py_NewRef(Py_None);
    PyObject *text = make_string(start, n, plain);
    if (text != NULL && !make) Py_SETREF(text, Py_NewRef(Py_None));
    return text;
}

/* Decimal digits, an optional minus sign first, of at most 18 digits (within int64 whatever they
 * are) into *value: 1; else 0 (more digits, or anything else: the caller reads them slowly). */
static int
small_decimal(const char *text, Py_ssize_t n, long long *value)
{
    int negative = n > 0 && text[0] == '-';
    Py_ssize_t digits = n - negative;
    if (digits < 1 || digits > 18) return 0;
    long long number = 0;
    for (Py_ssize_t i = negative; i < n; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
        number = number * 10 + (text[i] - '0');
    }
    *value = negative ? -number : number;
    return 1;
}

/* A JSON number at the cursor, by the grammar: where its text starts, its length, and whether
 * it is an integer (no fraction, no exponent). -1: Unparsed. */
static int
scan_number(Cursor *c, const char **start, Py_ssize_t *n, int *integer)
{
    skip_space(c);
    const char *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return outside(), -1;
    if (*p == '0') {
        p++;
    }
    else {
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *integer = 1;
    if (p < end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return outside(), -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return outside(), -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *start = c->p;
    *n = p - c->p;
    c->p = p;
    return 0;
}

/* An intValue: a JSON integer, or a string of decimal digits, within int64 (new reference). */
static PyObject *
int_member(Cursor *c)
{
    const char *start;
    Py_ssize_t n;
    int flag;
    long long value;
    skip_space(c);
    int quoted = c->p < c->end && *c->p == '"';
    if (quoted ? scan_string(c, &start, &n, &flag) < 0 : scan_number(c, &start, &n, &flag) < 0) return NULL;
    if (small_decimal(start, n, &value)) { /* int(text) or the JSON integer, certainly within int64 */
        return PyLong_FromLongLong(value);
    }
    if (!quoted) { /* a float (int64 refuses it), or an integer of 19 digits or more: left to the records */
        return outside();
    }
    PyObject *text = make_string(start, n, flag);
    if (text == NULL) return NULL;
    PyObject *number = int64(text); /* int(text), range-checked: it raises for text int() refuses */
    Py_DECREF(text);
    return number;
}

/* A doubleValue: a JSON number, as float() converts what msgspec decodes (new reference). */
static PyObject *
double_member(Cursor *c)
{
    const char *start;
    Py_ssize_t n;
    int integer;
    long long value;
    char token[64];
    if (scan_number(c, &start, &n, &integer) < 0) return NULL;
    if (integer) { /* msgspec decodes an int, which float() converts (correctly rounded, as C's cast) */
        return small_decimal(start, n, &value) ? PyFloat_FromDouble((double)value) : outside();
    }
    if (n >= (Py_ssize_t)sizeof(token)) return outside();
    memcpy(token, start, n);
    token[n] = '\0';
    double number = PyOS_string_to_double(token, NULL, NULL); /* correctly rounded, as msgspec's */
    if (number == -1.0 && PyErr_Occurred()) return NULL;
    if (Py_IS_INFINITY(number)) return outside(); /* beyond double range: left to msgspec */
    return PyFloat_FromDouble(number);
}

/* An arrayValue of strings only: {"values": [{"stringValue": "..."}, ...]} as a tuple. */
static PyObject *
array_member(Cursor *c)
{
    if (!take(c, '{') || !take_name(c, "values") || !take(c, '[')) return outside();
    PyObject *items = PyList_New(0);
    if (items == NULL) return NULL;
    if (!take(c, ']')) {
        do {
            if (!take(c, '{') || !take_name(c, "stringValue")) goto unparsed;
            PyObject *text = string(c, 1);
            if (text == NULL) goto failed;
            int appended = PyList_Append(items, text);
            Py_DECREF(text);
            if (appended < 0) goto failed;
            if (!take(c, '}')) goto unparsed;
        } while (take(c, ','));
        if (!take(c, ']')) goto unparsed;
    }
    if (!take(c, '}')) goto unparsed;
    PyObject *decoded = PyList_AsTuple(items);
    Py_DECREF(items);
    return decoded;
unparsed:
    outside();
failed:
    Py_DECREF(items);
    return NULL;
}

/* What is decided once per key: the key to keep it under, whether it is kept, whether its
 * string values are kept once per line. */
typedef struct {
    PyObject *key; /* NULL: a free entry */
    char *text;
    Py_ssize_t length;
    int wanted, repeated;
} KnownKey;

#define KNOWN_KEYS 512 /* a power of two; filled to three quarters at most, with the first keys met */
static KnownKey known_keys[KNOWN_KEYS];
static int known_count;
static PyObject *known_for_kept; /* the `kept` dict the table was filled with */

static void
forget_known_keys(void)
{
    for (int i = 0; i < KNOWN_KEYS; i++) {
        Py_CLEAR(known_keys[i].key);
        PyMem_Free(known_keys[i].text);
        known_keys[i].text = NULL;
    }
    known_count = 0;
    Py_CLEAR(known_for_kept);
}

static size_t
text_hash(const char *text, Py_ssize_t n)
{
    uint64_t hash = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        hash = (hash ^ (unsigned char)text[i]) * 0x100000001b3ULL;
    }
    return (size_t)hash;
}

/* The entry of a plain key's text: a known one, or a free one to fill (NULL when the table is full). */
static KnownKey *
known_key(const char *text, Py_ssize_t n)
{
    size_t at = text_hash(text, n) & (KNOWN_KEYS - 1);
    for (int probes = 0; probes < KNOWN_KEYS; probes++, at = (at + 1) & (KNOWN_KEYS - 1)) {
        KnownKey *entry = &known_keys[at];
        if (entry->key == NULL) {
            return known_count < KNOWN_KEYS * 3 / 4 ? entry : NULL;
        }
        if (entry->length == n && memcmp(entry->text, text, n) == 0) {
            return entry;
        }
    }
    return NULL; /* full (never, as filled: the bound is a guard) */
}

/* What read_one decides for a key: its kept key (new reference), whether it is wanted and whether
 * its string values are kept once. -1 on error. */
static int
decide_key(Cursor *c, PyObject *kept, PyObject **kept_key, int *repeated)
{
    const char *start;
    Py_ssize_t n;
    int plain;
    if (scan_string(c, &start, &n, &plain) < 0) return -1;
    KnownKey *entry = NULL;
    if (plain) {
        if (known_for_kept != kept) { /* another memory of keys (tests swap it): start afresh */
            forget_known_keys();
            known_for_kept = Py_NewRef(kept);
        }
        entry = known_key(start, n);
        if (entry != NULL && entry->key != NULL) {
            *kept_key = Py_NewRef(entry->key);
            *repeated = entry->repeated;
            return entry->wanted;
        }
    }
    PyObject *key = make_string(start, n, plain);
    if (key == NULL) return -1;
    int wanted = wanted_key(key, kept, kept_key);
    Py_DECREF(key);
    if (wanted < 0) {
        Py_CLEAR(*kept_key); /* set before is_read_key failed, if it did */
        return -1;
    }
    *repeated = PySet_Contains(repeated_keys, *kept_key);
    if (*repeated < 0) {
        Py_CLEAR(*kept_key);
        return -1;
    }
    /* Kept for the next span, unless the helper called back changed the configuration or filled
     * the table meanwhile (it may have parsed, on this thread or another). */
    if (entry != NULL && entry->key == NULL && known_for_kept == kept && known_count < KNOWN_KEYS * 3 / 4
        && (entry->text = PyMem_Malloc(n ? n : 1))) {
        memcpy(entry->text, start, n);
        entry->length = n;
        entry->key = Py_NewRef(*kept_key);
        entry->wanted = wanted;
        entry->repeated = *repeated;
        known_count++;
    }
    return wanted;
}

/* A value object's one member (new reference); Py_None for an empty one. A string is made only
 * when `wanted`, and kept once per line when `repeated`. */
static PyObject *
value_member(Cursor *c, PyObject *shared, int wanted, int repeated)
{
    if (!take(c, '{')) return outside();
    if (take(c, '}')) return Py_NewRef(Py_None); /* an empty value */
    PyObject *inner;
    if (take_name(c, "stringValue")) {
        inner = string(c, wanted);
        if (inner != NULL && wanted && repeated) {
            Py_SETREF(inner, kept_once(shared, inner));
        }
    }
    else if (take_name(c, "intValue")) {
        inner = int_member(c);
    }
    else if (take_name(c, "boolValue")) {
        inner = take_word(c, "true", 4) ? Py_NewRef(Py_True)
                : take_word(c, "false", 5) ? Py_NewRef(Py_False) : outside();
    }
    else if (take_name(c, "doubleValue")) {
        inner = double_member(c);
    }
    else if (take_name(c, "arrayValue")) {
        inner = array_member(c);
    }
    else {
        return outside(); /* key-value lists, bytes, a member msgspec would ignore */
    }
    if (inner != NULL && !take(c, '}')) { /* one member only: of several, msgspec's precedence decides */
        Py_DECREF(inner);
        return outside();
    }
    return inner;
}

/* One {"key": ..., "value": ...} into decoded; 0, or -1 with an exception set. */
static int
parse_one(Cursor *c, PyObject *decoded, PyObject *shared, PyObject *kept)
{
    if (!take(c, '{') || !take_name(c, "key")) return outside(), -1;
    PyObject *kept_key = NULL, *inner = NULL;
    int repeated = 0, result = -1;
    int wanted = decide_key(c, kept, &kept_key, &repeated);
    if (wanted < 0) return -1;
    if (take(c, '}')) { /* no value: None */
        inner = Py_NewRef(Py_None);
    }
    else {
        if (!take(c, ',') || !take_name(c, "value")) {
            outside();
            goto done;
        }
        inner = take_word(c, "null", 4) ? Py_NewRef(Py_None) : value_member(c, shared, wanted, repeated);
        if (inner == NULL) goto done;
        if (!take(c, '}')) {
            outside();
            goto done;
        }
    }
    result = wanted ? PyDict_SetItem(decoded, kept_key, inner) : 0;
done:
    Py_XDECREF(inner);
    Py_XDECREF(kept_key);
    return result;
}

static PyObject *
parse_attributes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!reader_arguments(args, nargs, "parse(raw, shared, kept)")) {
        return NULL;
    }
    PyObject *raw = args[0], *shared = args[1], *kept = args[2];
    PyObject *decoded = PyDict_New();
    if (decoded == NULL || raw == Py_None) { /* no attributes member */
        return decoded;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(decoded);
        return NULL;
    }
    /* The view holds the text while helpers called back run Python code. */
    Cursor c = {(const char *)view.buf, (const char *)view.buf + view.len};
    int failed = 0;
    if (take_word(&c, "null", 4)) {
        /* null: no attributes */
    }
    else if (!take(&c, '[')) {
        failed = 1;
    }
    else if (!take(&c, ']')) {
        do {
            if (parse_one(&c, decoded, shared, kept) < 0) {
                failed = -1;
                break;
            }
        } while (take(&c, ','));
        if (!failed && !take(&c, ']')) {
            failed = 1;
        }
    }
    if (!failed) {
        skip_space(&c);
        failed = c.p != c.end;
    }
    PyBuffer_Release(&view);
    if (failed) {
        /* Whatever went wrong, the records are read instead (and raise what the reference reader
         * is to word): a value the records would not even convert may be one of several members,
         * of which msgspec's precedence takes another. Running out of memory, an interrupt or an
         * exit stay as they are. */
        if (failed > 0 || (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError))) {
            PyErr_Clear();
            outside();
        }
        Py_DECREF(decoded);
        return NULL;
    }
    return decoded;
}

/* Where a record type keeps a field: its slot's offset, into *offset. */
static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descriptor = PyObject_GetAttrString((PyObject *)type, name);
    if (descriptor == NULL) {
        return -1;
    }
    int slot = Py_IS_TYPE(descriptor, &PyMemberDescr_Type);
    PyMemberDef *member = slot ? ((PyMemberDescrObject *)descriptor)->d_member : NULL;
    if (member == NULL || (member->type != T_OBJECT_EX && member->type != T_OBJECT)) {
        Py_DECREF(descriptor);
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    *offset = member->offset;
    Py_DECREF(descriptor);
    return 0;
}

static int
field_offset(PyTypeObject *type, int which, Py_ssize_t *offset)
{
    return slot_offset(type, field_names[which], offset);
}

/* --- One span's facts, as _typed_otlp._read_span reads them ----------------------------------
 *
 * read_span() follows the Python function line by line, with the same conversions through the
 * C-API calls the builtins make. Of its helpers, counts_in_range is done here in full, and the
 * usual cases of step_kind and session_facts (an operation name, a session id that is a str);
 * any other span calls them. The per-line setup is done once in configure_spans(). Whatever
 * raises here raises there too, and the reference reader reads the line. */

enum { TRACE_ID, SPAN_ID, PARENT_ID, NAME, START, END, STATUS, SPAN_FIELDS };
static const char *const span_field_names[SPAN_FIELDS] = {
    "traceId", "spanId", "parentSpanId", "name", "startTimeUnixNano", "endTimeUnixNano", "status",
};

/* What configure_spans() was given, with the records' layout. read_span() holds the one current
 * when it is called for the whole call: a helper it calls back may configure the module anew. */
enum { SPAN_TYPE, STATUS_TYPE, STEP_KIND, KIND_OF_OPERATION, OPERATION_KEY, COUNT_KEYS, MAX_COUNT, SESSION_FACTS,
       SESSION_KEY, SESSION_OPERATION, ERROR_CODES, NESTED_KEY, MAX_UNIX_NANO, UNUSUAL, SPAN_OBJECTS };
static const char *const span_object_names =
    "configure_spans(span_type, status_type, step_kind, kind_of_operation, operation_key, count_keys, max_count, "
    "session_facts, session_key, session_operation, error_codes, nested_key, max_unix_nano, unusual)";
typedef struct {
    PyObject *objects[SPAN_OBJECTS]; /* strong references */
    Py_ssize_t offsets[SPAN_FIELDS], code_offset;
    long long max_count;
} SpanConfig;
static PyObject *span_config; /* a capsule of the current SpanConfig */
static PyObject *empty_string, *zero;

static void
free_span_config(PyObject *capsule)
{
    SpanConfig *config = PyCapsule_GetPointer(capsule, NULL);
    for (int i = 0; i < SPAN_OBJECTS; i++) {
        Py_XDECREF(config->objects[i]);
    }
    PyMem_Free(config);
}

/* A span field (new reference). */
static PyObject *
span_field(const SpanConfig *config, PyObject *span, int which)
{
    return slot_value(span, config->offsets[which], span_field_names[which]);
}

/* ``span.<field> or ""``, which must then be a str (new reference); else _Unusual. */
static PyObject *
id_field(const SpanConfig *config, PyObject *span, int which)
{
    PyObject *value = span_field(config, span, which);
    if (value == NULL || PyUnicode_CheckExact(value)) {
        return value;
    }
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (truth < 0) {
        return NULL;
    }
    if (truth) {
        PyErr_SetNone(config->objects[UNUSUAL]);
        return NULL;
    }
    return Py_NewRef(empty_string);
}

/* ``int(span.<field> or 0)``, which must be from 0 to 2**64-1 (new reference); else _Unusual. */
static PyObject *
time_field(const SpanConfig *config, PyObject *span, int which)
{
    PyObject *value = span_field(config, span, which);
    if (value == NULL) {
        return NULL;
    }
    int truth = PyObject_IsTrue(value);
    PyObject *number = truth < 0 ? NULL : PyNumber_Long(truth ? value : zero); /* what int(x) calls */
    Py_DECREF(value);
    if (number == NULL) {
        return NULL;
    }
    int low = PyObject_RichCompareBool(number, zero, Py_GE);
    int high = low > 0 ? PyObject_RichCompareBool(number, config->objects[MAX_UNIX_NANO], Py_LE) : low;
    if (high <= 0) {
        if (high == 0) {
            PyErr_SetNone(config->objects[UNUSUAL]);
        }
        Py_DECREF(number);
        return NULL;
    }
    return number;
}

/* Whether the span failed: ``code in ERROR_CODES if code else False``, code from its status. */
static int
failed_status(const SpanConfig *config, PyObject *span)
{
    PyObject *status = span_field(config, span, STATUS);
    if (status == NULL) {
        return -1;
    }
    int error = 0;
    if (status != Py_None) {
        if ((PyObject *)Py_TYPE(status) != config->objects[STATUS_TYPE]) {
            PyErr_SetString(PyExc_TypeError, "not a _Status record");
            error = -1;
        }
        else {
            PyObject *code = slot_value(status, config->code_offset, "code");
            if (code == NULL) {
                error = -1;
            }
            else {
                error = PyObject_IsTrue(code);
                if (error > 0) {
                    error = PySequence_Contains(config->objects[ERROR_CODES], code);
                }
                Py_DECREF(code);
            }
        }
    }
    Py_DECREF(status);
    return error;
}

/* step_kind(attrs): an operation name that is a str is looked up in kind_of_operation (the table
 * step_kind reads it from: absent, no step); any other span calls step_kind. New reference. */
static PyObject *
kind_of(const SpanConfig *config, PyObject *attrs)
{
    PyObject *operation = PyDict_GetItemWithError(attrs, config->objects[OPERATION_KEY]);
    if (operation == NULL && PyErr_Occurred()) {
        return NULL;
    }
    if (operation == NULL || !PyUnicode_CheckExact(operation)) {
        return PyObject_CallOneArg(config->objects[STEP_KIND], attrs);
    }
    Py_INCREF(operation);
    PyObject *kind = PyDict_GetItemWithError(config->objects[KIND_OF_OPERATION], operation);
    Py_DECREF(operation);
    if (kind == NULL && PyErr_Occurred()) {
        return NULL;
    }
    return Py_NewRef(kind != NULL ? kind : Py_None);
}

/* counts_in_range(attrs): every count the judge reads that the span holds is an int from 0 to
 * max_count (1), else 0; -1 with an exception set. */
static int
counts_in_range(const SpanConfig *config, PyObject *attrs)
{
    PyObject *keys = config->objects[COUNT_KEYS];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *value = PyDict_GetItemWithError(attrs, PyTuple_GET_ITEM(keys, i));
        if (value == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        if (!PyLong_CheckExact(value)) {
            return 0;
        }
        int overflow;
        long long count = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (count == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow || count < 0 || count > config->max_count) {
            return 0;
        }
    }
    return 1;
}

/* session_facts(attrs, path, start, end, error): a span naming its session by a non-empty str
 * that is no session span is (session id, None) here; any other span calls session_facts.
 * New reference. */
static PyObject *
session_facts(const SpanConfig *config, PyObject *attrs, PyObject *path, PyObject *start, PyObject *end, int error)
{
    PyObject *const *objects = config->objects;
    PyObject *session_id = PyDict_GetItemWithError(attrs, objects[SESSION_KEY]);
    if (session_id == NULL && PyErr_Occurred()) {
        return NULL;
    }
    if (session_id != NULL && PyUnicode_CheckExact(session_id) && PyUnicode_GET_LENGTH(session_id) > 0) {
        Py_INCREF(session_id);
        PyObject *operation = PyDict_GetItemWithError(attrs, objects[OPERATION_KEY]);
        /* 1: no session span (no operation name, or a str that is not the session's); 0: ask
         * session_facts; -1: the lookup raised. */
        int plain = operation == NULL ? (PyErr_Occurred() ? -1 : 1)
                    : PyUnicode_CheckExact(operation) && PyUnicode_Compare(operation, objects[SESSION_OPERATION]) != 0;
        PyObject *facts = plain > 0 ? PyTuple_Pack(2, session_id, Py_None) : NULL;
        Py_DECREF(session_id);
        if (plain != 0) {
            return facts;
        }
    }
    PyObject *args[5] = {attrs, path, start, end, error ? Py_True : Py_False};
    PyObject *facts = PyObject_Vectorcall(objects[SESSION_FACTS], args, 5, NULL);
    if (facts != NULL && (!PyTuple_CheckExact(facts) || PyTuple_GET_SIZE(facts) != 2)) {
        PyErr_SetString(PyExc_TypeError, "session_facts must return a pair");
        Py_CLEAR(facts);
    }
    return facts;
}

/* The facts of one span from its record and attributes (the steps of _read_span, in order). */
static PyObject *
span_facts(const SpanConfig *config, PyObject *span, PyObject *attrs, PyObject *path, PyObject *shared)
{
    PyObject *const *objects = config->objects;
    PyObject *span_id = NULL, *parent_id = NULL, *trace_id = NULL, *start = NULL, *end = NULL, *nested = NULL,
             *kind = NULL, *name = NULL, *facts = NULL, *result = NULL;
    if ((span_id = id_field(config, span, SPAN_ID)) == NULL || (parent_id = id_field(config, span, PARENT_ID)) == NULL
        || (trace_id = id_field(config, span, TRACE_ID)) == NULL) {
        goto done;
    }
    Py_SETREF(trace_id, kept_once(shared, trace_id));
    if (trace_id == NULL) goto done;
    Py_SETREF(parent_id, kept_once(shared, parent_id));
    if (parent_id == NULL) goto done;
    if (PyUnicode_GET_LENGTH(span_id) == 0 || PyUnicode_GET_LENGTH(trace_id) == 0) {
        PyErr_SetNone(objects[UNUSUAL]);
        goto done;
    }
    if ((start = time_field(config, span, START)) == NULL || (end = time_field(config, span, END)) == NULL) goto done;
    int error = failed_status(config, span);
    if (error < 0) goto done;
    nested = PyDict_GetItemWithError(attrs, objects[NESTED_KEY]);
    Py_XINCREF(nested);
    int is_nested = nested == NULL ? (PyErr_Occurred() ? -1 : 0) : PyObject_IsTrue(nested);
    if (is_nested < 0) goto done;
    kind = is_nested ? Py_NewRef(Py_None) : kind_of(config, attrs);
    if (kind == NULL) goto done;
    if (kind == Py_None) {
        name = Py_NewRef(empty_string);
    }
    else {
        int in_range = counts_in_range(config, attrs);
        if (in_range <= 0) {
            if (in_range == 0) PyErr_SetNone(objects[UNUSUAL]);
            goto done;
        }
        if ((name = span_field(config, span, NAME)) == NULL) goto done;
        int named = PyObject_IsTrue(name);
        if (named < 0) goto done;
        if (!named) {
            Py_SETREF(name, Py_NewRef(empty_string));
        }
        if (PyUnicode_CheckExact(name)) {
            Py_SETREF(name, kept_once(shared, name));
        }
        else {
            Py_SETREF(name, PyObject_Str(name));
        }
        if (name == NULL) goto done;
    }
    facts = session_facts(config, attrs, path, start, end, error);
    if (facts == NULL) goto done;
    result = PyTuple_Pack(11, kind, attrs, name, trace_id, span_id, parent_id, start, end, error ? Py_True : Py_False,
                          PyTuple_GET_ITEM(facts, 0), PyTuple_GET_ITEM(facts, 1));
done:
    Py_XDECREF(span_id);
    Py_XDECREF(parent_id);
    Py_XDECREF(trace_id);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_XDECREF(nested);
    Py_XDECREF(kind);
    Py_XDECREF(name);
    Py_XDECREF(facts);
    return result;
}

static PyObject *
read_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_span(span, attrs, path, shared) takes four arguments");
        return NULL;
    }
    if (span_config == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_spans() was not called");
        return NULL;
    }
    PyObject *holder = Py_NewRef(span_config);
    const SpanConfig *config = PyCapsule_GetPointer(holder, NULL);
    PyObject *span = args[0], *attrs = args[1], *path = args[2], *shared = args[3], *result = NULL;
    if ((PyObject *)Py_TYPE(span) != config->objects[SPAN_TYPE] || !PyDict_CheckExact(attrs)
        || !PyDict_CheckExact(shared)) {
        PyErr_SetString(PyExc_TypeError, "read_span(span, attrs, path, shared): a _Span record and two dicts");
    }
    else {
        result = span_facts(config, span, attrs, path, shared);
    }
    Py_DECREF(holder);
    return result;
}

static PyObject *
configure_spans(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != SPAN_OBJECTS) {
        PyErr_SetString(PyExc_TypeError, span_object_names);
        return NULL;
    }
    if (!PyType_Check(args[SPAN_TYPE]) || !PyType_Check(args[STATUS_TYPE]) || !PyDict_CheckExact(args[KIND_OF_OPERATION])
        || !PyTuple_CheckExact(args[COUNT_KEYS]) || !PyLong_CheckExact(args[MAX_COUNT])
        || !PyUnicode_CheckExact(args[SESSION_OPERATION]) || !PyExceptionClass_Check(args[UNUSUAL])) {
        PyErr_Format(PyExc_TypeError, "%s: two types, a dict, ..., a tuple, an int, ..., a str, ..., and an exception "
                     "class", span_object_names);
        return NULL;
    }
    int overflow;
    long long max_count = PyLong_AsLongLongAndOverflow(args[MAX_COUNT], &overflow);
    if (overflow) {  /* refused as any other argument is: the package then reads spans in Python */
        PyErr_Format(PyExc_TypeError, "%s: max_count beyond a signed 64-bit int", span_object_names);
        return NULL;
    }
    if (max_count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((empty_string == NULL && (empty_string = PyUnicode_FromString("")) == NULL)
        || (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)) {
        return NULL;
    }
    SpanConfig *config = PyMem_Calloc(1, sizeof(SpanConfig));
    if (config == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(config, NULL, free_span_config);
    if (capsule == NULL) {
        PyMem_Free(config);
        return NULL;
    }
    for (int i = 0; i < SPAN_OBJECTS; i++) {
        config->objects[i] = Py_NewRef(args[i]);
    }
    config->max_count = max_count;
    for (int which = 0; which < SPAN_FIELDS; which++) {
        if (slot_offset((PyTypeObject *)args[SPAN_TYPE], span_field_names[which], &config->offsets[which]) < 0) {
            Py_DECREF(capsule);
            return NULL;
        }
    }
    if (slot_offset((PyTypeObject *)args[STATUS_TYPE], "code", &config->code_offset) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    Py_XSETREF(span_config, capsule);
    Py_RETURN_NONE;
}

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "configure(key_value_type, any_value_type, shared_keys, repeated_keys, "
                                         "is_read_key, decode_array, decode_value, unset, unparsed)");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyDict_CheckExact(args[2])
        || !PyFrozenSet_CheckExact(args[3]) || !PyExceptionClass_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "expected two types, a dict, a frozenset, ..., and an exception class");
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
    forget_known_keys(); /* decided under the old configuration */
    PyObject **slots[9] = {&key_value_type, &any_value_type, &shared_keys, &repeated_keys,
                           &is_read_key, &decode_array, &decode_value, &unset, &unparsed};
    for (int i = 0; i < 9; i++) {
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"read", (PyCFunction)(void (*)(void))read_attributes, METH_FASTCALL,
     "read(items, shared, kept): the attributes of one span, as _typed_otlp._attributes reads them."},
    {"parse", (PyCFunction)(void (*)(void))parse_attributes, METH_FASTCALL,
     "parse(raw, shared, kept): the same from the attributes' JSON text (msgspec.Raw), or Unparsed."},
    {"read_span", (PyCFunction)(void (*)(void))read_span, METH_FASTCALL,
     "read_span(span, attrs, path, shared): one span's facts, as _typed_otlp._read_span reads them."},
    {"configure_spans", (PyCFunction)(void (*)(void))configure_spans, METH_FASTCALL,
     "configure_spans(span_type, status_type, step_kind, kind_of_operation, operation_key, count_keys, max_count, "
     "session_facts, session_key, session_operation, error_codes, nested_key, max_unix_nano, unusual): what "
     "read_span() uses."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(key_value_type, any_value_type, shared_keys, repeated_keys, is_read_key, decode_array, "
     "decode_value, unset, unparsed): what read() and parse() use."},
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
