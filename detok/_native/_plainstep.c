/* StreamTable's batch step, compiled (optional extension; table.py has a numpy/Python path with
 * the same results, which tests compare it with).
 *
 * `step_packed` takes a scheduler batch as it came off the wire (packed little-endian rid, start,
 * count and token columns) and produces the frontend's columns directly: one UTF-8 text blob plus
 * per-row char lengths, char offsets and token counts. Rows that are "plain" (one id, the start
 * the stream expects, bytes only, no stop rule to check) are a few loads and stores here; every
 * other row is handed, in row order, to a Python callback that steps that request's DecodeStream.
 * `RidMap` finds a rid's slot (open addressing on the raw uint64), so no per-row Python object is
 * made on the plain path.
 *
 * Why C: in CPython every per-row list/dict/int operation goes through the interpreter (type checks,
 * reference counts, often an allocation) and a row needs several; here a plain row is a few array
 * reads and writes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_utf8.h"

#if PY_BIG_ENDIAN
#define LE64(v) __builtin_bswap64(v)
#define LE32(v) __builtin_bswap32(v)
#else
#define LE64(v) (v)
#define LE32(v) (v)
#endif

static inline uint64_t load_u64(const char *p, Py_ssize_t i) {
    uint64_t v;
    memcpy(&v, p + 8 * i, 8);
    return LE64(v);
}

static inline uint32_t load_u32(const char *p, Py_ssize_t i) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return LE32(v);
}

static inline void store_u32(char *p, Py_ssize_t i, uint32_t v) {
    v = LE32(v);
    memcpy(p + 4 * i, &v, 4);
}

/* ---- RidMap: uint64 rid -> slot (> 0) ------------------------------------------------------ */
typedef struct {
    uint64_t key;
    int64_t val; /* 0: empty, -1: deleted, > 0: the slot */
} RidEntry;      /* key and value side by side: one cache line per probe */

typedef struct {
    PyObject_HEAD
    RidEntry *e;
    size_t cap; /* a power of two, kept at least twice the filled entries */
    int shift;
    Py_ssize_t used, filled;
} RidMap;

static inline size_t rm_home(const RidMap *m, uint64_t key) {
    /* Fibonacci hashing: sequential rids (the common kind) spread over the whole table */
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> m->shift);
}

static inline int64_t rm_get(const RidMap *m, uint64_t key) {
    size_t mask = m->cap - 1, i = rm_home(m, key);
    for (;;) {
        int64_t v = m->e[i].val;
        if (v == 0) return 0;
        if (v > 0 && m->e[i].key == key) return v;
        i = (i + 1) & mask;
    }
}

static void rm_insert_absent(RidMap *m, uint64_t key, int64_t slot) {
    size_t mask = m->cap - 1, i = rm_home(m, key);
    while (m->e[i].val > 0) i = (i + 1) & mask;
    if (m->e[i].val == 0) m->filled++;
    m->e[i].key = key;
    m->e[i].val = slot;
    m->used++;
}

static int rm_resize(RidMap *m, size_t cap) {
    RidEntry *e = PyMem_Calloc(cap, sizeof(RidEntry)), *old = m->e;
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t old_cap = m->cap;
    int bits = 0;
    while (((size_t)1 << bits) < cap) bits++;
    m->e = e;
    m->cap = cap;
    m->shift = 64 - bits;
    m->used = m->filled = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].val > 0) rm_insert_absent(m, old[i].key, old[i].val);
    PyMem_Free(old);
    return 0;
}

static int rm_key(PyObject *obj, uint64_t *key) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *key = (uint64_t)v;
    return 0;
}

static PyObject *RidMap_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    RidMap *m = (RidMap *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    if (rm_resize(m, 1024) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static void RidMap_dealloc(RidMap *m) {
    PyMem_Free(m->e);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* key -> slot (an existing key is updated in place); -1 on memory error */
static int rm_put(RidMap *m, uint64_t key, int64_t slot) {
    size_t mask = m->cap - 1, i = rm_home(m, key);
    for (;;) {
        int64_t v = m->e[i].val;
        if (v == 0) break;
        if (v > 0 && m->e[i].key == key) {
            m->e[i].val = slot;
            return 0;
        }
        i = (i + 1) & mask;
    }
    if ((size_t)(m->filled + 1) * 2 > m->cap) {
        size_t cap = 1024;
        while (cap < (size_t)(m->used + 1) * 4) cap *= 2;
        if (rm_resize(m, cap) < 0) return -1;
    }
    rm_insert_absent(m, key, slot);
    return 0;
}

static PyObject *RidMap_put(RidMap *m, PyObject *args) {
    PyObject *o_key;
    long long slot;
    uint64_t key;
    if (!PyArg_ParseTuple(args, "OL", &o_key, &slot) || rm_key(o_key, &key) < 0) return NULL;
    if (slot <= 0) {
        PyErr_SetString(PyExc_ValueError, "slots are positive");
        return NULL;
    }
    if (rm_put(m, key, slot) < 0) return NULL;
    Py_RETURN_NONE;
}

/* the slot `key` had (its entry removed), or 0 */
static int64_t rm_pop(RidMap *m, uint64_t key) {
    size_t mask = m->cap - 1, i = rm_home(m, key);
    for (;;) {
        int64_t v = m->e[i].val;
        if (v == 0) return 0;
        if (v > 0 && m->e[i].key == key) {
            m->e[i].val = -1;
            m->used--;
            return v;
        }
        i = (i + 1) & mask;
    }
}

static PyObject *RidMap_pop(RidMap *m, PyObject *o_key) {
    uint64_t key;
    if (rm_key(o_key, &key) < 0) return NULL;
    return PyLong_FromLongLong(rm_pop(m, key));
}

static PyObject *RidMap_get(RidMap *m, PyObject *o_key) {
    uint64_t key;
    if (rm_key(o_key, &key) < 0) return NULL;
    return PyLong_FromLongLong(rm_get(m, key));
}

static Py_ssize_t RidMap_len(RidMap *m) { return m->used; }

static PyMethodDef RidMap_methods[] = {
    {"put", (PyCFunction)RidMap_put, METH_VARARGS, "put(rid, slot): map an unsigned 64-bit rid to a slot > 0."},
    {"pop", (PyCFunction)RidMap_pop, METH_O, "pop(rid) -> the slot it had, or 0."},
    {"get", (PyCFunction)RidMap_get, METH_O, "get(rid) -> its slot, or 0."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods RidMap_as_sequence = {.sq_length = (lenfunc)RidMap_len};

static PyTypeObject RidMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._plainstep.RidMap",
    .tp_basicsize = sizeof(RidMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Unsigned 64-bit rid -> slot, for step_packed's lookups.",
    .tp_new = RidMap_new,
    .tp_dealloc = (destructor)RidMap_dealloc,
    .tp_methods = RidMap_methods,
    .tp_as_sequence = &RidMap_as_sequence,
};

/* ---- buffers ------------------------------------------------------------------------------- */
typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get_buf(PyObject *obj, Buf *b, int writable, Py_ssize_t itemsize, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes", name, itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *b) {
    if (b->held) PyBuffer_Release(&b->view);
    b->held = 0;
}

static int text_append_str(Text *t, PyObject *s, Py_ssize_t *chars) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "row text must be a str");
        return -1;
    }
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    if (p == NULL) return -1;
    *chars = PyUnicode_GET_LENGTH(s);
    return text_append(t, p, n);
}

/* ---- step_packed --------------------------------------------------------------------------- */
/* What the step needs of one (decode mode, token id): 16 bytes, so a row costs one cache line of
 * the (large, randomly read) token table rather than one per column. */
typedef struct {
    uint32_t off;    /* the token's bytes in `utf8`, when longer than INLINE */
    uint16_t nbytes;
    uint16_t nchars; /* chars of its text, if T_WHOLE */
    uint8_t flags;
    char inl[7];     /* the bytes themselves, when they fit */
} TokenEntry;
#define INLINE 7
/* T_NEXT / T_PREV: after this id the slot's decode mode is the next / previous one (T_SHIFT2: the
 * second next / previous), a chain of modes for the values of a state: typed output's JSON string
 * after a backslash passed on, a string value after the whitespace it holds
 * (detok.stream.typed_fast). T_NL_PREFIX / T_SP_PREFIX: an escaped newline (a backslash and an n) /
 * a space goes out before the id's text (a value's held whitespace, once more text shows it is in). */
enum { T_WHOLE = 1, T_BYTE_OK = 2, T_EOS = 4, T_NEXT = 8, T_PREV = 16, T_NL_PREFIX = 32, T_SHIFT2 = 64, T_SP_PREFIX = 128 };

enum { B_RIDS, B_STARTS, B_COUNTS, B_TOKENS, B_ENTRIES, B_UTF8, B_MARKS, B_PEND, B_PEND_LEN, B_CHOFF, B_NTOK,
       B_EXPECT, B_EOS_STOPS, B_MODE, B_TAG, B_FIRSTS, B_FIRSTS_LEN, N_BUFS };
#define FIRSTS_BYTES 32 /* a slot's stop strings' first characters, UTF-8 back to back */

/* Whether any of the UTF-8 characters in firsts[0:n] occurs in p[0:len] (UTF-8 is
 * self-synchronizing: a character's bytes found in valid UTF-8 are that character) */
static int has_any_char(const char *p, Py_ssize_t len, const unsigned char *firsts, int n) {
    for (int i = 0; i < n;) {
        unsigned char b = firsts[i];
        int w = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (i + w > n) return 1; /* (malformed: take it as a match, the row's stream decides) */
        for (Py_ssize_t j = 0; j + w <= len; j++)
            if (memcmp(p + j, firsts + i, w) == 0) return 1;
        i += w;
    }
    return 0;
}

#define PREFETCH_MIN 32  /* rows: below this the table's lines are likely cached anyway */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 16 /* rows between a row's entry (and list item) prefetch and its use */
#endif
#ifndef PREFETCH_STR_AHEAD
#define PREFETCH_STR_AHEAD 8 /* rows between a row's str prefetch (its list item there by then) and its use */
#endif

/* Row j's index in `entries` (and `token_texts`) as its slot's mode stands now, -1 for none: for a
 * prefetch only (the prefetch is written at the call: a void helper that only prefetches is "pure"
 * to GCC, and its calls are dropped). */
static inline int64_t row_entry_index(const int64_t *pre_slot, Py_ssize_t j, Py_ssize_t n, const char *tokens,
                                      const int64_t *md, Py_ssize_t n_slots, Py_ssize_t vocab, Py_ssize_t n_entries) {
    if (j >= n) return -1;
    int64_t s = pre_slot[j], tok = load_u32(tokens, j);
    if (s <= 0 || s >= n_slots || tok >= vocab) return -1;
    int64_t idx = md[s] * vocab + tok;
    return idx < n_entries ? idx : -1;
}

/* step_packed(ridmap, rids, starts, counts, tokens, (entries, utf8, vocab, stop_marks),
 *             (pend, pend_len, choff, ntok, expect, eos_stops, mode, tag), (stop_firsts, stop_firsts_len),
 *             slow_row[, token_texts[, packed_text[, held[, held_limit]]]])
 *   -> (text, lengths, offsets, num_tokens, byte_lengths, tags, kinds[, texts]): bytes; all but
 *      `text` and `kinds` packed uint32, one per row (`tags`: the row's slot's tag, 0 for an
 *      unknown rid; `kinds`: a byte per row, empty if all are 0). With `token_texts` (a list or tuple of
 *      str or None per (mode, id), ModeTables.texts), also the rows' texts as a list of str: a
 *      whole token's own object where the row is just that token (no str is made for it); with
 *      `token_texts` and a false `packed_text`, `text` is empty: the strs are the rows' text alone,
 *      and a whole token's bytes are neither read nor copied (for a long token, a cache line of
 *      `utf8` fewer: 14% of a 16-token request's cost, cold).
 *
 * rids: uint64, starts/counts/tokens: uint32, little-endian; `counts` empty means one id per row.
 * entries[mode * vocab + id] (TokenEntry, 16 bytes) holds a token's bytes in that decode mode:
 * T_WHOLE if they are whole characters, T_BYTE_OK unless it is a spaced special token, T_EOS for
 * end-of-sequence ids; stop_marks[id] (uint32) is non-zero for an id some live request stops on
 * besides those. pend[slot] (4 bytes) holds the slot's pend_len[slot] bytes of an incomplete
 * character, the per-slot columns its expected start, tokens, chars, mode (an id flagged T_NEXT /
 * T_PREV moves it along its chain) and whether it stops on ids (then an end-of-sequence or marked
 * id is its stream's to step: a mark of another request's costs a slow row, never a wrong one).
 * stop_firsts[slot] (FIRSTS_BYTES) holds the first characters of the slot's stop strings, UTF-8,
 * stop_firsts_len[slot] bytes of it (0: none); such a slot's row is plain only for an id of whole
 * characters none of which begins a stop string, with nothing held (its matcher then stays idle).
 * slow_row(row, rid, slot, start, first, count) -> (text, offset, num_tokens) steps any other row.
 * `held` (a list, or None): per slot None or a bytearray; a plain row of a slot with a bytearray
 * (a typed request whose parser holds its text: detok.stream.typed_fast) appends its token's bytes
 * there and goes out empty (no text, no chars; its slot's held bytes and char offset untouched),
 * unless that would take the bytearray past `held_limit` bytes: then the row is its stream's. */
static PyObject *step_packed(PyObject *self, PyObject *args) {
    PyObject *o[N_BUFS], *slow_row, *token_texts = Py_None, *held_bufs = Py_None;
    RidMap *map;
    Py_ssize_t vocab, held_limit = PY_SSIZE_T_MAX;
    int packed_text = 1;
    if (!PyArg_ParseTuple(args, "O!OOOO(OOnO)(OOOOOOOO)(OO)O|OpOn", &RidMapType, &map, &o[B_RIDS], &o[B_STARTS], &o[B_COUNTS],
                          &o[B_TOKENS], &o[B_ENTRIES], &o[B_UTF8], &vocab, &o[B_MARKS], &o[B_PEND], &o[B_PEND_LEN], &o[B_CHOFF],
                          &o[B_NTOK], &o[B_EXPECT], &o[B_EOS_STOPS], &o[B_MODE], &o[B_TAG], &o[B_FIRSTS], &o[B_FIRSTS_LEN],
                          &slow_row, &token_texts, &packed_text, &held_bufs, &held_limit))
        return NULL;
    if (held_bufs != Py_None && !PyList_CheckExact(held_bufs)) {
        PyErr_SetString(PyExc_TypeError, "held must be a list or None");
        return NULL;
    }
    if (held_bufs == Py_None) held_bufs = NULL;
    if (token_texts == Py_None) packed_text = 1; /* (the blob is then the rows' only text) */
    static const struct {
        Py_ssize_t itemsize;
        int writable;
        const char *name;
    } spec[N_BUFS] = {
        {1, 0, "rids"}, {1, 0, "starts"}, {1, 0, "counts"}, {1, 0, "tokens"}, {sizeof(TokenEntry), 0, "entries"},
        {1, 0, "utf8"}, {4, 0, "stop_marks"}, {1, 1, "pend"}, {1, 1, "pend_len"}, {8, 1, "choff"}, {8, 1, "ntok"},
        {8, 1, "expect"},
        {1, 0, "eos_stops"}, {8, 1, "mode"}, {4, 0, "tag"}, {1, 0, "stop_firsts"}, {1, 0, "stop_firsts_len"},
    };
    Buf b[N_BUFS];
    for (int i = 0; i < N_BUFS; i++) b[i].held = 0;
    PyObject *out_lengths = NULL, *out_offsets = NULL, *out_ntok = NULL, *out_nbytes = NULL, *out_tags = NULL;
    PyObject *out_kinds = NULL, *out_strs = NULL;
    int64_t *pre_slot = NULL;
    int any_kind = 0;
    PyObject *result = NULL;
    Text text = {NULL, 0, 0};
    for (int i = 0; i < N_BUFS; i++)
        if (get_buf(o[i], &b[i], spec[i].writable, spec[i].itemsize, spec[i].name) < 0) goto done;

    Py_ssize_t n = b[B_RIDS].view.len / 8, n_tokens = b[B_TOKENS].view.len / 4;
    int has_counts = b[B_COUNTS].view.len != 0;
    if (b[B_RIDS].view.len % 8 || b[B_STARTS].view.len != 4 * n || b[B_TOKENS].view.len % 4 ||
        (has_counts ? b[B_COUNTS].view.len != 4 * n : n_tokens != n)) {
        PyErr_SetString(PyExc_ValueError, "rids, starts, counts and tokens do not fit together");
        goto done;
    }
    Py_ssize_t n_slots = b[B_PEND_LEN].view.len, n_entries = b[B_ENTRIES].view.len / (Py_ssize_t)sizeof(TokenEntry);
    Py_ssize_t n_utf8 = b[B_UTF8].view.len;
    if (b[B_CHOFF].view.len != 8 * n_slots || b[B_NTOK].view.len != 8 * n_slots || b[B_EXPECT].view.len != 8 * n_slots ||
        b[B_EOS_STOPS].view.len != n_slots || b[B_MODE].view.len != 8 * n_slots || b[B_TAG].view.len != 4 * n_slots ||
        b[B_PEND].view.len != MAX_PENDING * n_slots || vocab <= 0 || n_entries % vocab || b[B_MARKS].view.len != 4 * vocab ||
        b[B_FIRSTS].view.len != FIRSTS_BYTES * n_slots || b[B_FIRSTS_LEN].view.len != n_slots) {
        PyErr_SetString(PyExc_ValueError, "table columns do not match");
        goto done;
    }
    const char *rids = b[B_RIDS].view.buf, *starts = b[B_STARTS].view.buf, *counts = b[B_COUNTS].view.buf;
    const char *tokens = b[B_TOKENS].view.buf, *utf8 = b[B_UTF8].view.buf;
    const TokenEntry *entries = b[B_ENTRIES].view.buf;
    int64_t *md = b[B_MODE].view.buf;
    const uint32_t *tag = b[B_TAG].view.buf;
    const char *es = b[B_EOS_STOPS].view.buf;
    const uint32_t *marks = b[B_MARKS].view.buf;
    const unsigned char *firsts = b[B_FIRSTS].view.buf, *firsts_len = b[B_FIRSTS_LEN].view.buf;
    unsigned char *pend = b[B_PEND].view.buf, *pend_len = b[B_PEND_LEN].view.buf;
    int64_t *co = b[B_CHOFF].view.buf, *nt = b[B_NTOK].view.buf, *ex = b[B_EXPECT].view.buf;
    if (has_counts) { /* checked before anything is stepped */
        Py_ssize_t total = 0;
        for (Py_ssize_t k = 0; k < n; k++) total += load_u32(counts, k);
        if (total != n_tokens) {
            PyErr_SetString(PyExc_ValueError, "counts do not add up to the tokens");
            goto done;
        }
    }

    out_lengths = PyBytes_FromStringAndSize(NULL, 4 * n);
    out_offsets = PyBytes_FromStringAndSize(NULL, 4 * n);
    out_ntok = PyBytes_FromStringAndSize(NULL, 4 * n);
    out_nbytes = PyBytes_FromStringAndSize(NULL, 4 * n);
    out_tags = PyBytes_FromStringAndSize(NULL, 4 * n);
    out_kinds = PyBytes_FromStringAndSize(NULL, n);
    if (token_texts != Py_None) { /* the rows' texts as str too: a whole token's own str object where it can be */
        if (!(PyList_CheckExact(token_texts) || PyTuple_CheckExact(token_texts)) ||
            PySequence_Fast_GET_SIZE(token_texts) != n_entries) {
            PyErr_SetString(PyExc_ValueError, "token_texts must be a list or tuple of one entry per (mode, id)");
            goto done;
        }
        if ((out_strs = PyList_New(n)) == NULL) goto done;
    }
    if (!out_lengths || !out_offsets || !out_ntok || !out_nbytes || !out_tags || !out_kinds) goto done;
    char *o_kind = PyBytes_AS_STRING(out_kinds);
    char *o_len = PyBytes_AS_STRING(out_lengths), *o_off = PyBytes_AS_STRING(out_offsets);
    char *o_nt = PyBytes_AS_STRING(out_ntok), *o_nb = PyBytes_AS_STRING(out_nbytes), *o_tag = PyBytes_AS_STRING(out_tags);
    text.cap = 8 * n + 64;
    if ((text.data = PyMem_Malloc(text.cap)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    /* One id per row: each row's slot looked up first, so the main loop can prefetch a later row's
     * token entry and str (random reads in MBs of table: cache misses the loop would otherwise wait
     * on one by one). Those slots are used until a row goes to its stream: its call-back may close
     * a request (a later row of it would be refused with the old slot too; the map is looked up
     * again all the same). */
    if (!has_counts && n >= PREFETCH_MIN && (pre_slot = PyMem_Malloc(n * sizeof(int64_t))) != NULL)
        for (Py_ssize_t k = 0; k < n; k++) pre_slot[k] = rm_get(map, load_u64(rids, k));
    PyObject **texts_items = out_strs != NULL ? PySequence_Fast_ITEMS(token_texts) : NULL;
    int map_changed = 0;
    Py_ssize_t first = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t rid = load_u64(rids, k);
        int64_t start = load_u32(starts, k), count = has_counts ? load_u32(counts, k) : 1;
        int64_t slot = pre_slot != NULL && !map_changed ? pre_slot[k] : rm_get(map, rid);
        if (pre_slot != NULL) { /* a later row's token entry (and list item), a nearer row's str */
            int64_t ahead = row_entry_index(pre_slot, k + PREFETCH_AHEAD, n, tokens, md, n_slots, vocab, n_entries);
            if (ahead >= 0) {
                __builtin_prefetch(&entries[ahead]);
                if (texts_items != NULL) __builtin_prefetch(&texts_items[ahead]);
            }
            int64_t near = texts_items == NULL ? -1
                           : row_entry_index(pre_slot, k + PREFETCH_STR_AHEAD, n, tokens, md, n_slots, vocab, n_entries);
            if (near >= 0) __builtin_prefetch(texts_items[near], 1); /* its refcount is written */
        }
        if (slot < 0 || slot >= n_slots) {
            PyErr_SetString(PyExc_IndexError, "slot out of range");
            goto done;
        }
        int64_t tok = count >= 1 ? load_u32(tokens, first) : 0;
        uint32_t row_tag = tag[slot]; /* read before a slow row may close the slot */
        Py_ssize_t size_before = text.size, row_bytes = -1; /* (row_bytes: set where the blob does not hold them) */
        const TokenEntry *e = NULL;
        if (count == 1 && slot != 0 && ex[slot] == start && tok < vocab) {
            int64_t idx = md[slot] * vocab + tok;
            if (idx >= 0 && idx < n_entries) {
                e = &entries[idx];
                if (!(e->flags & T_BYTE_OK) || (es[slot] && ((e->flags & T_EOS) || marks[tok]))) e = NULL;
                else if (firsts_len[slot]) { /* stop strings: only whole text that cannot begin one */
                    int fl = firsts_len[slot] < FIRSTS_BYTES ? firsts_len[slot] : FIRSTS_BYTES;
                    if (!(e->flags & T_WHOLE) || pend_len[slot] || (e->flags & (T_NL_PREFIX | T_SP_PREFIX)) ||
                        (e->nbytes > INLINE && (Py_ssize_t)e->off + e->nbytes > b[B_UTF8].view.len) ||
                        has_any_char(e->nbytes <= INLINE ? e->inl : (const char *)b[B_UTF8].view.buf + e->off, e->nbytes,
                                     firsts + FIRSTS_BYTES * slot, fl))
                        e = NULL;
                }
            }
        }
        int64_t offset, chars, count_after;
        if (e != NULL && (e->nbytes > INLINE && (Py_ssize_t)e->off + e->nbytes > n_utf8)) {
            PyErr_SetString(PyExc_ValueError, "token entry outside utf8");
            goto done;
        }
        /* (the list is read at each row: a slow row's call-back may put a slot in or out) */
        PyObject *keep = held_bufs != NULL && slot < PyList_GET_SIZE(held_bufs) ? PyList_GET_ITEM(held_bufs, slot) : NULL;
        if (keep != NULL && !PyByteArray_CheckExact(keep)) keep = NULL;
        if (e != NULL && keep != NULL && e->nbytes > held_limit - PyByteArray_GET_SIZE(keep)) e = NULL; /* full */
        if (e != NULL && keep != NULL) { /* a plain row whose text its stream's parser holds: kept, sent empty */
            const char *p = e->nbytes <= INLINE ? e->inl : utf8 + e->off;
            Py_ssize_t size = PyByteArray_GET_SIZE(keep);
            if (PyByteArray_Resize(keep, size + e->nbytes) < 0) goto done;
            memcpy(PyByteArray_AS_STRING(keep) + size, p, e->nbytes);
            chars = 0;
            offset = co[slot];
            count_after = ex[slot] = nt[slot] = nt[slot] + 1;
        } else if (e != NULL) { /* a plain row */
            const char *p = e->nbytes <= INLINE ? e->inl : utf8 + e->off;
            unsigned char held = pend_len[slot];
            if ((e->flags & T_WHOLE) && !held) {
                int nl = (e->flags & T_NL_PREFIX) != 0, sp = (e->flags & T_SP_PREFIX) != 0;
                if (out_strs != NULL && !nl && !sp) {
                    PyObject *str = texts_items[md[slot] * vocab + tok];
                    if (PyUnicode_Check(str) && PyUnicode_GET_LENGTH(str) == e->nchars) {
                        PyList_SET_ITEM(out_strs, k, Py_NewRef(str));
                        if (!packed_text) row_bytes = e->nbytes; /* its str is its text: no bytes to copy */
                    }
                }
                if (nl && text_append(&text, "\\n", 2) < 0) goto done;
                if (sp && text_append(&text, " ", 1) < 0) goto done;
                if (row_bytes < 0 && text_append(&text, p, e->nbytes) < 0) goto done;
                chars = e->nchars + 2 * nl + sp;
            } else { /* part of a character, or bytes held: the slot's incremental UTF-8 */
                unsigned char small[64], *data = small;
                Py_ssize_t size = held + e->nbytes, used;
                if (held > MAX_PENDING - 1) {
                    PyErr_SetString(PyExc_ValueError, "held bytes out of range");
                    goto done;
                }
                if (size > (Py_ssize_t)sizeof(small) && (data = PyMem_Malloc(size)) == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                memcpy(data, pend + MAX_PENDING * slot, held);
                memcpy(data + held, p, e->nbytes);
                chars = utf8_replace(&text, data, size, &used);
                if (chars >= 0 && size - used > MAX_PENDING - 1) { /* cannot happen: a held prefix is < 4 bytes */
                    PyErr_SetString(PyExc_ValueError, "incomplete UTF-8 tail too long");
                    chars = -1;
                }
                if (chars >= 0) {
                    memcpy(pend + MAX_PENDING * slot, data + used, size - used);
                    pend_len[slot] = (unsigned char)(size - used);
                }
                if (data != small) PyMem_Free(data);
                if (chars < 0) goto done;
            }
            offset = co[slot];
            co[slot] = offset + chars;
            count_after = ex[slot] = nt[slot] = nt[slot] + 1;
            if (e->flags & (T_NEXT | T_PREV)) { /* another mode of its chain, built with it */
                int64_t d = (e->flags & T_SHIFT2) ? 2 : 1;
                int64_t m = md[slot] + ((e->flags & T_NEXT) ? d : -d);
                if (m < 0 || (m + 1) * vocab > n_entries) {
                    PyErr_SetString(PyExc_ValueError, "mode switch out of range");
                    goto done;
                }
                md[slot] = m;
            }
        } else {
            map_changed = 1;
            PyObject *r = PyObject_CallFunction(slow_row, "nKLLnL", k, (unsigned long long)rid, (long long)slot,
                                                (long long)start, first, (long long)count);
            if (r == NULL) goto done;
            PyObject *s;
            long long off, cnt;
            Py_ssize_t c;
            if (!PyArg_ParseTuple(r, "ULL", &s, &off, &cnt) || text_append_str(&text, s, &c) < 0) {
                Py_DECREF(r);
                goto done;
            }
            if (out_strs != NULL) PyList_SET_ITEM(out_strs, k, Py_NewRef(s));
            Py_DECREF(r);
            chars = c;
            offset = off;
            count_after = cnt;
        }
        if (out_strs != NULL && PyList_GET_ITEM(out_strs, k) == NULL) {
            PyObject *str = PyUnicode_DecodeUTF8(text.data + size_before, text.size - size_before, "strict");
            if (str == NULL) goto done;
            PyList_SET_ITEM(out_strs, k, str);
        }
        if (row_bytes < 0) row_bytes = text.size - size_before;
        if (!packed_text) text.size = size_before; /* (the buffer only made this row's str) */
        store_u32(o_len, k, (uint32_t)chars);
        store_u32(o_off, k, (uint32_t)offset);
        store_u32(o_nt, k, (uint32_t)count_after);
        store_u32(o_nb, k, (uint32_t)row_bytes);
        /* a tag's bits 30-31: the kind of a typed request's row (detok.stream.typed_fast) */
        o_kind[k] = (char)(row_tag >> 30);
        any_kind |= (int)(row_tag >> 30);
        store_u32(o_tag, k, row_tag & 0x3FFFFFFFu);
        first += count;
    }
    PyObject *blob = PyBytes_FromStringAndSize(text.data, text.size);
    if (blob == NULL) goto done;
    if (!any_kind) {
        Py_DECREF(out_kinds);
        if ((out_kinds = PyBytes_FromStringAndSize(NULL, 0)) == NULL) {
            Py_DECREF(blob);
            goto done;
        }
    }
    result = out_strs == NULL ? PyTuple_Pack(7, blob, out_lengths, out_offsets, out_ntok, out_nbytes, out_tags, out_kinds)
                              : PyTuple_Pack(8, blob, out_lengths, out_offsets, out_ntok, out_nbytes, out_tags, out_kinds, out_strs);
    Py_DECREF(blob);
done:
    for (int i = 0; i < N_BUFS; i++) release(&b[i]);
    PyMem_Free(text.data);
    PyMem_Free(pre_slot);
    Py_XDECREF(out_lengths);
    Py_XDECREF(out_offsets);
    Py_XDECREF(out_ntok);
    Py_XDECREF(out_nbytes);
    Py_XDECREF(out_tags);
    Py_XDECREF(out_kinds);
    Py_XDECREF(out_strs);
    return result;
}

#ifndef PROMPT_AHEAD
#define PROMPT_AHEAD 4 /* requests between the prefetch of a prompt's tail and its set-up (its list: 3x) */
#endif

/* ---- PlainOpener: a plain request's set-up ---------------------------------------------------- */
enum { O_PEND, O_PEND_LEN, O_CHOFF, O_NTOK, O_EXPECT, O_EOS_STOPS, O_MODE, O_TAG, N_OBUFS };

/* PlainOpener(ridmap, (entries, utf8, vocab), (pend, pend_len, choff, ntok, expect, eos_stops, mode, tag), all_ok)
 * (all_ok: a byte per decode mode, whether every id of it has a byte entry)
 * holds the table's buffers (taken once: a buffer per call would cost more than the set-up itself;
 * the table makes a new opener when its columns or entries are replaced) for a plain request's set-up
 * and end (`finish`, below). open(rid, slot, mode, context, max_context, tag, eos_stops) -> bool: the set-up in
 * the columns (StreamTable.open's deferred case, see table.py): the bytes of an incomplete character
 * its prompt tail (the last `max_context` ids of `context`, a list or tuple) leaves held in decode mode
 * `mode`, the slot's columns and the rid's map entry. False, with nothing changed, where the tail
 * needs the Python path: no ids, an id without a byte entry in the mode (outside the vocabulary, an
 * added token with raw content), no bytes at all (a leading space may be pending). */
typedef struct {
    PyObject_HEAD
    RidMap *map;
    Buf entries, utf8, all_ok, col[N_OBUFS];
    Py_ssize_t vocab, n_slots, n_modes;
} PlainOpener;

static void PlainOpener_dealloc(PlainOpener *p) {
    release(&p->entries);
    release(&p->utf8);
    release(&p->all_ok);
    for (int i = 0; i < N_OBUFS; i++) release(&p->col[i]);
    Py_XDECREF(p->map);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *PlainOpener_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *o_entries, *o_utf8, *o_all_ok, *o[N_OBUFS];
    RidMap *map;
    Py_ssize_t vocab;
    if (!PyArg_ParseTuple(args, "O!(OOn)(OOOOOOOO)O", &RidMapType, &map, &o_entries, &o_utf8, &vocab, &o[O_PEND],
                          &o[O_PEND_LEN], &o[O_CHOFF], &o[O_NTOK], &o[O_EXPECT], &o[O_EOS_STOPS], &o[O_MODE], &o[O_TAG],
                          &o_all_ok))
        return NULL;
    PlainOpener *p = (PlainOpener *)type->tp_alloc(type, 0);
    if (p == NULL) return NULL;
    p->map = (RidMap *)Py_NewRef(map);
    static const Py_ssize_t itemsize[N_OBUFS] = {1, 1, 8, 8, 8, 1, 8, 4};
    if (get_buf(o_entries, &p->entries, 0, sizeof(TokenEntry), "entries") < 0 || get_buf(o_utf8, &p->utf8, 0, 1, "utf8") < 0 ||
        get_buf(o_all_ok, &p->all_ok, 0, 1, "all_ok") < 0)
        goto fail;
    for (int i = 0; i < N_OBUFS; i++)
        if (get_buf(o[i], &p->col[i], 1, itemsize[i], "column") < 0) goto fail;
    Py_ssize_t n = p->col[O_PEND_LEN].view.len, n_entries = p->entries.view.len / (Py_ssize_t)sizeof(TokenEntry);
    if (p->col[O_PEND].view.len != MAX_PENDING * n || p->col[O_CHOFF].view.len != 8 * n || p->col[O_NTOK].view.len != 8 * n ||
        p->col[O_EXPECT].view.len != 8 * n || p->col[O_EOS_STOPS].view.len != n || p->col[O_MODE].view.len != 8 * n ||
        p->col[O_TAG].view.len != 4 * n || vocab <= 0 || n_entries % vocab || p->all_ok.view.len != n_entries / vocab) {
        PyErr_SetString(PyExc_ValueError, "table columns do not match");
        goto fail;
    }
    p->vocab = vocab, p->n_slots = n, p->n_modes = n_entries / vocab;
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

/* the slot's columns and the rid's map entry of an opened plain request holding `held`: 1, or -1 */
static int plain_opened(PlainOpener *p, unsigned long long rid, long long slot, long long mode, unsigned long tag,
                        int eos_stops, const unsigned char *held, Py_ssize_t n_held) {
    if (rm_put(p->map, (uint64_t)rid, slot) < 0) return -1;
    ((int64_t *)p->col[O_MODE].view.buf)[slot] = mode;
    ((int64_t *)p->col[O_EXPECT].view.buf)[slot] = 0;
    ((int64_t *)p->col[O_NTOK].view.buf)[slot] = 0;
    ((int64_t *)p->col[O_CHOFF].view.buf)[slot] = 0;
    ((char *)p->col[O_EOS_STOPS].view.buf)[slot] = (char)(eos_stops != 0);
    ((uint32_t *)p->col[O_TAG].view.buf)[slot] = (uint32_t)tag;
    ((unsigned char *)p->col[O_PEND_LEN].view.buf)[slot] = (unsigned char)n_held;
    if (n_held) memcpy((unsigned char *)p->col[O_PEND].view.buf + MAX_PENDING * slot, held, n_held);
    return 1;
}

/* One plain request's set-up (see `open` below): 1 opened, 0 declined (nothing changed), -1 error. */
static int plain_open_one(PlainOpener *p, unsigned long long rid, long long slot, long long mode, PyObject *context,
                          Py_ssize_t max_context, unsigned long tag, int eos_stops) {
    int result = -1;
    const TokenEntry *entries = (const TokenEntry *)p->entries.view.buf + mode * p->vocab;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(context), first = n > max_context ? n - max_context : 0;
    PyObject **items = PySequence_Fast_ITEMS(context);
    if (n == first) return 0;
    if (((const char *)p->all_ok.view.buf)[mode]) {
        /* every id of the mode has a byte entry: a tail whose last id is whole characters holds
         * nothing, whatever came before it, and needs only a range check (one entry read, not one
         * per id: the table is megabytes, and each read of it a likely cache miss) */
        int in_range = 1;
        for (Py_ssize_t k = first; k < n && in_range; k++) {
            PyObject *item = items[k];
            long long id = PyLong_Check(item) ? PyLong_AsLongLong(item) : -1;
            if (id == -1 && PyErr_Occurred()) PyErr_Clear();
            in_range = id >= 0 && id < p->vocab;
        }
        if (!in_range) return 0;
        const TokenEntry *e = &entries[PyLong_AsLongLong(items[n - 1])];
        if ((e->flags & T_WHOLE) && e->nchars > 0) return plain_opened(p, rid, slot, mode, tag, eos_stops, NULL, 0);
    }
    /* every id must have a byte entry; the tail's bytes are concatenated as the stream's push would */
    unsigned char small[256], *data = small;
    Py_ssize_t size = 0, cap = sizeof(small);
    const TokenEntry *last = NULL;
    for (Py_ssize_t k = first; k < n; k++) {
        PyObject *item = items[k];
        long long id = PyLong_Check(item) ? PyLong_AsLongLong(item) : -1;
        if (id == -1 && PyErr_Occurred()) PyErr_Clear(); /* too large: not in the vocabulary */
        if (id < 0 || id >= p->vocab || !(entries[id].flags & T_BYTE_OK)) {
            result = 0;
            goto done;
        }
        last = &entries[id];
        if (last->nbytes > INLINE && (Py_ssize_t)last->off + last->nbytes > p->utf8.view.len) {
            PyErr_SetString(PyExc_ValueError, "token entry outside utf8");
            goto done;
        }
        if (size + last->nbytes > cap) {
            Py_ssize_t new_cap = 2 * (size + last->nbytes);
            unsigned char *grown = data == small ? PyMem_Malloc(new_cap) : PyMem_Realloc(data, new_cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (data == small) memcpy(grown, small, size);
            data = grown, cap = new_cap;
        }
        memcpy(data + size, last->nbytes <= INLINE ? last->inl : (const char *)p->utf8.view.buf + last->off, last->nbytes);
        size += last->nbytes;
    }
    Py_ssize_t used = size;
    if (size == 0) {
        result = 0;
        goto done;
    }
    if (!((last->flags & T_WHOLE) && last->nchars > 0) && utf8_replace(NULL, data, size, &used) < 0) goto done;
    if (size - used > MAX_PENDING - 1) { /* cannot happen: a held prefix is < 4 bytes */
        PyErr_SetString(PyExc_ValueError, "incomplete UTF-8 tail too long");
        goto done;
    }
    result = plain_opened(p, rid, slot, mode, tag, eos_stops, data + used, size - used);
done:
    if (data != small) PyMem_Free(data);
    return result;
}

static PyObject *PlainOpener_open(PlainOpener *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !(PyList_Check(args[3]) || PyTuple_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "open(rid, slot, mode, context: list or tuple, max_context, tag, eos_stops)");
        return NULL;
    }
    unsigned long long rid = PyLong_AsUnsignedLongLong(args[0]);
    long long slot = PyLong_AsLongLong(args[1]), mode = PyLong_AsLongLong(args[2]);
    Py_ssize_t max_context = PyLong_AsSsize_t(args[4]);
    unsigned long tag = PyLong_AsUnsignedLong(args[5]);
    int eos_stops = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (slot <= 0 || slot >= p->n_slots || mode < 0 || mode >= p->n_modes || max_context < 0 || tag > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "slot, mode, max_context or tag out of range");
        return NULL;
    }
    int r = plain_open_one(p, rid, slot, mode, args[3], max_context, tag, eos_stops);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

/* Prefetches for the prompts of later requests of open_many, one step of the chain each: a
 * prompt's list, its item array, its tail's int objects. The caller made them long before this call, so
 * they are out of cache: their reads, waited on one by one, are most of a request's set-up (the first
 * read of a tail's int above all). */
static inline void prefetch_prompt(PyObject **ctx_items, Py_ssize_t i, Py_ssize_t n, Py_ssize_t max_context) {
    if (i + 3 * PROMPT_AHEAD < n) __builtin_prefetch(ctx_items[i + 3 * PROMPT_AHEAD]);
    if (i + 2 * PROMPT_AHEAD < n && PyList_CheckExact(ctx_items[i + 2 * PROMPT_AHEAD])) {
        PyObject *c = ctx_items[i + 2 * PROMPT_AHEAD];
        Py_ssize_t len = PyList_GET_SIZE(c);
        if (len > 0) __builtin_prefetch(&PyList_GET_ITEM(c, len - 1));
    }
    if (i + PROMPT_AHEAD < n && PyList_CheckExact(ctx_items[i + PROMPT_AHEAD])) {
        PyObject *c = ctx_items[i + PROMPT_AHEAD];
        Py_ssize_t len = PyList_GET_SIZE(c), k = len > max_context ? len - max_context : 0;
        for (; k < len; k++) __builtin_prefetch(PyList_GET_ITEM(c, k));
    }
}

/* open_many(rids, contexts, start, mode, max_context, tag, eos_stops, free, slot_of, deferred, value) -> int:
 * `open` for rids[start:] in order (rids and contexts: lists or tuples of the same length), each
 * slot popped from the end of the `free` list, each opened rid entered in `slot_of` (-> its slot)
 * and `deferred` (-> `value`) as StreamTable.open does: the set-up of a batch of plain requests
 * with no Python call per request. Returns the index of the first request it did not open (the
 * caller opens that one itself): a rid that is not a wire rid or already in `slot_of`, a context
 * that is not a list or tuple, no free slot, a prompt tail `open` declines; len(rids) when done. */
static PyObject *PlainOpener_open_many(PlainOpener *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])) || !(PyList_Check(args[1]) || PyTuple_Check(args[1])) ||
        !PyList_Check(args[7]) || !PyDict_Check(args[8]) || !PyDict_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError, "open_many(rids, contexts, start, mode, max_context, tag, eos_stops, free: list, "
                                         "slot_of: dict, deferred: dict, value)");
        return NULL;
    }
    PyObject *rids = args[0], *contexts = args[1], *free = args[7], *slot_of = args[8], *deferred = args[9], *value = args[10];
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rids), start = PyLong_AsSsize_t(args[2]);
    long long mode = PyLong_AsLongLong(args[3]);
    Py_ssize_t max_context = PyLong_AsSsize_t(args[4]);
    unsigned long tag = PyLong_AsUnsignedLong(args[5]);
    int eos_stops = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (PySequence_Fast_GET_SIZE(contexts) != n || start < 0 || mode < 0 || mode >= p->n_modes || max_context < 0 ||
        tag > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "rids and contexts differ in length, or start, mode, max_context or tag out of range");
        return NULL;
    }
    PyObject **rid_items = PySequence_Fast_ITEMS(rids), **ctx_items = PySequence_Fast_ITEMS(contexts);
    Py_ssize_t i = start;
    for (; i < n; i++) {
        PyObject *rid_obj = rid_items[i], *context = ctx_items[i];
        prefetch_prompt(ctx_items, i, n, max_context);
        Py_ssize_t n_free = PyList_GET_SIZE(free);
        if (!PyLong_CheckExact(rid_obj) || !(PyList_Check(context) || PyTuple_Check(context)) || n_free == 0) break;
        unsigned long long rid = PyLong_AsUnsignedLongLong(rid_obj);
        if (rid == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            break;
        }
        int known = PyDict_Contains(slot_of, rid_obj);
        if (known < 0) return NULL;
        if (known) break;
        PyObject *slot_obj = PyList_GET_ITEM(free, n_free - 1);
        long long slot = PyLong_AsLongLong(slot_obj);
        if (slot == -1 && PyErr_Occurred()) return NULL;
        if (slot <= 0 || slot >= p->n_slots) {
            PyErr_SetString(PyExc_ValueError, "a free slot out of range");
            return NULL;
        }
        int r = plain_open_one(p, rid, slot, mode, context, max_context, tag, eos_stops);
        if (r < 0) return NULL;
        if (r == 0) break;
        Py_INCREF(slot_obj); /* the list's reference goes with the pop */
        int failed = PyDict_SetItem(slot_of, rid_obj, slot_obj) < 0 || PyDict_SetItem(deferred, rid_obj, value) < 0 ||
                     PyList_SetSlice(free, n_free - 1, n_free, NULL) < 0;
        Py_DECREF(slot_obj);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(i);
}

/* A plain request's end in the columns: (text of its held bytes, char offset, tokens[, finish]);
 * the slot leaves the plain path and the rid the map. NULL (nothing changed) on an error. */
static PyObject *plain_end(PlainOpener *p, unsigned long long rid, long long slot, PyObject *finish) {
    unsigned char *pend_len = p->col[O_PEND_LEN].view.buf;
    unsigned char held = pend_len[slot];
    if (held > MAX_PENDING - 1) {
        PyErr_SetString(PyExc_ValueError, "held bytes out of range");
        return NULL;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p->col[O_PEND].view.buf + MAX_PENDING * slot, held, "replace");
    if (text == NULL) return NULL;
    long long offset = ((int64_t *)p->col[O_CHOFF].view.buf)[slot], ntok = ((int64_t *)p->col[O_NTOK].view.buf)[slot];
    /* the tuple built directly: Py_BuildValue parses its format on every call */
    PyObject *result = PyTuple_New(finish == NULL ? 3 : 4), *off_obj = PyLong_FromLongLong(offset),
             *ntok_obj = PyLong_FromLongLong(ntok);
    if (result == NULL || off_obj == NULL || ntok_obj == NULL) {
        Py_XDECREF(result);
        Py_XDECREF(off_obj);
        Py_XDECREF(ntok_obj);
        Py_DECREF(text);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, text);
    PyTuple_SET_ITEM(result, 1, off_obj);
    PyTuple_SET_ITEM(result, 2, ntok_obj);
    if (finish != NULL) {
        Py_INCREF(finish);
        PyTuple_SET_ITEM(result, 3, finish);
    }
    ((int64_t *)p->col[O_EXPECT].view.buf)[slot] = -2; /* _NOT_PLAIN */
    pend_len[slot] = 0;
    rm_pop(p->map, (uint64_t)rid);
    return result;
}

/* finish(rid, slot) -> (text, char_offset, num_tokens): a plain request's end (StreamTable.finish's
 * deferred case): the text of the bytes it holds (as a final decode: U+FFFD for an incomplete
 * character), its counters; the slot leaves the plain path and the rid the map. */
static PyObject *PlainOpener_finish(PlainOpener *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "finish(rid, slot)");
        return NULL;
    }
    unsigned long long rid = PyLong_AsUnsignedLongLong(args[0]);
    long long slot = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (slot <= 0 || slot >= p->n_slots) {
        PyErr_SetString(PyExc_ValueError, "slot out of range");
        return NULL;
    }
    return plain_end(p, rid, slot, NULL);
}

/* finish_many(rids, start, out, slot_of, deferred, stop_marked, free, firsts_len, finish) -> int: `finish`
 * for rids[start:] in order, as StreamTable.finish does for a plain request, each result
 * (text, char_offset, num_tokens, `finish`) appended to the list `out`: the rid leaves `slot_of`,
 * `deferred` and the map, its slot goes back to `free`; a rid `slot_of` does not hold gives
 * ("", 0, 0, None). Returns the index of the first rid it did not finish (the caller finishes
 * that one itself): one with a stream (not in `deferred`), stop ids marked (in `stop_marked`) or
 * stop strings and held bytes, or not a wire rid; len(rids) when done. */
static PyObject *PlainOpener_finish_many(PlainOpener *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !(PyList_Check(args[0]) || PyTuple_Check(args[0])) || !PyList_Check(args[2]) || !PyDict_Check(args[3]) ||
        !PyDict_Check(args[4]) || !PyDict_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "finish_many(rids, start, out: list, slot_of: dict, deferred: dict, "
                                         "stop_marked: dict, free: list, firsts_len, finish)");
        return NULL;
    }
    PyObject *rids = args[0], *out = args[2], *slot_of = args[3], *deferred = args[4], *stop_marked = args[5];
    PyObject *free = args[6], *finish = args[8];
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rids), i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    Buf firsts = {.held = 0};
    if (get_buf(args[7], &firsts, 1, 1, "firsts_len") < 0) return NULL;
    if (firsts.view.len != p->n_slots || i < 0) {
        PyErr_SetString(PyExc_ValueError, "firsts_len does not match the table, or start out of range");
        release(&firsts);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(rids);
    unsigned char *pend_len = p->col[O_PEND_LEN].view.buf, *firsts_len = firsts.view.buf;
    for (; i < n; i++) {
        PyObject *rid_obj = items[i], *item;
        if (!PyLong_CheckExact(rid_obj)) break;
        PyObject *slot_obj = PyDict_GetItemWithError(slot_of, rid_obj); /* borrowed */
        if (slot_obj == NULL) {
            if (PyErr_Occurred()) goto fail;
            if ((item = Py_BuildValue("(siiO)", "", 0, 0, Py_None)) == NULL) goto fail;
        } else {
            unsigned long long rid = PyLong_AsUnsignedLongLong(rid_obj);
            if (rid == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                break;
            }
            long long slot = PyLong_AsLongLong(slot_obj);
            if (slot == -1 && PyErr_Occurred()) goto fail;
            int is_deferred = PyDict_Contains(deferred, rid_obj), marked = PyDict_Contains(stop_marked, rid_obj);
            if (is_deferred < 0 || marked < 0) goto fail;
            if (slot <= 0 || slot >= p->n_slots || !is_deferred || marked || (firsts_len[slot] && pend_len[slot])) break;
            if ((item = plain_end(p, rid, slot, finish)) == NULL) goto fail;
            firsts_len[slot] = 0;
            Py_INCREF(slot_obj); /* slot_of's reference goes with the deletion */
            int failed = PyList_Append(free, slot_obj) < 0 || PyDict_DelItem(slot_of, rid_obj) < 0 ||
                         PyDict_DelItem(deferred, rid_obj) < 0;
            Py_DECREF(slot_obj);
            if (failed) {
                Py_DECREF(item);
                goto fail;
            }
        }
        int failed = PyList_Append(out, item) < 0;
        Py_DECREF(item);
        if (failed) goto fail;
    }
    release(&firsts);
    return PyLong_FromSsize_t(i);
fail:
    release(&firsts);
    return NULL;
}

static PyMethodDef PlainOpener_methods[] = {
    {"open", (PyCFunction)(void (*)(void))PlainOpener_open, METH_FASTCALL,
     "open(rid, slot, mode, context, max_context, tag, eos_stops) -> bool: a plain request's set-up."},
    {"finish", (PyCFunction)(void (*)(void))PlainOpener_finish, METH_FASTCALL,
     "finish(rid, slot) -> (text, char_offset, num_tokens): a plain request's end."},
    {"open_many", (PyCFunction)(void (*)(void))PlainOpener_open_many, METH_FASTCALL,
     "open_many(rids, contexts, start, mode, max_context, tag, eos_stops, free, slot_of, deferred, value) -> int."},
    {"finish_many", (PyCFunction)(void (*)(void))PlainOpener_finish_many, METH_FASTCALL,
     "finish_many(rids, start, out, slot_of, deferred, stop_marked, free, firsts_len, finish) -> int."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlainOpenerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._plainstep.PlainOpener",
    .tp_basicsize = sizeof(PlainOpener),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PlainOpener_new,
    .tp_dealloc = (destructor)PlainOpener_dealloc,
    .tp_methods = PlainOpener_methods,
};

/* split_text(text, lengths) -> list[str]: the per-row texts of a packed step (a frontend's view) */
static PyObject *split_text(PyObject *self, PyObject *args) {
    PyObject *o_text, *o_lengths;
    if (!PyArg_ParseTuple(args, "OO", &o_text, &o_lengths)) return NULL;
    Buf t = {.held = 0}, l = {.held = 0};
    PyObject *out = NULL, *whole = NULL;
    if (get_buf(o_text, &t, 0, 1, "text") < 0 || get_buf(o_lengths, &l, 0, 1, "lengths") < 0) goto done;
    if (l.view.len % 4) {
        PyErr_SetString(PyExc_ValueError, "lengths must be packed uint32");
        goto done;
    }
    whole = PyUnicode_DecodeUTF8(t.view.buf, t.view.len, "strict");
    if (whole == NULL) goto done;
    Py_ssize_t n = l.view.len / 4, total = PyUnicode_GET_LENGTH(whole), at = 0;
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t chars = load_u32(l.view.buf, k);
        if (chars > total - at) {
            PyErr_SetString(PyExc_ValueError, "lengths add up to more than the text");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *s = PyUnicode_Substring(whole, at, at + chars);
        if (s == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, s);
        at += chars;
    }
    if (at != total) {
        PyErr_SetString(PyExc_ValueError, "lengths add up to fewer than the text");
        Py_CLEAR(out);
    }
done:
    release(&t);
    release(&l);
    Py_XDECREF(whole);
    return out;
}

/* group_rows(tags, byte_lengths, text, rids, lengths, offsets)
 *   -> [(tag, rids, text, lengths, offsets), ...] in order of each tag's first row
 * A packed step's rows split by tag (the worker's per-frontend DeltaBatch columns): rids packed
 * uint64, lengths/offsets/tags/byte_lengths packed uint32, text the rows' UTF-8 back to back. */
static PyObject *group_rows(PyObject *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    Buf b[6];
    for (int i = 0; i < 6; i++) b[i].held = 0;
    PyObject *result = NULL;
    uint32_t *group_tag = NULL;
    Py_ssize_t *rows = NULL, *bytes = NULL, *at_row = NULL, *at_byte = NULL, *group_of = NULL;
    char **dst = NULL;
    for (int i = 0; i < 6; i++)
        if (get_buf(o[i], &b[i], 0, 1, "column") < 0) goto done;
    Py_ssize_t n = b[0].view.len / 4;
    if (b[0].view.len % 4 || b[1].view.len != 4 * n || b[3].view.len != 8 * n || b[4].view.len != 4 * n ||
        b[5].view.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "columns do not fit together");
        goto done;
    }
    const char *tags = b[0].view.buf, *blen = b[1].view.buf, *text = b[2].view.buf, *rids = b[3].view.buf;
    const char *lens = b[4].view.buf, *offs = b[5].view.buf;
    group_tag = PyMem_Malloc((n + 1) * sizeof(uint32_t));
    rows = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    bytes = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    group_of = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (!group_tag || !rows || !bytes || !group_of) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t groups = 0, total = 0;
    for (Py_ssize_t k = 0; k < n; k++) { /* few distinct tags (frontends): a linear search, newest first */
        uint32_t t = load_u32(tags, k);
        Py_ssize_t g = groups - 1;
        while (g >= 0 && group_tag[g] != t) g--;
        if (g < 0) {
            g = groups++;
            group_tag[g] = t;
        }
        group_of[k] = g;
        rows[g]++;
        bytes[g] += load_u32(blen, k);
        total += load_u32(blen, k);
    }
    if (total != b[2].view.len) {
        PyErr_SetString(PyExc_ValueError, "byte lengths do not add up to the text");
        goto done;
    }
    result = PyList_New(groups);
    at_row = PyMem_Calloc(groups + 1, sizeof(Py_ssize_t));
    at_byte = PyMem_Calloc(groups + 1, sizeof(Py_ssize_t));
    dst = PyMem_Calloc(4 * (groups + 1), sizeof(char *));
    if (result == NULL || !at_row || !at_byte || !dst) {
        if (result != NULL) PyErr_NoMemory();
        Py_CLEAR(result);
        goto done;
    }
    for (Py_ssize_t g = 0; g < groups; g++) {
        PyObject *cols[4] = {PyBytes_FromStringAndSize(NULL, 8 * rows[g]), PyBytes_FromStringAndSize(NULL, bytes[g]),
                             PyBytes_FromStringAndSize(NULL, 4 * rows[g]), PyBytes_FromStringAndSize(NULL, 4 * rows[g])};
        PyObject *tag = PyLong_FromUnsignedLong(group_tag[g]);
        PyObject *item = (cols[0] && cols[1] && cols[2] && cols[3] && tag)
                             ? PyTuple_Pack(5, tag, cols[0], cols[1], cols[2], cols[3]) : NULL;
        for (int i = 0; i < 4; i++) {
            if (cols[i] != NULL) dst[4 * g + i] = PyBytes_AS_STRING(cols[i]);
            Py_XDECREF(cols[i]);
        }
        Py_XDECREF(tag);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, g, item); /* the tuple keeps the columns alive while we fill them */
    }
    Py_ssize_t src = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t g = group_of[k], r = at_row[g]++, nb = load_u32(blen, k);
        memcpy(dst[4 * g] + 8 * r, rids + 8 * k, 8);
        memcpy(dst[4 * g + 1] + at_byte[g], text + src, nb);
        memcpy(dst[4 * g + 2] + 4 * r, lens + 4 * k, 4);
        memcpy(dst[4 * g + 3] + 4 * r, offs + 4 * k, 4);
        at_byte[g] += nb;
        src += nb;
    }
done:
    for (int i = 0; i < 6; i++) release(&b[i]);
    PyMem_Free(group_tag);
    PyMem_Free(rows);
    PyMem_Free(bytes);
    PyMem_Free(group_of);
    PyMem_Free(at_row);
    PyMem_Free(at_byte);
    PyMem_Free(dst);
    return result;
}

/* decode_utf8(data) -> (text, used): utf8_replace on its own (tests compare it with CPython's) */
static PyObject *decode_utf8(PyObject *self, PyObject *arg) {
    Buf d = {.held = 0};
    Text t = {NULL, 0, 0};
    PyObject *result = NULL;
    Py_ssize_t used = 0;
    if (get_buf(arg, &d, 0, 1, "data") < 0) goto done;
    t.cap = 3 * d.view.len + 16;
    if ((t.data = PyMem_Malloc(t.cap)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (utf8_replace(&t, d.view.buf, d.view.len, &used) < 0) goto done;
    PyObject *text = PyUnicode_DecodeUTF8(t.data, t.size, "strict");
    if (text != NULL) {
        result = Py_BuildValue("Nn", text, used);
    }
done:
    release(&d);
    PyMem_Free(t.data);
    return result;
}


static PyMethodDef methods[] = {
    {"step_packed", step_packed, METH_VARARGS, "A StreamTable step on packed wire columns (see table.py)."},
    {"split_text", split_text, METH_VARARGS, "Per-row texts of a packed text and its uint32 char lengths."},
    {"group_rows", group_rows, METH_VARARGS, "A packed step's rows split by tag: [(tag, rids, text, lengths, offsets)]."},
    {"decode_utf8", decode_utf8, METH_O, "(text, bytes used): UTF-8, errors='replace', an incomplete tail kept."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plainstep", NULL, -1, methods};

PyMODINIT_FUNC PyInit__plainstep(void) {
    if (PyType_Ready(&RidMapType) < 0 || PyType_Ready(&PlainOpenerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RidMapType);
    if (PyModule_AddObject(m, "RidMap", (PyObject *)&RidMapType) < 0) {
        Py_DECREF(&RidMapType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PlainOpenerType);
    if (PyModule_AddObject(m, "PlainOpener", (PyObject *)&PlainOpenerType) < 0) {
        Py_DECREF(&PlainOpenerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
