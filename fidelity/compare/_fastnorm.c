/* The line-local built-in normalization rules, compiled.
 *
 * Each matcher below is a hand translation of one rule's regular expression in
 * normalize.py (lead + pattern) with CPython's `re` semantics: leftmost match,
 * alternatives and greedy choices tried in the regex's own order, the first way
 * that satisfies every lookaround wins. A matcher is used only for the exact
 * rule it was written from: `rule_id` takes the rule's name, regex, replacement
 * and flags and answers -1 unless their FNV-1a fingerprint is the one recorded
 * here, so an edited rule falls back to `re` until its matcher is updated.
 *
 * Only ASCII text comes here (the caller checks), so `\w`, `\d` and `\s` read
 * the same with and without re.ASCII: [A-Za-z0-9_], [0-9], and for `\s` the
 * Unicode set's ASCII members (which include \x1c-\x1f).
 *
 * Two rules are not translated (pip_temp, carriage_return): a pass of theirs is
 * a no-op unless its guard occurs, and then `normalize` returns None so that the
 * caller runs the regex passes instead.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef Py_ssize_t ssz;

/* -- character classes ------------------------------------------------------------------- */

enum {
    K_W = 1 << 0,     /* \w */
    K_D = 1 << 1,     /* \d */
    K_HX = 1 << 2,    /* [0-9a-fA-F] */
    K_HL = 1 << 3,    /* [0-9a-f] */
    K_SP = 1 << 4,    /* \s (Unicode's ASCII members) */
    K_TOK = 1 << 5,   /* [\w.~+/%-] */
    K_BEAR = 1 << 6,  /* [\w.~+/-] */
    K_AL = 1 << 7,    /* [A-Za-z] */
    K_AN = 1 << 8,    /* [A-Za-z0-9] */
    K_LDU = 1 << 9,   /* [a-z0-9_] */
    K_WD = 1 << 10,   /* [\w-] */
    K_AF = 1 << 11,   /* [a-f] */
    K_LO = 1 << 12,   /* [a-z] */
    K_ST = 1 << 13,   /* [ \t] */
    K_NSL = 1 << 14,  /* [^/\s] */
};

static uint16_t K[256];

static void init_classes(void)
{
    for (int c = 0; c < 256; c++) {
        uint16_t k = 0;
        int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z', digit = c >= '0' && c <= '9';
        int word = lower || upper || digit || c == '_';
        int space = c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
        if (c >= 128) {
            K[c] = K_NSL; /* never seen: the text is ASCII */
            continue;
        }
        if (word) k |= K_W | K_WD;
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
        K[c] = k;
    }
}

/* The text being matched: s[0..n). */
typedef struct {
    const unsigned char *s;
    ssz n;
} Text;

/* character at i, or -1 outside the text */
static inline int at(const Text *t, ssz i) { return i >= 0 && i < t->n ? t->s[i] : -1; }
/* is the character at i in class k (false outside the text) */
static inline int is(const Text *t, ssz i, int k) { return i >= 0 && i < t->n && (K[t->s[i]] & k); }
/* length of the run of class k from i */
static inline ssz run(const Text *t, ssz i, int k)
{
    ssz j = i;
    while (j < t->n && (K[t->s[j]] & k)) j++;
    return j - i;
}
static inline ssz run_of(const Text *t, ssz i, int c)
{
    ssz j = i;
    while (j < t->n && t->s[j] == c) j++;
    return j - i;
}
static inline int starts(const Text *t, ssz i, const char *lit, ssz len)
{
    if (i < 0 || i + len > t->n) return 0;
    for (ssz j = 0; j < len; j++)
        if (t->s[i + j] != (unsigned char)lit[j]) return 0;
    return 1;
}
static inline int one_of(int c, const char *set)
{
    if (c <= 0) return 0;
    for (; *set; set++)
        if (*set == c) return 1;
    return 0;
}
/* How common a character is in terminal text (higher: rarer); find() looks for a literal's
 * rarest character with memchr, then checks the rest around it. */
static int rarity(int c)
{
    static const char COMMON[] = "e tanoisrhldcu/.-_:=0123456789mfpgwybvkxjqz";
    const char *at = strchr(COMMON, c);
    return c && at ? (int)(at - COMMON) : 100;
}

/* the first occurrence of lit (len >= 1) in s[0..n), or NULL */
static const unsigned char *find(const unsigned char *s, ssz n, const char *lit, ssz len)
{
    ssz anchor = 0;
    for (ssz j = 1; j < len; j++)
        if (rarity((unsigned char)lit[j]) > rarity((unsigned char)lit[anchor])) anchor = j;
    const unsigned char *end = s + n, *from = s + anchor;
    while (end - from >= len - anchor) {
        const unsigned char *f = memchr(from, (unsigned char)lit[anchor], (size_t)(end - from - (len - anchor) + 1));
        if (!f) return NULL;
        const unsigned char *start = f - anchor;
        ssz j = 0;
        while (j < len && start[j] == (unsigned char)lit[j]) j++;
        if (j == len) return start;
        from = f + 1;
    }
    return NULL;
}

/* A match: [start, end), and group 1 as [g1, g1_end) (g1 < 0: not in the replacement). */
typedef struct {
    ssz end, g1, g1_end;
} Match;

static inline int found(Match *m, ssz end)
{
    m->end = end;
    m->g1 = -1;
    m->g1_end = -1;
    return 1;
}
static inline int found_group(Match *m, ssz end, ssz g1, ssz g1_end)
{
    m->end = end;
    m->g1 = g1;
    m->g1_end = g1_end;
    return 1;
}

/* -- shared pieces of the date rules -------------------------------------------------------- */

static const char *const MONTHS[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const DAYS[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};

static int name_at(const Text *t, ssz i, const char *const *names, int count)
{
    for (int k = 0; k < count; k++)
        if (starts(t, i, names[k], 3)) return 1;
    return 0;
}
static inline int month_at(const Text *t, ssz i) { return name_at(t, i, MONTHS, 12); }

/* (?!\w) at i */
static inline int word_ends(const Text *t, ssz i) { return !is(t, i, K_W); }

/* _TIME = \d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)? : its possible ends, in the regex's order, into
 * out[]; returns how many. Ends a digit follows are left out: every rule that uses _TIME needs
 * a non-word character or a space after it (so only the longest run of fraction digits counts).
 */
static int time_ends(const Text *t, ssz i, ssz out[3])
{
    int count = 0;
    ssz hour = run(t, i, K_D);
    if (hour < 1 || hour > 2 || at(t, i + hour) != ':') return 0;
    ssz r = i + hour + 1;
    if (!is(t, r, K_D) || !is(t, r + 1, K_D)) return 0;
    ssz minutes = r + 2;
    if (at(t, minutes) == ':' && is(t, minutes + 1, K_D) && is(t, minutes + 2, K_D)) {
        ssz seconds = minutes + 3;
        if (one_of(at(t, seconds), ".,")) {
            ssz f = run(t, seconds + 1, K_D);
            if (f >= 1) out[count++] = seconds + 1 + f;
        }
        out[count++] = seconds;
    }
    out[count++] = minutes;
    return count;
}

/* _ZONE at i (no leading space): its end, or -1. At most one alternative can match. */
static ssz zone_at(const Text *t, ssz i)
{
    int c = at(t, i);
    if (c == '+' || c == '-') {
        if (!is(t, i + 1, K_D) || !is(t, i + 2, K_D)) return -1;
        if (at(t, i + 3) == ':') return is(t, i + 4, K_D) && is(t, i + 5, K_D) ? i + 6 : -1;
        return is(t, i + 3, K_D) && is(t, i + 4, K_D) ? i + 5 : -1;
    }
    if (starts(t, i, "UTC", 3) || starts(t, i, "GMT", 3)) return i + 3;
    int c1 = at(t, i + 1), c2 = at(t, i + 2);
    if (one_of(c, "ECMPA") && one_of(c1, "SD") && c2 == 'T') return i + 3;
    if (c == 'C' && c1 == 'E') {
        if (c2 == 'S' && at(t, i + 3) == 'T') return i + 4;
        if (c2 == 'T') return i + 3;
        return -1;
    }
    if (one_of(c, "BIJ") && c1 == 'S' && c2 == 'T') return i + 3;
    if (c == 'A' && c1 == 'E' && one_of(c2, "SD") && at(t, i + 3) == 'T') return i + 4;
    return -1;
}

/* ` +ZONE` at i: its end, or -1 */
static ssz spaced_zone(const Text *t, ssz i)
{
    ssz k = run_of(t, i, ' ');
    return k >= 1 ? zone_at(t, i + k) : -1;
}

/* ` ?[AP]M` at i: its end, or -1 */
static ssz am_pm(const Text *t, ssz i)
{
    if (at(t, i) == ' ') return one_of(at(t, i + 1), "AP") && at(t, i + 2) == 'M' ? i + 3 : -1;
    return one_of(at(t, i), "AP") && at(t, i + 1) == 'M' ? i + 2 : -1;
}

/* `(?: +_TIME)?(?: ?[AP]M)?(?: +_ZONE)?(?!\w)` at i: the first end the regex accepts, or -1 */
static ssz time_ampm_zone(const Text *t, ssz i)
{
    ssz times[4];
    int nt = 0;
    ssz k = run_of(t, i, ' ');
    if (k >= 1) nt = time_ends(t, i + k, times);
    times[nt++] = i;
    for (int a = 0; a < nt; a++) {
        ssz ampm[2];
        int na = 0;
        ssz e = am_pm(t, times[a]);
        if (e >= 0) ampm[na++] = e;
        ampm[na++] = times[a];
        for (int b = 0; b < na; b++) {
            ssz z = spaced_zone(t, ampm[b]);
            if (z >= 0 && word_ends(t, z)) return z;
            if (word_ends(t, ampm[b])) return ampm[b];
        }
    }
    return -1;
}

/* ` +\d{4}` at i: its end, or -1 */
static ssz spaced_year(const Text *t, ssz i)
{
    ssz k = run_of(t, i, ' ');
    return k >= 1 && run(t, i + k, K_D) >= 4 ? i + k + 4 : -1;
}

/* _MON_REST then (?!\w), right after a month name at i: the end, or -1.
 *  +\d{1,2}(?: +TIME(?:(?: +ZONE)? +\d{4}(?: +ZONE)?)?|,? +\d{4}) */
static ssz month_rest(const Text *t, ssz i)
{
    ssz k = run_of(t, i, ' ');
    if (k < 1) return -1;
    ssz day = run(t, i + k, K_D);
    if (day < 1 || day > 2) return -1;
    ssz q = i + k + day;
    ssz s = run_of(t, q, ' ');
    if (s >= 1) {
        ssz times[3];
        int nt = time_ends(t, q + s, times);
        for (int a = 0; a < nt; a++) {
            ssz z1[2];
            int nz = 0;
            ssz z = spaced_zone(t, times[a]);
            if (z >= 0) z1[nz++] = z;
            z1[nz++] = times[a];
            for (int b = 0; b < nz; b++) {
                ssz year = spaced_year(t, z1[b]);
                if (year < 0) continue;
                ssz z2 = spaced_zone(t, year);
                if (z2 >= 0 && word_ends(t, z2)) return z2;
                if (word_ends(t, year)) return year;
            }
            if (word_ends(t, times[a])) return times[a];
        }
    }
    ssz r = at(t, q) == ',' ? q + 1 : q;
    ssz year = spaced_year(t, r);
    return year >= 0 && word_ends(t, year) ? year : -1;
}

/* the leads: [JFMASONDTW](?<!\w.) and [0-9a-fA-F](?<!\w.) */
static inline int word_start(const Text *t, ssz p) { return !is(t, p - 1, K_W); }
/* _DIGIT after the lead: the lead is a digit not continuing a dotted version */
static inline int digit_lead(const Text *t, ssz p) { return is(t, p, K_D) && at(t, p - 1) != '.'; }

/* -- the rules ------------------------------------------------------------------------------ */

static int m_temp_path(const Text *t, ssz p, Match *m)
{
    if (!starts(t, p, "/tmp/", 5)) return 0;
    ssz q = p + 5;
#define FREE(e) (!is(t, (e), K_W) && at(t, (e)) != '.')
    if (starts(t, q, "tmp.", 4) && run(t, q + 4, K_AN) >= 10 && FREE(q + 14)) return found(m, q + 14);
    if (starts(t, q, "tmp", 3)) {
        ssz k = run(t, q + 3, K_LDU);
        if (k >= 6 && FREE(q + 3 + k)) return found(m, q + 3 + k);
    }
    if (starts(t, q, "pytest-of-", 10)) {
        ssz k = run(t, q + 10, K_NSL);
        if (k < 1) return 0;
        ssz e = q + 10 + k;
        if (starts(t, e, "/pytest-", 8)) {
            ssz d = run(t, e + 8, K_D);
            if (d >= 1 && FREE(e + 8 + d)) return found(m, e + 8 + d);
        }
        return found(m, e); /* '/', a space or the end follows: (?![\w.]) holds */
    }
#undef FREE
    return 0;
}

static int m_test_seed(const Text *t, ssz p, Match *m)
{
    ssz len = 0;
    int c = at(t, p);
    if (starts(t, p, "random seed", 11))
        len = 11;
    else if ((c == 'R' || c == 'r') && starts(t, p + 1, "andom", 5) && one_of(at(t, p + 6), " -") &&
             starts(t, p + 7, "seed", 4))
        len = 11;
    else if (starts(t, p, "randomly-seed", 13))
        len = 13;
    else if (starts(t, p, "PYTHONHASHSEED", 14))
        len = 14;
    else if (starts(t, p, "hypothesis seed", 15))
        len = 15;
    else
        return 0;
    ssz q = p + len;
    q += run(t, q, K_ST);
    if (!one_of(at(t, q), ":=")) return 0;
    q += 1;
    q += run(t, q, K_ST);
    ssz group_end = q;
    if (at(t, q) == '-') q++;
    ssz d = run(t, q, K_D);
    if (d < 1 || !word_ends(t, q + d)) return 0;
    return found_group(m, q + d, p, group_end);
}

static int m_jwt(const Text *t, ssz p, Match *m)
{
    ssz q = p;
    for (int part = 0; part < 3; part++) {
        if (part < 2 && !starts(t, q, "eyJ", 3)) return 0;
        if (part < 2) q += 3;
        ssz k = run(t, q, K_WD);
        if (k < 6) return 0;
        q += k;
        if (part < 2) {
            if (at(t, q) != '.') return 0;
            q += 1;
        }
    }
    return found(m, q);
}

static const char *const TOKEN_KEYS[] = {"token",  "session", "sessionid", "session_id",
                                         "sessid", "sid",     "jwt",       "signature",
                                         "sig",    "csrf",    "session_key"};

static int m_signed_token(const Text *t, ssz p, Match *m)
{
    if (at(t, p) != '=') return 0;
    int last = at(t, p - 1) | 0x20; /* every key ends in one of these letters (any case) */
    if (last != 'n' && last != 'd' && last != 't' && last != 'e' && last != 'g' && last != 'f' &&
        last != 'y')
        return 0;
    int keyed = 0;
    for (size_t k = 0; k < sizeof TOKEN_KEYS / sizeof *TOKEN_KEYS && !keyed; k++) {
        ssz len = (ssz)strlen(TOKEN_KEYS[k]);
        if (p - len < 0) continue;
        keyed = 1;
        for (ssz j = 0; j < len; j++) {
            int c = t->s[p - len + j];
            if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
            if (c != TOKEN_KEYS[k][j]) {
                keyed = 0;
                break;
            }
        }
    }
    if (!keyed) return 0;
    ssz k = run(t, p + 1, K_TOK);
    if (k < 12) return 0;
    ssz e = p + 1 + k;
    return found(m, e + run_of(t, e, '='));
}

static int m_bearer_token(const Text *t, ssz p, Match *m)
{
    ssz len = starts(t, p, "Bearer ", 7) ? 7 : starts(t, p, "Token ", 6) ? 6 : 0;
    if (!len) return 0;
    ssz k = run(t, p + len, K_BEAR);
    if (k < 16) return 0;
    ssz e = p + len + k;
    return found_group(m, e + run_of(t, e, '='), p, p + len);
}

static int m_hostname(const Text *t, ssz p, Match *m)
{
    if (at(t, p) != '@' || run(t, p + 1, K_HL) < 12) return 0;
    ssz e = p + 13;
    if (is(t, e, K_W) || at(t, e) == '.' || at(t, e) == '-') return 0;
    return found(m, e);
}

static int m_port(const Text *t, ssz p, Match *m)
{
    static const char *const HOSTS[] = {"localhost", "127.0.0.1", "0.0.0.0", "[::]", "[::1]"};
    if (at(t, p) != ':') return 0;
    int loopback = 0;
    for (size_t k = 0; k < sizeof HOSTS / sizeof *HOSTS && !loopback; k++) {
        ssz len = (ssz)strlen(HOSTS[k]);
        loopback = starts(t, p - len, HOSTS[k], len);
    }
    if (!loopback) return 0;
    ssz d = run(t, p + 1, K_D);
    return d >= 2 && d <= 5 ? found(m, p + 1 + d) : 0;
}

static int m_pid(const Text *t, ssz p, Match *m)
{
    int c = at(t, p);
    if ((c != 'p' && c != 'P') || is(t, p - 1, K_W)) return 0;
    ssz q = p + 1;
    if (starts(t, q, "id", 2) || starts(t, q, "ID", 2))
        q += 2;
    else if (starts(t, q, "rocess", 6) || starts(t, q, "ROCESS", 6))
        q += 6;
    else
        return 0;
    q += run(t, q, K_ST);
    if (one_of(at(t, q), ":=#")) q++;
    q += run(t, q, K_ST);
    ssz d = run(t, q, K_D);
    if (d < 1 || !word_ends(t, q + d)) return 0;
    return found_group(m, q + d, p, q);
}

static int m_bracket_pid(const Text *t, ssz p, Match *m)
{
    if (at(t, p) != '[') return 0;
    if (is(t, p - 1, K_AL)) { /* syslog: sshd[1234]: */
        ssz d = run(t, p + 1, K_D);
        if (d >= 2 && starts(t, p + 1 + d, "]: ", 3)) return found_group(m, p + 1 + d, p, p);
        return 0;
    }
    if (p > 0 && at(t, p - 1) != '\n') return 0;
    ssz q = p + 1; /* job line: [1]+ 12345 */
    ssz d = run(t, q, K_D);
    if (d < 1 || at(t, q + d) != ']') return 0;
    q += d + 1;
    if (one_of(at(t, q), "+-")) q++;
    ssz k = run(t, q, K_ST);
    if (k < 1) return 0;
    q += k;
    ssz pid = run(t, q, K_D);
    if (pid < 2) return 0;
    ssz e = q + pid, after = e + run(t, e, K_ST);
    if (after != t->n && at(t, after) != '\n') return 0;
    return found_group(m, e, p + 1, q);
}

static int m_hex_address(const Text *t, ssz p, Match *m)
{
    if (!starts(t, p, "0x", 2)) return 0;
    ssz k = run(t, p + 2, K_HX);
    if (k < 6 || k > 16 || is(t, p + 2 + k, K_W)) return 0;
    return found(m, p + 2 + k);
}

static int m_date(const Text *t, ssz p, Match *m)
{
    if (!one_of(at(t, p), "JFMASONDTW") || !word_start(t, p)) return 0;
    if (!is(t, p + 1, K_LO) || !is(t, p + 2, K_LO)) return 0;
    ssz q = p + 3, e = -1;
    if (name_at(t, p, DAYS, 7)) {
        if (at(t, q) == ',') q++;
        ssz k = run_of(t, q, ' ');
        if (k < 1) return 0;
        q += k;
        /* \d{1,2} +MON +\d{4}(?: +TIME)?(?: ?[AP]M)?(?: +ZONE)? */
        ssz day = run(t, q, K_D);
        if (day >= 1 && day <= 2 && at(t, q + day) == ' ') {
            ssz r = q + day + run_of(t, q + day, ' ');
            if (month_at(t, r)) {
                ssz year = spaced_year(t, r + 3);
                if (year >= 0) e = time_ampm_zone(t, year);
            }
        }
        if (e < 0 && month_at(t, q)) e = month_rest(t, q + 3);
    } else if (month_at(t, p)) {
        e = month_rest(t, q);
    }
    return e >= 0 ? found(m, e) : 0;
}

static int hex_lead(const Text *t, ssz p) { return is(t, p, K_HX) && word_start(t, p); }

static int m_uuid(const Text *t, ssz p, Match *m)
{
    static const int GROUPS[] = {8, 4, 4, 4, 12};
    if (at(t, p + 8) != '-' || !hex_lead(t, p)) return 0;
    ssz q = p;
    for (int g = 0; g < 5; g++) {
        for (int j = 0; j < GROUPS[g]; j++, q++)
            if (!is(t, q, K_HX)) return 0;
        if (g < 4) {
            if (at(t, q) != '-') return 0;
            q++;
        }
    }
    if (is(t, q, K_W) || at(t, q) == '-') return 0;
    return found(m, q);
}

/* the zone part of an ISO timestamp: (?:Z|[+-]\d\d(?::?\d\d)?| ZONE)? ; its ends, in order */
static int iso_zone_ends(const Text *t, ssz i, ssz out[3])
{
    int count = 0;
    int c = at(t, i);
    if (c == 'Z') {
        out[count++] = i + 1;
    } else if ((c == '+' || c == '-') && is(t, i + 1, K_D) && is(t, i + 2, K_D)) {
        if (at(t, i + 3) == ':') {
            if (is(t, i + 4, K_D) && is(t, i + 5, K_D)) out[count++] = i + 6;
        } else if (is(t, i + 3, K_D) && is(t, i + 4, K_D)) {
            out[count++] = i + 5;
        }
        out[count++] = i + 3;
    } else if (c == ' ') {
        ssz z = zone_at(t, i + 1);
        if (z >= 0) out[count++] = z;
    }
    out[count++] = i;
    return count;
}

static int m_timestamp(const Text *t, ssz p, Match *m)
{
    if (!digit_lead(t, p) || !word_start(t, p)) return 0;
    ssz q = p + 1;
    /* ISO 8601: \d{3}-[01]\d-[0-3]\d(?:[T ]TIME)?(?:Z|[+-]\d\d(?::?\d\d)?| ZONE)? */
    if (is(t, q, K_D) && is(t, q + 1, K_D) && is(t, q + 2, K_D) && at(t, q + 3) == '-' &&
        one_of(at(t, q + 4), "01") && is(t, q + 5, K_D) && at(t, q + 6) == '-' &&
        one_of(at(t, q + 7), "0123") && is(t, q + 8, K_D)) {
        ssz date = q + 9, times[4];
        int nt = 0;
        if (one_of(at(t, date), "T ")) nt = time_ends(t, date + 1, times);
        times[nt++] = date;
        for (int a = 0; a < nt; a++) {
            ssz zones[3];
            int nz = iso_zone_ends(t, times[a], zones);
            for (int b = 0; b < nz; b++)
                if (word_ends(t, zones[b])) return found(m, zones[b]);
        }
    }
    /* \d? +MON +\d{4}(?: +TIME)?(?: ?[AP]M)?(?: +ZONE)? */
    {
        ssz r = is(t, q, K_D) ? q + 1 : q;
        ssz k = run_of(t, r, ' ');
        if (k >= 1 && month_at(t, r + k)) {
            ssz year = spaced_year(t, r + k + 3);
            if (year >= 0) {
                ssz e = time_ampm_zone(t, year);
                if (e >= 0) return found(m, e);
            }
        }
    }
    /* (?<!:.)\d?:[0-5]\d:[0-5]\d(?:[.,]\d+)?(?!:\d) */
    if (at(t, p - 1) != ':') {
        ssz r = is(t, q, K_D) ? q + 1 : q;
        if (at(t, r) == ':' && one_of(at(t, r + 1), "012345") && is(t, r + 2, K_D) &&
            at(t, r + 3) == ':' && one_of(at(t, r + 4), "012345") && is(t, r + 5, K_D)) {
            ssz seconds = r + 6, ends[2];
            int count = 0;
            if (one_of(at(t, seconds), ".,")) {
                ssz f = run(t, seconds + 1, K_D);
                if (f >= 1) ends[count++] = seconds + 1 + f;
            }
            ends[count++] = seconds;
            for (int a = 0; a < count; a++) {
                ssz e = ends[a];
                if (at(t, e) == ':' && is(t, e + 1, K_D)) continue;
                if (word_ends(t, e)) return found(m, e);
            }
        }
    }
    return 0;
}

static int m_epoch(const Text *t, ssz p, Match *m)
{
    if (at(t, p) != '1' || at(t, p - 1) == '.' || !word_start(t, p)) return 0;
    if (!one_of(at(t, p + 1), "456789") || run(t, p + 2, K_D) < 8) return 0;
    ssz seconds = p + 10, ends[2];
    int count = 0;
    if (run(t, seconds, K_D) >= 3) ends[count++] = seconds + 3;
    ends[count++] = seconds;
    for (int a = 0; a < count; a++) {
        ssz e = ends[a], tried[2];
        int nt = 0;
        if (at(t, e) == '.') {
            ssz f = run(t, e + 1, K_D);
            if (f >= 1) tried[nt++] = e + 1 + f;
        }
        tried[nt++] = e;
        for (int b = 0; b < nt; b++) {
            ssz x = tried[b];
            if (!is(t, x, K_W) && !(at(t, x) == '.' && is(t, x + 1, K_W))) return found(m, x);
        }
    }
    return 0;
}

static const char *const UNITS[] = {"ns",      "us",     "ms",    "sec",  "secs",
                                    "seconds", "second", "min",   "mins", "minutes",
                                    "minute",  "hours",  "hour",  "hrs",  "hr"};
static const ssz UNIT_LENGTHS[] = {2, 2, 2, 3, 4, 7, 6, 3, 4, 7, 6, 5, 4, 3, 2};

/* ++ runs: a letter then at least one digit, all of them */
static inline ssz tagged_digits(const Text *t, ssz i, int tag)
{
    if (at(t, i) != tag || !is(t, i + 1, K_D)) return i;
    return i + 1 + run(t, i + 1, K_D);
}

static int m_duration(const Text *t, ssz p, Match *m)
{
    if (!digit_lead(t, p) || !word_start(t, p)) return 0;
    ssz q = p + 1;
    if (is(t, q, K_D) && is(t, q + 1, K_D) && at(t, q + 2) == '0' && at(t, q + 3) == 's' &&
        word_ends(t, q + 4))
        return 0; /* 1990s */
    q += run(t, q, K_D);
    q = tagged_digits(t, q, '.');
    ssz r = tagged_digits(t, tagged_digits(t, tagged_digits(t, q, 'h'), 'm'), '.');
    if (at(t, r) == 's' && word_ends(t, r + 1)) return found(m, r + 1);
    if (at(t, q) == ' ') q++;
    if (!one_of(at(t, q), "numsh")) return 0; /* the first letters of the units */
    for (size_t k = 0; k < sizeof UNITS / sizeof *UNITS; k++) {
        ssz len = UNIT_LENGTHS[k];
        if (starts(t, q, UNITS[k], len) && word_ends(t, q + len)) return found(m, q + len);
    }
    return 0;
}

static int m_hex_id(const Text *t, ssz p, Match *m)
{
    if (!hex_lead(t, p)) return 0;
    ssz q = p + 1;
    int ok = 0;
    if (is(t, p, K_AF))
        ok = is(t, q + run(t, q, K_AF), K_D);
    else if (is(t, p, K_D))
        ok = is(t, q + run(t, q, K_D), K_AF);
    if (!ok) return 0;
    ssz k = run(t, q, K_HL);
    if (k > 127) k = 127;
    if (k < 6 || is(t, q + k, K_W)) return 0;
    return found(m, q + k);
}

/* (?<![\w/<>-])[0-9a-f]{7,40}(?![\w/<>-]) : abbreviated commit ids in git's output */
static int m_git_short_id(const Text *t, ssz p, Match *m)
{
    int before = at(t, p - 1);
    if (is(t, p - 1, K_W) || before == '/' || before == '<' || before == '>' || before == '-') return 0;
    ssz k = run(t, p, K_HL);
    if (k < 7 || k > 40) return 0;
    int after = at(t, p + k);
    if (is(t, p + k, K_W) || after == '/' || after == '<' || after == '>' || after == '-') return 0;
    return found(m, p + k);
}

/* -- the rule table ------------------------------------------------------------------------- */

typedef int (*Matcher)(const Text *, ssz, Match *);

typedef struct {
    const char *name;
    uint64_t fingerprint; /* FNV-1a of name \0 regex \0 replacement \0 flags */
    Matcher match;        /* NULL: bails out when `bail` occurs */
    const char *first;    /* the characters a match can start with */
    const char *before;   /* the replacement: before, group 1 (if any), after */
    const char *after;
    const char *bail;
    const char *prefix;   /* a literal every match starts with (found with memmem), or NULL */
    int word_lead;        /* every match starts a word: skip the rest of a word that failed */
    const char *guard[3]; /* literals of which one occurs in every text a match is in */
} RuleDef;

/* filled by init_rules: per rule id */
static ssz BEFORE_LEN[32], AFTER_LEN[32], PREFIX_LEN[32];
static unsigned char FIRST[32][256]; /* the characters a rule's match can start with */
static int USES_GROUP[32];

static const RuleDef RULE_DEFS[] = {
    {"carriage_return", 0x5dcbc4b617fa394bULL, NULL, "", "", "", "\r", NULL, 0, {NULL}},
    {"temp_path", 0x30de15cbc278c76fULL, m_temp_path, "/", "", "<TMP>", NULL, "/tmp/", 0, {NULL}},
    {"pip_temp", 0x0a62cf31ee603ec6ULL, NULL, "", "", "", "/tmp/pip-", NULL, 0, {NULL}},
    {"test_seed", 0xfb2a43bc02d8a0dbULL, m_test_seed, "rRPh", "", "<SEED>", NULL, NULL, 0,
     {"seed", "SEED", NULL}},
    {"jwt", 0xfcdde43fd9cc7e37ULL, m_jwt, "e", "", "<TOKEN>", NULL, "eyJ", 0, {NULL}},
    {"signed_token", 0x964e19c9fd3c09b0ULL, m_signed_token, "=", "=", "<TOKEN>", NULL, "=", 0,
     {NULL}},
    {"bearer_token", 0x24c2f141da8137f3ULL, m_bearer_token, "BT", "", "<TOKEN>", NULL, NULL, 0,
     {"Bearer ", "Token ", NULL}},
    {"hostname", 0xbb2f6989ea09ce64ULL, m_hostname, "@", "@", "<HOST>", NULL, "@", 0, {NULL}},
    {"port", 0xab30bbb3f4992b15ULL, m_port, ":", ":", "<PORT>", NULL, ":", 0,
     {"localhost:", ".0.0.", "[::"}},
    {"pid", 0x53d6112b142ba9d3ULL, m_pid, "pP", "", "<PID>", NULL, NULL, 1, {NULL}},
    {"bracket_pid", 0x6d953db28ee39bc9ULL, m_bracket_pid, "[", "[", "<PID>", NULL, "[", 0, {NULL}},
    {"hex_address", 0x24f3ac83db85e73dULL, m_hex_address, "0", "", "<ADDR>", NULL, "0x", 0, {NULL}},
    {"date", 0x97357a9368c5465fULL, m_date, "JFMASONDTW", "", "<TIMESTAMP>", NULL, NULL, 1, {NULL}},
    {"uuid", 0x262d12223c45c59eULL, m_uuid, "0123456789abcdefABCDEF", "", "<UUID>", NULL, NULL, 1,
     {NULL}},
    {"timestamp", 0x3b8632686bcc1276ULL, m_timestamp, "0123456789", "", "<TIMESTAMP>", NULL, NULL, 1,
     {NULL}},
    {"epoch", 0xbd4043f23bd73bbeULL, m_epoch, "1", "", "<TIMESTAMP>", NULL, NULL, 1, {NULL}},
    {"duration", 0x3bb1c66d0cd62a80ULL, m_duration, "0123456789", "", "<DURATION>", NULL, NULL, 1,
     {NULL}},
    {"hex_id", 0xb48e47ea70385b85ULL, m_hex_id, "0123456789abcdef", "", "<HEX>", NULL, NULL, 1,
     {NULL}},
    {"git_short_id", 0xd431d7b302086476ULL, m_git_short_id, "0123456789abcdef", "", "<HEX>", NULL,
     NULL, 1, {NULL}},
};
#define RULE_COUNT ((int)(sizeof RULE_DEFS / sizeof *RULE_DEFS))
_Static_assert(sizeof RULE_DEFS / sizeof *RULE_DEFS <= 32, "the per-rule tables hold 32");

/* group 1 goes into the replacement of these (\1 in normalize.py) */
static const char *const GROUP_RULES[] = {"test_seed", "bearer_token", "pid", "bracket_pid"};

static void init_rules(void)
{
    for (int id = 0; id < RULE_COUNT; id++) {
        const RuleDef *def = &RULE_DEFS[id];
        BEFORE_LEN[id] = (ssz)strlen(def->before);
        AFTER_LEN[id] = (ssz)strlen(def->after);
        PREFIX_LEN[id] = def->prefix ? (ssz)strlen(def->prefix) : 0;
        for (const char *c = def->first; *c; c++) FIRST[id][(unsigned char)*c] = 1;
        for (size_t g = 0; g < sizeof GROUP_RULES / sizeof *GROUP_RULES; g++)
            if (!strcmp(def->name, GROUP_RULES[g])) USES_GROUP[id] = 1;
    }
}

static uint64_t fnv1a(uint64_t h, const char *data, Py_ssize_t len)
{
    for (Py_ssize_t i = 0; i < len; i++) {
        h ^= (unsigned char)data[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static PyObject *rule_id(PyObject *self, PyObject *args)
{
    const char *name, *regex, *replacement;
    Py_ssize_t name_len, regex_len, replacement_len;
    long flags;
    if (!PyArg_ParseTuple(args, "s#s#s#l", &name, &name_len, &regex, &regex_len, &replacement,
                          &replacement_len, &flags))
        return NULL;
    char flag_text[32];
    int flag_len = snprintf(flag_text, sizeof flag_text, "%ld", flags);
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv1a(h, name, name_len);
    h = fnv1a(h, "", 1);
    h = fnv1a(h, regex, regex_len);
    h = fnv1a(h, "", 1);
    h = fnv1a(h, replacement, replacement_len);
    h = fnv1a(h, "", 1);
    h = fnv1a(h, flag_text, flag_len);
    for (int id = 0; id < RULE_COUNT; id++)
        if (!strcmp(RULE_DEFS[id].name, name) && RULE_DEFS[id].fingerprint == h)
            return PyLong_FromLong(id);
    return PyLong_FromLong(-1);
}

/* -- running the passes --------------------------------------------------------------------- */

typedef struct {
    char *data;
    ssz len, cap;
} Buffer;

static int put(Buffer *b, const void *data, ssz len)
{
    if (b->len + len > b->cap) {
        ssz cap = b->cap ? b->cap : 256;
        while (cap < b->len + len) cap *= 2;
        char *grown = PyMem_Realloc(b->data, (size_t)cap);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, (size_t)len);
    b->len += len;
    return 0;
}

#define MAX_PASS 8

static int contains(const unsigned char *s, ssz n, const char *literal)
{
    return find(s, n, literal, (ssz)strlen(literal)) != NULL;
}

/* The next position from p where a rule of the pass may match, or n. */
static ssz next_candidate(const Text *in, ssz p, const char *prefix, ssz prefix_len,
                          const unsigned char *first)
{
    const unsigned char *s = in->s;
    if (prefix) {
        if (p >= in->n) return in->n;
        const unsigned char *f = find(s + p, in->n - p, prefix, prefix_len);
        return f ? f - s : in->n;
    }
    while (p < in->n && !first[s[p]]) p++;
    return p;
}

#if defined(__SSE2__)
#include <emmintrin.h>
/* bit i set: s[i] is a word character [A-Za-z0-9_] (ASCII: signed compares are safe) */
static inline unsigned word_mask16(const unsigned char *s)
{
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
    __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)),
                                  _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
    __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(folded, _mm_set1_epi8('a' - 1)),
                                   _mm_cmplt_epi8(folded, _mm_set1_epi8('z' + 1)));
    __m128i under = _mm_cmpeq_epi8(v, _mm_set1_epi8('_'));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(digit, letter), under));
}
#endif

/* The first position from p where a word starts (a word character after a non-word one). */
static ssz next_word_start(const Text *in, ssz p)
{
    const unsigned char *s = in->s;
    ssz n = in->n;
    unsigned before = p > 0 && (K[s[p - 1]] & K_W);
#if defined(__SSE2__)
    while (p + 16 <= n) {
        unsigned words = word_mask16(s + p);
        unsigned starts = words & ~((words << 1) | before) & 0xFFFFu;
        if (starts) return p + __builtin_ctz(starts);
        before = (words >> 15) & 1u;
        p += 16;
    }
#endif
    for (; p < n; p++) {
        unsigned word = (K[s[p]] & K_W) != 0;
        if (word && !before) return p;
        before = word;
    }
    return n;
}

/* next_candidate for passes whose matches all start a word */
static ssz next_word_candidate(const Text *in, ssz p, const unsigned char *first)
{
    while ((p = next_word_start(in, p)) < in->n && !first[in->s[p]]) p++;
    return p;
}

/* One pass of rules ids[0..count) (fused: at each position the first rule that matches) over
 * `in`; the result goes to `out` (emptied first). Returns the number of matches, -1 on error. */
static ssz run_pass(const Text *in, const int *ids, int count, Buffer *out, long *counts,
                    long *first_hit, long *hits)
{
    const RuleDef *lead = &RULE_DEFS[ids[0]];
    if (count == 1 && lead->guard[0]) {
        int any = 0;
        for (int g = 0; g < 3 && lead->guard[g] && !any; g++)
            any = contains(in->s, in->n, lead->guard[g]);
        if (!any) return 0;
    }
    unsigned char fused[256];
    const unsigned char *first = FIRST[ids[0]];
    int word_lead = lead->word_lead;
    if (count > 1) {
        memset(fused, 0, sizeof fused);
        for (int r = 0; r < count; r++) {
            for (int c = 0; c < 256; c++) fused[c] |= FIRST[ids[r]][c];
            word_lead &= RULE_DEFS[ids[r]].word_lead;
        }
        first = fused;
    }
    const char *prefix = count == 1 ? lead->prefix : NULL;
    ssz prefix_len = prefix ? PREFIX_LEN[ids[0]] : 0;
    ssz matches = 0, copied = 0, p = 0;
    out->len = 0;
    const unsigned char *s = in->s;
    while ((p = word_lead ? next_word_candidate(in, p, first)
                          : next_candidate(in, p, prefix, prefix_len, first)) < in->n) {
        Match m;
        int hit = -1;
        for (int r = 0; r < count && hit < 0; r++)
            if (RULE_DEFS[ids[r]].match(in, p, &m)) hit = r;
        if (hit < 0) {
            p++; /* with word leads, next_word_candidate skips the rest of this word */
            continue;
        }
        const RuleDef *def = &RULE_DEFS[ids[hit]];
        if (put(out, s + copied, p - copied) < 0 ||
            put(out, def->before, BEFORE_LEN[ids[hit]]) < 0)
            return -1;
        if (USES_GROUP[ids[hit]] && m.g1 >= 0 && put(out, s + m.g1, m.g1_end - m.g1) < 0) return -1;
        if (put(out, def->after, AFTER_LEN[ids[hit]]) < 0) return -1;
        counts[hit]++;
        if (!first_hit[hit]) first_hit[hit] = ++*hits; /* the order re.sub's callback meets the rules */
        matches++;
        copied = p = m.end;
    }
    if (matches && put(out, s + copied, in->n - copied) < 0) return -1;
    return matches;
}

static int bails(const Text *t, const char *literal) { return contains(t->s, t->n, literal); }

/* normalize(text, passes, names, counts) -> text | None
 * passes: a tuple of tuples of rule ids; names: one per rule, in the order given; counts: a dict
 * whose entry for a rule's name grows by its number of matches (rules without any are left out).
 */
static PyObject *normalize(PyObject *self, PyObject *args)
{
    PyObject *text, *passes, *names, *tallies;
    if (!PyArg_ParseTuple(args, "UO!O!O!", &text, &PyTuple_Type, &passes, &PyTuple_Type, &names,
                          &PyDict_Type, &tallies))
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "_fastnorm.normalize takes ASCII text only");
        return NULL;
    }
    Py_ssize_t npasses = PyTuple_GET_SIZE(passes), nrules = 0;
    int ids[64][MAX_PASS], sizes[64];
    if (npasses > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 passes");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < npasses; i++) {
        PyObject *pass = PyTuple_GET_ITEM(passes, i);
        if (!PyTuple_Check(pass) || PyTuple_GET_SIZE(pass) < 1 || PyTuple_GET_SIZE(pass) > MAX_PASS) {
            PyErr_SetString(PyExc_ValueError, "each pass is a tuple of 1 to 8 rule ids");
            return NULL;
        }
        sizes[i] = (int)PyTuple_GET_SIZE(pass);
        for (int r = 0; r < sizes[i]; r++) {
            long id = PyLong_AsLong(PyTuple_GET_ITEM(pass, r));
            if (id == -1 && PyErr_Occurred()) return NULL;
            if (id < 0 || id >= RULE_COUNT || (sizes[i] > 1 && !RULE_DEFS[id].match)) {
                PyErr_Format(PyExc_ValueError, "not a rule id of this module: %ld", id);
                return NULL;
            }
            ids[i][r] = (int)id;
        }
        nrules += sizes[i];
    }
    if (PyTuple_GET_SIZE(names) != nrules) {
        PyErr_SetString(PyExc_ValueError, "one name per rule of the passes");
        return NULL;
    }
    Text cur = {(const unsigned char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    Buffer buffers[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    int which = 0, changed = 0;
    long counts[64 * MAX_PASS] = {0}, first[64 * MAX_PASS] = {0}, hits = 0;
    PyObject *result = NULL;
    Py_ssize_t at_rule = 0;
    for (Py_ssize_t i = 0; i < npasses; at_rule += sizes[i], i++) {
        const RuleDef *only = &RULE_DEFS[ids[i][0]];
        if (!only->match) {
            if (bails(&cur, only->bail)) {
                result = Py_NewRef(Py_None);
                goto done;
            }
            continue;
        }
        ssz n = run_pass(&cur, ids[i], sizes[i], &buffers[which], counts + at_rule,
                         first + at_rule, &hits);
        if (n < 0) goto done;
        if (n > 0) {
            cur.s = (const unsigned char *)buffers[which].data;
            cur.n = buffers[which].len;
            which ^= 1;
            changed = 1;
        }
    }
    /* counts go into the dict in the order the regex passes insert them: pass by pass, and
     * within a fused pass by each rule's first match (same keys, same order, same JSON) */
    for (long order = 1; order <= hits; order++) {
        Py_ssize_t r = 0;
        while (r < nrules && first[r] != order) r++;
        PyObject *name = PyTuple_GET_ITEM(names, r), *before = PyDict_GetItemWithError(tallies, name);
        if (!before && PyErr_Occurred()) goto done;
        long total = counts[r];
        if (before) {
            total += PyLong_AsLong(before);
            if (PyErr_Occurred()) goto done;
        }
        PyObject *value = PyLong_FromLong(total);
        if (!value || PyDict_SetItem(tallies, name, value) < 0) {
            Py_XDECREF(value);
            goto done;
        }
        Py_DECREF(value);
    }
    if (changed) {
        result = PyUnicode_New(cur.n, 127);
        if (result) memcpy(PyUnicode_DATA(result), cur.s, (size_t)cur.n);
    } else {
        result = Py_NewRef(text);
    }
done:
    PyMem_Free(buffers[0].data);
    PyMem_Free(buffers[1].data);
    return result;
}

/* -- token and line codes ------------------------------------------------------------------ */

/* A code point per piece such that two pieces of different texts get the same code exactly
 * when they are equal: Indel on the two code strings then equals Indel on the two lists of
 * pieces (the longest common subsequence depends only on which pieces of a match pieces of b).
 * Pieces that only one text holds can match nothing, so they share one code per text (0 for
 * a, 1 for b); the pieces both hold are numbered from 2. The codes then mostly stay under 256,
 * the strings take one byte a code and rapidfuzz looks them up in a table, not a hash map. */
typedef struct {
    uint32_t start; /* offset in its text */
    uint32_t len;
    uint32_t id;    /* 1 + the piece's number among the distinct pieces; 0: an empty slot */
    uint32_t text;  /* which text the piece was first seen in */
} Piece;

static uint64_t piece_hash(const unsigned char *s, ssz len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (ssz i = 0; i < len; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* str.split() (ASCII whitespace, runs dropped) or str.split("\n") of s[0..n): piece bounds */
static ssz split_pieces(const unsigned char *s, ssz n, int lines, ssz *starts, ssz *ends)
{
    ssz count = 0;
    if (lines) {
        ssz from = 0;
        for (ssz i = 0; i <= n; i++)
            if (i == n || s[i] == '\n') {
                starts[count] = from;
                ends[count++] = i;
                from = i + 1;
            }
        return count;
    }
    ssz i = 0;
    while (i < n) {
        while (i < n && (K[s[i]] & K_SP)) i++;
        if (i == n) break;
        starts[count] = i;
        while (i < n && !(K[s[i]] & K_SP)) i++;
        ends[count++] = i;
    }
    return count;
}

/* the code of the shared piece numbered k (from 0): 2 + k, clear of the surrogates */
static Py_UCS4 shared_code(uint32_t k)
{
    Py_UCS4 code = 2 + k;
    return code < 0xD800 ? code : code + 0x800;
}

/* sequence_codes(a, b, lines) -> (codes_a, codes_b): see Piece */
static PyObject *sequence_codes(PyObject *self, PyObject *args)
{
    PyObject *texts[2];
    int lines;
    if (!PyArg_ParseTuple(args, "UUp", &texts[0], &texts[1], &lines)) return NULL;
    if (!PyUnicode_IS_ASCII(texts[0]) || !PyUnicode_IS_ASCII(texts[1])) {
        PyErr_SetString(PyExc_ValueError, "_fastnorm.sequence_codes takes ASCII text only");
        return NULL;
    }
    const unsigned char *s[2];
    ssz n[2], most[2], count[2];
    for (int k = 0; k < 2; k++) {
        s[k] = (const unsigned char *)PyUnicode_DATA(texts[k]);
        n[k] = PyUnicode_GET_LENGTH(texts[k]);
        most[k] = n[k] / 2 + 2; /* pieces: at most one per two characters, plus the last line */
    }
    if (n[0] > 0x7FFFFFFF || n[1] > 0x7FFFFFFF || most[0] + most[1] > 0xE0000) {
        /* more pieces than code points outside the surrogates, or offsets past 32 bits */
        PyErr_SetString(PyExc_ValueError, "_fastnorm.sequence_codes: texts too long");
        return NULL;
    }
    PyObject *result = NULL, *codes[2] = {NULL, NULL};
    /* starts and ends of a's pieces, then of b's; then each piece's id */
    ssz *bounds = PyMem_Malloc(sizeof(ssz) * 2 * (size_t)(most[0] + most[1]));
    uint32_t *ids = PyMem_Malloc(sizeof(uint32_t) * (size_t)(most[0] + most[1]));
    Piece *table = NULL;
    uint8_t *seen = NULL;   /* per distinct piece: bit k set when text k holds it */
    Py_UCS4 *code = NULL;   /* per distinct piece */
    if (!bounds || !ids) goto no_memory;
    ssz *starts[2] = {bounds, bounds + 2 * most[0]}, *ends[2];
    ends[0] = starts[0] + most[0];
    ends[1] = starts[1] + most[1];
    for (int k = 0; k < 2; k++) count[k] = split_pieces(s[k], n[k], lines, starts[k], ends[k]);
    size_t slots = 16;
    while (slots < 2 * (size_t)(count[0] + count[1])) slots *= 2;
    table = PyMem_Calloc(slots, sizeof(Piece));
    seen = PyMem_Calloc((size_t)(count[0] + count[1]) + 1, 1);
    if (!table || !seen) goto no_memory;
    uint32_t distinct = 0, *piece_id = ids;
    for (int k = 0; k < 2; k++) {
        for (ssz i = 0; i < count[k]; i++) {
            const unsigned char *start = s[k] + starts[k][i];
            uint32_t len = (uint32_t)(ends[k][i] - starts[k][i]);
            size_t slot = (size_t)piece_hash(start, len) & (slots - 1);
            while (table[slot].id && (table[slot].len != len ||
                                      memcmp(s[table[slot].text] + table[slot].start, start, len)))
                slot = (slot + 1) & (slots - 1);
            if (!table[slot].id) {
                table[slot].start = (uint32_t)starts[k][i];
                table[slot].len = len;
                table[slot].text = (uint32_t)k;
                table[slot].id = ++distinct;
            }
            seen[table[slot].id - 1] |= (uint8_t)(1 << k);
            *piece_id++ = table[slot].id - 1;
        }
    }
    code = PyMem_Malloc(sizeof(Py_UCS4) * ((size_t)distinct + 1));
    if (!code) goto no_memory;
    uint32_t shared = 0;
    Py_UCS4 top = 1;
    for (uint32_t d = 0; d < distinct; d++) {
        if (seen[d] == 3) {
            code[d] = shared_code(shared++);
            top = code[d];
        } else {
            code[d] = seen[d] == 1 ? 0 : 1;
        }
    }
    piece_id = ids;
    for (int k = 0; k < 2; k++) {
        codes[k] = PyUnicode_New(count[k], top);
        if (!codes[k]) goto done;
        int kind = PyUnicode_KIND(codes[k]);
        void *data = PyUnicode_DATA(codes[k]);
        for (ssz i = 0; i < count[k]; i++) PyUnicode_WRITE(kind, data, i, code[*piece_id++]);
    }
    result = PyTuple_Pack(2, codes[0], codes[1]);
    goto done;
no_memory:
    PyErr_NoMemory();
done:
    Py_XDECREF(codes[0]);
    Py_XDECREF(codes[1]);
    PyMem_Free(bounds);
    PyMem_Free(ids);
    PyMem_Free(table);
    PyMem_Free(seen);
    PyMem_Free(code);
    return result;
}

static PyMethodDef METHODS[] = {
    {"sequence_codes", sequence_codes, METH_VARARGS,
     "sequence_codes(a, b, lines) -> two strings, a code point per token (per line if lines)"},
    {"rule_id", rule_id, METH_VARARGS,
     "rule_id(name, regex, replacement, flags) -> the id of the compiled rule, or -1"},
    {"normalize", normalize, METH_VARARGS,
     "normalize(ascii_text, passes, names, counts) -> text, or None (run the regexes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_fastnorm", "The line-local built-in normalization rules, compiled.",
    -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastnorm(void)
{
    init_classes();
    init_rules();
    return PyModule_Create(&MODULE);
}
