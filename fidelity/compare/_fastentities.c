/* The entity regex of entities.py (_ENTITY_RE), compiled.
 *
 * `entities(text)` returns what `{kind:value for m in _ENTITY_RE.finditer(text)}` builds in
 * entities._extract (package values through entities._package), for ASCII text. Each
 * alternative below is a hand translation of its regex with CPython's `re` semantics (leftmost
 * match, alternatives in order, greedy and lazy choices tried in the regex's order, the first
 * way that satisfies every lookaround wins). `matches_pattern` takes the regex's pattern and
 * answers whether it is the one translated here (FNV-1a fingerprint): entities.py uses this
 * code only then, so an edited regex runs in `re` until this file follows it.
 *
 * On ASCII text `\w`, `\d` and `\s` read the same with and without re.ASCII: [A-Za-z0-9_],
 * [0-9], and for `\s` the Unicode set's ASCII members (which include \x1c-\x1f).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_textscan.h" /* Text, the class table K (K_*), at/is/run/starts/one_of, fnv1a */

#define PATTERN_FINGERPRINT 0x4c13b14f7b58030aULL /* FNV-1a of entities._ENTITY_RE.pattern */

/* -- the alternatives: each returns the match end, or -1 (p: the lead character) ----------- */

/* url: (?<=[a-z])[a-z0-9+.-]{1,9}+://(?:[^\s<>"'`]|<[A-Z]+>)*(?<![.,;:!?)\]]) */
static ssz url(const Text *t, ssz p)
{
    if (!is(t, p, K_LO)) return -1;
    ssz k = run_upto(t, p + 1, K_SCHEME, 10); /* past 9 the same as 10: no "://" after 9 */
    if (k < 1) return -1;
    if (k > 9) k = 9;
    ssz q = p + 1 + k;
    if (!starts(t, q, "://", 3)) return -1;
    q += 3;
    ssz best = q; /* the longest run of tokens whose last character (?<!...) allows */
    while (q < t->n) {
        if (is(t, q, K_URL)) {
            q++;
        } else if (at(t, q) == '<') {
            ssz u = run(t, q + 1, K_UP);
            if (u < 1 || at(t, q + 1 + u) != '>') break;
            q += 2 + u;
        } else {
            break;
        }
        if (!one_of(at(t, q - 1), ".,;:!?)]")) best = q;
    }
    return best;
}

/* \d+(?:\.\d+)+(?:\.?[a-z]+\d*)? matching s[i..e) exactly */
static int version_tail(const Text *t, ssz i, ssz e)
{
    ssz d = run(t, i, K_D);
    if (d < 1) return 0;
    i += d;
    int groups = 0;
    while (i < e && at(t, i) == '.' && is(t, i + 1, K_D)) {
        i += 1 + run(t, i + 1, K_D);
        groups++;
    }
    if (!groups) return 0;
    if (i == e) return 1;
    if (at(t, i) == '.') i++;
    ssz letters = run(t, i, K_LO);
    if (letters < 1) return 0;
    i += letters;
    i += run(t, i, K_D);
    return i == e;
}

/* package: (?<=[A-Za-z])(?<![.@/-].)(?=[\w.]*+[=@-])[\w.-]*(?:==|@|(?<=[A-Za-z0-9])-)
 *          \d+(?:\.\d+)+(?:\.?[a-z]+\d*)?(?![\w.-]) */
static ssz package(const Text *t, ssz p)
{
    if (!is(t, p, K_AL) || one_of(at(t, p - 1), ".@/-")) return -1;
    if (!one_of(at(t, p + 1 + run(t, p + 1, K_WDOT)), "=@-")) return -1;
    ssz end = p + 1 + run(t, p + 1, K_PKG);
    /* the separator right after [\w.-]* : its greedy run first, then one character less... */
    for (ssz i = end; i >= p + 1; i--) {
        ssz tail;
        if (i == end && starts(t, i, "==", 2))
            tail = i + 2;
        else if (i == end && at(t, i) == '@')
            tail = i + 1;
        else if (at(t, i) == '-' && is(t, i - 1, K_AN) && i < end)
            tail = i + 1;
        else
            continue;
        ssz e = tail + run(t, tail, K_TAIL);
        if (is(t, e, K_PKG)) continue; /* (?![\w.-]) needs the version to end the run */
        if (version_tail(t, tail, e)) return e;
    }
    return -1;
}

static const char *const ERROR_ENDS[] = {"Error", "Exception", "Warning", "Interrupt", "Exit"};

/* error: (?<=[A-Z])\w*?(?:Error|Exception|Warning|Interrupt|Exit)(?!\w) */
static ssz error_class(const Text *t, ssz p)
{
    if (!is(t, p, K_UP)) return -1;
    ssz end = p + 1 + run(t, p + 1, K_W);
    ssz best = -1;
    for (size_t k = 0; k < sizeof ERROR_ENDS / sizeof *ERROR_ENDS; k++) {
        ssz len = (ssz)strlen(ERROR_ENDS[k]);
        ssz q = end - len;
        if (q >= p + 1 && starts(t, q, ERROR_ENDS[k], len) && (best < 0 || q < best)) best = q;
    }
    return best >= 0 ? end : -1;
}

/* error: (?<=S)topIteration(?!\w) */
static ssz stop_iteration(const Text *t, ssz p)
{
    if (at(t, p) != 'S' || !starts(t, p + 1, "topIteration", 12) || is(t, p + 13, K_W)) return -1;
    return p + 13;
}

/* test: (?<=[tT])(?<!\..)est(?:_\w+|[A-Z]\w*)(?![\w.]) */
static ssz test_name(const Text *t, ssz p)
{
    if (!one_of(at(t, p), "tT") || at(t, p - 1) == '.' || !starts(t, p + 1, "est", 3)) return -1;
    ssz q = p + 4;
    if (at(t, q) == '_' && is(t, q + 1, K_W)) {
        ssz e = q + 1 + run(t, q + 1, K_W);
        if (at(t, e) != '.') return e;
    }
    if (is(t, q, K_UP)) {
        ssz e = q + 1 + run(t, q + 1, K_W);
        if (at(t, e) != '.') return e;
    }
    return -1;
}

/* (?:/[\w.@+~-]++)* from q: the end of the segments (count: how many) */
static ssz path_segments(const Text *t, ssz q, int *count)
{
    *count = 0;
    while (at(t, q) == '/' && is(t, q + 1, K_PATH)) {
        q += 1 + run(t, q + 1, K_PATH);
        (*count)++;
    }
    return q;
}

/* path: (?<=<)[A-Z]+>(?:/[\w.@+~-]++)+/? */
static ssz placeholder_path(const Text *t, ssz p)
{
    if (at(t, p) != '<') return -1;
    ssz u = run(t, p + 1, K_UP);
    if (u < 1 || at(t, p + 1 + u) != '>') return -1;
    int count;
    ssz e = path_segments(t, p + 2 + u, &count);
    if (!count) return -1;
    return at(t, e) == '/' ? e + 1 : e;
}

/* path: (?<=/)(?<![.~@+/-].)[\w.@+~-]++(?:/[\w.@+~-]++)*+/? */
static ssz rooted_path(const Text *t, ssz p)
{
    if (at(t, p) != '/' || one_of(at(t, p - 1), ".~@+/-")) return -1;
    ssz k = run(t, p + 1, K_PATH);
    if (k < 1) return -1;
    int count;
    ssz e = path_segments(t, p + 1 + k, &count);
    return at(t, e) == '/' ? e + 1 : e;
}

/* path: (?<=[\w.~@+-])(?<![.~@+/-].)[\w.@+~-]*+(?:(?:/[\w.@+~-]++)++/?|/(?![\w.])) */
static ssz relative_path(const Text *t, ssz p)
{
    if (!is(t, p, K_PATH) || one_of(at(t, p - 1), ".~@+/-")) return -1;
    ssz q = p + 1 + run(t, p + 1, K_PATH);
    if (at(t, q) != '/') return -1;
    int count;
    ssz e = path_segments(t, q, &count);
    if (count) return at(t, e) == '/' ? e + 1 : e;
    return is(t, q + 1, K_W) || at(t, q + 1) == '.' ? -1 : q + 1;
}

/* (?!\w|\.\w) at i */
static inline int number_ends(const Text *t, ssz i)
{
    return !is(t, i, K_W) && !(at(t, i) == '.' && is(t, i + 1, K_W));
}

/* number: (?<=[0-9])(?<![.,].)(?<!\w-.)[0-9]*+(?:[.,][0-9]++)*+
 *         (?:[KMGTP]i?B?|[kKMGT]B|%|[kmg]b)?(?!\w|\.\w) */
static ssz number(const Text *t, ssz p)
{
    if (!is(t, p, K_D) || one_of(at(t, p - 1), ".,")) return -1;
    if (at(t, p - 1) == '-' && is(t, p - 2, K_W)) return -1;
    ssz q = p + 1 + run(t, p + 1, K_D);
    while (one_of(at(t, q), ".,") && is(t, q + 1, K_D)) q += 1 + run(t, q + 1, K_D);
    ssz ends[8];
    int count = 0;
    int c = at(t, q);
    if (one_of(c, "KMGTP")) {
        if (at(t, q + 1) == 'i') {
            if (at(t, q + 2) == 'B') ends[count++] = q + 3;
            ends[count++] = q + 2;
        }
        if (at(t, q + 1) == 'B') ends[count++] = q + 2;
        ends[count++] = q + 1;
    }
    if (one_of(c, "kKMGT") && at(t, q + 1) == 'B') ends[count++] = q + 2;
    if (c == '%') ends[count++] = q + 1;
    if (one_of(c, "kmg") && at(t, q + 1) == 'b') ends[count++] = q + 2;
    ends[count++] = q;
    for (int a = 0; a < count; a++)
        if (number_ends(t, ends[a])) return ends[a];
    return -1;
}

/* (?![\w/-]) at i */
static inline int name_ends(const Text *t, ssz i)
{
    return !is(t, i, K_W) && at(t, i) != '/' && at(t, i) != '-';
}

/* file: (?<=[\w.])(?<![.>+-].)[\w.+-]*\.(?=[a-zA-Z0-9]*[A-Za-z])(?:[a-z0-9]{1,8}|[A-Z0-9]{1,4})
 *       (?![\w/-]) */
static ssz file_name(const Text *t, ssz p)
{
    if (!is(t, p, K_WDOT) || one_of(at(t, p - 1), ".>+-")) return -1;
    ssz end = p + 1 + run(t, p + 1, K_FILE);
    for (ssz d = end - 1; d >= p + 1; d--) {
        if (at(t, d) != '.') continue;
        ssz i = d + 1, letter = 0; /* (?=[a-zA-Z0-9]*[A-Za-z]) */
        while (i < t->n && (K[t->s[i]] & K_AN)) {
            if (K[t->s[i]] & K_AL) letter = 1;
            i++;
        }
        if (!letter) continue;
        ssz lower = run(t, d + 1, K_LO | K_D);
        if (lower >= 1 && lower <= 8 && name_ends(t, d + 1 + lower)) return d + 1 + lower;
        ssz upper = run(t, d + 1, K_UP | K_D);
        if (upper >= 1 && upper <= 4 && name_ends(t, d + 1 + upper)) return d + 1 + upper;
    }
    return -1;
}

/* file: (?<=\.)(?<![.>-].)\w[\w.-]*+(?<!\.)(?![\w/-]) */
static ssz dotfile(const Text *t, ssz p)
{
    if (at(t, p) != '.' || one_of(at(t, p - 1), ".>-") || !is(t, p + 1, K_W)) return -1;
    ssz e = p + 2 + run(t, p + 2, K_PKG);
    if (at(t, e - 1) == '.' || !name_ends(t, e)) return -1;
    return e;
}

typedef ssz (*Alternative)(const Text *, ssz);

static const Alternative ALTERNATIVES[] = {url,        package,      error_class,   stop_iteration,
                                           test_name,  placeholder_path, rooted_path, relative_path,
                                           number,     file_name,    dotfile};
static const char *const KINDS[] = {"url:",  "package:", "error:", "error:", "test:", "path:",
                                    "path:", "path:",    "number:", "file:", "file:"};
#define PACKAGE 1

/* entities._package: a dash before the version written `==` (value: s[start..end)) */
static PyObject *package_entity(const unsigned char *s, ssz start, ssz end)
{
    ssz len = end - start, dash = -1;
    int plain = 1;
    for (ssz i = start; i < end; i++) {
        if (s[i] == '@' || (s[i] == '=' && i + 1 < end && s[i + 1] == '=')) plain = 0;
        if (s[i] == '-') dash = i;
    }
    char *buffer = PyMem_Malloc((size_t)len + 16);
    if (!buffer) return PyErr_NoMemory();
    memcpy(buffer, "package:", 8);
    ssz n = 8;
    if (plain && dash >= 0 && dash + 1 < end && s[dash + 1] >= '0' && s[dash + 1] <= '9') {
        memcpy(buffer + n, s + start, (size_t)(dash - start));
        n += dash - start;
        memcpy(buffer + n, "==", 2);
        n += 2;
        memcpy(buffer + n, s + dash + 1, (size_t)(end - dash - 1));
        n += end - dash - 1;
    } else {
        memcpy(buffer + n, s + start, (size_t)len);
        n += len;
    }
    PyObject *value = PyUnicode_DecodeASCII(buffer, n, NULL);
    PyMem_Free(buffer);
    return value;
}

static PyObject *entity(const unsigned char *s, int kind, ssz start, ssz end)
{
    if (kind == PACKAGE) return package_entity(s, start, end);
    ssz prefix = (ssz)strlen(KINDS[kind]);
    PyObject *value = PyUnicode_New(prefix + end - start, 127);
    if (!value) return NULL;
    memcpy(PyUnicode_DATA(value), KINDS[kind], (size_t)prefix);
    memcpy((char *)PyUnicode_DATA(value) + prefix, s + start, (size_t)(end - start));
    return value;
}

/* entities(ascii_text) -> set of kind:value */
static PyObject *entities(PyObject *Py_UNUSED(self), PyObject *arg)
{
    if (!PyUnicode_Check(arg) || !PyUnicode_IS_ASCII(arg)) {
        PyErr_SetString(PyExc_ValueError, "_fastentities.entities takes ASCII text only");
        return NULL;
    }
    Text t = {(const unsigned char *)PyUnicode_DATA(arg), PyUnicode_GET_LENGTH(arg)};
    PyObject *found = PySet_New(NULL);
    if (!found) return NULL;
    ssz p = 0;
    while (p < t.n) {
        if (!(K[t.s[p]] & K_LEAD) || is(&t, p - 1, K_W)) {
            p++;
            continue;
        }
        ssz e = -1;
        int kind = 0;
        for (; kind < (int)(sizeof ALTERNATIVES / sizeof *ALTERNATIVES); kind++)
            if ((e = ALTERNATIVES[kind](&t, p)) >= 0) break;
        if (e < 0) {
            p++;
            continue;
        }
        PyObject *value = entity(t.s, kind, p, e);
        if (!value || PySet_Add(found, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(value);
        p = e > p ? e : p + 1;
    }
    return found;
}

static PyObject *matches_pattern(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *pattern;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &pattern, &len)) return NULL;
    return PyBool_FromLong(fnv1a(FNV_OFFSET, pattern, len) == PATTERN_FINGERPRINT);
}

static PyMethodDef METHODS[] = {
    {"entities", entities, METH_O, "entities(ascii_text) -> the set of kind:value _ENTITY_RE finds"},
    {"matches_pattern", matches_pattern, METH_VARARGS,
     "matches_pattern(pattern) -> whether this module translates that regex"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_fastentities", "The entity regex of entities.py, compiled.", -1,
    METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastentities(void)
{
    init_classes();
    return PyModule_Create(&MODULE);
}
