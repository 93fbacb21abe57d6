/* A DeltaBatch's logprob entries cut into one entries object per entry-row (optional;
 * detok/receiver/token_logprobs.py has the Python loop, and the tests compare the two).
 *
 * rows(cls, rids, firsts, counts, ids, tokens, logprobs, top_counts, top_ids, top_tokens, top_logprobs)
 *     -> list of (rid, cls(first, ids[a:b], tokens[a:b], logprobs[a:b], top_counts[a:b],
 *                          top_ids[c:d], top_tokens[c:d], top_logprobs[c:d]))
 * All arguments but `cls` are lists; row r holds counts[r] entries, entry e top_counts[e]
 * alternatives. Every range is checked against its list (ValueError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "rows takes 11 arguments");
        return NULL;
    }
    PyObject *cls = args[0];
    for (int i = 1; i < 11; i++)
        if (!PyList_CheckExact(args[i])) {
            PyErr_SetString(PyExc_TypeError, "rows: lists expected");
            return NULL;
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
            alts += c;
        }
        if (alts > m - top) {
            PyErr_SetString(PyExc_ValueError, "rows: top_counts past the alternatives");
            goto fail;
        }
        PyObject *fields[8] = {PyList_GET_ITEM(firsts, r), NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        int bad = 0;
        for (int f = 0; f < 4 && !bad; f++)  /* ids, tokens, logprobs, top_counts */
            bad = (fields[1 + f] = PyList_GetSlice(args[4 + f], e, e + count)) == NULL;
        for (int f = 0; f < 3 && !bad; f++)  /* top_ids, top_tokens, top_logprobs */
            bad = (fields[5 + f] = PyList_GetSlice(args[8 + f], top, top + alts)) == NULL;
        PyObject *entries = bad ? NULL : PyObject_Vectorcall(cls, fields, 8, NULL);
        for (int f = 1; f < 8; f++)
            Py_XDECREF(fields[f]);
        if (entries == NULL)
            goto fail;
        PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(rids, r), entries);
        Py_DECREF(entries);
        if (pair == NULL)
            goto fail;
        PyList_SET_ITEM(out, r, pair);
        e += count;
        top += alts;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL,
     "rows(cls, rids, firsts, counts, ids, tokens, logprobs, top_counts, top_ids, top_tokens, top_logprobs) "
     "-> [(rid, cls(...))]: a batch's logprob entries per entry-row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_logprobrows", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__logprobrows(void)
{
    return PyModule_Create(&module);
}
