/* A chat chunk's `logprobs` object written in one pass (optional; without it detok/frontend/
 * chat_logprobs_json.py encodes the Structs of logprobs_format.py, and the tests hold this writer
 * to their encoding).
 *
 * render(token_ids, tokens, logprobs, logprobs_json, top_counts, top_ids, top_tokens, top_logprobs,
 *        top_logprobs_json, k, cache, make) -> bytes
 *   token_ids, tokens, logprobs, top_counts      lists, one item per token
 *   top_ids, top_tokens, top_logprobs            lists, the alternatives of every token back to back
 *   logprobs_json, top_logprobs_json             bytes: msgspec's JSON array of those floats (its
 *       float format is kept as is); a value that is not finite or is below -9999.0 is written as
 *       OpenAI's -9999.0 (+inf: 0.0), msgspec's spelling of those
 *   k        alternatives per token in the output, the sampled one included (0: none)
 *   cache    dict: token id -> (token string, its type, b'{"token":T,"logprob":', b',"bytes":[..]')
 *   make     callable (id, token) -> (head, tail), stores them in `cache` (and bounds it)
 * Returns the object `{"content":[...]}`. A cached entry is used only when its string
 * equals (type included) the string that came with the id. Each fragment is copied out at once:
 * a later `make` may clear the cache.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_jsonfloats.h"

#define PUT_LIT(b, s) text_append((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* The cached fragments of (tid, token), or new ones from `make`: *made holds a reference the
 * caller drops once it has copied the fragments. */
static int
fragments(PyObject *cache, PyObject *make, PyObject *tid, PyObject *token, PyObject **head, PyObject **tail,
          PyObject **made)
{
    *made = NULL;
    /* exact ints and str comparisons only: no Python code (a subclass's __hash__ or __eq__) may run
     * while fragments borrowed from the cache are held */
    if (!PyLong_CheckExact(tid) || !PyUnicode_Check(token)) {
        PyErr_SetString(PyExc_TypeError, "render: token ids must be ints and token strings str");
        return -1;
    }
    PyObject *c = PyDict_GetItemWithError(cache, tid);
    if (c == NULL && PyErr_Occurred())
        return -1;
    if (c != NULL && PyTuple_CheckExact(c) && PyTuple_GET_SIZE(c) == 4
        && (PyObject *)Py_TYPE(token) == PyTuple_GET_ITEM(c, 1) && PyUnicode_Check(PyTuple_GET_ITEM(c, 0))) {
        PyObject *cached = PyTuple_GET_ITEM(c, 0);
        int eq = cached == token || (PyUnicode_GET_LENGTH(cached) == PyUnicode_GET_LENGTH(token)
                                     && PyUnicode_Compare(cached, token) == 0);
        if (eq) {
            *head = PyTuple_GET_ITEM(c, 2);
            *tail = PyTuple_GET_ITEM(c, 3);
            if (PyBytes_Check(*head) && PyBytes_Check(*tail))
                return 0;
        }
    }
    PyObject *pair = PyObject_CallFunctionObjArgs(make, tid, token, NULL);
    if (pair == NULL)
        return -1;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(pair, 0))
        || !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
        Py_DECREF(pair);
        PyErr_SetString(PyExc_TypeError, "make must return (bytes, bytes)");
        return -1;
    }
    *head = PyTuple_GET_ITEM(pair, 0);
    *tail = PyTuple_GET_ITEM(pair, 1);
    *made = pair;
    return 0;
}

static int
put_bytes(Text *b, PyObject *bytes)
{
    return text_append(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

/* The JSON of logprob `i`: msgspec's bytes, or the clamped value's. */
static int
put_float(Text *b, PyObject *values, Py_ssize_t i, const char *json, Py_ssize_t *starts, Py_ssize_t *lens)
{
    PyObject *item = PyList_GET_ITEM(values, i);
    if (!PyFloat_CheckExact(item)) { /* (a subclass's __float__ could run Python code) */
        PyErr_SetString(PyExc_TypeError, "render: logprobs must be floats");
        return -1;
    }
    return put_json_float(b, PyFloat_AS_DOUBLE(item), json, starts[i], lens[i]);
}

static PyObject *
render(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "render takes 12 arguments");
        return NULL;
    }
    PyObject *ids = args[0], *tokens = args[1], *lps = args[2], *lps_json = args[3], *counts = args[4],
             *top_ids = args[5], *top_tokens = args[6], *tlps = args[7], *tlps_json = args[8], *cache = args[10],
             *make = args[11];
    Py_ssize_t k = PyLong_AsSsize_t(args[9]);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(ids) || !PyList_CheckExact(tokens) || !PyList_CheckExact(lps) || !PyList_CheckExact(counts)
        || !PyList_CheckExact(top_ids) || !PyList_CheckExact(top_tokens) || !PyList_CheckExact(tlps)
        || !PyDict_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "render: lists and a dict expected");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(ids), m = PyList_GET_SIZE(top_ids);
    if (PyList_GET_SIZE(tokens) != n || PyList_GET_SIZE(lps) != n || PyList_GET_SIZE(counts) != n
        || PyList_GET_SIZE(top_tokens) != m || PyList_GET_SIZE(tlps) != m) {
        PyErr_SetString(PyExc_ValueError, "render: columns of different lengths");
        return NULL;
    }
    Py_ssize_t *ls = NULL, *ll = NULL, *ts = NULL, *tl = NULL;
    Text b = {NULL, 0, 0};
    PyObject *out = NULL;
    if (split_floats(lps_json, n, &ls, &ll, "logprobs_json") < 0)
        goto done;
    if (k > 0 && split_floats(tlps_json, m, &ts, &tl, "top_logprobs_json") < 0)
        goto done;
    const char *lp = PyBytes_AS_STRING(lps_json);
    const char *tlp = k > 0 ? PyBytes_AS_STRING(tlps_json) : NULL;
    /* (the first guess of the size: k is the caller's int, bounded here by the API's 20 so the
     * product cannot overflow; the buffer grows past it when needed) */
    b.cap = n * ((k < 0 ? 0 : k > 20 ? 20 : k) + 1) * 96 + 64;
    b.data = PyMem_Malloc(b.cap);
    if (b.data == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (PUT_LIT(&b, "{\"content\":[") < 0)
        goto done;
    Py_ssize_t j = 0;
    for (Py_ssize_t t = 0; t < n; t++) {
        PyObject *sid = PyList_GET_ITEM(ids, t), *head, *tail, *made;
        if (t > 0 && PUT_LIT(&b, ",") < 0)
            goto done;
        if (fragments(cache, make, sid, PyList_GET_ITEM(tokens, t), &head, &tail, &made) < 0)
            goto done;
        int bad = put_bytes(&b, head) < 0 || put_float(&b, lps, t, lp, ls, ll) < 0 || put_bytes(&b, tail) < 0;
        if (!bad && k <= 0)
            bad = PUT_LIT(&b, ",\"top_logprobs\":[]}") < 0;
        else if (!bad)  /* the sampled token first, then the alternatives without it (vLLM's order) */
            bad = PUT_LIT(&b, ",\"top_logprobs\":[") < 0 || put_bytes(&b, head) < 0
                  || put_float(&b, lps, t, lp, ls, ll) < 0 || put_bytes(&b, tail) < 0;
        Py_XDECREF(made);
        if (bad)
            goto done;
        Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(counts, t));
        if (count == -1 && PyErr_Occurred())
            goto done;
        if (count < 0 || count > m - j) {
            PyErr_SetString(PyExc_ValueError, "render: top_counts past the alternatives");
            goto done;
        }
        if (k > 0) {
            Py_ssize_t shown = 1;
            for (Py_ssize_t i = j; i < j + count && shown < k; i++) {
                PyObject *tid = PyList_GET_ITEM(top_ids, i);
                if (!PyLong_CheckExact(tid)) {
                    PyErr_SetString(PyExc_TypeError, "render: token ids must be ints");
                    goto done;
                }
                int same = tid == sid ? 1 : PyObject_RichCompareBool(tid, sid, Py_EQ); /* exact ints: no Python code */
                if (same < 0)
                    goto done;
                if (same)
                    continue;
                if (fragments(cache, make, tid, PyList_GET_ITEM(top_tokens, i), &head, &tail, &made) < 0)
                    goto done;
                bad = PUT_LIT(&b, "},") < 0 || put_bytes(&b, head) < 0 || put_float(&b, tlps, i, tlp, ts, tl) < 0
                      || put_bytes(&b, tail) < 0;
                Py_XDECREF(made);
                if (bad)
                    goto done;
                shown++;
            }
            if (PUT_LIT(&b, "}]}") < 0)
                goto done;
        }
        j += count;
    }
    if (PUT_LIT(&b, "]}") < 0)
        goto done;
    out = PyBytes_FromStringAndSize(b.data, b.size);
done:
    PyMem_Free(b.data);
    PyMem_Free(ls);
    PyMem_Free(ll);
    PyMem_Free(ts);
    PyMem_Free(tl);
    return out;
}

static PyMethodDef methods[] = {
    {"render", (PyCFunction)(void (*)(void))render, METH_FASTCALL,
     "render(token_ids, tokens, logprobs, logprobs_json, top_counts, top_ids, top_tokens, top_logprobs, "
     "top_logprobs_json, k, cache, make) -> bytes: a chat chunk's logprobs object"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chatlogprobs", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__chatlogprobs(void)
{
    return PyModule_Create(&module);
}
