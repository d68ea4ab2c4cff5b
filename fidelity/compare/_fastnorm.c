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

#include "_textscan.h" /* Text, the class table K (K_*), at/is/run/run_of/starts/one_of, fnv1a */

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* How common a character is in terminal text (higher: rarer): find() tests a literal's first
 * and last characters and the rarest one between them. */
static int rarity(int c)
{
    static const char COMMON[] = "e tanoisrhldcu/.-_:=0123456789mfpgwybvkxjqz";
    const char *at = strchr(COMMON, c);
    return c && at ? (int)(at - COMMON) : 100;
}

/* A literal find() looks for: its text and length, and `mid`, the rarest of its characters
 * between the first and the last (the last itself when it has two). */
typedef struct {
    const char *text;
    ssz len, mid;
} Literal;

static void init_literal(Literal *lit, const char *text)
{
    lit->text = text;
    lit->len = text ? (ssz)strlen(text) : 0;
    lit->mid = lit->len > 1 ? lit->len - 1 : 0;
    for (ssz j = 1; j < lit->len - 1; j++)
        if (j == 1 || rarity((unsigned char)text[j]) > rarity((unsigned char)text[lit->mid]))
            lit->mid = j;
}

/* whether the literal t[0..len) stands at f, whose first character is known to be t[0] (a loop
 * without calls: the vector constants of the callers stay in registers) */
static inline int rest_equal(const unsigned char *f, const unsigned char *t, ssz len)
{
    ssz k = 1;
    while (k < len && f[k] == t[k]) k++;
    return k == len;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define AVX2_FIND 1
static int HAS_AVX2; /* set by init_rules from the CPU */

/* find()'s test 32 places at a time, on CPUs with AVX2: from *from while a whole block fits
 * before `last`; *from is left at the first place not looked at. */
__attribute__((target("avx2"))) static const unsigned char *
find_avx2(const unsigned char *s, ssz last, const Literal *lit, ssz *from)
{
    const unsigned char *t = (const unsigned char *)lit->text;
    ssz len = lit->len, mid = lit->mid, i = *from;
    const __m256i first = _mm256_set1_epi8((char)t[0]), middle = _mm256_set1_epi8((char)t[mid]),
                  end = _mm256_set1_epi8((char)t[len - 1]);
    for (; i + 31 <= last; i += 32) {
        __m256i a = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(s + i)), first);
        __m256i b = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(s + i + mid)), middle);
        __m256i c = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(s + i + len - 1)), end);
        unsigned places = (unsigned)_mm256_movemask_epi8(_mm256_and_si256(_mm256_and_si256(a, b), c));
        for (; places; places &= places - 1) {
            const unsigned char *f = s + i + __builtin_ctz(places);
            if (rest_equal(f, t, len)) return f;
        }
    }
    *from = i;
    return NULL;
}
#endif

/* the first occurrence of lit (len >= 1) in s[0..n), or NULL. A single character is memchr's.
 * A longer literal is looked for 32 places at a time with AVX2, where its first, mid and last
 * characters all stand (in terminal text the three together are rare, even where each is
 * common), and checked in full there; the rest of the text (all of it without AVX2) goes by
 * memchr for its mid character. */
static const unsigned char *find(const unsigned char *s, ssz n, const Literal *lit)
{
    const unsigned char *t = (const unsigned char *)lit->text;
    ssz len = lit->len, mid = lit->mid, i = 0, last = n - len; /* where it can start at most */
    if (len == 1) return n > 0 ? memchr(s, t[0], (size_t)n) : NULL;
    if (last < 0) return NULL;
#if defined(AVX2_FIND)
    if (HAS_AVX2) {
        const unsigned char *f = find_avx2(s, last, lit, &i);
        if (f) return f;
    }
#endif
    for (; i <= last; i++) {
        const unsigned char *f = memchr(s + i + mid, t[mid], (size_t)(last - i + 1));
        if (!f) return NULL;
        f -= mid;
        if (f[0] == t[0] && rest_equal(f, t, len)) return f;
        i = f - s;
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

/* the names as three characters in one number: a name is one compare of the text's three */
#define NAME(a, b, c) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16)
static const uint32_t MONTHS[] = {NAME('J', 'a', 'n'), NAME('F', 'e', 'b'), NAME('M', 'a', 'r'),
                                  NAME('A', 'p', 'r'), NAME('M', 'a', 'y'), NAME('J', 'u', 'n'),
                                  NAME('J', 'u', 'l'), NAME('A', 'u', 'g'), NAME('S', 'e', 'p'),
                                  NAME('O', 'c', 't'), NAME('N', 'o', 'v'), NAME('D', 'e', 'c')};
static const uint32_t DAYS[] = {NAME('M', 'o', 'n'), NAME('T', 'u', 'e'), NAME('W', 'e', 'd'),
                                NAME('T', 'h', 'u'), NAME('F', 'r', 'i'), NAME('S', 'a', 't'),
                                NAME('S', 'u', 'n')};

static inline int name_at(const Text *t, ssz i, const uint32_t *names, int count)
{
    if (i < 0 || i + 3 > t->n) return 0;
    uint32_t here = NAME(t->s[i], t->s[i + 1], t->s[i + 2]);
    int any = 0;
    for (int k = 0; k < count; k++) any |= here == names[k];
    return any;
}
#undef NAME
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
    const char *first;    /* the characters a match can start with (a rule is tried only there) */
    const char *before;   /* the replacement: before, group 1 (if any), after */
    const char *after;
    const char *bail;
    const char *prefix;   /* a literal every match starts with (found with find()), or NULL */
    int word_lead;        /* every match starts a word: skip the rest of a word that failed */
    const char *guard[3]; /* literals of which one occurs in every text a match is in */
} RuleDef;

/* filled by init_rules: per rule id */
static ssz BEFORE_LEN[32], AFTER_LEN[32];
static Literal PREFIX[32], GUARD[32][3], BAIL[32];
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
#if defined(AVX2_FIND)
    __builtin_cpu_init();
    HAS_AVX2 = __builtin_cpu_supports("avx2");
#endif
    for (int id = 0; id < RULE_COUNT; id++) {
        const RuleDef *def = &RULE_DEFS[id];
        BEFORE_LEN[id] = (ssz)strlen(def->before);
        AFTER_LEN[id] = (ssz)strlen(def->after);
        init_literal(&PREFIX[id], def->prefix);
        init_literal(&BAIL[id], def->bail);
        for (int g = 0; g < 3; g++) init_literal(&GUARD[id][g], def->guard[g]);
        for (const char *c = def->first; *c; c++) FIRST[id][(unsigned char)*c] = 1;
        for (size_t g = 0; g < sizeof GROUP_RULES / sizeof *GROUP_RULES; g++)
            if (!strcmp(def->name, GROUP_RULES[g])) USES_GROUP[id] = 1;
    }
}

static PyObject *rule_id(PyObject *Py_UNUSED(self), PyObject *args)
{
    const char *name, *regex, *replacement;
    Py_ssize_t name_len, regex_len, replacement_len;
    long flags;
    if (!PyArg_ParseTuple(args, "s#s#s#l", &name, &name_len, &regex, &regex_len, &replacement,
                          &replacement_len, &flags))
        return NULL;
    char flag_text[32];
    int flag_len = snprintf(flag_text, sizeof flag_text, "%ld", flags);
    uint64_t h = fnv1a(FNV_OFFSET, name, name_len);
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

/* room for len more bytes (at least `least` in all) */
static int grow(Buffer *b, ssz len, ssz least)
{
    ssz cap = b->cap > least ? b->cap : least > 256 ? least : 256;
    while (cap < b->len + len) cap *= 2;
    char *grown = PyMem_Realloc(b->data, (size_t)cap);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

static inline int put(Buffer *b, const void *data, ssz len)
{
    if (b->len + len > b->cap && grow(b, len, 0) < 0) return -1;
    memcpy(b->data + b->len, data, (size_t)len);
    b->len += len;
    return 0;
}

#define MAX_PASS 8
#define MAX_PASSES 64
#define LEAD_SLOTS 8 /* word-lead passes whose word starts one scan of the text lists */

/* A pass of a program, prepared once per program (see program_for). */
typedef struct {
    int count, ids[MAX_PASS];
    int slot;                    /* word-lead passes: the list of word starts they read, else -1 */
    const Literal *prefix;       /* a single rule's prefix: candidates are where it stands */
    unsigned char rules_at[256]; /* bit r: rule ids[r]'s matches can start with this character */
} Pass;

typedef struct {
    PyObject *key; /* the tuple of passes it was made from (a reference is held), or NULL */
    Py_ssize_t npasses, nrules;
    int slots;
    unsigned char slot_bits[256]; /* bit j: the pass in slot j has a rule that can start here */
    Pass pass[MAX_PASSES];
} Program;

/* Programs made lately, by the identity of their tuple: the callers pass the same few tuples on
 * every call, so the ids are read, checked and turned into tables once. */
#define CACHED_PROGRAMS 4
static Program *CACHE[CACHED_PROGRAMS];
static int cache_next;

/* The program of `passes` (a tuple of tuples of rule ids), or NULL with an exception set when it
 * is not one. Only exact tuples of exact ints are cached (nothing else is sure to read the same
 * twice); any other program is made for this call alone (*owned: the caller frees it). */
static Program *program_for(PyObject *passes, int *owned)
{
    *owned = 0;
    for (int c = 0; c < CACHED_PROGRAMS; c++)
        if (CACHE[c] && CACHE[c]->key == passes) return CACHE[c];
    Py_ssize_t npasses = PyTuple_GET_SIZE(passes);
    if (npasses > MAX_PASSES) {
        PyErr_SetString(PyExc_ValueError, "at most 64 passes");
        return NULL;
    }
    Program *prog = PyMem_Calloc(1, sizeof *prog);
    if (!prog) return (Program *)PyErr_NoMemory();
    int cacheable = PyTuple_CheckExact(passes);
    prog->npasses = npasses;
    for (Py_ssize_t i = 0; i < npasses; i++) {
        PyObject *pass = PyTuple_GET_ITEM(passes, i);
        if (!PyTuple_Check(pass) || PyTuple_GET_SIZE(pass) < 1 || PyTuple_GET_SIZE(pass) > MAX_PASS) {
            PyErr_SetString(PyExc_ValueError, "each pass is a tuple of 1 to 8 rule ids");
            goto fail;
        }
        cacheable &= PyTuple_CheckExact(pass);
        Pass *p = &prog->pass[i];
        p->count = (int)PyTuple_GET_SIZE(pass);
        for (int r = 0; r < p->count; r++) {
            PyObject *item = PyTuple_GET_ITEM(pass, r);
            cacheable &= PyLong_CheckExact(item);
            long id = PyLong_AsLong(item);
            if (id == -1 && PyErr_Occurred()) goto fail;
            if (id < 0 || id >= RULE_COUNT || (p->count > 1 && !RULE_DEFS[id].match)) {
                PyErr_Format(PyExc_ValueError, "not a rule id of this module: %ld", id);
                goto fail;
            }
            p->ids[r] = (int)id;
        }
        prog->nrules += p->count;
    }
    for (Py_ssize_t i = 0; i < npasses; i++) {
        Pass *p = &prog->pass[i];
        const RuleDef *lead = &RULE_DEFS[p->ids[0]];
        int word_lead = 1;
        for (int r = 0; r < p->count; r++) {
            for (int c = 0; c < 256; c++) p->rules_at[c] |= (unsigned char)(FIRST[p->ids[r]][c] << r);
            word_lead &= RULE_DEFS[p->ids[r]].word_lead;
        }
        p->prefix = p->count == 1 && lead->prefix ? &PREFIX[p->ids[0]] : NULL;
        /* past LEAD_SLOTS a word-lead pass tries every place its rules can start at, as other
         * passes do: the same matches (each of its rules checks the word start itself) */
        p->slot = -1;
        if (lead->match && word_lead && prog->slots < LEAD_SLOTS) {
            p->slot = prog->slots++;
            for (int c = 0; c < 256; c++)
                if (p->rules_at[c]) prog->slot_bits[c] |= (unsigned char)(1u << p->slot);
        }
    }
    if (!cacheable) {
        *owned = 1;
        return prog;
    }
    if (CACHE[cache_next]) { /* the oldest goes */
        Py_DECREF(CACHE[cache_next]->key);
        PyMem_Free(CACHE[cache_next]);
    }
    prog->key = Py_NewRef(passes);
    CACHE[cache_next] = prog;
    cache_next = (cache_next + 1) % CACHED_PROGRAMS;
    return prog;
fail:
    PyMem_Free(prog);
    return NULL;
}

static int contains(const Text *t, const Literal *lit) { return find(t->s, t->n, lit) != NULL; }

#if defined(__SSE2__)
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

/* Every rule of a word-lead pass matches only at a word start (a word character after a
 * non-word one, or at 0), so such a pass looks at those alone, and of them at the ones its
 * rules can start with. One scan of the text lists the word starts some word-lead pass of the
 * program can start with, each with the slots of the passes that can (Program.slot_bits); the
 * list serves until a pass changes the text (most passes change nothing), and then the next
 * word-lead pass scans the new text. */
typedef struct {
    ssz *at, *picked;     /* the word starts listed; room for those one pass picks of them */
    unsigned char *slots; /* per listed start: bit j, the pass in slot j can start there */
    ssz count, cap;
    int valid;
} Leads;

static int find_leads(const Text *in, const Program *prog, Leads *leads)
{
    const unsigned char *s = in->s, *slot_bits = prog->slot_bits;
    ssz n = in->n, p = 0, count = 0;
    ssz most = n / 2 + 1; /* two word starts are never next to each other */
    if (most > leads->cap) {
        ssz *grown = PyMem_Realloc(leads->at, (2 * sizeof(ssz) + 1) * (size_t)most);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        leads->at = grown;
        leads->picked = grown + most;
        leads->slots = (unsigned char *)(grown + 2 * most);
        leads->cap = most;
    }
    ssz *at = leads->at;
    unsigned char *slots = leads->slots;
    unsigned before = 0;
    /* every start is written, and the count moves past it when a pass wants it: no branch
     * that depends on the text */
#if defined(__SSE2__)
    for (; p + 16 <= n; p += 16) {
        unsigned words = word_mask16(s + p);
        unsigned starts = words & ~((words << 1) | before) & 0xFFFFu;
        before = (words >> 15) & 1u;
        for (; starts; starts &= starts - 1) {
            ssz q = p + __builtin_ctz(starts);
            unsigned char bits = slot_bits[s[q]];
            at[count] = q;
            slots[count] = bits;
            count += bits != 0;
        }
    }
#endif
    for (; p < n; p++) {
        unsigned word = (K[s[p]] & K_W) != 0;
        if (word && !before) {
            unsigned char bits = slot_bits[s[p]];
            at[count] = p;
            slots[count] = bits;
            count += bits != 0;
        }
        before = word;
    }
    leads->count = count;
    leads->valid = 1;
    return 0;
}

/* the listed word starts the pass in `slot` can start at, into leads->picked: how many */
static ssz pick_leads(Leads *leads, int slot)
{
    ssz picked = 0, *out = leads->picked;
    const ssz *at = leads->at;
    const unsigned char *slots = leads->slots;
    for (ssz w = 0; w < leads->count; w++) {
        out[picked] = at[w];
        picked += (slots[w] >> slot) & 1u;
    }
    return picked;
}

/* The rules of pass at p (the first that matches, among those that can start with the
 * character there): its index in the pass, or -1 */
static inline int match_at(const Text *in, ssz p, const Pass *pass, Match *m)
{
    for (unsigned rules = pass->rules_at[in->s[p]]; rules; rules &= rules - 1) {
        int r = __builtin_ctz(rules);
        if (RULE_DEFS[pass->ids[r]].match(in, p, m)) return r;
    }
    return -1;
}

/* Writes rule id's replacement of the match at p, after what precedes it from `copied`. */
static int replace(const Text *in, ssz copied, ssz p, int id, const Match *m, Buffer *out)
{
    const RuleDef *def = &RULE_DEFS[id];
    if (put(out, in->s + copied, p - copied) < 0 || put(out, def->before, BEFORE_LEN[id]) < 0)
        return -1;
    if (USES_GROUP[id] && m->g1 >= 0 && put(out, in->s + m->g1, m->g1_end - m->g1) < 0) return -1;
    return put(out, def->after, AFTER_LEN[id]);
}

/* One pass (fused: at each position the first rule that matches) over `in`; the result goes to
 * `out` (emptied first). Returns the number of matches, -1 on error. */
static ssz run_pass(const Text *in, const Program *prog, const Pass *pass, Buffer *out,
                    long *counts, long *first_hit, long *hits, Leads *leads)
{
    const RuleDef *lead = &RULE_DEFS[pass->ids[0]];
    if (pass->count == 1 && lead->guard[0]) {
        int any = 0;
        for (int g = 0; g < 3 && lead->guard[g] && !any; g++)
            any = contains(in, &GUARD[pass->ids[0]][g]);
        if (!any) return 0;
    }
    const unsigned char *s = in->s;
    ssz matches = 0, copied = 0, p = 0, n = in->n;
    out->len = 0;
    Match m;
    int hit;
    /* the first match makes room for the text and some growth at once (one allocation where
     * doubling from 256 took several) */
#define MATCHED()                                                                                \
    do {                                                                                         \
        if (!matches && out->cap < n + n / 8 + 64 && grow(out, 0, n + n / 8 + 64) < 0) return -1; \
        if (replace(in, copied, p, pass->ids[hit], &m, out) < 0) return -1;                      \
        counts[hit]++;                                                                           \
        if (!first_hit[hit]) first_hit[hit] = ++*hits; /* the order re.sub's callback meets them */ \
        matches++;                                                                               \
        copied = m.end;                                                                          \
    } while (0)
    if (pass->slot >= 0) {
        /* the places the loop below would try and match at: the listed word starts from the
         * end of the last match on */
        if (!leads->valid && find_leads(in, prog, leads) < 0) return -1;
        const ssz *list = leads->picked;
        for (ssz w = 0, count = pick_leads(leads, pass->slot); w < count; w++) {
            if ((p = list[w]) < copied || (hit = match_at(in, p, pass, &m)) < 0) continue;
            MATCHED();
        }
    } else if (pass->prefix) {
        const unsigned char *f;
        while (p < n && (f = find(s + p, n - p, pass->prefix)) != NULL) {
            p = f - s;
            if ((hit = match_at(in, p, pass, &m)) < 0) {
                p++;
                continue;
            }
            MATCHED();
            p = m.end;
        }
    } else {
        for (; p < n; p++) {
            if (!pass->rules_at[s[p]] || (hit = match_at(in, p, pass, &m)) < 0) continue;
            MATCHED();
            p = m.end - 1;
        }
    }
#undef MATCHED
    if (matches && put(out, s + copied, n - copied) < 0) return -1;
    return matches;
}

/* The passes' scratch space (two texts, the word starts), kept from call to call: the passes
 * run no Python code, so no other call can use it meanwhile. Past 1 MiB it is let go. */
static Buffer SCRATCH[2];
static Leads LEADS;

static void release_scratch(void)
{
    for (int k = 0; k < 2; k++)
        if (SCRATCH[k].cap > (1 << 20)) {
            PyMem_Free(SCRATCH[k].data);
            SCRATCH[k].data = NULL;
            SCRATCH[k].cap = SCRATCH[k].len = 0;
        }
    if (LEADS.cap > (1 << 17)) {
        PyMem_Free(LEADS.at);
        memset(&LEADS, 0, sizeof LEADS);
    }
}

/* normalize(text, passes, names, counts) -> text | None
 * passes: a tuple of tuples of rule ids; names: one per rule, in the order given; counts: a dict
 * whose entry for a rule's name grows by its number of matches (rules without any are left out).
 */
static PyObject *normalize(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *passes, *names, *tallies;
    if (!PyArg_ParseTuple(args, "UO!O!O!", &text, &PyTuple_Type, &passes, &PyTuple_Type, &names,
                          &PyDict_Type, &tallies))
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "_fastnorm.normalize takes ASCII text only");
        return NULL;
    }
    int owned;
    Program *prog = program_for(passes, &owned);
    if (!prog) return NULL;
    Py_ssize_t nrules = prog->nrules;
    PyObject *result = NULL;
    if (PyTuple_GET_SIZE(names) != nrules) {
        PyErr_SetString(PyExc_ValueError, "one name per rule of the passes");
        goto done;
    }
    Text cur = {(const unsigned char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    Buffer *buffers = SCRATCH;
    Leads *leads = &LEADS;
    leads->valid = 0;
    int which = 0, changed = 0;
    long counts[MAX_PASSES * MAX_PASS], first[MAX_PASSES * MAX_PASS], hits = 0;
    memset(counts, 0, sizeof(long) * (size_t)nrules); /* only these are read */
    memset(first, 0, sizeof(long) * (size_t)nrules);
    Py_ssize_t at_rule = 0;
    for (Py_ssize_t i = 0; i < prog->npasses; at_rule += prog->pass[i].count, i++) {
        const Pass *pass = &prog->pass[i];
        if (!RULE_DEFS[pass->ids[0]].match) {
            if (contains(&cur, &BAIL[pass->ids[0]])) {
                result = Py_NewRef(Py_None);
                goto release;
            }
            continue;
        }
        ssz n = run_pass(&cur, prog, pass, &buffers[which], counts + at_rule, first + at_rule,
                         &hits, leads);
        if (n < 0) goto release;
        if (n > 0) {
            leads->valid = 0;
            cur.s = (const unsigned char *)buffers[which].data;
            cur.n = buffers[which].len;
            which ^= 1;
            changed = 1;
        }
    }
    /* the text is made before the counts go in: the dict may run Python code, even this
     * function again, which reuses the scratch space */
    if (changed) {
        if (!(result = PyUnicode_New(cur.n, 127))) goto release;
        memcpy(PyUnicode_DATA(result), cur.s, (size_t)cur.n);
    } else {
        result = Py_NewRef(text);
    }
    release_scratch();
    /* counts go into the dict in the order the regex passes insert them: pass by pass, and
     * within a fused pass by each rule's first match (same keys, same order, same JSON) */
    for (long order = 1; order <= hits; order++) {
        Py_ssize_t r = 0;
        while (r < nrules && first[r] != order) r++;
        PyObject *name = PyTuple_GET_ITEM(names, r), *before = PyDict_GetItemWithError(tallies, name);
        if (!before && PyErr_Occurred()) goto fail;
        long total = counts[r];
        if (before) {
            total += PyLong_AsLong(before);
            if (PyErr_Occurred()) goto fail;
        }
        PyObject *value = PyLong_FromLong(total);
        if (!value || PyDict_SetItem(tallies, name, value) < 0) {
            Py_XDECREF(value);
            goto fail;
        }
        Py_DECREF(value);
    }
    goto done;
fail:
    Py_CLEAR(result);
    goto done;
release:
    release_scratch();
done:
    if (owned) PyMem_Free(prog);
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
static PyObject *sequence_codes(PyObject *Py_UNUSED(self), PyObject *args)
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
            size_t slot = (size_t)fnv1a(FNV_OFFSET, start, len) & (slots - 1);
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
