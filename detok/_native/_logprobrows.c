/* A DeltaBatch's logprob entries cut into one entries object per entry-row (optional;
 * detok/receiver/token_logprobs.py has the Python loop, and the tests compare the two).
 *
 * rows(cls, rids, firsts, counts, ids, tokens, logprobs, top_counts, top_ids, top_tokens, top_logprobs)
 *     -> list of (rid, cls(first, ids[a:b], tokens[a:b], logprobs[a:b], top_counts[a:b],
 *                          top_ids[c:d], top_tokens[c:d], top_logprobs[c:d]), first, None)
 * (the row's first token index and rendered items beside the entries object: what the frontend's
 * compiled push reads, given rather than read from the object)
 * All arguments but `cls` are lists; row r holds counts[r] entries, entry e top_counts[e]
 * alternatives. Every range is checked against its list (ValueError).
 *
 * rows(..., items, item_lengths): and the workers' rendered chat items (DeltaLogprobs.items, bytes;
 * item_lengths: uint32 per entry, 0 for an entry not rendered, or empty: none), each rendered
 * row's items as a list of bytes, the ninth argument of cls and the tuple's fourth (None for the others). A row partly
 * rendered, or lengths that do not fit the items, raise ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static Py_ssize_t
as_count(PyObject *item)
{
    Py_ssize_t v = PyLong_AsSsize_t(item);
    if (v < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "rows: a negative count");
    return v;
}

static PyObject *
rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11 && nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "rows takes 11 or 13 arguments");
        return NULL;
    }
    for (int i = 1; i < 11; i++) /* before any list is read as one */
        if (!PyList_CheckExact(args[i])) {
            PyErr_SetString(PyExc_TypeError, "rows: lists expected");
            return NULL;
        }
    PyObject *cls = args[0];
    const char *blob = NULL;
    const uint32_t *il = NULL;
    Py_ssize_t blen = 0, off = 0;
    if (nargs == 13) {
        if (!PyBytes_CheckExact(args[11]) || !PyBytes_CheckExact(args[12])) {
            PyErr_SetString(PyExc_TypeError, "rows: items and item_lengths must be bytes");
            return NULL;
        }
        blob = PyBytes_AS_STRING(args[11]);
        blen = PyBytes_GET_SIZE(args[11]);
        if (PyBytes_GET_SIZE(args[12]) != 4 * PyList_GET_SIZE(args[4])
            && !(PyBytes_GET_SIZE(args[12]) == 0 && blen == 0)) {
            PyErr_SetString(PyExc_ValueError, "rows: chat items and entries do not fit together");
            return NULL;
        }
        if (PyBytes_GET_SIZE(args[12]) > 0)
            il = (const uint32_t *)PyBytes_AS_STRING(args[12]);
    }
    PyObject *rids = args[1], *firsts = args[2], *counts = args[3], *tcs = args[7];
    Py_ssize_t nrows = PyList_GET_SIZE(rids), n = PyList_GET_SIZE(args[4]), m = PyList_GET_SIZE(args[8]);
    if (PyList_GET_SIZE(firsts) != nrows || PyList_GET_SIZE(counts) != nrows || PyList_GET_SIZE(args[5]) != n
        || PyList_GET_SIZE(args[6]) != n || PyList_GET_SIZE(tcs) != n || PyList_GET_SIZE(args[9]) != m
        || PyList_GET_SIZE(args[10]) != m) {
        PyErr_SetString(PyExc_ValueError, "rows: columns of different lengths");
        return NULL;
    }
    PyObject *out = PyList_New(nrows);
    if (out == NULL)
        return NULL;
    Py_ssize_t e = 0, top = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        /* `cls` is Python code and may change the lists: every index below is checked against the
         * lengths taken above, so they must still hold */
        for (int i = 1; i < 11; i++)
            if (PyList_GET_SIZE(args[i]) != (i < 4 ? nrows : i < 8 ? n : m)) {
                PyErr_SetString(PyExc_RuntimeError, "rows: a column changed length during the call");
                goto fail;
            }
        Py_ssize_t count = as_count(PyList_GET_ITEM(counts, r));
        if (count < 0)
            goto fail;
        if (count > n - e) {
            PyErr_SetString(PyExc_ValueError, "rows: counts past the entries");
            goto fail;
        }
        Py_ssize_t alts = 0;
        for (Py_ssize_t i = e; i < e + count; i++) {
            Py_ssize_t c = as_count(PyList_GET_ITEM(tcs, i));
            if (c < 0)
                goto fail;
            if (c > m - top - alts) { /* checked per entry: a sum of huge counts must not overflow */
                PyErr_SetString(PyExc_ValueError, "rows: top_counts past the alternatives");
                goto fail;
            }
            alts += c;
        }
        PyObject *fields[9] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        int bad = 0;
        if (il != NULL) { /* the row's rendered items: all of its entries, or none */
            Py_ssize_t rendered = 0;
            for (Py_ssize_t i = e; i < e + count; i++)
                rendered += il[i] > 0;
            if (rendered != 0 && rendered != count) {
                PyErr_SetString(PyExc_ValueError, "rows: an entry-row partly rendered");
                goto fail;
            }
            if (rendered) {
                bad = (fields[8] = PyList_New(count)) == NULL;
                for (Py_ssize_t i = 0; i < count && !bad; i++) {
                    Py_ssize_t len = il[e + i];
                    PyObject *item = len <= blen - off ? PyBytes_FromStringAndSize(blob + off, len) : NULL;
                    if (item == NULL && !PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "rows: chat items and entries do not fit together");
                    bad = item == NULL;
                    if (!bad)
                        PyList_SET_ITEM(fields[8], i, item);
                    off += len;
                }
            }
        }
        for (int f = 0; f < 4 && !bad; f++)  /* ids, tokens, logprobs, top_counts */
            bad = (fields[1 + f] = PyList_GetSlice(args[4 + f], e, e + count)) == NULL;
        for (int f = 0; f < 3 && !bad; f++)  /* top_ids, top_tokens, top_logprobs */
            bad = (fields[5 + f] = PyList_GetSlice(args[8 + f], top, top + alts)) == NULL;
        /* owned across the call of cls, which may drop them from their lists */
        PyObject *rid = Py_NewRef(PyList_GET_ITEM(rids, r));
        fields[0] = Py_NewRef(PyList_GET_ITEM(firsts, r));
        PyObject *entries = bad ? NULL : PyObject_Vectorcall(cls, fields, fields[8] != NULL ? 9 : 8, NULL);
        PyObject *pair = entries == NULL ? NULL
            : PyTuple_Pack(4, rid, entries, fields[0], fields[8] != NULL ? fields[8] : Py_None);
        for (int f = 0; f < 9; f++)
            Py_XDECREF(fields[f]);
        Py_DECREF(rid);
        Py_XDECREF(entries);
        if (pair == NULL)
            goto fail;
        PyList_SET_ITEM(out, r, pair);
        e += count;
        top += alts;
    }
    if (off != blen) {
        PyErr_SetString(PyExc_ValueError, "rows: chat items and entries do not fit together");
        goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL,
     "rows(cls, rids, firsts, counts, ids, tokens, logprobs, top_counts, top_ids, top_tokens, top_logprobs"
     "[, items, item_lengths]) -> [(rid, cls(...), first, items or None)]: a batch's logprob entries per entry-row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_logprobrows", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__logprobrows(void)
{
    return PyModule_Create(&module);
}
