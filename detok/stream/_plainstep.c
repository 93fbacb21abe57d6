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
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t slot = sl[k], idx = g[k];
        if (slot < 0 || slot >= n_slots || idx < 0 || idx >= n_len || slot >= n_dec) {
            PyErr_SetString(PyExc_IndexError, "slot or id out of range");
            goto done;
        }
        PyObject *text;
        int64_t chars;
        if (wh[idx] && !hd[slot]) {
            text = PyList_GET_ITEM(texts, idx);
            Py_INCREF(text);
            chars = len[idx];
        } else {
            /* held bytes, or an id that is part of a character: the request's own UTF-8 state */
            PyObject *dec = PyList_GET_ITEM(decoders, slot);
            PyObject *pending = PyObject_GetAttr(dec, s_pending);
            if (pending == NULL) goto done;
            PyObject *pieces = md[slot] >= 0 && md[slot] < n_modes ? PyList_GET_ITEM(pieces_by_mode, md[slot]) : NULL;
            PyObject *piece = pieces && PyList_Check(pieces) && tk[k] >= 0 && tk[k] < PyList_GET_SIZE(pieces)
                                  ? PyList_GET_ITEM(pieces, tk[k]) : NULL;
            if (piece == NULL || !PyBytes_Check(piece) || !PyBytes_Check(pending)) {
                PyErr_SetString(PyExc_TypeError, "byte pieces expected");
                Py_DECREF(pending);
                goto done;
            }
            Py_INCREF(piece);
            PyObject *rest = NULL;
            text = decode_partial(pending, piece, &rest);
            Py_DECREF(pending);
            Py_DECREF(piece);
            if (text == NULL) goto done;
            int held = PyBytes_GET_SIZE(rest) > 0;
            int bad = PyObject_SetAttr(dec, s_pending, rest) < 0 || PyObject_SetAttr(dec, s_fast, held ? Py_False : Py_True) < 0;
            Py_DECREF(rest);
            if (bad) {
                Py_DECREF(text);
                goto done;
            }
            hd[slot] = (char)held;
            chars = PyUnicode_GET_LENGTH(text);
        }
        int64_t off = co[slot];
        co[slot] = off + chars;
        int64_t count = nt[slot] + 1;
        nt[slot] = count;
        ex[slot] = count;
        PyList_SET_ITEM(out_texts, k, text);
        PyObject *o_off = PyLong_FromLongLong(off), *o_count = PyLong_FromLongLong(count);
        if (o_off == NULL || o_count == NULL) {
            Py_XDECREF(o_off);
            Py_XDECREF(o_count);
            goto done;
        }
        PyList_SET_ITEM(out_offsets, k, o_off);
        PyList_SET_ITEM(out_counts, k, o_count);
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

static PyMethodDef methods[] = {
    {"step_plain", step_plain, METH_VARARGS, "The plain rows of a StreamTable step (see table.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plainstep", NULL, -1, methods};

PyMODINIT_FUNC PyInit__plainstep(void) { return PyModule_Create(&module); }
