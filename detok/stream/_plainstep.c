/* The inner loop of StreamTable's vectorized path, compiled: one pass over the plain rows of a
 * batch (one id each, nothing but bytes to decode), producing their texts, char offsets and token
 * counts, and advancing the per-slot columns. Same behaviour as the numpy/Python fallback in
 * table.py (`_step_plain_py`), which tests compare it with; built as an optional extension.
 *
 * Why C: in CPython every per-row list/dict/tolist operation costs 30-100 ns on a small machine,
 * and a row needs several; here a row is a few loads and stores.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get_buf(PyObject *obj, Buf *b, int writable, Py_ssize_t itemsize, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    b->held = 0;
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
}

/* decode `pending + piece` with UTF-8 "replace", keeping an incomplete tail: the text, and the
 * new pending bytes in *rest (new references) */
static PyObject *decode_partial(PyObject *pending, PyObject *piece, PyObject **rest) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(pending) + PyBytes_GET_SIZE(piece));
    if (data == NULL) return NULL;
    char *p = PyBytes_AS_STRING(data);
    memcpy(p, PyBytes_AS_STRING(pending), PyBytes_GET_SIZE(pending));
    memcpy(p + PyBytes_GET_SIZE(pending), PyBytes_AS_STRING(piece), PyBytes_GET_SIZE(piece));
    Py_ssize_t size = PyBytes_GET_SIZE(data), consumed = 0;
    PyObject *text = PyUnicode_DecodeUTF8Stateful(p, size, "replace", &consumed);
    if (text == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    *rest = PyBytes_FromStringAndSize(p + consumed, size - consumed);
    Py_DECREF(data);
    if (*rest == NULL) {
        Py_DECREF(text);
        return NULL;
    }
    return text;
}


/* a row whose bytes are not whole characters (or with held bytes): the request's own UTF-8 state,
 * kept in its ByteTextDecoder (`_pending`, `_fast`) so the per-stream path sees the same state */
static PyObject *partial_row(PyObject *dec, int64_t mode, int64_t tok, PyObject *pieces_by_mode, Py_ssize_t n_modes,
                             PyObject *s_pending, PyObject *s_fast, char *held_flag) {
    PyObject *pending = PyObject_GetAttr(dec, s_pending);
    if (pending == NULL) return NULL;
    PyObject *pieces = mode >= 0 && mode < n_modes ? PyList_GET_ITEM(pieces_by_mode, mode) : NULL;
    PyObject *piece = pieces && PyList_Check(pieces) && tok >= 0 && tok < PyList_GET_SIZE(pieces)
                          ? PyList_GET_ITEM(pieces, tok) : NULL;
    if (piece == NULL || !PyBytes_Check(piece) || !PyBytes_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "byte pieces expected");
        Py_DECREF(pending);
        return NULL;
    }
    PyObject *rest = NULL;
    PyObject *text = decode_partial(pending, piece, &rest);
    Py_DECREF(pending);
    if (text == NULL) return NULL;
    int held = PyBytes_GET_SIZE(rest) > 0;
    int bad = PyObject_SetAttr(dec, s_pending, rest) < 0 || PyObject_SetAttr(dec, s_fast, held ? Py_False : Py_True) < 0;
    Py_DECREF(rest);
    if (bad) {
        Py_DECREF(text);
        return NULL;
    }
    *held_flag = (char)held;
    return text;
}

/* what one plain row reads and advances */
typedef struct {
    PyObject *texts, *decoders, *pieces_by_mode, *s_pending, *s_fast;
    PyObject *out_texts, *out_offsets, *out_counts;
    const int64_t *len, *md;
    const char *wh;
    char *hd;
    int64_t *co, *nt, *ex;
    Py_ssize_t n_modes;
} Row;

/* step row k (slot, table index idx = mode * vocab + tok): its text, char offset and token count
 * into the output lists, the slot's columns advanced; -1 with an exception set on failure */
static int plain_row(Row *r, Py_ssize_t k, int64_t slot, int64_t idx, int64_t tok) {
    PyObject *text;
    int64_t chars;
    if (r->wh[idx] && !r->hd[slot]) {
        text = PyList_GET_ITEM(r->texts, idx);
        Py_INCREF(text);
        chars = r->len[idx];
    } else {
        text = partial_row(PyList_GET_ITEM(r->decoders, slot), r->md[slot], tok, r->pieces_by_mode, r->n_modes,
                           r->s_pending, r->s_fast, &r->hd[slot]);
        if (text == NULL) return -1;
        chars = PyUnicode_GET_LENGTH(text);
    }
    int64_t off = r->co[slot];
    r->co[slot] = off + chars;
    int64_t count = r->nt[slot] + 1;
    r->nt[slot] = count;
    r->ex[slot] = count;
    PyList_SET_ITEM(r->out_texts, k, text);
    PyObject *o_off = PyLong_FromLongLong(off), *o_count = PyLong_FromLongLong(count);
    if (o_off == NULL || o_count == NULL) {
        Py_XDECREF(o_off);
        Py_XDECREF(o_count);
        return -1;
    }
    PyList_SET_ITEM(r->out_offsets, k, o_off);
    PyList_SET_ITEM(r->out_counts, k, o_count);
    return 0;
}

/* step_plain(slots, gi, toks, texts, lengths, whole, hold, choff, ntok, expect, decoders, mode, pieces)
 *   -> (texts_out: list[str], offsets: list[int], counts: list[int])
 * pieces[mode[slot]][tok] are the bytes of `tok` in that slot's decode mode. */
static PyObject *step_plain(PyObject *self, PyObject *args) {
    PyObject *o_slots, *o_gi, *o_toks, *texts, *o_lengths, *o_whole, *o_hold, *o_choff, *o_ntok, *o_expect, *decoders;
    PyObject *o_mode, *pieces_by_mode;
    if (!PyArg_ParseTuple(args, "OOOO!OOOOOOO!OO!", &o_slots, &o_gi, &o_toks, &PyList_Type, &texts, &o_lengths,
                          &o_whole, &o_hold, &o_choff, &o_ntok, &o_expect, &PyList_Type, &decoders, &o_mode,
                          &PyList_Type, &pieces_by_mode))
        return NULL;
    Buf slots, gi, toks, lengths, whole, hold, choff, ntok, expect, mode;
    Buf *all[] = {&slots, &gi, &toks, &lengths, &whole, &hold, &choff, &ntok, &expect, &mode};
    for (int i = 0; i < 10; i++) all[i]->held = 0;
    PyObject *out_texts = NULL, *out_offsets = NULL, *out_counts = NULL, *result = NULL;
    PyObject *s_pending = NULL, *s_fast = NULL;
    if (get_buf(o_slots, &slots, 0, 8, "slots") || get_buf(o_gi, &gi, 0, 8, "gi") || get_buf(o_toks, &toks, 0, 8, "toks") ||
        get_buf(o_lengths, &lengths, 0, 8, "lengths") || get_buf(o_whole, &whole, 0, 1, "whole") ||
        get_buf(o_hold, &hold, 1, 1, "hold") || get_buf(o_choff, &choff, 1, 8, "choff") ||
        get_buf(o_ntok, &ntok, 1, 8, "ntok") || get_buf(o_expect, &expect, 1, 8, "expect") ||
        get_buf(o_mode, &mode, 0, 8, "mode"))
        goto done;
    Py_ssize_t n = slots.view.len / 8;
    if (gi.view.len / 8 != n || toks.view.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "slots, gi and toks must have the same length");
        goto done;
    }
    const int64_t *sl = slots.view.buf, *g = gi.view.buf, *tk = toks.view.buf, *len = lengths.view.buf;
    const char *wh = whole.view.buf;
    char *hd = hold.view.buf;
    int64_t *co = choff.view.buf, *nt = ntok.view.buf, *ex = expect.view.buf;
    const int64_t *md = mode.view.buf;
    Py_ssize_t n_modes = PyList_GET_SIZE(pieces_by_mode);
    Py_ssize_t n_texts = PyList_GET_SIZE(texts), n_len = lengths.view.len / 8, n_slots = hold.view.len;
    Py_ssize_t n_dec = PyList_GET_SIZE(decoders);
    if (choff.view.len / 8 != n_slots || ntok.view.len / 8 != n_slots || expect.view.len / 8 != n_slots ||
        mode.view.len / 8 != n_slots ||
        whole.view.len != n_len || n_texts != n_len) {
        PyErr_SetString(PyExc_ValueError, "column lengths do not match");
        goto done;
    }
    out_texts = PyList_New(n);
    out_offsets = PyList_New(n);
    out_counts = PyList_New(n);
    s_pending = PyUnicode_InternFromString("_pending");
    s_fast = PyUnicode_InternFromString("_fast");
    if (!out_texts || !out_offsets || !out_counts || !s_pending || !s_fast) goto done;
    Row row = {texts, decoders, pieces_by_mode, s_pending, s_fast, out_texts, out_offsets, out_counts,
               len, md, wh, hd, co, nt, ex, n_modes};
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t slot = sl[k], idx = g[k];
        if (slot < 0 || slot >= n_slots || idx < 0 || idx >= n_len || slot >= n_dec) {
            PyErr_SetString(PyExc_IndexError, "slot or id out of range");
            goto done;
        }
        if (plain_row(&row, k, slot, idx, tk[k]) < 0) goto done;
    }
    result = PyTuple_Pack(3, out_texts, out_offsets, out_counts);
done:
    for (int i = 0; i < 10; i++) release(all[i]);
    Py_XDECREF(out_texts);
    Py_XDECREF(out_offsets);
    Py_XDECREF(out_counts);
    Py_XDECREF(s_pending);
    Py_XDECREF(s_fast);
    return result;
}


/* step_one_each(slots, starts, toks, vocab, eos_mask, eos_stops, byte_ok, row_of,
 *               texts, lengths, whole, hold, choff, ntok, expect, decoders, mode, pieces)
 *   -> (texts_out, offsets, counts, slow_rows)
 * A batch of one id per row: decides which rows are plain (the stream expects this start, the id
 * is in the vocabulary and no end-of-sequence stop for that stream, not a spaced special, the row's
 * rid not repeated later in the batch) and steps those; the other rows are listed in slow_rows
 * (their texts None, offsets and counts 0) for the caller's per-stream path. */
static PyObject *step_one_each(PyObject *self, PyObject *args) {
    PyObject *o_slots, *o_starts, *o_toks, *o_eos_mask, *o_eos_stops, *o_byte_ok, *o_row_of;
    PyObject *texts, *o_lengths, *o_whole, *o_hold, *o_choff, *o_ntok, *o_expect, *decoders, *o_mode, *pieces_by_mode;
    Py_ssize_t vocab;
    if (!PyArg_ParseTuple(args, "OOOnOOOOO!OOOOOOO!OO!", &o_slots, &o_starts, &o_toks, &vocab, &o_eos_mask, &o_eos_stops,
                          &o_byte_ok, &o_row_of, &PyList_Type, &texts, &o_lengths, &o_whole, &o_hold, &o_choff,
                          &o_ntok, &o_expect, &PyList_Type, &decoders, &o_mode, &PyList_Type, &pieces_by_mode))
        return NULL;
    Buf slots, starts, toks, eos_mask, eos_stops, byte_ok, row_of, lengths, whole, hold, choff, ntok, expect, mode;
    Buf *all[] = {&slots, &starts, &toks, &eos_mask, &eos_stops, &byte_ok, &row_of, &lengths, &whole, &hold, &choff,
                  &ntok, &expect, &mode};
    const int nbuf = 14;
    for (int i = 0; i < nbuf; i++) all[i]->held = 0;
    PyObject *out_texts = NULL, *out_offsets = NULL, *out_counts = NULL, *slow = NULL, *result = NULL;
    PyObject *s_pending = NULL, *s_fast = NULL;
    if (get_buf(o_slots, &slots, 0, 8, "slots") || get_buf(o_starts, &starts, 0, 8, "starts") ||
        get_buf(o_toks, &toks, 0, 8, "toks") || get_buf(o_eos_mask, &eos_mask, 0, 1, "eos_mask") ||
        get_buf(o_eos_stops, &eos_stops, 0, 1, "eos_stops") || get_buf(o_byte_ok, &byte_ok, 0, 1, "byte_ok") ||
        get_buf(o_row_of, &row_of, 1, 8, "row_of") || get_buf(o_lengths, &lengths, 0, 8, "lengths") ||
        get_buf(o_whole, &whole, 0, 1, "whole") || get_buf(o_hold, &hold, 1, 1, "hold") ||
        get_buf(o_choff, &choff, 1, 8, "choff") || get_buf(o_ntok, &ntok, 1, 8, "ntok") ||
        get_buf(o_expect, &expect, 1, 8, "expect") || get_buf(o_mode, &mode, 0, 8, "mode"))
        goto done;
    Py_ssize_t n = slots.view.len / 8, n_slots = hold.view.len, n_len = lengths.view.len / 8;
    Py_ssize_t n_modes = PyList_GET_SIZE(pieces_by_mode);
    if (starts.view.len / 8 != n || toks.view.len / 8 != n || eos_mask.view.len != vocab ||
        eos_stops.view.len != n_slots || row_of.view.len / 8 != n_slots || choff.view.len / 8 != n_slots ||
        ntok.view.len / 8 != n_slots || expect.view.len / 8 != n_slots || mode.view.len / 8 != n_slots ||
        whole.view.len != n_len || PyList_GET_SIZE(texts) != n_len || PyList_GET_SIZE(decoders) != n_slots ||
        (byte_ok.view.len != 0 && byte_ok.view.len != n_len) || n_len != n_modes * vocab) {
        PyErr_SetString(PyExc_ValueError, "column lengths do not match");
        goto done;
    }
    const int64_t *sl = slots.view.buf, *st = starts.view.buf, *tk = toks.view.buf, *len = lengths.view.buf;
    const int64_t *md = mode.view.buf;
    const char *em = eos_mask.view.buf, *es = eos_stops.view.buf, *bo = byte_ok.view.buf, *wh = whole.view.buf;
    char *hd = hold.view.buf;
    int64_t *ro = row_of.view.buf, *co = choff.view.buf, *nt = ntok.view.buf, *ex = expect.view.buf;
    out_texts = PyList_New(n);
    out_offsets = PyList_New(n);
    out_counts = PyList_New(n);
    slow = PyList_New(0);
    s_pending = PyUnicode_InternFromString("_pending");
    s_fast = PyUnicode_InternFromString("_fast");
    if (!out_texts || !out_offsets || !out_counts || !slow || !s_pending || !s_fast) goto done;
    Row row = {texts, decoders, pieces_by_mode, s_pending, s_fast, out_texts, out_offsets, out_counts,
               len, md, wh, hd, co, nt, ex, n_modes};
    for (Py_ssize_t k = 0; k < n; k++) {
        if (sl[k] < 0 || sl[k] >= n_slots) {
            PyErr_SetString(PyExc_IndexError, "slot out of range");
            goto done;
        }
        ro[sl[k]] = k;  /* the last row of each slot wins: earlier repeats go the per-stream way */
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t slot = sl[k], tok = tk[k];
        int plain = ex[slot] == st[k] && ro[slot] == k && tok >= 0 && tok < vocab && !(em[tok] && es[slot]);
        int64_t idx = plain ? md[slot] * vocab + tok : 0;
        if (plain && (idx < 0 || idx >= n_len || (byte_ok.view.len && !bo[idx]))) plain = 0;
        if (!plain) {
            PyObject *kk = PyLong_FromSsize_t(k);
            if (kk == NULL || PyList_Append(slow, kk) < 0) {
                Py_XDECREF(kk);
                goto done;
            }
            Py_DECREF(kk);
            Py_INCREF(Py_None);
            PyList_SET_ITEM(out_texts, k, Py_None);
            PyObject *z1 = PyLong_FromLong(0), *z2 = PyLong_FromLong(0);
            if (z1 == NULL || z2 == NULL) {
                Py_XDECREF(z1);
                Py_XDECREF(z2);
                goto done;
            }
            PyList_SET_ITEM(out_offsets, k, z1);
            PyList_SET_ITEM(out_counts, k, z2);
            continue;
        }
        if (plain_row(&row, k, slot, idx, tok) < 0) goto done;
    }
    result = PyTuple_Pack(4, out_texts, out_offsets, out_counts, slow);
done:
    for (int i = 0; i < nbuf; i++) release(all[i]);
    Py_XDECREF(out_texts);
    Py_XDECREF(out_offsets);
    Py_XDECREF(out_counts);
    Py_XDECREF(slow);
    Py_XDECREF(s_pending);
    Py_XDECREF(s_fast);
    return result;
}

static PyMethodDef methods[] = {
    {"step_plain", step_plain, METH_VARARGS, "The plain rows of a StreamTable step (see table.py)."},
    {"step_one_each", step_one_each, METH_VARARGS, "A one-id-per-row batch: plain rows stepped, others listed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plainstep", NULL, -1, methods};

PyMODINIT_FUNC PyInit__plainstep(void) { return PyModule_Create(&module); }
