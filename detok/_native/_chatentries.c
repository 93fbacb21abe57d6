/* The chat `logprobs` item of every entry of a logprob step, written by the worker in one pass
 * (optional; detok/worker/chat_entries.py has the Python equivalent, and the tests hold both to
 * the frontend's writer, frontend/_chatlogprobs.c).
 *
 * render(ids, ks, logprobs, logprobs_json, top_counts, top_ids, top_logprobs, top_logprobs_json,
 *        table, buffer) -> (bytes, bytes)
 *   ids            uint32 per entry: the sampled id
 *   ks             int32 per entry: the request's top_logprobs (0-20; the sampled token counts as
 *                  one of them), or -1: the entry is not rendered (its length is 0)
 *   logprobs       float64 per entry; logprobs_json: msgspec's JSON array of them
 *   top_counts     uint32 per entry: its alternatives in top_ids / top_logprobs, in order
 *   top_ids        uint32, flattened; top_logprobs float64, flattened; top_logprobs_json as above
 *   table          int64, 3 per id (an id past the end: the last row, the string of an id outside
 *                  the vocabulary): where the id's fragments start in `buffer`, the length of its
 *                  head b'{"token":T,"logprob":' and of its tail b',"bytes":[..]' that follows;
 *                  a length of -1: not made (ValueError). One row per id, interleaved: a token
 *                  costs one cache line of the table and its bytes, not three lists' objects.
 *   buffer         the fragments' bytes
 * Returns the items back to back and their byte lengths (uint32 per entry). A value that is not
 * finite or is below -9999.0 is written as OpenAI's -9999.0 (+inf: 0.0), as the frontend does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_jsonfloats.h"

#define PUT_LIT(b, s) text_append((b), (s), (Py_ssize_t)(sizeof(s) - 1))

typedef struct {
    Py_buffer view;
    int held;
} Column;

static int
column(PyObject *obj, Column *c, Py_ssize_t item, const char *name)
{
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    c->held = 1;
    if (c->view.len % item) {
        PyErr_Format(PyExc_ValueError, "%s is %zd bytes, not whole items of %zd", name, c->view.len, item);
        return -1;
    }
    return 0;
}

typedef struct {
    const int64_t *rows; /* 3 per id */
    Py_ssize_t n;        /* ids in the table */
    const char *data;
    Py_ssize_t size;
} Fragments;

static int
put_token(Text *b, const Fragments *f, uint32_t id, double v, const char *json, Py_ssize_t start, Py_ssize_t len)
{
    const int64_t *row = f->rows + 3 * ((Py_ssize_t)id < f->n - 1 ? (Py_ssize_t)id : f->n - 1);
    int64_t at = row[0], head = row[1], tail = row[2];
    /* (each compared with what is left: lengths near INT64_MAX must not wrap a sum) */
    if (head < 0 || tail < 0 || at < 0 || head > f->size || tail > f->size - head || at > f->size - head - tail) {
        PyErr_Format(PyExc_ValueError, "render: no fragments for token id %u", id);
        return -1;
    }
    if (text_append(b, f->data + at, head) < 0 || put_json_float(b, v, json, start, len) < 0)
        return -1;
    return text_append(b, f->data + at + head, tail);
}

static PyObject *
render(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "render takes 10 arguments");
        return NULL;
    }
    Column ids = {0}, ks = {0}, lps = {0}, counts = {0}, tids = {0}, tlps = {0}, table = {0}, buffer = {0};
    Py_ssize_t *ls = NULL, *ll = NULL, *ts = NULL, *tl = NULL;
    Text b = {NULL, 0, 0};
    uint32_t *lengths = NULL;
    PyObject *out = NULL;
    if (column(args[0], &ids, 4, "ids") < 0 || column(args[1], &ks, 4, "ks") < 0 || column(args[2], &lps, 8, "logprobs") < 0
        || column(args[4], &counts, 4, "top_counts") < 0 || column(args[5], &tids, 4, "top_ids") < 0
        || column(args[6], &tlps, 8, "top_logprobs") < 0 || column(args[8], &table, 24, "table") < 0
        || column(args[9], &buffer, 1, "buffer") < 0)
        goto done;
    if (table.view.len == 0) {
        PyErr_SetString(PyExc_ValueError, "render: an empty fragment table");
        goto done;
    }
    Fragments frags = {table.view.buf, table.view.len / 24, buffer.view.buf, buffer.view.len};
    Py_ssize_t n = ids.view.len / 4, m = tids.view.len / 4;
    if (ks.view.len / 4 != n || lps.view.len / 8 != n || counts.view.len / 4 != n || tlps.view.len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "render: columns of different lengths");
        goto done;
    }
    if (split_floats(args[3], n, &ls, &ll, "logprobs_json") < 0 || split_floats(args[7], m, &ts, &tl, "top_logprobs_json") < 0)
        goto done;
    const uint32_t *id = ids.view.buf, *count = counts.view.buf, *tid = tids.view.buf;
    const int32_t *k = ks.view.buf;
    const double *lp = lps.view.buf, *tlp = tlps.view.buf;
    const char *lj = PyBytes_AS_STRING(args[3]), *tj = PyBytes_AS_STRING(args[7]);
    lengths = PyMem_Malloc(sizeof(uint32_t) * (n + 1));
    b.cap = n * 160 + 64;
    b.data = PyMem_Malloc(b.cap);
    if (lengths == NULL || b.data == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t j = 0;
    for (Py_ssize_t t = 0; t < n; t++) {
        Py_ssize_t at = b.size;
        if (count[t] > (uint64_t)(m - j)) {
            PyErr_SetString(PyExc_ValueError, "render: top_counts past the alternatives");
            goto done;
        }
        if (k[t] >= 0) {
            if (put_token(&b, &frags, id[t], lp[t], lj, ls[t], ll[t]) < 0)
                goto done;
            if (k[t] == 0) {
                if (PUT_LIT(&b, ",\"top_logprobs\":[]}") < 0)
                    goto done;
            } else {  /* the sampled token first, then the alternatives without it (vLLM's order) */
                if (PUT_LIT(&b, ",\"top_logprobs\":[") < 0 || put_token(&b, &frags, id[t], lp[t], lj, ls[t], ll[t]) < 0)
                    goto done;
                int32_t shown = 1;
                for (Py_ssize_t i = j; i < j + (Py_ssize_t)count[t] && shown < k[t]; i++) {
                    if (tid[i] == id[t])
                        continue;
                    if (PUT_LIT(&b, "},") < 0 || put_token(&b, &frags, tid[i], tlp[i], tj, ts[i], tl[i]) < 0)
                        goto done;
                    shown++;
                }
                if (PUT_LIT(&b, "}]}") < 0)
                    goto done;
            }
        }
        if (b.size - at > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "render: an entry past 4 GiB");
            goto done;
        }
        lengths[t] = (uint32_t)(b.size - at);
        j += count[t];
    }
    PyObject *blob = PyBytes_FromStringAndSize(b.data, b.size);
    PyObject *lens = blob == NULL ? NULL : PyBytes_FromStringAndSize((const char *)lengths, (Py_ssize_t)(4 * n));
    if (lens != NULL)
        out = PyTuple_Pack(2, blob, lens);
    Py_XDECREF(blob);
    Py_XDECREF(lens);
done:
    if (ids.held) PyBuffer_Release(&ids.view);
    if (ks.held) PyBuffer_Release(&ks.view);
    if (lps.held) PyBuffer_Release(&lps.view);
    if (counts.held) PyBuffer_Release(&counts.view);
    if (tids.held) PyBuffer_Release(&tids.view);
    if (tlps.held) PyBuffer_Release(&tlps.view);
    if (table.held) PyBuffer_Release(&table.view);
    if (buffer.held) PyBuffer_Release(&buffer.view);
    PyMem_Free(b.data);
    PyMem_Free(lengths);
    PyMem_Free(ls);
    PyMem_Free(ll);
    PyMem_Free(ts);
    PyMem_Free(tl);
    return out;
}

static PyMethodDef methods[] = {
    {"render", (PyCFunction)(void (*)(void))render, METH_FASTCALL,
     "render(ids, ks, logprobs, logprobs_json, top_counts, top_ids, top_logprobs, top_logprobs_json, table, buffer) "
     "-> (items, lengths): every entry's chat logprobs item"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chatentries", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__chatentries(void)
{
    return PyModule_Create(&module);
}
