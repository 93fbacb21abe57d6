/* The frontend's per-chunk latency clock in C (optional; detok/streaming/latency.py has the Python
 * form, and the tests compare the two).
 *
 * Buckets(bounds): a histogram's observations kept as per-bucket counts until taken, as
 * prometheus puts them: a value goes to the first bucket whose upper bound is >= it (bounds
 * ascending, the last normally +inf; a value past every bound to the last; bisect.bisect_left's
 * rule, so NaN to the first, as the Python form).
 *   observe(value) ; take() -> (counts: list[int], total: float), both reset.
 * TokenClock(ttft, itl, arrival): one request's clock over two Buckets: text() observes the time
 * since `arrival` into ttft the first time, since the previous call into itl after that. The
 * time is CLOCK_MONOTONIC in seconds, time.perf_counter's clock on Linux (checked at import by
 * latency.py, which uses the Python form elsewhere).
 * Why: the clock ticks once per streamed chunk; in Python it is three calls (the clock, the
 * histogram, bisect) on the receiving loop's path of every chunk. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    double *bounds;
    long long *counts;
    double total;
} Buckets;

static void buckets_observe(Buckets *b, double value) {
    Py_ssize_t lo = 0, hi = b->n - 1; /* bisect_left's search; the last bucket takes what no bound holds */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (b->bounds[mid] < value) lo = mid + 1;
        else hi = mid;
    }
    b->counts[lo] += 1;
    b->total += value;
}

static PyObject *Buckets_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *bounds;
    if (!PyArg_ParseTuple(args, "O:Buckets", &bounds)) return NULL;
    PyObject *seq = PySequence_Fast(bounds, "Buckets: bounds must be a sequence of floats");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 4096) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "Buckets: 1 to 4096 bounds");
        return NULL;
    }
    Buckets *b = (Buckets *)type->tp_alloc(type, 0);
    if (b == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    b->n = n;
    b->bounds = PyMem_Calloc(n, sizeof(double));
    b->counts = PyMem_Calloc(n, sizeof(long long));
    if (b->bounds == NULL || b->counts == NULL) {
        Py_DECREF(seq);
        Py_DECREF(b);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            Py_DECREF(b);
            return NULL;
        }
        if (i > 0 && !(v > b->bounds[i - 1])) {
            Py_DECREF(seq);
            Py_DECREF(b);
            PyErr_SetString(PyExc_ValueError, "Buckets: bounds must ascend");
            return NULL;
        }
        b->bounds[i] = v;
    }
    Py_DECREF(seq);
    return (PyObject *)b;
}

static void Buckets_dealloc(Buckets *b) {
    PyMem_Free(b->bounds);
    PyMem_Free(b->counts);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *Buckets_observe(Buckets *b, PyObject *value) {
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    buckets_observe(b, v);
    Py_RETURN_NONE;
}

static PyObject *Buckets_take(Buckets *b, PyObject *Py_UNUSED(ignored)) {
    PyObject *counts = PyList_New(b->n);
    if (counts == NULL) return NULL;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *c = PyLong_FromLongLong(b->counts[i]);
        if (c == NULL) {
            Py_DECREF(counts);
            return NULL;
        }
        PyList_SET_ITEM(counts, i, c);
    }
    PyObject *out = Py_BuildValue("(Nd)", counts, b->total);
    if (out != NULL) {
        memset(b->counts, 0, b->n * sizeof(long long));
        b->total = 0.0;
    }
    return out;
}

static PyMethodDef Buckets_methods[] = {
    {"observe", (PyCFunction)Buckets_observe, METH_O, "observe(value): count it in its bucket"},
    {"take", (PyCFunction)Buckets_take, METH_NOARGS, "take() -> (counts, total) since the last take"},
    {NULL},
};

static PyTypeObject BucketsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._latency.Buckets",
    .tp_basicsize = sizeof(Buckets),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Buckets(bounds): a histogram's observations as per-bucket counts until taken",
    .tp_new = Buckets_new,
    .tp_dealloc = (destructor)Buckets_dealloc,
    .tp_methods = Buckets_methods,
};

typedef struct {
    PyObject_HEAD
    Buckets *ttft, *itl;
    double arrival, last;
    int started;
} TokenClock;

static PyObject *TokenClock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *ttft, *itl;
    double arrival;
    if (!PyArg_ParseTuple(args, "O!O!d:TokenClock", &BucketsType, &ttft, &BucketsType, &itl, &arrival)) return NULL;
    TokenClock *c = (TokenClock *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    c->ttft = (Buckets *)Py_NewRef(ttft);
    c->itl = (Buckets *)Py_NewRef(itl);
    c->arrival = arrival;
    return (PyObject *)c;
}

static void TokenClock_dealloc(TokenClock *c) {
    Py_XDECREF(c->ttft);
    Py_XDECREF(c->itl);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *TokenClock_text(TokenClock *c, PyObject *Py_UNUSED(ignored)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (c->started) buckets_observe(c->itl, now - c->last);
    else buckets_observe(c->ttft, now - c->arrival);
    c->started = 1;
    c->last = now;
    Py_RETURN_NONE;
}

static PyObject *TokenClock_get_last(TokenClock *c, void *closure) {
    if (!c->started) Py_RETURN_NONE;
    return PyFloat_FromDouble(c->last);
}

static PyMethodDef TokenClock_methods[] = {
    {"text", (PyCFunction)TokenClock_text, METH_NOARGS, "text(): a text-bearing chunk now"},
    {NULL},
};

static PyGetSetDef TokenClock_getset[] = {
    {"last", (getter)TokenClock_get_last, NULL, "the time of the last text() (None: none yet)", NULL},
    {NULL},
};

static PyTypeObject TokenClockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._latency.TokenClock",
    .tp_basicsize = sizeof(TokenClock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TokenClock(ttft, itl, arrival): one request's time to first token and inter-token clock",
    .tp_new = TokenClock_new,
    .tp_dealloc = (destructor)TokenClock_dealloc,
    .tp_methods = TokenClock_methods,
    .tp_getset = TokenClock_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_latency", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__latency(void) {
    if (PyType_Ready(&BucketsType) < 0 || PyType_Ready(&TokenClockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Buckets", (PyObject *)&BucketsType) < 0
        || PyModule_AddObjectRef(m, "TokenClock", (PyObject *)&TokenClockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
