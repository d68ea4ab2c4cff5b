/* What the two compiled matchers share (_fastnorm.c, _fastentities.c): the text being
 * matched, one table of character classes holding both modules' classes, the small
 * scanning helpers their hand-translated regexes are written with, and FNV-1a (the
 * fingerprints that tie each translation to the regex it was written from).
 *
 * Everything here is static: each module gets its own copy, and its module init calls
 * init_classes() once. Only ASCII text is matched (the callers check), so `\w`, `\d` and
 * `\s` read the same with and without re.ASCII: [A-Za-z0-9_], [0-9], and for `\s` the
 * Unicode set's ASCII members (which include \x1c-\x1f).
 */
#ifndef FIDELITY_TEXTSCAN_H
#define FIDELITY_TEXTSCAN_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef Py_ssize_t ssz;

/* -- character classes ------------------------------------------------------------------- */

enum {
    K_W = 1 << 0,       /* \w */
    K_D = 1 << 1,       /* \d, [0-9] */
    K_HX = 1 << 2,      /* [0-9a-fA-F] */
    K_HL = 1 << 3,      /* [0-9a-f] */
    K_SP = 1 << 4,      /* \s (Unicode's ASCII members) */
    K_TOK = 1 << 5,     /* [\w.~+/%-] */
    K_BEAR = 1 << 6,    /* [\w.~+/-] */
    K_AL = 1 << 7,      /* [A-Za-z] */
    K_AN = 1 << 8,      /* [A-Za-z0-9] */
    K_LDU = 1 << 9,     /* [a-z0-9_] */
    K_WD = 1 << 10,     /* [\w-] */
    K_AF = 1 << 11,     /* [a-f] */
    K_LO = 1 << 12,     /* [a-z] */
    K_ST = 1 << 13,     /* [ \t] */
    K_NSL = 1 << 14,    /* [^/\s] */
    K_UP = 1 << 15,     /* [A-Z] */
    K_PATH = 1 << 16,   /* [\w.@+~-] */
    K_SCHEME = 1 << 17, /* [a-z0-9+.-] */
    K_URL = 1 << 18,    /* [^\s<>"'`] */
    K_FILE = 1 << 19,   /* [\w.+-] */
    K_PKG = 1 << 20,    /* [\w.-] */
    K_WDOT = 1 << 21,   /* [\w.] */
    K_LEAD = 1 << 22,   /* [\w.~@+</-]: what an entity can start with */
    K_TAIL = 1 << 23,   /* [0-9a-z.]: what a package version's tail holds */
};

static uint32_t K[256];

static void init_classes(void)
{
    for (int c = 0; c < 256; c++) {
        uint32_t k = 0;
        int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z', digit = c >= '0' && c <= '9';
        int word = lower || upper || digit || c == '_';
        int space = c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
        if (c >= 128) {
            K[c] = K_NSL; /* never seen: the text is ASCII */
            continue;
        }
        if (word) k |= K_W | K_WD | K_PATH | K_FILE | K_PKG | K_WDOT | K_LEAD;
        if (digit) k |= K_D;
        if (digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) k |= K_HX;
        if (digit || (c >= 'a' && c <= 'f')) k |= K_HL;
        if (space) k |= K_SP;
        if (word || c == '.' || c == '~' || c == '+' || c == '/' || c == '%' || c == '-') k |= K_TOK;
        if (word || c == '.' || c == '~' || c == '+' || c == '/' || c == '-') k |= K_BEAR;
        if (lower || upper) k |= K_AL;
        if (lower || upper || digit) k |= K_AN;
        if (lower || digit || c == '_') k |= K_LDU;
        if (c == '-') k |= K_WD;
        if (c >= 'a' && c <= 'f') k |= K_AF;
        if (lower) k |= K_LO;
        if (c == ' ' || c == '\t') k |= K_ST;
        if (c != '/' && !space) k |= K_NSL;
        if (upper) k |= K_UP;
        if (c == '.' || c == '@' || c == '+' || c == '~' || c == '-') k |= K_PATH;
        if (lower || digit || c == '+' || c == '.' || c == '-') k |= K_SCHEME;
        if (!space && c != '<' && c != '>' && c != '"' && c != '\'' && c != '`') k |= K_URL;
        if (c == '.' || c == '+' || c == '-') k |= K_FILE;
        if (c == '.' || c == '-') k |= K_PKG;
        if (c == '.') k |= K_WDOT;
        if (c == '.' || c == '~' || c == '@' || c == '+' || c == '<' || c == '/' || c == '-')
            k |= K_LEAD;
        if (lower || digit || c == '.') k |= K_TAIL;
        K[c] = k;
    }
}

/* -- the text and its helpers ------------------------------------------------------------- */

/* The text being matched: s[0..n). */
typedef struct {
    const unsigned char *s;
    ssz n;
} Text;

/* character at i, or -1 outside the text */
static inline int at(const Text *t, ssz i) { return i >= 0 && i < t->n ? t->s[i] : -1; }
/* is the character at i in class k (false outside the text) */
static inline int is(const Text *t, ssz i, uint32_t k) { return i >= 0 && i < t->n && (K[t->s[i]] & k); }
/* length of the run of class k from i */
static inline ssz run(const Text *t, ssz i, uint32_t k)
{
    ssz j = i;
    while (j < t->n && (K[t->s[j]] & k)) j++;
    return j - i;
}
/* length of the run of class k from i, counted up to most (a possessive {1,N}+ needs N + 1) */
static inline ssz run_upto(const Text *t, ssz i, uint32_t k, ssz most)
{
    ssz j = i;
    while (j < t->n && j - i < most && (K[t->s[j]] & k)) j++;
    return j - i;
}
/* length of the run of character c from i */
static inline ssz run_of(const Text *t, ssz i, int c)
{
    ssz j = i;
    while (j < t->n && t->s[j] == c) j++;
    return j - i;
}
/* does the literal lit[0..len) stand at i */
static inline int starts(const Text *t, ssz i, const char *lit, ssz len)
{
    if (i < 0 || i + len > t->n) return 0;
    for (ssz j = 0; j < len; j++)
        if (t->s[i + j] != (unsigned char)lit[j]) return 0;
    return 1;
}
/* is c (a result of at(): -1 outside the text) one of the characters of set */
static inline int one_of(int c, const char *set)
{
    if (c <= 0) return 0;
    for (; *set; set++)
        if (*set == c) return 1;
    return 0;
}

/* -- fingerprints -------------------------------------------------------------------------- */

#define FNV_OFFSET 0xcbf29ce484222325ULL

/* FNV-1a of data[0..len) continuing from h (FNV_OFFSET to start) */
static inline uint64_t fnv1a(uint64_t h, const void *data, ssz len)
{
    const unsigned char *bytes = data;
    for (ssz i = 0; i < len; i++) {
        h ^= bytes[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#endif
