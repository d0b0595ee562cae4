/* The canonical form of a short JSON text, written from the text itself (part of _plain_check.c,
 * included after its writer, whose Buffer, put(), put_escaped() and put_number() it uses).
 *
 * A foreign span's tool arguments and result are JSON text. Decoding the text into Python objects
 * only to write them back out in the canonical form was most of what fingerprinting it cost; this
 * reads the text once and writes the form as it goes:
 *
 *   - an object's members are written in the order they come, then put in the order of their keys
 *     (UTF-8 bytes sort as code points do, which is how the reference sorts str keys);
 *   - a string is written with the canonical escapes (those of json.encoder.encode_basestring),
 *     whatever escapes the text used; a string value spelled as a JSON number becomes that number;
 *   - a number is written as the value json.loads reads is written: an integer as its digits, a
 *     fraction or an exponent as a float (write_float's canonical spelling);
 *   - whether a result is empty (fingerprint.is_empty of the decoded value) is told on the way.
 *
 * It accepts strict JSON only, a subset of what json.loads reads, and only texts whose value the
 * canonical form writes as plain JSON. It refuses (1, no error set) anything else, and the caller
 * then decodes the text and writes the form the usual way, which decides. Refused: NaN and
 * Infinity, a lone surrogate, a raw control character in a string, a duplicate key (json.loads keeps
 * the last), a key that needs an escape (its bytes would not sort as its text), a noise or unordered
 * key (the form drops the one and sorts the other's list), an integral float from 1e16 up, a
 * number longer than NUMBER_TEXT, nesting at the depth bound, more values than allowed (and than the
 * walk's budget), an object of more than MAX_MEMBERS members and a text beyond the walk's text budget.
 */

#define MAX_SPECIAL_KEYS 32 /* more noise and unordered keys than this: refused */
#define MAX_MEMBERS 64      /* an object with more members is refused (they are put in order by insertion) */
#define MAX_VALUES 50000    /* the walk's value budget (fingerprint._MAX_NODES), whatever the caller allows */
#define MAX_TEXT (4 << 20)  /* the walk's text budget (fingerprint._MAX_TEXT): a longer text is refused */
#define SPECIAL_SETS 8      /* the sets of special keys whose UTF-8 is at hand (one per tool contract) */

/* A frozenset of special keys as UTF-8, held (strongly) so that its address names no other set
 * and its strs' UTF-8 stays valid. */
typedef struct {
    PyObject *set;
    int count;
    const char *key[MAX_SPECIAL_KEYS];
    Py_ssize_t length[MAX_SPECIAL_KEYS];
} SpecialKeys;

static SpecialKeys special_sets[SPECIAL_SETS];
static int next_special_set;

typedef struct {
    Py_ssize_t start;   /* where its '"key":value' begins in the output */
    Py_ssize_t end;     /* where it ends (set once the object is complete) */
    Py_ssize_t key_len; /* the key's UTF-8 bytes, just after start's quote */
} Member;

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t length;
    Py_ssize_t at;
    Buffer *out;
    Member *members; /* a stack: the members of every object still open */
    Py_ssize_t members_count;
    Py_ssize_t members_capacity;
    Py_ssize_t values_left;
    const SpecialKeys *special;
} Reader;

#define PEEK(r) ((r)->at < (r)->length ? PyUnicode_READ((r)->kind, (r)->data, (r)->at) : (Py_UCS4)-1)

static void
skip_whitespace(Reader *r)
{
    while (r->at < r->length) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, r->at);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            return;
        }
        r->at++;
    }
}

static int
hex_digit(Py_UCS4 c)
{
    return c >= '0' && c <= '9' ? (int)(c - '0')
        : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
        : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
}

/* The four hex digits of a \u escape at r->at, or -1. */
static long
read_hex4(Reader *r)
{
    if (r->at + 4 > r->length) {
        return -1;
    }
    long value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_digit(PyUnicode_READ(r->kind, r->data, r->at + i));
        if (digit < 0) {
            return -1;
        }
        value = value * 16 + digit;
    }
    r->at += 4;
    return value;
}

/* One character of a string, escapes decoded: the code point, or -1 to refuse the text. The
 * closing quote is the caller's. */
static long
read_char(Reader *r)
{
    Py_UCS4 c = PyUnicode_READ(r->kind, r->data, r->at);
    r->at++;
    if (c < 0x20 || Py_UNICODE_IS_SURROGATE(c)) {
        return -1;
    }
    if (c != '\\') {
        return (long)c;
    }
    switch (PEEK(r)) {
    case '"': r->at++; return '"';
    case '\\': r->at++; return '\\';
    case '/': r->at++; return '/';
    case 'b': r->at++; return '\b';
    case 'f': r->at++; return '\f';
    case 'n': r->at++; return '\n';
    case 'r': r->at++; return '\r';
    case 't': r->at++; return '\t';
    case 'u': break;
    default: return -1;
    }
    r->at++;
    long high = read_hex4(r);
    if (high < 0 || Py_UNICODE_IS_LOW_SURROGATE(high)) {
        return -1;
    }
    if (!Py_UNICODE_IS_HIGH_SURROGATE(high)) {
        return high;
    }
    if (PEEK(r) != '\\' || r->at + 1 >= r->length || PyUnicode_READ(r->kind, r->data, r->at + 1) != 'u') {
        return -1; /* a lone surrogate */
    }
    r->at += 2;
    long low = read_hex4(r);
    if (low < 0 || !Py_UNICODE_IS_LOW_SURROGATE(low)) {
        return -1;
    }
    return (long)Py_UNICODE_JOIN_SURROGATES(high, low);
}

/* A code point in UTF-8 with the canonical escapes. */
static int
put_char(Buffer *b, Py_UCS4 c)
{
    if (reserve(b, 6) < 0) {
        return -1;
    }
    b->length = put_escaped(b->data + b->length, c) - b->data;
    return 0;
}

/* Whether a character is written as it is (printable ASCII but for the quote and backslash). */
static int
plain_ascii(Py_UCS4 c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* A string at r->at (its opening quote), written quoted; a value spelled as a JSON number is written
 * as that number. *key_len: for a key, its UTF-8 bytes (a key needing an escape is refused);
 * *empty: whether it is blank. */
static int
read_string(Reader *r, int is_key, Py_ssize_t *key_len, int *empty)
{
    Buffer *b = r->out;
    Py_ssize_t quote = b->length;
    if (put(b, "\"", 1) < 0) {
        return -1;
    }
    r->at++;
    int blank = 1, ascii = 1;
    Py_ssize_t chars = 0;
    for (;;) {
        if (r->at >= r->length) {
            return 1;
        }
        if (r->kind == PyUnicode_1BYTE_KIND) { /* most texts: a run of plain characters copied at once */
            const Py_UCS1 *text = (const Py_UCS1 *)r->data;
            Py_ssize_t end = r->at;
            while (end < r->length && plain_ascii(text[end])) {
                end++;
            }
            if (end > r->at) {
                for (Py_ssize_t i = r->at; blank && i < end; i++) {
                    blank = text[i] == ' ';
                }
                chars += end - r->at;
                if (put(b, (const char *)text + r->at, end - r->at) < 0) {
                    return -1;
                }
                r->at = end;
                if (r->at >= r->length) {
                    return 1;
                }
            }
        }
        if (PyUnicode_READ(r->kind, r->data, r->at) == '"') {
            r->at++;
            break;
        }
        long c = read_char(r);
        if (c < 0 || (is_key && (c < 0x20 || c == '"' || c == '\\'))) {
            return 1;
        }
        blank &= Py_UNICODE_ISSPACE((Py_UCS4)c) != 0;
        ascii &= c < 0x80;
        chars++;
        if (put_char(b, (Py_UCS4)c) < 0) {
            return -1;
        }
    }
    Py_ssize_t content = b->length - quote - 1;
    if (is_key) {
        *key_len = content;
        return put(b, "\"", 1);
    }
    *empty = blank;
    const char *text = b->data + quote + 1;
    if (ascii && chars > 0 && chars <= NUMBER_TEXT && (text[0] == '-' || is_digit((Py_UCS4)text[0])) &&
        spelled_as_number(PyUnicode_1BYTE_KIND, text, chars)) {
        char number[NUMBER_TEXT + 1];
        memcpy(number, text, (size_t)chars);
        number[chars] = '\0';
        b->length = quote;
        return put_number(b, number, chars);
    }
    return put(b, "\"", 1);
}

/* A number token at r->at, strictly JSON's grammar (json.loads reads more: NaN, Infinity). */
static int
read_number(Reader *r)
{
    char text[NUMBER_TEXT + 1];
    Py_ssize_t n = 0;
    while (r->at < r->length && n < NUMBER_TEXT) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, r->at);
        if (!(is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E')) {
            break;
        }
        text[n++] = (char)c;
        r->at++;
    }
    if (n == 0 || n == NUMBER_TEXT || !spelled_as_number(PyUnicode_1BYTE_KIND, text, n)) {
        return 1;
    }
    text[n] = '\0';
    return put_number(r->out, text, n); /* (out->numbers is set: an integral float from 1e16 up is refused) */
}

static int
read_literal(Reader *r, const char *word, Py_ssize_t n)
{
    if (r->at + n > r->length) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyUnicode_READ(r->kind, r->data, r->at + i) != (Py_UCS4)word[i]) {
            return 1;
        }
    }
    r->at += n;
    return put(r->out, word, n);
}

static int
by_member_key(const char *data, const Member *left, const Member *right)
{
    Py_ssize_t n = left->key_len < right->key_len ? left->key_len : right->key_len;
    int order = memcmp(data + left->start + 1, data + right->start + 1, (size_t)n);
    return order ? order : (left->key_len > right->key_len) - (left->key_len < right->key_len);
}

/* The members of the object just read (the top `count` of the stack) put in key order, in place
 * in the output (which ends with the last member); 1 for a duplicate key. */
static int
sort_members(Reader *r, Py_ssize_t count)
{
    Member *members = r->members + r->members_count - count;
    char *data = r->out->data;
    Py_ssize_t first = members[0].start; /* where the first member, as read, begins */
    for (Py_ssize_t i = 0; i < count; i++) {
        members[i].end = i + 1 < count ? members[i + 1].start - 1 : r->out->length; /* (less the comma) */
    }
    int sorted = 1;
    for (Py_ssize_t i = 1; i < count; i++) { /* insertion sort: objects are small, often in order */
        Member moving = members[i];
        Py_ssize_t j = i;
        int order;
        while (j > 0 && (order = by_member_key(data, &members[j - 1], &moving)) >= 0) {
            if (order == 0) {
                return 1;
            }
            members[j] = members[j - 1];
            j--;
            sorted = 0;
        }
        members[j] = moving;
    }
    if (sorted) {
        return 0;
    }
    Py_ssize_t size = r->out->length - first;
    char *copy = PyMem_Malloc((size_t)size);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, data + first, (size_t)size);
    char *out = data + first;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i) {
            *out++ = ',';
        }
        Py_ssize_t length = members[i].end - members[i].start;
        memcpy(out, copy + (members[i].start - first), (size_t)length);
        out += length;
    }
    PyMem_Free(copy);
    return 0;
}

static int
is_special(const Reader *r, const char *key, Py_ssize_t n)
{
    for (int i = 0; i < r->special->count; i++) {
        if (r->special->length[i] == n && memcmp(r->special->key[i], key, (size_t)n) == 0) {
            return 1;
        }
    }
    return 0;
}

static int read_value(Reader *r, long depth, long dict_depth, int *empty);

static int
push_member(Reader *r, Py_ssize_t start)
{
    if (r->members_count == r->members_capacity) {
        Py_ssize_t capacity = r->members_capacity ? 2 * r->members_capacity : 16;
        Member *members = PyMem_Realloc(r->members, (size_t)capacity * sizeof(Member));
        if (members == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->members = members;
        r->members_capacity = capacity;
    }
    r->members[r->members_count++] = (Member){start, 0, 0};
    return 0;
}

/* An object at r->at ('{'). *empty: fingerprint.is_empty's answer for it, `dict_depth` dicts down. */
static int
read_object(Reader *r, long depth, long dict_depth, int *empty)
{
    r->at++;
    if (put(r->out, "{", 1) < 0) {
        return -1;
    }
    skip_whitespace(r);
    Py_ssize_t count = 0;
    int all_empty = 1, status;
    if (PEEK(r) == '}') {
        r->at++;
        *empty = dict_depth <= 8;
        return put(r->out, "}", 1);
    }
    for (;;) {
        if (PEEK(r) != '"' || --r->values_left < 0 || count == MAX_MEMBERS) {
            return 1;
        }
        if ((count && put(r->out, ",", 1) < 0) || push_member(r, r->out->length) < 0) {
            return -1;
        }
        count++;
        Member *member = &r->members[r->members_count - 1];
        if ((status = read_string(r, 1, &member->key_len, NULL)) != 0) {
            return status;
        }
        if (is_special(r, r->out->data + member->start + 1, member->key_len)) {
            return 1;
        }
        skip_whitespace(r);
        if (PEEK(r) != ':' || put(r->out, ":", 1) < 0) {
            return PyErr_Occurred() ? -1 : 1;
        }
        r->at++;
        int value_empty = 0;
        if ((status = read_value(r, depth + 1, dict_depth + 1, &value_empty)) != 0) {
            return status;
        }
        all_empty &= value_empty;
        skip_whitespace(r);
        Py_UCS4 c = PEEK(r);
        r->at++;
        if (c == '}') {
            break;
        }
        if (c != ',') {
            return 1;
        }
        skip_whitespace(r);
    }
    if (count > 1 && (status = sort_members(r, count)) != 0) {
        return status;
    }
    r->members_count -= count;
    *empty = all_empty && dict_depth <= 8 && count <= 64;
    return put(r->out, "}", 1);
}

static int
read_array(Reader *r, long depth, int *empty)
{
    r->at++;
    if (put(r->out, "[", 1) < 0) {
        return -1;
    }
    skip_whitespace(r);
    *empty = PEEK(r) == ']';
    if (*empty) {
        r->at++;
        return put(r->out, "]", 1);
    }
    for (Py_ssize_t count = 0;; count++) {
        int item_empty, status;
        if (--r->values_left < 0) {
            return 1;
        }
        if ((count && put(r->out, ",", 1) < 0)) {
            return -1;
        }
        if ((status = read_value(r, depth + 1, 0, &item_empty)) != 0) {
            return status;
        }
        skip_whitespace(r);
        Py_UCS4 c = PEEK(r);
        r->at++;
        if (c == ']') {
            return put(r->out, "]", 1);
        }
        if (c != ',') {
            return 1;
        }
        skip_whitespace(r);
    }
}

static int
read_value(Reader *r, long depth, long dict_depth, int *empty)
{
    skip_whitespace(r);
    Py_UCS4 c = PEEK(r);
    *empty = 0;
    if (c == '"') {
        return read_string(r, 0, NULL, empty);
    }
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH) {
            return 1;
        }
        return c == '{' ? read_object(r, depth, dict_depth, empty) : read_array(r, depth, empty);
    }
    if (c == '-' || is_digit(c)) {
        return read_number(r);
    }
    if (c == 'n') {
        *empty = 1;
        return read_literal(r, "null", 4);
    }
    return c == 't' ? read_literal(r, "true", 4) : c == 'f' ? read_literal(r, "false", 5) : 1;
}

/* The special keys as UTF-8, read once per set; NULL (no error set) when the text path cannot honour
 * them: too many, a key that is no str, or one with a lone surrogate. A set that made way for this
 * one is handed back in *dropped, for the caller to release once the text is read: releasing it may
 * run code (a weak reference's callback), which could reuse the slot while the text is read. */
static const SpecialKeys *
special_keys(PyObject *special, PyObject **dropped)
{
    for (int i = 0; i < SPECIAL_SETS; i++) {
        if (special_sets[i].set == special) {
            return &special_sets[i];
        }
    }
    if (PySet_GET_SIZE(special) > MAX_SPECIAL_KEYS) {
        return NULL;
    }
    SpecialKeys found = {.set = special, .count = 0};
    PyObject *keys = PyObject_GetIter(special), *key; /* an exact frozenset's iterator runs no Python code */
    if (keys == NULL) {
        return NULL;
    }
    while ((key = PyIter_Next(keys)) != NULL) {
        /* (borrowed from here: the frozenset holds its keys) */
        const char *utf8 = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &found.length[found.count]) : NULL;
        Py_DECREF(key);
        if (utf8 == NULL) {
            Py_DECREF(keys);
            PyErr_Clear();
            return NULL;
        }
        found.key[found.count++] = utf8;
    }
    Py_DECREF(keys);
    if (PyErr_Occurred()) {
        return NULL;
    }
    SpecialKeys *slot = &special_sets[next_special_set];
    next_special_set = (next_special_set + 1) % SPECIAL_SETS;
    *dropped = slot->set;
    *slot = found;
    Py_INCREF(special);
    return slot;
}

/* The canonical form of the object or array the JSON text `text` holds, into `out` (whose
 * `numbers` is set), and whether it is empty: 0; 1 to refuse it (no error set); -1 with an error. */
static int
form_of_text(PyObject *text, PyObject *special, Py_ssize_t values_left, Buffer *out, int *empty)
{
    Reader r = {.out = out, .values_left = values_left < MAX_VALUES ? values_left : MAX_VALUES};
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return -1;
    }
#endif
    r.kind = PyUnicode_KIND(text);
    r.data = PyUnicode_DATA(text);
    r.length = PyUnicode_GET_LENGTH(text);
    if (r.length > MAX_TEXT) { /* (within it, long strings cannot spend the walk's text budget) */
        return 1;
    }
    PyObject *dropped = NULL;
    if ((r.special = special_keys(special, &dropped)) == NULL) {
        return PyErr_Occurred() ? -1 : 1;
    }
    Py_UCS4 first = PEEK(&r);
    int status = first == '{' ? read_object(&r, 0, 0, empty) : first == '[' ? read_array(&r, 0, empty) : 1;
    if (status == 0) {
        skip_whitespace(&r);
        status = r.at == r.length ? 0 : 1;
    }
    PyMem_Free(r.members);
    Py_XDECREF(dropped);
    return status;
}

#undef PEEK
